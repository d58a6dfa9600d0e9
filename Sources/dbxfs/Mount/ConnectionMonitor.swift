/// The mount's link to Dropbox as a person needs to know it: online, offline (Dropbox cannot be
/// reached), or refused (Dropbox no longer accepts this mount's access: revoked by `dbxfs
/// unlink`, or expired past refresh), with the last error of any call and when the next attempt
/// is due. `dbxfs status` shows it (`connection` in docs/STATUS.md) and the log gets one line
/// when the access is lost and one when it is back.
///
/// It learns from the client itself (a `RequestObserver` on every client of the mount: each
/// retry, final failure and success) and from the change watcher's offline state. While the
/// access is refused it polls the mount's credentials every second (`adoptNewCredentials`: the
/// profile file a new `dbxfs auth` rewrites, or the token file), and once a new token is
/// adopted it tells the write-back to retry what it held back (`resume`): so a relink is picked
/// up by the running mount within a second, without a remount.
import DropboxRemote
import Foundation
import Synchronization
import VFSCache

final class ConnectionMonitor: RequestObserver, Sendable {
    private struct State {
        var refusedSince: Date?
        var refusedBecause: AuthError?
        var lastError: String?
        var lastErrorAt: Date?
        var nextRetryAt: Date?
        var polling = false
        /// The first failure to reach Dropbox (5xx, no answer) since the last answered call.
        var failingSince: Date?
        /// The log has said this period of failures makes the mount offline.
        var failingLogged = false
    }

    /// Seconds of calls failing with none answered after which status says offline, before
    /// the change watcher may notice (its long-poll can wait two minutes to fail). The
    /// watcher's own rule (ChangeWatcher.Options.offlineAfter) is as long.
    static let defaultFailingAfter: Double = 3
    let failingAfter: Double

    /// How the person at the machine restores access, e.g. "run 'dbxfs auth --profile work'; the
    /// mount picks it up without a remount".
    let fix: String
    private let offline: OfflineState
    private let log: Logger
    private let state = Mutex(State())
    /// False while nothing needs attention: a success then costs one atomic load.
    private let troubled = Atomic<Bool>(false)
    private let hooks = Mutex<Hooks>(Hooks())

    private struct Hooks {
        var adoptNewCredentials: (@Sendable () -> Bool)?
        var resume: (@Sendable () -> Void)?
    }

    init(fix: String, offline: OfflineState, log: Logger, failingAfter: Double = ConnectionMonitor.defaultFailingAfter) {
        self.fix = fix; self.offline = offline; self.log = log; self.failingAfter = failingAfter
    }

    /// `adoptNewCredentials` looks for new credentials and adopts them (true when it did);
    /// `resume` retries the uploads held back meanwhile. Set once the mount is assembled.
    func connect(adoptNewCredentials: (@Sendable () -> Bool)?, resume: @escaping @Sendable () -> Void) {
        hooks.withLock { $0 = Hooks(adoptNewCredentials: adoptNewCredentials, resume: resume) }
    }

    /// The sentence for a call Dropbox refused because of the access itself.
    static func refusal(_ reason: AuthError, fix: String) -> String {
        "Dropbox no longer accepts this mount's access (\(reason)): \(fix)"
    }

    // MARK: RequestObserver

    func willRetry(after error: DropboxError, in seconds: Double) {
        note(error, retryAt: Date().addingTimeInterval(seconds))
    }

    func failed(_ error: DropboxError) {
        switch error {
        // Answers about one item (409: not found, a conflict, ...) or about this side: the link is fine.
        case .route, .cancelled, .localIO, .contentChanged: return
        default: break
        }
        note(error, retryAt: nil)
        // A missing permission is about one call; re-linking fixes it, but the access as such stands.
        if case .auth(let reason, _) = error {
            if case .missingScope = reason { return }
            refused(reason)
        }
    }

    func succeeded() {
        guard troubled.load(ordering: .relaxed) else { return }
        let (wasRefused, wasFailing) = state.withLock { state -> (Bool, Bool) in
            defer {
                state.refusedSince = nil; state.refusedBecause = nil; state.nextRetryAt = nil
                state.failingSince = nil; state.failingLogged = false
            }
            return (state.refusedSince != nil, state.failingLogged)
        }
        troubled.store(false, ordering: .relaxed)
        if wasFailing { log.info("Dropbox answers again") }
        if wasRefused {
            log.warning("Dropbox accepts this mount's access again; held uploads resume")
            hooks.withLock { $0.resume }?()
        }
    }

