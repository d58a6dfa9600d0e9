/// The mount's view of its link to Dropbox (Mount/ConnectionMonitor.swift), fed the way the
/// client feeds it: a refused token is reported once with the fix and clears on the next success
/// (which resumes the held uploads); offline and retries show with their next attempt; answers
/// about one item (a 409) are not trouble with the link.
import DropboxRemote
import Foundation
import Synchronization
import Testing
import VFSCache
@testable import dbxfs

@Suite struct ConnectionMonitorTests {
    final class Lines: Sendable {
        let lines = Mutex<[String]>([])
        var all: [String] { lines.withLock { $0 } }
        var logger: Logger { Logger(level: .debug) { level, message in self.lines.withLock { $0.append("\(level.label): \(message)") } } }
    }

    static let fix = "run 'dbxfs auth --profile work'; the mount picks it up without a remount"

    @Test func aRefusedTokenIsReportedOnceWithTheFixAndClearsOnSuccess() {
        let log = Lines()
        let monitor = ConnectionMonitor(fix: Self.fix, offline: OfflineState(), log: log.logger)
        let resumed = Atomic<Int>(0)
        monitor.connect(adoptNewCredentials: nil, resume: { resumed.add(1, ordering: .relaxed) })
        #expect(monitor.report().state == "online")

        monitor.failed(.auth(.invalidAccessToken, summary: "invalid_access_token/.."))
        monitor.failed(.auth(.invalidAccessToken, summary: "invalid_access_token/.."))
        let refused = monitor.report()
        #expect(refused.state == "refused" && refused.since != nil)
        #expect(refused.message == "Dropbox no longer accepts this mount's access (the access token is invalid or was revoked): \(Self.fix)")
        #expect(log.all.filter { $0.contains("no longer accepts") }.count == 1, "\(log.all)")

        monitor.succeeded()
        #expect(monitor.report().state == "online")
        #expect(resumed.load(ordering: .relaxed) == 1)
        #expect(log.all.contains { $0.contains("accepts this mount's access again") })
    }

    @Test func aMissingPermissionOrAnAnswerAboutOneItemIsNotTroubleWithTheLink() {
        let monitor = ConnectionMonitor(fix: Self.fix, offline: OfflineState(), log: Lines().logger)
        monitor.failed(.auth(.missingScope(requiredScope: "files.content.write"), summary: ""))
        #expect(monitor.report().state == "online")
        let before = monitor.report().lastErrorAt
        monitor.failed(.route(.path(.notFound), summary: "path/not_found/.."))
        monitor.failed(.cancelled)
        #expect(monitor.report().lastErrorAt == before)
    }

    @Test func retriesAndOfflineShowTheLastErrorAndTheNextTry() {
        let offline = OfflineState()
        let monitor = ConnectionMonitor(fix: Self.fix, offline: offline, log: Lines().logger)
        monitor.willRetry(after: .server(status: 503, message: "injected fault"), in: 30)
        let retrying = monitor.report()
        #expect(retrying.state == "online")
        #expect(retrying.lastError == "Dropbox is failing (HTTP 503: injected fault); try again later")
        #expect((retrying.nextRetryAt?.timeIntervalSinceNow ?? 0) > 20)

        #expect(monitor.report(now: Date().addingTimeInterval(2)).state == "online")

        offline.set(offline: true, reason: "cannot reach Dropbox: Couldn't connect to server")
        offline.noteNextProbe(at: Date().addingTimeInterval(2))
        let down = monitor.report()
        #expect(down.state == "offline" && down.since != nil)
        #expect(down.message?.hasPrefix("cannot reach Dropbox: Couldn't connect to server. Cached files can be read") == true)
        #expect((down.nextRetryAt?.timeIntervalSinceNow ?? 0) < 5)
    }

