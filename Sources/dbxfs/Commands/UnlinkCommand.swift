/// `dbxfs unlink`: revokes the stored authorization with Dropbox (`auth/token/revoke`, which
/// also kills the refresh token) and deletes the stored credentials.
///
/// The local file is deleted even when the server cannot be reached or refuses (a warning says
/// so), because the user's intent is "this machine must not hold my Dropbox access any more";
/// the warning tells them to revoke the app in their Dropbox account settings as well.
import DropboxRemote
import Foundation

enum UnlinkCommand {
    static let usage = """
        usage: dbxfs unlink [--profile NAME]

        Revokes dbxfs's access to the account linked under NAME (default: "default") and deletes
        the stored credentials. If Dropbox cannot be reached the credentials are deleted anyway,
        with a warning: then remove the app under Settings > Connected apps on dropbox.com.

        options:
          --profile NAME      the profile to unlink (default "default")
          --ca-file PEM       also trust the CA certificates in PEM
          -h, --help          this text

        exit status: 0 unlinked (possibly with a warning), 1 nothing to unlink or deleting failed, 2 bad usage.
        """

    static let subcommand = Subcommand(name: "unlink", summary: "revoke and forget a linked account", run: run)

    static func run(_ arguments: [String]) -> Int32 {
        var profile: String?
        var caFile: String?
        var help = false
        var scanner = OptionScanner(arguments, command: "unlink")
        let config: ConfigFile
        do {
            config = try ConfigFile.load()
            while let item = scanner.next() {
                switch item {
                case .positional(let value):
                    throw OptionScanner.UsageError(description: "unexpected argument '\(value)' (see dbxfs unlink --help)")
                case .option(let name, let inline):
                    switch name {
                    case "-h", "--help": help = true
                    case "--profile": profile = try scanner.value(for: name, inline: inline)
                    case "--ca-file": caFile = PathArgument.absolute(try scanner.value(for: name, inline: inline))
                    default: throw scanner.unknown(name)
                    }
                }
            }
        } catch let error as OptionScanner.UsageError {
            printError(error.description); return 2
        } catch {
            printError("\(error)"); return 2
        }
        if help { print(usage); return 0 }
        let name = profile ?? config["profile"] ?? CredentialStore.defaultProfile
        guard CredentialStore.isValidProfileName(name) else {
            printError("invalid profile name '\(name)'"); return 2
        }

        let store = CredentialStore()
        let stored: StoredCredentials?
        do { stored = try store.load(profile: name) } catch {
            // A damaged file is still ours to delete; with no token in it, nothing can be revoked.
            printError("warning: \(store.path(profile: name)) is unreadable; deleted it without revoking (revoke the app under Settings > Connected apps on dropbox.com)")
            _ = try? store.delete(profile: name)
            return 0
        }
        guard let stored else {
            printError("no account is linked under profile '\(name)'")
            return 1
        }

        let server = ServerMessages.serverName(stored.apiBase)
        let configuration = ClientConfiguration(endpoints: ServerMessages.endpoints(stored.apiBase),
                                                extraCAFile: caFile ?? config["ca_file"], connectTimeout: 5,
                                                retryPolicy: RetryPolicy(maxAttempts: 2))
        let client = DropboxClient(configuration: configuration, tokens: TokenProvider(token: stored.oauthToken, appKey: stored.appKey))
        let notRevoked = "the authorization was not revoked on the server (remove the app under Settings > Connected apps on dropbox.com)"
        var warning: String?
        if let problem = stored.apiBase.flatMap(APIBase.problem) {
            // Sending the token there would expose it: it is only forgotten here.
            warning = "the stored api_base \(problem); \(notRevoked)"
        } else {
            do {
                try client.revokeToken()
            } catch {
                if case .auth = error {
                    // Already revoked or expired for good: nothing left to revoke on the server.
                } else {
                    warning = "\(ServerMessages.describe(error, server: server)); \(notRevoked)"
                }
            }
        }
        do { try store.delete(profile: name) } catch {
            printError(error.description)
            return 1
        }
        if let warning { printError("warning: \(warning)") }
        print("Unlinked \(stored.displayName) <\(stored.email)> (profile '\(name)'); deleted \(store.path(profile: name)).")
        return 0
    }
}
