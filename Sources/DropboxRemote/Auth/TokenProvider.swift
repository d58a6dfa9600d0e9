/// The access token every authenticated call carries, and its refresh as a single flight.
///
/// Many FUSE worker threads may meet `expired_access_token` at the same moment. The first one
/// refreshes; the others wait on the condition and then use the new token. A thread whose failed
/// request carried a token that is no longer current skips the refresh entirely and retries with
/// the current one. Each new token is handed to `persist` (e.g. to rewrite the config file) before
/// anyone else can refresh again, so saved tokens arrive in order.
///
/// A token can also be replaced from outside: when the server rejects ours for good (revoked by
/// `dbxfs unlink`, or a refresh token that no longer works), `reload` is asked for the token
/// stored now, which a new `dbxfs auth` of the same profile may have written meanwhile; a
/// different one is adopted, so a running mount needs no remount after a relink.
import Foundation

/// What the OAuth token endpoint gave us.
public struct OAuthToken: Sendable, Equatable, Codable {
    public var accessToken: String
    /// Present for offline access; a refresh grant keeps the old one.
    public var refreshToken: String?
    /// When the access token stops working; nil = unknown or never.
    public var expiresAt: Date?
    /// Set by the code exchange.
    public var accountID: String?
    public var uid: String?

    public init(accessToken: String, refreshToken: String? = nil, expiresAt: Date? = nil, accountID: String? = nil, uid: String? = nil) {
        self.accessToken = accessToken; self.refreshToken = refreshToken; self.expiresAt = expiresAt
        self.accountID = accountID; self.uid = uid
    }
}

/// Holds the current token. Safe from any thread: the state is guarded by `condition`, and the
/// refresh itself runs outside the lock while the `refreshing` flag keeps others waiting.
public final class TokenProvider: @unchecked Sendable {
    /// App key (client_id) and optional secret, needed for refresh grants.
    public let appKey: String?
    public let appSecret: String?
    /// Refresh this long before `expiresAt` rather than waiting for a 401.
    public let refreshMargin: TimeInterval
    private let persist: (@Sendable (OAuthToken) -> Void)?
    /// The token stored outside now (the credential store), or nil; see the top of the file.
    private let reload: (@Sendable () -> OAuthToken?)?
    private let condition = NSCondition()
    private var token: OAuthToken
    /// When `token` arrived: with `expiresAt` it gives the token's lifetime.
    private var receivedAt = Date()
    private var refreshing = false

    public init(token: OAuthToken, appKey: String? = nil, appSecret: String? = nil, refreshMargin: TimeInterval = 60,
                persist: (@Sendable (OAuthToken) -> Void)? = nil, reload: (@Sendable () -> OAuthToken?)? = nil) {
        self.token = token; self.appKey = appKey; self.appSecret = appSecret
        self.refreshMargin = refreshMargin; self.persist = persist; self.reload = reload
    }

    /// A provider for a long-lived token that is never refreshed.
    public convenience init(accessToken: String, reload: (@Sendable () -> OAuthToken?)? = nil) {
        self.init(token: OAuthToken(accessToken: accessToken), reload: reload)
    }

    public var current: OAuthToken {
        condition.lock(); defer { condition.unlock() }
        return token
    }

    public var canRefresh: Bool { current.refreshToken != nil && appKey != nil }

    /// True when the token is known to expire within the margin and can be refreshed. The margin
    /// is at most a quarter of the token's lifetime, so short-lived tokens (tests, gateways) are
    /// not refreshed before every call.
    func needsProactiveRefresh(now: Date = Date()) -> Bool {
        condition.lock()
        let (t, received) = (token, receivedAt)
        condition.unlock()
        guard let expiry = t.expiresAt, t.refreshToken != nil, appKey != nil else { return false }
        let margin = min(refreshMargin, max(0, expiry.timeIntervalSince(received)) / 4)
        return expiry.timeIntervalSince(now) < margin
    }

    /// Returns a token newer than `stale`, refreshing through `refresher` if nobody else has yet.
    /// `refresher` receives the refresh token and returns the new token (without a refresh token
    /// if the server sent none; the old one is kept).
    func refresh(replacing stale: String,
                 using refresher: (_ refreshToken: String) throws(DropboxError) -> OAuthToken) throws(DropboxError) -> String {
        condition.lock()
        while refreshing { condition.wait() }
        if token.accessToken != stale {
            // Someone refreshed while our request was in flight or while we waited.
            let fresh = token.accessToken
            condition.unlock()
            return fresh
        }
        guard let refreshToken = token.refreshToken, appKey != nil else {
            condition.unlock()
            throw .auth(.expiredAccessToken, summary: "access token expired and no refresh token is configured")
        }
        refreshing = true
        condition.unlock()

        let result: Result<OAuthToken, DropboxError>
        do { result = .success(try refresher(refreshToken)) } catch { result = .failure(error) }

        if case .success(var fresh) = result {
            if fresh.refreshToken == nil { fresh.refreshToken = refreshToken }
            condition.lock(); token = fresh; receivedAt = Date(); condition.unlock()
            persist?(fresh)
        }
        condition.lock()
        refreshing = false
        condition.broadcast()
        condition.unlock()
        return try result.get().accessToken
    }

    /// After the server rejected `stale` for good: adopts the token `reload` finds if it is
    /// another one (a relink happened), and returns whether it did. Single flight with
    /// `refresh`; a token adopted or refreshed by another thread meanwhile counts as found.
    public func adoptReloaded(replacing stale: String) -> Bool {
        guard let reload else { return false }
        condition.lock()
        while refreshing { condition.wait() }
        if token.accessToken != stale {
            condition.unlock()
            return true
        }
        refreshing = true
        condition.unlock()
        let stored = reload()
        condition.lock()
        defer {
            refreshing = false
            condition.broadcast()
            condition.unlock()
        }
        guard let stored, stored.accessToken != stale, stored.accessToken != token.accessToken else { return false }
        token = stored
        receivedAt = Date()
        return true
    }
}
