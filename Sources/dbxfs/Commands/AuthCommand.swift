/// `dbxfs auth` (alias `link`): links a Dropbox account with OAuth2 code flow + PKCE (S256) and
/// offline access, then stores the refresh token for mounts (Account/CredentialStore.swift).
///
/// Two forms: by default the no-redirect flow (print the authorize URL, read the code the user
/// pastes on stdin), which works over SSH and on headless machines; with `--redirect`, a loopback
/// listener on 127.0.0.1 receives the browser's redirect (the app must list
/// `http://127.0.0.1:PORT/` as a redirect URI in the App Console).
/// The URL and prompts go to stdout; tokens are never printed.
import ContentHash
import DropboxRemote
import Foundation

enum AuthCommand {
    static let usage = """
        usage: dbxfs auth [--app-key KEY] [--profile NAME] [--redirect [--port N]] [--api-base URL]

        Links a Dropbox account (alias: dbxfs link). Opens nothing by itself: it prints a URL to
        open in a browser, then reads the authorization code Dropbox shows you from stdin.

        options:
          --app-key KEY       your app's key from the Dropbox App Console
                              (default: app_key in the config file, or $DBXFS_APP_KEY)
          --profile NAME      store the link under NAME (default: "default"); mount it with
                              dbxfs --profile NAME MOUNTPOINT
          --redirect          receive the code through a redirect to http://127.0.0.1:PORT/
                              instead of pasting it (register that URI in the App Console)
          --port N            the --redirect port (default 53682; 0 picks a free one)
          --timeout S         how long --redirect waits for the browser (default 300)
          --api-base URL      Dropbox API base URL (for an emulator or gateway)
          --ca-file PEM       also trust the CA certificates in PEM
          -h, --help          this text

        Credentials go to $XDG_CONFIG_HOME/dbxfs/accounts/NAME.json (mode 0600).
        exit status: 0 linked, 1 linking failed, 2 bad usage.
        """

    static let subcommand = Subcommand(name: "auth", summary: "link a Dropbox account", run: run)
    static let alias = Subcommand(name: "link", summary: "same as auth", run: run)

    struct Options {
        var appKey: String?
        var profile = CredentialStore.defaultProfile
        var redirect = false
        var port: UInt16 = 53682
        var timeout: TimeInterval = 300
        var apiBase: String?
        var caFile: String?
        var help = false
    }

    static func parse(_ arguments: [String], config: ConfigFile, environment: [String: String]) throws(OptionScanner.UsageError) -> Options {
        var options = Options()
        var scanner = OptionScanner(arguments, command: "auth")
        while let item = scanner.next() {
            switch item {
            case .positional(let value):
                throw OptionScanner.UsageError(description: "unexpected argument '\(value)' (see dbxfs auth --help)")
            case .option(let name, let inline):
                switch name {
                case "-h", "--help": options.help = true
                case "--app-key": options.appKey = try scanner.value(for: name, inline: inline)
                case "--profile": options.profile = try scanner.value(for: name, inline: inline)
                case "--redirect": try scanner.flagTakesNoValue(name, inline); options.redirect = true
                case "--port":
                    let raw = try scanner.value(for: name, inline: inline)
                    guard let port = UInt16(raw) else { throw OptionScanner.UsageError(description: "invalid --port '\(raw)'") }
                    options.port = port
                case "--timeout":
                    let raw = try scanner.value(for: name, inline: inline)
                    guard let seconds = Double(raw), seconds > 0 else { throw OptionScanner.UsageError(description: "invalid --timeout '\(raw)'") }
                    options.timeout = seconds
                case "--api-base": options.apiBase = try scanner.value(for: name, inline: inline)
                case "--ca-file": options.caFile = try scanner.value(for: name, inline: inline)
                default: throw scanner.unknown(name)
                }
            }
        }
        if options.help { return options }
        options.appKey = options.appKey ?? config["app_key"] ?? environment["DBXFS_APP_KEY"].flatMap { $0.isEmpty ? nil : $0 }
        guard options.appKey != nil else {
            throw OptionScanner.UsageError(description: "no app key: pass --app-key KEY or set app_key in \(config.path) (create an app at https://www.dropbox.com/developers/apps)")
        }
        guard CredentialStore.isValidProfileName(options.profile) else {
            throw OptionScanner.UsageError(description: "invalid profile name '\(options.profile)' (letters, digits, '.', '_', '-')")
        }
        do throws(APIBase.Refused) {
            options.apiBase = try APIBase.chosen(option: options.apiBase, configured: config["api_base"], environment: environment)
        } catch {
            throw OptionScanner.UsageError(description: error.description)
        }
        options.caFile = options.caFile.map { PathArgument.absolute($0) } ?? config["ca_file"]
        return options
    }

    static func run(_ arguments: [String]) -> Int32 {
        let environment = ProcessInfo.processInfo.environment
        let options: Options
        do {
            let config = try ConfigFile.load()
            options = try parse(arguments, config: config, environment: environment)
        } catch let error as OptionScanner.UsageError {
            printError(error.description)
            return 2
        } catch {
            printError("\(error)")
            return 2
        }
        if options.help {
            print(usage)
            return 0
        }
        do {
            try link(options)
            return 0
        } catch {
            printError(error.description)
            return 1
        }
    }