    /// Every call failing (5xx, no answer) for a few seconds with none answered is offline for a
    /// person, also before the change watcher notices: its long-poll may wait two minutes before
    /// it fails, and status said "online" meanwhile (CI: test_status.py's
    /// `…under_server_failures…`, "connection online, next try in 7 s; last error …503…"). One
    /// success ends it; rate limits are not it (Dropbox answers, and asks to wait).
    @Test func callsFailingForSecondsWithNoneAnsweredAreOffline() {
        let log = Lines()
        let monitor = ConnectionMonitor(fix: Self.fix, offline: OfflineState(), log: log.logger)
        let start = Date()
        monitor.willRetry(after: .server(status: 503, message: "injected fault"), in: 7)
        monitor.failed(.transport(code: 7, message: "Couldn't connect to server"))
        #expect(!log.all.contains { $0.contains("offline") }, "logged before the period was long enough: \(log.all)")
        let failing = monitor.report(now: start.addingTimeInterval(ConnectionMonitor.defaultFailingAfter + 1))
        #expect(failing.state == "offline", "\(failing)")
        #expect(failing.since.map { $0 >= start && $0 <= start.addingTimeInterval(1) } == true)
        #expect(failing.message?.contains("Couldn't connect to server") == true, "\(failing.message ?? "")")
        monitor.succeeded()
        #expect(monitor.report(now: Date().addingTimeInterval(60)).state == "online")

        let limited = ConnectionMonitor(fix: Self.fix, offline: OfflineState(), log: Lines().logger)
        limited.willRetry(after: .rateLimited(reason: "too_many_requests", retryAfter: 5), in: 5)
        #expect(limited.report(now: Date().addingTimeInterval(60)).state == "online")
    }

    /// Status and the log tell one story: once status says offline, the log has said it too
    /// (CI, stop 29: test_status.py's `…under_server_failures…` found status "offline" by the
    /// period's age while the log waited for the next failure to say so, a retry seconds later).
    @Test func aStatusThatSaysOfflineHasSaidItInTheLog() {
        let log = Lines()
        let monitor = ConnectionMonitor(fix: Self.fix, offline: OfflineState(), log: log.logger)
        monitor.willRetry(after: .server(status: 503, message: "injected fault"), in: 30)
        #expect(!log.all.contains { $0.contains("offline") }, "logged before the period was long enough: \(log.all)")
        let failing = monitor.report(now: Date().addingTimeInterval(ConnectionMonitor.defaultFailingAfter + 1))
        #expect(failing.state == "offline")
        #expect(log.all.filter { $0.contains("offline") }.count == 1, "\(log.all)")
        _ = monitor.report(now: Date().addingTimeInterval(ConnectionMonitor.defaultFailingAfter + 2))
        #expect(log.all.filter { $0.contains("offline") }.count == 1, "said twice: \(log.all)")
    }

    /// Nobody asks status and no call fails again for a while (a retry backing off): the log says
    /// offline when the period is long enough all the same, not at the next failure.
    @Test func theLogSaysOfflineWhenThePeriodIsLongEnoughWithoutAnotherFailure() async throws {
        let log = Lines()
        let monitor = ConnectionMonitor(fix: Self.fix, offline: OfflineState(), log: log.logger, failingAfter: 0.2)
        monitor.willRetry(after: .server(status: 503, message: "injected fault"), in: 30)
        let deadline = Date().addingTimeInterval(5)
        while !log.all.contains(where: { $0.contains("offline") }) && Date() < deadline {
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        #expect(log.all.filter { $0.contains("offline") }.count == 1, "\(log.all)")

        // A success before the period ends: nothing is said.
        let quiet = Lines()
        let answered = ConnectionMonitor(fix: Self.fix, offline: OfflineState(), log: quiet.logger, failingAfter: 0.2)
        answered.willRetry(after: .server(status: 503, message: "injected fault"), in: 30)
        answered.succeeded()
        try await Task.sleep(nanoseconds: 500_000_000)
        #expect(!quiet.all.contains { $0.contains("offline") }, "\(quiet.all)")
    }
}
