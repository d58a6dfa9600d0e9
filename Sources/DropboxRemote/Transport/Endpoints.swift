/// The four Dropbox base URLs. They default to the real hosts; one base URL (the emulator's
/// `http://127.0.0.1:PORT`, or a compatible gateway) can replace all four at once, and a `{host}`
/// in it becomes `api`, `content`, `notify` or `web` for each (`http://127.0.0.1:PORT/{host}`:
/// the emulator then checks that every route goes to its own host, as Dropbox does). Bases carry
/// their scheme, and routes are appended as `<base>/2/<route>` (SwiftyDropbox's model).
public struct Endpoints: Sendable, Equatable {
    /// RPC routes and the OAuth token endpoint.
    public var api: String
    /// Upload and download routes.
    public var content: String
    /// `files/list_folder/longpoll`.
    public var notify: String
    /// The OAuth authorize page.
    public var web: String

    public init(api: String, content: String, notify: String, web: String) {
        self.api = Self.trimmed(api); self.content = Self.trimmed(content)
        self.notify = Self.trimmed(notify); self.web = Self.trimmed(web)
    }

    /// All four bases replaced by one URL; `{host}` in it names each host.
    public init(overridingAllWith base: String) {
        func named(_ host: String) -> String { base.replacingOccurrences(of: "{host}", with: host) }
        self.init(api: named("api"), content: named("content"), notify: named("notify"), web: named("web"))
    }

    public static let dropbox = Endpoints(
        api: "https://api.dropboxapi.com", content: "https://content.dropboxapi.com",
        notify: "https://notify.dropboxapi.com", web: "https://www.dropbox.com")

    public var tokenURL: String { api + "/oauth2/token" }
    public var authorizeURL: String { web + "/oauth2/authorize" }

    private static func trimmed(_ url: String) -> String {
        var url = url
        while url.hasSuffix("/") { url.removeLast() }
        return url
    }
}

/// Options of the client. Everything has a default that suits the real Dropbox.
public struct ClientConfiguration: Sendable {
    public var endpoints: Endpoints
    /// Extra CA bundle (PEM) trusted in addition to the system store: for tests with a private CA.
    /// Verification itself is always on.
    public var extraCAFile: String?
    /// Seconds to establish a connection (TCP + TLS).
    public var connectTimeout: Int
    /// A transfer slower than 1 byte/s for this many seconds is abandoned (and retried).
    public var lowSpeedTimeout: Int
    public var userAgent: String
    public var retryPolicy: RetryPolicy
    /// Idle easy handles kept for reuse (each keeps its connection open).
    public var maxIdleHandles: Int
    /// Sent as `Dropbox-API-Path-Root` on every call (nil: none, the home namespace). A team
    /// member needs `.root(root_namespace_id)` to see the team space (rclone #2003, Maestral).
    public var pathRoot: PathRoot?
    /// Slow the whole client down after 429s (RequestPacer.swift). Off only for tests that look at
    /// one call's own waits.
    public var adaptivePacing = true
    /// Told of every retry, final failure and success (RequestObserver.swift); nil: nobody.
    public var observer: (any RequestObserver)?
    /// A call with no idle connection to its host waits (a few seconds at most) for a warm-up of
    /// that host in flight rather than open its own (HandlePool.swift). Off for a mount's start-up
    /// check, which runs alongside the warm-ups started with it: waiting for one (three round
    /// trips: TCP, TLS, its request) and then sending would take a round trip more than its own
    /// connection.
    public var waitsForWarmUps = true
    /// Cancels every call of the client along with the caller's own handle (`cancelled(by:)`): a
    /// stopping mount ends the calls its FUSE requests wait on at once.
    public var stop: CancelHandle?

    public static let version = "0.1.0"

    public init(endpoints: Endpoints = .dropbox, extraCAFile: String? = nil, connectTimeout: Int = 15,
                lowSpeedTimeout: Int = 60, userAgent: String = "dbxfs/\(ClientConfiguration.version)",
                retryPolicy: RetryPolicy = RetryPolicy(), maxIdleHandles: Int = 32, pathRoot: PathRoot? = nil) {
        self.endpoints = endpoints; self.extraCAFile = extraCAFile; self.connectTimeout = connectTimeout
        self.lowSpeedTimeout = lowSpeedTimeout; self.userAgent = userAgent; self.retryPolicy = retryPolicy
        self.maxIdleHandles = maxIdleHandles; self.pathRoot = pathRoot
    }
}
