/// What a client's calls go through, for whoever reports on the link to Dropbox (the mount's
/// `dbxfs status`, its metrics): each wait before a retry, with the error that caused it, each
/// call's final failure, and each success; and, per HTTP request (attempt), its route, outcome,
/// duration and body bytes, and each wait the request pacer imposed. The retry loop
/// (`DropboxClient.withRetries`) and `DropboxClient.attempt` are the only callers.
///
/// Called on the calling thread, outside the client's locks; an observer must be cheap (a success
/// is reported for every call) and must not call the client back. The client knows nothing of
/// what an observer does with this (no metrics format lives here).
public protocol RequestObserver: Sendable {
    /// A call failed with `error` and will be sent again in `seconds`.
    func willRetry(after error: DropboxError, in seconds: Double)
    /// A call gave up with `error` (after its retries, or at once for errors never retried).
    func failed(_ error: DropboxError)
    /// A call got its answer.
    func succeeded()
    /// One HTTP request ended (every attempt of every call, retried or not). Default: nothing.
    func attempted(_ attempt: RequestAttempt)
    /// A call waited `seconds` for the request pacer (slowed down after 429s). Default: nothing.
    func paced(seconds: Double)
}

extension RequestObserver {
    public func attempted(_ attempt: RequestAttempt) {}
    public func paced(seconds: Double) {}
}

/// One HTTP request of a call, as the observer sees it.
public struct RequestAttempt: Sendable, Equatable {
    /// The route, e.g. "files/download": a name from the API spec, never a path.
    public var route: String
    /// Whether it carried file content up, down, or neither (an rpc).
    public var kind: RequestKind
    public var outcome: RequestOutcome
    /// From sending the request to the end of its answer (or the failure).
    public var seconds: Double
    /// Body bytes sent (uploads, JSON arguments) and received (downloads, JSON answers).
    public var bytesSent: UInt64
    public var bytesReceived: UInt64
    /// New connections (TCP and TLS handshakes) the request opened: 0 on a kept-alive connection.
    public var connectionsOpened: Int

    public init(route: String, kind: RequestKind, outcome: RequestOutcome, seconds: Double, bytesSent: UInt64,
                bytesReceived: UInt64, connectionsOpened: Int = 0) {
        self.route = route; self.kind = kind; self.outcome = outcome; self.seconds = seconds
        self.bytesSent = bytesSent; self.bytesReceived = bytesReceived; self.connectionsOpened = connectionsOpened
    }
}

/// The API's request styles: rpc (JSON both ways), upload (content up), download (content down).
public enum RequestKind: Sendable, Equatable { case rpc, upload, download }

/// How one request ended, in a few kinds an operator alerts on. A route error (409) keeps its
/// tag, the first levels of Dropbox's `error_summary` ("path/not_found"): tags come from the API
/// spec, so they are a bounded set.
public enum RequestOutcome: Sendable, Equatable {
    case ok
    case conflict(tag: String)
    /// 429, or a 409 `too_many_write_operations` (which means the same).
    case rateLimited
    case serverError
    /// No HTTP answer: connection, TLS or timeout failures.
    case transportError
    case authError
    case accessDenied
    case badRequest
    case cancelled
    case other

    public init(_ error: DropboxError) {
        switch error {
        case .route(_, let summary): self = .conflict(tag: Self.tag(ofSummary: summary))
        case .rateLimited: self = .rateLimited
        case .server: self = .serverError
        case .transport: self = .transportError
        case .auth: self = .authError
        case .accessDenied: self = .accessDenied
        case .badInput: self = .badRequest
        case .cancelled: self = .cancelled
        case .unexpectedResponse, .localIO, .contentChanged: self = .other
        }
    }

    /// "ok", "conflict", "rate_limited", ...: the value of the `outcome` label.
    public var label: String {
        switch self {
        case .ok: "ok"
        case .conflict: "conflict"
        case .rateLimited: "rate_limited"
        case .serverError: "server_error"
        case .transportError: "transport_error"
        case .authError: "auth_error"
        case .accessDenied: "access_denied"
        case .badRequest: "bad_request"
        case .cancelled: "cancelled"
        case .other: "other"
        }
    }

    /// "path/not_found/.." → "path/not_found": at most two levels, each of the spec's
    /// characters only (lower-case letters, digits, `_`), so no path or message can leak in.
    static func tag(ofSummary summary: String) -> String {
        var levels: [Substring] = []
        for level in summary.split(separator: "/", omittingEmptySubsequences: false) {
            guard !level.isEmpty, level.count <= 64,
                  level.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "_" }) else { break }
            levels.append(level)
            if levels.count == 2 { break }
        }
        return levels.isEmpty ? "unknown" : levels.joined(separator: "/")
    }
}

/// Several observers as one (the mount's connection monitor and its metrics), told in order.
public struct RequestObservers: RequestObserver {
    public let observers: [any RequestObserver]

    public init(_ observers: [any RequestObserver]) { self.observers = observers }

    public func willRetry(after error: DropboxError, in seconds: Double) {
        for observer in observers { observer.willRetry(after: error, in: seconds) }
    }
    public func failed(_ error: DropboxError) { for observer in observers { observer.failed(error) } }
    public func succeeded() { for observer in observers { observer.succeeded() } }
    public func attempted(_ attempt: RequestAttempt) { for observer in observers { observer.attempted(attempt) } }
    public func paced(seconds: Double) { for observer in observers { observer.paced(seconds: seconds) } }
}
