/// Linking an account: OAuth2 with PKCE (code flow for a native app with no secret), the
/// refresh-token grant the TokenProvider uses, and token revocation.
///
/// Flow for `dbxfs auth`: make a `PKCE`, show `authorizeURL(...)` to the user, read back the code,
/// call `exchangeCode`, store the returned `OAuthToken` (it carries the refresh token).
import ContentHash
import Foundation

/// A PKCE verifier (128 characters from [A-Za-z0-9], as the Python SDK makes them) and its S256
/// challenge, base64url(sha256(verifier)) without padding.
public struct PKCE: Sendable, Equatable {
    public let verifier: String
    public let challenge: String

    public init(verifier: String = SecureRandom.string(count: 128)) {
        self.verifier = verifier
        self.challenge = Self.base64URL(sha256(Array(verifier.utf8)))
    }

    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

extension DropboxClient {
    /// The page the user opens to grant access. `tokenAccessType` "offline" yields a refresh token.
    public func authorizeURL(appKey: String, pkce: PKCE, redirectURI: String? = nil, state: String? = nil,
                             tokenAccessType: String = "offline", scopes: [String] = []) -> String {
        var items = [URLQueryItem(name: "response_type", value: "code"),
                     URLQueryItem(name: "client_id", value: appKey),
                     URLQueryItem(name: "token_access_type", value: tokenAccessType),
                     URLQueryItem(name: "code_challenge", value: pkce.challenge),
                     URLQueryItem(name: "code_challenge_method", value: "S256")]
        if let redirectURI { items.append(URLQueryItem(name: "redirect_uri", value: redirectURI)) }
        if let state { items.append(URLQueryItem(name: "state", value: state)) }
        if !scopes.isEmpty { items.append(URLQueryItem(name: "scope", value: scopes.joined(separator: " "))) }
        // Every value percent-encoded but RFC 3986's unreserved characters: URLComponents would
        // leave ':' and '/' of the redirect_uri as they are, which some parsers take apart.
        let query = items.map { "\($0.name)=\(Self.queryValue($0.value ?? ""))" }.joined(separator: "&")
        return configuration.endpoints.authorizeURL + "?" + query
    }

    private static func queryValue(_ value: String) -> String {
        let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        return value.addingPercentEncoding(withAllowedCharacters: unreserved) ?? value
    }

    /// Whether the API host answers at all: one bare request to the token endpoint, which any
    /// server answers (400, missing grant) without side effects. `dbxfs auth` asks before it
    /// sends the user to a browser for a code it could not exchange. Throws the transport error.
    public func checkReachable() throws(DropboxError) {
        let request = HTTPRequest(url: configuration.endpoints.tokenURL,
                                  headers: ["Content-Type: application/x-www-form-urlencoded"],
                                  body: .data(Data()), totalTimeout: nil)
        if case .failure(let error) = transport.perform(request) { throw error }
    }

    /// Exchanges an authorization code (PKCE) for tokens.
    public func exchangeCode(_ code: String, appKey: String, pkce: PKCE, redirectURI: String? = nil) throws(DropboxError) -> OAuthToken {
        var fields = ["grant_type": "authorization_code", "code": code, "client_id": appKey, "code_verifier": pkce.verifier]
        if let redirectURI { fields["redirect_uri"] = redirectURI }
        return try tokenRequest(fields)
    }

    /// The refresh grant: a new access token for `refreshToken`, using the provider's app key.
    public func refreshAccessToken(refreshToken: String, appKey: String, appSecret: String? = nil) throws(DropboxError) -> OAuthToken {
        var fields = ["grant_type": "refresh_token", "refresh_token": refreshToken, "client_id": appKey]
        if let appSecret { fields["client_secret"] = appSecret }
        var token = try tokenRequest(fields)
        if token.refreshToken == nil { token.refreshToken = refreshToken }
        return token
    }

    /// Used by the retry loop's single-flight refresh.
    func refreshGrant(_ refreshToken: String) throws(DropboxError) -> OAuthToken {
        guard let appKey = tokens?.appKey else { throw .auth(.expiredAccessToken, summary: "no app key to refresh with") }
        return try refreshAccessToken(refreshToken: refreshToken, appKey: appKey, appSecret: tokens?.appSecret)
    }

    /// Disables the current access token (and its refresh token) on the server.
    public func revokeToken() throws(DropboxError) {
        _ = try call(.rpc("auth/token/revoke"), arg: nil)
    }

    private func tokenRequest(_ fields: [String: String]) throws(DropboxError) -> OAuthToken {
        var form = URLComponents()
        form.queryItems = fields.sorted { $0.key < $1.key }.map { URLQueryItem(name: $0.key, value: $0.value) }
        // URLComponents leaves '+' alone, which a form decoder would read as a space.
        let body = (form.percentEncodedQuery ?? "").replacingOccurrences(of: "+", with: "%2B")
        let route = Route(name: "oauth2/token", host: .api, style: .rpc, errors: .none, authenticated: false)
        let json = try withRetries(route: route) { (_) throws(DropboxError) -> JSON in
            let request = HTTPRequest(url: configuration.endpoints.tokenURL,
                                      headers: ["Content-Type: application/x-www-form-urlencoded"],
                                      body: .data(Data(body.utf8)), totalTimeout: nil)
            let response: HTTPResponse
            switch transport.perform(request) {
            case .success(let r): response = r
            case .failure(let e): throw e
            }
            let parsed = try? JSON.parse(response.body)
            if response.status == 400 || response.status == 401, let oauthError = parsed?["error"]?.string {
                // RFC 6749 errors: {"error":"invalid_grant","error_description":"..."}.
                throw .auth(.other(oauthError), summary: parsed?["error_description"]?.string ?? oauthError)
            }
            guard (200...299).contains(response.status) else {
                throw DropboxError.classify(status: response.status, body: response.body,
                                            contentType: response.headers["content-type"],
                                            retryAfterHeader: response.headers["retry-after"], shape: .none)
            }
            guard let parsed else { throw .unexpectedResponse("token endpoint answered non-JSON") }
            return parsed
        }
        guard let access = json["access_token"]?.string else { throw .unexpectedResponse("token answer without access_token") }
        let expiry = json["expires_in"]?.double.map { Date().addingTimeInterval($0) }
        return OAuthToken(accessToken: access, refreshToken: json["refresh_token"]?.string, expiresAt: expiry,
                          accountID: json["account_id"]?.string, uid: json["uid"]?.string)
    }
}
