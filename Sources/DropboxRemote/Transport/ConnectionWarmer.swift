/// Keeps a connection open to each of a client's hosts (api and content) while the client is in
/// use, so that the first call after the mount, or after a pause, does not pay a new connection's
/// TCP and TLS handshakes (two round trips: 40 ms at 20 ms, 100 ms on a 50 ms WAN) on top of its
/// own round trip (issue 15: a cold file's first byte took three round trips).
///
/// It opens connections at `start()` until each host has two (a mount lists its first folder while
/// the whole-tree listing starts), then, every `tick` seconds, warms a host whose last
/// request ended more than `refreshAfter` seconds ago: servers close idle connections (see
/// docs/CLIENT.md, "Warm connections"), and a connection found closed costs the handshakes again.
/// It stops warming `keepWarmFor` seconds after the client's last call of its own, so an idle
/// mount sends nothing for hours. A warm-up is a token-less OPTIONS (`CurlTransport.warm`): it
/// carries no credentials, is not retried, and its failure (offline, DNS) is only counted and
/// handed to `onFailure` (the mount logs it at debug level): the calls that follow report a real
/// problem themselves.
///
/// Threads: a short-lived one per warm-up (the timer runs on Dispatch's global queue), at most
/// `connectionsAtStart` warm-ups per host at a time. `stop()` cancels the timer and any warm-up
/// in flight (libcurl checks the cancel at least once a second) and waits for them, so no
/// request outlives it.
import Dispatch
import Foundation
import Synchronization

public final class ConnectionWarmer: Sendable {
    public struct Options: Sendable {
        /// Seconds between checks.
        public var tick: Double = 10
        /// A host idle this long is warmed again: under the shortest idle timeouts servers use
        /// (nginx's default keepalive_timeout is 75 s), so a kept connection is still open.
        public var refreshAfter: Double = 50
        /// Warming stops this long after the client's last call of its own.
        public var keepWarmFor: Double = 600
        /// A warm-up gives up after this many seconds (its connect and answer together).
        public var requestTimeout: Int = 10
        /// Connections each host has after `start()`, counting those already open.
        public var connectionsAtStart = 2

        public init() {}
    }

    /// A dispatch source is thread-safe; Swift just does not know it.
    private struct Timer: @unchecked Sendable { let source: DispatchSourceTimer }

    private struct State {
        var timer: Timer?
        /// URL and copy of each warm-up in flight.
        var inFlight: Set<String> = []
        var stopped = false
    }

    private let client: DropboxClient
    private let options: Options
    private let onFailure: (@Sendable (String, DropboxError) -> Void)?
    private let state = Mutex(State())
    private let cancel = CancelHandle()
    private let running = DispatchGroup()
    private let failureCount = Atomic<Int>(0)

    /// `onFailure` hears of each failed warm-up (the URL and the error); nil: nobody.
    public init(client: DropboxClient, options: Options = Options(),
                onFailure: (@Sendable (String, DropboxError) -> Void)? = nil) {
        self.client = client; self.options = options; self.onFailure = onFailure
    }

    /// The URLs a warm-up asks for: one per host the mount's calls go to.
    var urls: [String] {
        let endpoints = client.configuration.endpoints
        return ["\(endpoints.api)/2/files/list_folder", "\(endpoints.content)/2/files/download"]
    }

    /// Warm-ups that failed so far.
    public var failures: Int { failureCount.load(ordering: .relaxed) }

    /// Warms every host now (in the background) and then keeps them warm.
    public func start() {
        let tick = options.tick
        let timer = state.withLock { state -> Timer? in
            guard !state.stopped, state.timer == nil else { return nil }
            // Made only once claimed: libdispatch traps on releasing a source never resumed.
            let source = DispatchSource.makeTimerSource(queue: .global(qos: .utility))
            source.schedule(deadline: .now() + tick, repeating: tick, leeway: .seconds(1))
            source.setEventHandler { [weak self] in self?.check() }
            state.timer = Timer(source: source)
            return state.timer
        }
        guard let timer else { return }
        timer.source.resume()
        // Two connections to each host, counting those already open (the account check's): right
        // after the mount, the first folder's listing runs alongside the whole-tree listing, and
        // the first read alongside its read-ahead.
        for url in urls {
            let open = client.transport.idleConnections(to: url)
            for copy in 0..<max(0, options.connectionsAtStart - open) { warmInBackground(url, copy: copy, fresh: true) }
        }
    }

    /// Stops warming; returns once no warm-up is in flight (about a second at most).
    public func stop() {
        let timer = state.withLock { state -> Timer? in
            state.stopped = true
            defer { state.timer = nil }
            return state.timer
        }
        timer?.source.cancel()
        cancel.cancel()
        running.wait()
    }

    /// Warms `url`'s host now, on the calling thread (`fresh`: with one more connection); the new
    /// connections it opened, or the error.
    @discardableResult
    public func warmNow(_ url: String, fresh: Bool = false) -> Result<Int, DropboxError> {
        let result = client.transport.warm(url, timeout: options.requestTimeout, fresh: fresh, cancel: cancel)
        if case .failure(let error) = result, !cancel.isCancelled {
            failureCount.add(1, ordering: .relaxed)
            onFailure?(url, error)
        }
        return result
    }

    private func check() {
        let transport = client.transport
        guard let sinceCall = transport.secondsSinceLastCall, sinceCall < options.keepWarmFor else { return }
        for url in urls {
            if let idle = transport.idleSeconds(of: url), idle < options.refreshAfter { continue }
            warmInBackground(url)
        }
    }

    private func warmInBackground(_ url: String, copy: Int = 0, fresh: Bool = false) {
        let key = "\(copy) \(url)"
        let claimed = state.withLock { state -> Bool in
            guard !state.stopped, !state.inFlight.contains(key) else { return false }
            state.inFlight.insert(key)
            running.enter()
            return true
        }
        guard claimed else { return }
        // A thread of its own, not Dispatch's global queue: that runs blocking work only as wide
        // as the cores, and on two the content host's warm-ups waited for the api host's.
        let thread = Thread { [self] in
            warmNow(url, fresh: fresh)
            state.withLock { _ = $0.inFlight.remove(key) }
            running.leave()
        }
        thread.name = "dbxfs-warm-up"
        thread.start()
    }
}