    private func note(_ error: DropboxError, retryAt: Date?) {
        troubled.store(true, ordering: .relaxed)
        let unreachable = error.isUnreachable
        let periodBegins = state.withLock { state -> Bool in
            let now = Date()
            state.lastError = "\(error)"
            state.lastErrorAt = now
            state.nextRetryAt = retryAt
            guard unreachable, state.failingSince == nil else { return false }
            state.failingSince = now
            return true
        }
        if periodBegins {
            // The next failure may be a retry backing off for many seconds: the log should not
            // wait for it to say what status says from the period's age alone.
            DispatchQueue.global().asyncAfter(deadline: .now() + failingAfter + 0.05) { [weak self] in
                self?.sayOfflineIfDue(now: Date())
            }
        }
        sayOfflineIfDue(now: Date())
    }

    /// Logs, once per period, that calls failing with none answered for `failingAfter` seconds
    /// make the mount offline. Status calls it too before it says so (`report`), so what status
    /// says the log has said.
    private func sayOfflineIfDue(now: Date) {
        let said = state.withLock { state -> (seconds: Double, error: String)? in
            guard let since = state.failingSince, !state.failingLogged,
                  now.timeIntervalSince(since) >= failingAfter else { return nil }
            state.failingLogged = true
            return (now.timeIntervalSince(since), state.lastError ?? "no answer")
        }
        if let said {
            log.warning("offline: Dropbox has answered no call for \(Int(said.seconds)) s (\(said.error)); retrying. " + Self.offlineRules)
        }
    }

    private func refused(_ reason: AuthError) {
        let (first, poll) = state.withLock { state -> (Bool, Bool) in
            let first = state.refusedSince == nil
            if first { state.refusedSince = Date() }
            state.refusedBecause = reason
            let poll = !state.polling
            state.polling = true
            return (first, poll)
        }
        if first { log.error(Self.refusal(reason, fix: fix)) }
        if poll { startPolling() }
    }

    /// Every second while the access is refused: new credentials? (The next success logs that
    /// the access is back.)
    private func startPolling() {
        let thread = Thread { [self] in
            while true {
                Thread.sleep(forTimeInterval: 1)
                if adoptNewCredentialsIfRefused() != false { break }
            }
            state.withLock { $0.polling = false }
        }
        thread.name = "dbxfs-credentials"
        thread.start()
    }

    /// While the access is refused: adopts new credentials if there are any, and then retries
    /// the uploads held back meanwhile. nil when the access is not refused (nothing to do).
    /// `dbxfs sync` calls it too, so a sync right after a relink waits for the uploads.
    @discardableResult
    func adoptNewCredentialsIfRefused() -> Bool? {
        guard state.withLock({ $0.refusedSince != nil }) else { return nil }
        guard let adopt = hooks.withLock({ $0.adoptNewCredentials }), adopt() else { return false }
        log.info("new credentials found; retrying the held uploads with them")
        hooks.withLock { $0.resume }?()
        return true
    }

    // MARK: For status

    func report(uploadsPausedUntil: Date? = nil, now: Date = Date()) -> ConnectionReport {
        sayOfflineIfDue(now: now)
        let snapshot = state.withLock { $0 }
        var nextRetry = [snapshot.nextRetryAt, uploadsPausedUntil].compactMap { $0 }.filter { $0 > now }.min()
        if let refusedSince = snapshot.refusedSince, let reason = snapshot.refusedBecause {
            return ConnectionReport(state: "refused", since: refusedSince, message: Self.refusal(reason, fix: fix),
                                    lastError: snapshot.lastError, lastErrorAt: snapshot.lastErrorAt, nextRetryAt: nextRetry)
        }
        if offline.isOffline {
            if let probe = offline.nextProbe, probe > now { nextRetry = min(nextRetry ?? probe, probe) }
            return ConnectionReport(state: "offline", since: offline.since,
                                    message: "\(offline.reason ?? "Dropbox cannot be reached"). " + Self.offlineRules,
                                    lastError: snapshot.lastError, lastErrorAt: snapshot.lastErrorAt, nextRetryAt: nextRetry)
        }
        if let since = snapshot.failingSince, now.timeIntervalSince(since) >= failingAfter {
            return ConnectionReport(state: "offline", since: since,
                                    message: "Dropbox has answered no call since \(StatusRenderer.time(since)) (\(snapshot.lastError ?? "no answer")). "
                                        + Self.offlineRules,
                                    lastError: snapshot.lastError, lastErrorAt: snapshot.lastErrorAt, nextRetryAt: nextRetry)
        }
        return ConnectionReport(state: "online", since: nil, message: nil, lastError: snapshot.lastError,
                                lastErrorAt: snapshot.lastErrorAt, nextRetryAt: nextRetry)
    }

    /// What works while offline (docs/SEMANTICS.md, "Remote changes, remounts and offline").
    static let offlineRules = "Cached files can be read; files written, folders made, renames and deletions are kept "
        + "and sent when it answers."
}
