/// The API base URL a user gives (`--api-base`, `$DBXFS_API_BASE`, `api_base` in the config file,
/// or the one stored with a profile), checked before any request is made: every request carries
/// the bearer token. It must be an http:// or https:// URL with a host, and plain http:// may only
/// go to this machine (127.0.0.0/8, ::1, `localhost`: an emulator or a local gateway), where the
/// token crosses no network. A `{host}` in it (Endpoints) is checked as each of the four hosts it
/// becomes, so `http://{host}.example.com` is refused like `http://api.example.com`.
import DropboxRemote
import Foundation

enum APIBase {
    struct Refused: Error, CustomStringConvertible { var description: String }

    /// The base a command uses: `option` (`--api-base`), else `configured` (`api_base`, checked
    /// when the config file was read), else `$DBXFS_API_BASE`; nil for the real Dropbox.
    static func chosen(option: String?, configured: String? = nil, environment: [String: String]) throws(Refused) -> String? {
        if let option {
            if let problem = problem(option) { throw Refused(description: "--api-base \(problem)") }
            return option
        }
        if let configured { return configured }
        guard let base = environment["DBXFS_API_BASE"], !base.isEmpty else { return nil }
        if let problem = problem(base) { throw Refused(description: "DBXFS_API_BASE \(problem)") }
        return base
    }

    /// Why `base` cannot be used, as the rest of a sentence that starts with where it came from
    /// ("--api-base 'x' is ..."); nil when it can.
    static func problem(_ base: String) -> String? {
        let endpoints = Endpoints(overridingAllWith: base)
        for url in [endpoints.api, endpoints.content, endpoints.notify, endpoints.web] {
            guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
                  scheme == "http" || scheme == "https", let host = components.host, !host.isEmpty else {
                return "'\(base)' is not an http:// or https:// URL with a host (for example https://api.example.com)"
            }
            if scheme == "http" && !isLoopback(host) {
                return "'\(base)' uses plain http:// to another machine, which would send the access token "
                    + "unencrypted over the network: use https://, or plain http:// only to this machine "
                    + "(127.0.0.1, ::1, localhost)"
            }
        }
        return nil
    }

    /// 127.0.0.0/8, ::1, `localhost` or a name under it (RFC 6761 6.3: always this machine; libcurl
    /// resolves them to loopback itself, without DNS: 7.88 here), as a URL's host spells them. `http://{host}.localhost:PORT`
    /// gives an emulator's four hosts four names, as Dropbox's are.
    static func isLoopback(_ host: String) -> Bool {
        var name = host.lowercased()
        if name.hasPrefix("["), name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        if name.hasSuffix(".") { name.removeLast() }
        if name == "localhost" || name.hasSuffix(".localhost") { return true }
        var v4 = in_addr()
        if inet_pton(AF_INET, name, &v4) == 1 { return UInt32(bigEndian: v4.s_addr) >> 24 == 127 }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, name, &v6) == 1 {
            let bytes = withUnsafeBytes(of: &v6) { Array($0) }
            return bytes == [UInt8](repeating: 0, count: 15) + [1]
        }
        return false
    }
}
