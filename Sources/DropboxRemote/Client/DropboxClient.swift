/// The Dropbox API v2 client: how one route call is made (URL, headers, argument and result
/// encoding for the rpc, upload and download styles) and how it is retried. The routes themselves
/// live in the `DropboxClient+*.swift` files and are thin.
///
/// Concurrency model (see docs/CLIENT.md): every route method is synchronous and blocks the
/// calling thread, which is meant to be a plain pthread (a FUSE worker, a background uploader).
/// The class is Sendable and shares nothing mutable besides the handle pool, the token provider
/// and the statistics, all internally locked; any number of threads may call it at once. Async
/// callers use the wrappers in `DropboxClient+Async.swift`, which move the blocking call onto a
/// dedicated thread so Swift's cooperative pool never blocks.
import Foundation

public final class DropboxClient: Sendable {
    public let configuration: ClientConfiguration
    /// The token source; nil for a client used only for OAuth exchanges.
    public let tokens: TokenProvider?
    /// What the retry machinery absorbed since creation (or the last reset).
    public let statistics: RetryStatistics
    let transport: CurlTransport
    /// The request rate, adapted to 429s, shared by every thread (nil: `adaptivePacing` off).
    public let pacer: RequestPacer?
    /// Dropbox commits one batch at a time per namespace: so do we (DropboxClient+Upload.swift).
    let batchCommits: NSLock

    public init(configuration: ClientConfiguration = ClientConfiguration(), tokens: TokenProvider?) {
        self.configuration = configuration
        self.tokens = tokens
        self.transport = CurlTransport(configuration: configuration)
        self.statistics = RetryStatistics()
        self.pacer = configuration.adaptivePacing ? RequestPacer() : nil
        self.batchCommits = NSLock()
    }

    private init(sharing client: DropboxClient, configuration: ClientConfiguration) {
        self.configuration = configuration
        self.tokens = client.tokens
        self.transport = client.transport
        self.statistics = client.statistics
        self.pacer = client.pacer
        self.batchCommits = client.batchCommits
    }

    private init(configuration: ClientConfiguration, tokens: TokenProvider?, transport: CurlTransport) {
        self.configuration = configuration
        self.tokens = tokens
        self.transport = transport
        self.statistics = RetryStatistics()
        self.pacer = configuration.adaptivePacing ? RequestPacer() : nil
        self.batchCommits = NSLock()
    }

    /// Another client on this one's connections: its own configuration (retry policy, connect
    /// timeout, path root, observer), counters and pacer. The transport's own settings (CA file,
    /// user agent, idle handles) stay this client's. A mount checks the account with a fail-fast
    /// client and then serves through one made this way, so its first call finds the check's
    /// connection (and the warm-ups started with the check) instead of opening its own.
    public func sharingConnections(configuration: ClientConfiguration, tokens: TokenProvider?) -> DropboxClient {
        DropboxClient(configuration: configuration, tokens: tokens, transport: transport)
    }

    /// The same client (connections, token, pacer, counters) for callers who are waiting on the
    /// answer, such as a FUSE request: one call spends at most `maxWait` seconds waiting out 429s,
    /// back-offs and the pacer, then throws its last error instead.
    public func bounded(maxWait: Double) -> DropboxClient {
        var configuration = self.configuration
        configuration.retryPolicy.maxTotalWait = maxWait
        return DropboxClient(sharing: self, configuration: configuration)
    }

    /// The same client, whose every call also ends (`.cancelled`, within a second on a stalled
    /// link) once `stop` is cancelled, whatever handle its caller passed.
    public func cancelled(by stop: CancelHandle) -> DropboxClient {
        var configuration = self.configuration
        configuration.stop = CancelHandle.either(configuration.stop, stop)
        return DropboxClient(sharing: self, configuration: configuration)
    }

