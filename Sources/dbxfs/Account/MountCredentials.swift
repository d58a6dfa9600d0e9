/// Which token a mount uses, and what to tell the user when the server refuses it.
///
/// Precedence: `--token-file` (a bare access token, for tests and scripts), then a profile named
/// with `--profile` (or `profile =` in the config file), then `$DBXFS_ACCESS_TOKEN`, then the
/// stored "default" profile. A stored profile gives a refreshing `TokenProvider` whose new tokens
/// are written back to the profile's file.
import DropboxRemote
import Foundation
import VFSCache

struct MountCredentials: Sendable {
    struct Failure: Error, CustomStringConvertible { var description: String }

    let tokens: TokenProvider
    /// The API base stored with the profile (a token is only good where it was issued).
    let apiBase: String?
    /// The profile in use, nil for a bare token.
    let profile: String?
    /// The second half of the line shown when the server rejects the token at mount time.
    let fixHint: String
    /// What to do when Dropbox stops accepting the token of a running mount (ConnectionMonitor).
    let mountedFix: String
    /// The profile's file, nil for a bare token (named when what it holds is refused).
    var storedFile: String? = nil

    static func resolve(tokenFile: String?, environmentToken: String?, profile: String?,
                        store: CredentialStore = CredentialStore(), logger: Logger) throws(Failure) -> MountCredentials {
        if let tokenFile {
            guard let token = readToken(tokenFile) else {
                throw Failure(description: FileManager.default.isReadableFile(atPath: tokenFile)
                              ? "the token file \(tokenFile) is empty" : "cannot read the token file \(tokenFile)")
            }
            // A new token written into the file is picked up when Dropbox refuses the old one.
            let reload: @Sendable () -> OAuthToken? = { readToken(tokenFile).map { OAuthToken(accessToken: $0) } }
            return MountCredentials(tokens: TokenProvider(accessToken: token, reload: reload), apiBase: nil, profile: nil,
                                    fixHint: "check the token in \(tokenFile)",
                                    mountedFix: "put a valid access token in \(tokenFile); the mount picks it up without a remount")
        }
        if profile == nil, let token = environmentToken, !token.isEmpty {
            return MountCredentials(tokens: TokenProvider(accessToken: token), apiBase: nil, profile: nil,
                                    fixHint: "check DBXFS_ACCESS_TOKEN",
                                    mountedFix: "set DBXFS_ACCESS_TOKEN to a valid token and mount again")
        }
        let name = profile ?? CredentialStore.defaultProfile
        let again = name == CredentialStore.defaultProfile ? "dbxfs auth" : "dbxfs auth --profile \(name)"
        let stored: StoredCredentials?
        do { stored = try store.load(profile: name) } catch { throw Failure(description: error.description) }
        guard let stored else {
            throw Failure(description: "no Dropbox account is linked\(name == CredentialStore.defaultProfile ? "" : " for profile '\(name)'"); run '\(again) --app-key KEY' first")
        }
        // A relink (`dbxfs auth` of the same profile) while mounted rewrites the file: the mount
        // takes the new token once Dropbox refuses the old one (TokenProvider.adoptReloaded).
        let provider = TokenProvider(token: stored.oauthToken, appKey: stored.appKey,
                                     persist: { token in persist(token, profile: name, store: store, logger: logger) },
                                     reload: { (try? store.load(profile: name))??.oauthToken })
        return MountCredentials(tokens: provider, apiBase: stored.apiBase, profile: name,
                                fixHint: "the stored authorization may have been revoked or expired; run '\(again)' again",
                                mountedFix: "run '\(again)'; the mount picks it up without a remount",
                                storedFile: store.path(profile: name))
    }

    /// The token in a token file, trimmed; nil when it cannot be read or is empty.
    private static func readToken(_ file: String) -> String? {
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { return nil }
        let token = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return token.isEmpty ? nil : token
    }

    /// Writes a refreshed token back into the profile's file (re-read first, so a concurrent
    /// `dbxfs auth` of the same profile is not undone). Never logs the token itself.
    private static func persist(_ token: OAuthToken, profile: String, store: CredentialStore, logger: Logger) {
        do {
            guard var current = try store.load(profile: profile) else {
                logger.warning("profile '\(profile)' was unlinked while mounted; the refreshed token is not saved")
                return
            }
            current.update(with: token)
            try store.save(current)
            logger.debug("saved the refreshed access token of profile '\(profile)'")
        } catch {
            logger.warning("cannot save the refreshed access token: \(error.description)")
        }
    }
}
