/// What `dbxfs auth` stores for one profile: the long-lived refresh token and what is needed to
/// use it (app key, API base), who it belongs to, and the latest access token (refreshed tokens
/// are written back so a remount within the token's lifetime needs no refresh).
///
/// The JSON field names are snake_case and stable; docs/ACCOUNTS.md describes the file.
import DropboxRemote
import Foundation

struct StoredCredentials: Codable, Sendable, Equatable {
    var profile: String
    var appKey: String
    /// The API base the token was issued by; nil = the real Dropbox.
    var apiBase: String?
    var accountID: String
    var email: String
    var displayName: String
    var refreshToken: String
    var accessToken: String?
    var accessTokenExpiresAt: Date?
    var linkedAt: Date

    enum CodingKeys: String, CodingKey {
        case profile, email
        case appKey = "app_key", apiBase = "api_base", accountID = "account_id", displayName = "display_name"
        case refreshToken = "refresh_token", accessToken = "access_token"
        case accessTokenExpiresAt = "access_token_expires_at", linkedAt = "linked_at"
    }

    /// The token as the client's `TokenProvider` wants it.
    var oauthToken: OAuthToken {
        // With no access token stored, an empty one makes the first call fail with 401 and
        // refresh; an expiry in the past makes the provider refresh before even trying.
        OAuthToken(accessToken: accessToken ?? "", refreshToken: refreshToken,
                   expiresAt: accessToken == nil ? Date.distantPast : accessTokenExpiresAt, accountID: accountID)
    }

    /// Folds a refreshed token in (the refresh token is kept unless the server rotated it).
    mutating func update(with token: OAuthToken) {
        accessToken = token.accessToken
        accessTokenExpiresAt = token.expiresAt
        if let refresh = token.refreshToken, !refresh.isEmpty { refreshToken = refresh }
    }
}