    /// Convenience: a long-lived token and optionally one base URL for all four hosts.
    public convenience init(accessToken: String, baseURL: String? = nil) {
        var configuration = ClientConfiguration()
        if let baseURL { configuration.endpoints = Endpoints(overridingAllWith: baseURL) }
        self.init(configuration: configuration, tokens: TokenProvider(accessToken: accessToken))
    }
}

/// One route of the API: its name, host, request style and error union.
struct Route: Sendable {
    enum Host: Sendable { case api, content, notify }
    enum Style: Sendable { case rpc, upload, download }
    let name: String
    let host: Host
    let style: Style
    let errors: RouteErrorShape
    var authenticated = true

    static func rpc(_ name: String, errors: RouteErrorShape = .none) -> Route {
        Route(name: name, host: .api, style: .rpc, errors: errors)
    }
    static func upload(_ name: String, errors: RouteErrorShape) -> Route {
        Route(name: name, host: .content, style: .upload, errors: errors)
    }
    static func download(_ name: String, errors: RouteErrorShape) -> Route {
        Route(name: name, host: .content, style: .download, errors: errors)
    }
}

/// What the retry loop tells one attempt.
struct AttemptContext {
    /// 0 for the first attempt.
    var number: Int
    /// The access token to send (nil for unauthenticated routes).
    var accessToken: String?
    /// An earlier attempt failed in a way that leaves open whether the server executed it
    /// (5xx, or a transport error after the connection was made). Write routes use this to tell
    /// "our own earlier attempt succeeded" from a genuine conflict.
    var earlierAttemptMayHaveCommitted: Bool
}

/// A successful answer: the JSON result (rpc/upload body, download header) and the headers.
struct RouteResult {
    var result: JSON
    var status: Int
    var headers: [String: String]
}

extension DropboxClient {
    // MARK: One attempt

    /// Makes one request for `route`. `arg` is the JSON argument (nil = Void). For downloads,
    /// `sink` receives the body; `range` adds a Range header. The observer hears of it
    /// (`RequestObserver.attempted`): route, outcome, duration, body bytes.
    func attempt(_ route: Route, arg: JSON?, context: AttemptContext, body: UploadBody? = nil,
                 range: (start: UInt64, end: UInt64?)? = nil, sink: DownloadSink? = nil,
                 cancel: CancelHandle? = nil, totalTimeout: Int? = nil,
                 onSent: ((UInt64) -> Void)? = nil, onReceived: ((UInt64) -> Void)? = nil,
                 onResponseStart: ((Int, [String: String]) -> DropboxError?)? = nil) throws(DropboxError) -> RouteResult {
        guard let observer = configuration.observer else {
            return try send(route, arg: arg, context: context, body: body, range: range, sink: sink, cancel: cancel,
                            totalTimeout: totalTimeout, onSent: onSent, onReceived: onReceived,
                            onResponseStart: onResponseStart, traffic: nil)
        }
        var traffic: (sent: UInt64, received: UInt64, connections: Int) = (0, 0, 0)
        let started = DispatchTime.now().uptimeNanoseconds
        func report(_ outcome: RequestOutcome) {
            let seconds = Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9
            let kind: RequestKind = switch route.style {
            case .rpc: .rpc
            case .upload: .upload
            case .download: .download
            }
            observer.attempted(RequestAttempt(route: route.name, kind: kind, outcome: outcome, seconds: seconds,
                                              bytesSent: traffic.sent, bytesReceived: traffic.received,
                                              connectionsOpened: traffic.connections))
        }
        do throws(DropboxError) {
            let result = try withUnsafeMutablePointer(to: &traffic) { (counts) throws(DropboxError) -> RouteResult in
                try send(route, arg: arg, context: context, body: body, range: range, sink: sink, cancel: cancel,
                         totalTimeout: totalTimeout, onSent: onSent, onReceived: onReceived,
                         onResponseStart: onResponseStart, traffic: counts)
            }
            report(.ok)
            return result
        } catch {
            report(RequestOutcome(error))
            throw error
        }
    }