    struct Failure: Error, CustomStringConvertible { var description: String }

    private static func link(_ options: Options) throws(Failure) {
        let appKey = options.appKey!
        let server = ServerMessages.serverName(options.apiBase)
        let configuration = ClientConfiguration(endpoints: ServerMessages.endpoints(options.apiBase), extraCAFile: options.caFile,
                                                connectTimeout: 10, retryPolicy: RetryPolicy(maxAttempts: 3))
        let unauthenticated = DropboxClient(configuration: configuration, tokens: nil)
        // Before the user is sent to a browser for a code: a code this server cannot take is
        // wasted, and a wrong --api-base or a dead network should say so at once.
        do { try unauthenticated.checkReachable() } catch { throw Failure(description: ServerMessages.describe(error, server: server)) }
        let pkce = PKCE()

        let code: String
        var redirectURI: String?
        if options.redirect {
            let listener: LoopbackRedirect
            do { listener = try LoopbackRedirect(port: options.port) } catch { throw Failure(description: error.description) }
            let state = SecureRandomState.make()
            redirectURI = listener.redirectURI
            let url = unauthenticated.authorizeURL(appKey: appKey, pkce: pkce, redirectURI: listener.redirectURI, state: state)
            say("""
                To link dbxfs with your Dropbox account, open this page in a browser and click "Allow":

                    \(url)

                Waiting for the browser to come back to \(listener.redirectURI) ...
                """)
            do { code = try listener.waitForCode(state: state, timeout: options.timeout) } catch { throw Failure(description: error.description) }
        } else {
            let url = unauthenticated.authorizeURL(appKey: appKey, pkce: pkce)
            say("""
                To link dbxfs with your Dropbox account:
                  1. Open this page in a browser (log in to Dropbox if asked):

                     \(url)

                  2. Click "Allow".
                  3. Copy the authorization code shown, and paste it here.

                """)
            writeOutput("Authorization code: ")
            guard let line = readLine(strippingNewline: true) else {
                throw Failure(description: "no authorization code was entered (stdin closed)")
            }
            code = line.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !code.isEmpty else { throw Failure(description: "no authorization code was entered") }
        }

        let token: OAuthToken
        do {
            token = try unauthenticated.exchangeCode(code, appKey: appKey, pkce: pkce, redirectURI: redirectURI)
        } catch {
            if case .auth(let reason, let summary) = error {
                throw Failure(description: "\(server) refused the authorization code (\(summary.isEmpty ? "\(reason)" : summary)); codes work once and expire after a few minutes, run 'dbxfs auth' again")
            }
            throw Failure(description: ServerMessages.describe(error, server: server))
        }
        guard let refreshToken = token.refreshToken else {
            throw Failure(description: "\(server) gave no refresh token (offline access was not granted)")
        }

        let client = DropboxClient(configuration: configuration, tokens: TokenProvider(token: token, appKey: appKey))
        let account: FullAccount
        do { account = try client.currentAccount() } catch { throw Failure(description: ServerMessages.describe(error, server: server)) }

        let store = CredentialStore()
        let previous = try? store.load(profile: options.profile)
        let replacing = store.exists(profile: options.profile)
        let credentials = StoredCredentials(profile: options.profile, appKey: appKey, apiBase: options.apiBase,
                                            accountID: account.accountID, email: account.email,
                                            displayName: account.name.displayName, refreshToken: refreshToken,
                                            accessToken: token.accessToken, accessTokenExpiresAt: token.expiresAt,
                                            linkedAt: Date())
        do { try store.save(credentials) } catch { throw Failure(description: error.description) }
        if let previous, previous.refreshToken != refreshToken { revokeQuietly(previous, caFile: options.caFile) }

        let mountHint = options.profile == CredentialStore.defaultProfile ? "dbxfs MOUNTPOINT" : "dbxfs --profile \(options.profile) MOUNTPOINT"
        say("""

            Linked \(account.name.displayName) <\(account.email)> as profile '\(options.profile)'\(replacing ? " (replacing the previous link)" : "").
            Credentials saved in \(store.path(profile: options.profile)).
            Mount it with: \(mountHint)
            """)
    }

    /// A re-link replaces the profile's tokens; the old ones would otherwise stay valid on the
    /// server with nobody holding them. Best effort: a failure changes nothing for the new link.
    private static func revokeQuietly(_ old: StoredCredentials, caFile: String?) {
        // Never send a token where it would cross the network in clear.
        if old.apiBase.flatMap(APIBase.problem) != nil { return }
        let configuration = ClientConfiguration(endpoints: ServerMessages.endpoints(old.apiBase), extraCAFile: caFile,
                                                connectTimeout: 5, retryPolicy: RetryPolicy(maxAttempts: 2))
        let client = DropboxClient(configuration: configuration, tokens: TokenProvider(token: old.oauthToken, appKey: old.appKey))
        try? client.revokeToken()
    }

    private static func say(_ text: String) {
        writeOutput(text + "\n")
    }
}

/// The OAuth `state` of the redirect flow: unguessable, URL-safe.
enum SecureRandomState {
    static func make() -> String { SecureRandom.string(count: 32) }
}