    private func send(_ route: Route, arg: JSON?, context: AttemptContext, body: UploadBody?,
                      range: (start: UInt64, end: UInt64?)?, sink: DownloadSink?, cancel: CancelHandle?, totalTimeout: Int?,
                      onSent: ((UInt64) -> Void)?, onReceived: ((UInt64) -> Void)?,
                      onResponseStart: ((Int, [String: String]) -> DropboxError?)?,
                      traffic: UnsafeMutablePointer<(sent: UInt64, received: UInt64, connections: Int)>?) throws(DropboxError) -> RouteResult {
        let cancel = CancelHandle.either(cancel, configuration.stop)
        let endpoints = configuration.endpoints
        let base = switch route.host {
        case .api: endpoints.api
        case .content: endpoints.content
        case .notify: endpoints.notify
        }
        var headers: [String] = []
        if route.authenticated, let token = context.accessToken { headers.append("Authorization: Bearer \(token)") }
        // Every call, longpoll included: paths, ids and cursors all live in the chosen namespace.
        if let pathRoot = configuration.pathRoot { headers.append("Dropbox-API-Path-Root: \(pathRoot.headerValue)") }
        var requestBody: UploadBody
        switch route.style {
        case .rpc:
            headers.append("Content-Type: application/json")
            // A Void argument is sent as `null`, as the official SDKs do.
            requestBody = .data((arg ?? .null).data)
        case .upload:
            headers.append("Content-Type: application/octet-stream")
            headers.append("Dropbox-API-Arg: \((arg ?? .null).encoded(asciiOnly: true))")
            requestBody = body ?? .empty
        case .download:
            // No Content-Type and an empty body, as the Python SDK sends downloads.
            headers.append("Content-Type:")
            headers.append("Dropbox-API-Arg: \((arg ?? .null).encoded(asciiOnly: true))")
            if let range { headers.append("Range: bytes=\(range.start)-\(range.end.map(String.init) ?? "")") }
            requestBody = .empty
        }
        var request = HTTPRequest(url: "\(base)/2/\(route.name)", headers: headers, body: requestBody, totalTimeout: totalTimeout,
                                  connectTimeout: configuration.connectTimeout)
        request.waitsForWarmUp = configuration.waitsForWarmUps
        let response: HTTPResponse
        switch transport.perform(request, sink: sink, cancel: cancel, onSent: onSent, onReceived: onReceived,
                                 onResponseStart: onResponseStart, traffic: traffic) {
        case .success(let r): response = r
        case .failure(let error): throw error
        }
        guard (200...299).contains(response.status) else {
            throw DropboxError.classify(status: response.status, body: response.body,
                                        contentType: response.headers["content-type"],
                                        retryAfterHeader: response.headers["retry-after"], shape: route.errors)
        }
        let resultText: Data
        if route.style == .download {
            guard let header = response.headers["dropbox-api-result"] else {
                throw .unexpectedResponse("download answer without Dropbox-API-Result")
            }
            resultText = Data(header.utf8)
        } else {
            resultText = response.body
        }
        if resultText.isEmpty { return RouteResult(result: .null, status: response.status, headers: response.headers) }
        do {
            return RouteResult(result: try JSON.parse(resultText), status: response.status, headers: response.headers)
        } catch {
            throw .unexpectedResponse("\(route.name): result is not JSON: \(String(decoding: resultText.prefix(200), as: UTF8.self))")
        }
    }

    // MARK: The retry loop

    /// Runs `body` until it succeeds or the policy gives up. The only place retries happen.
    func withRetries<T>(route: Route, cancel: CancelHandle? = nil,
                        _ body: (AttemptContext) throws(DropboxError) -> T) throws(DropboxError) -> T {
        let policy = configuration.retryPolicy
        let cancel = CancelHandle.either(cancel, configuration.stop)
        var tally = RetryPolicy.Tally()
        var context = AttemptContext(number: 0, accessToken: nil, earlierAttemptMayHaveCommitted: false)
        // Longpoll waits on purpose and is not rate limited: it never queues behind the pacer.
        let pacer = route.host == .notify ? nil : self.pacer
        var waited = 0.0
        var lastError: DropboxError?
        while true {
            if cancel?.isCancelled == true { throw .cancelled }
            if let pacer {
                let budget = policy.maxTotalWait.map { max(0, $0 - waited) } ?? .infinity
                guard let wait = pacer.reserve(limit: budget) else {
                    // The client is paused for longer than this caller may wait.
                    let error = lastError ?? .rateLimited(reason: "paced", retryAfter: pacer.interval)
                    configuration.observer?.failed(error)
                    throw error
                }
                if wait > 0 {
                    waited += wait
                    configuration.observer?.paced(seconds: wait)
                    if !CancellableSleeper().sleep(seconds: wait, cancel: cancel) { throw .cancelled }
                }
            }
            if route.authenticated, let tokens {
                if tokens.needsProactiveRefresh() {
                    // Best effort: if it fails, the request's own 401 will drive the refresh.
                    _ = try? tokens.refresh(replacing: tokens.current.accessToken, using: refreshGrant)
                }
                context.accessToken = tokens.current.accessToken
            }
            let error: DropboxError
            do {
                let result = try body(context)
                pacer?.succeeded()
                configuration.observer?.succeeded()
                return result
            } catch let failure {
                error = failure
            }
            lastError = error
            switch error {
            case .rateLimited(let reason, let retryAfter):
                pacer?.rateLimited(retryAfter: retryAfter, slowDown: reason != RouteError.writeContentionTag)
            case .transport, .cancelled, .localIO: break
            default: pacer?.succeeded()   // answered, and not rate limited
            }
            let decision = policy.decide(after: error, tally: tally)
            RetryPolicy.record(error, decision: decision, in: &tally)
            switch decision {
            case .fail:
                // A rejected token may have a successor already: a new `dbxfs auth` of the same
                // profile while this client runs. Take it and send the request again, once per
                // refresh allowance.
                guard case .auth = error, tally.tokenRefreshes < policy.maxTokenRefreshes,
                      let tokens, let used = context.accessToken, tokens.adoptReloaded(replacing: used) else {
                    configuration.observer?.failed(error)
                    throw error
                }
                tally.tokenRefreshes += 1
            case .refreshToken:
                guard let tokens, let used = context.accessToken else { configuration.observer?.failed(error); throw error }
                do {
                    _ = try tokens.refresh(replacing: used, using: refreshGrant)
                } catch let refused {
                    // The refresh token itself was revoked (`dbxfs unlink`): perhaps relinked since.
                    guard tokens.adoptReloaded(replacing: used) else { configuration.observer?.failed(refused); throw refused }
                }
                statistics.countRetry(of: error)
            case .retry(let delay):
                if let limit = policy.maxTotalWait, waited + delay > limit { configuration.observer?.failed(error); throw error }
                statistics.countRetry(of: error)
                configuration.observer?.willRetry(after: error, in: delay)
                waited += delay
                if !policy.sleeper.sleep(seconds: delay, cancel: cancel) { throw .cancelled }
            }
            if Self.mayHaveCommitted(error) { context.earlierAttemptMayHaveCommitted = true }
            context.number += 1
        }
    }

    /// Whether the server might have executed a request that failed with `error`.
    static func mayHaveCommitted(_ error: DropboxError) -> Bool {
        switch error {
        case .server: true
        // Name resolution or connection failures happen before a single byte is sent.
        case .transport(let code, _): ![5, 6, 7].contains(code)
        default: false
        }
    }

    /// A call with retries whose attempts are all plain `attempt`s.
    func call(_ route: Route, arg: JSON?, cancel: CancelHandle? = nil, totalTimeout: Int? = nil) throws(DropboxError) -> JSON {
        try withRetries(route: route, cancel: cancel) { (context) throws(DropboxError) -> JSON in
            try attempt(route, arg: arg, context: context, cancel: cancel, totalTimeout: totalTimeout).result
        }
    }
}
