/// Where `--metrics` serves: `PORT` (on 127.0.0.1), `HOST:PORT` with an IPv4 address or
/// `localhost`, or `[IPv6]:PORT`. Numeric addresses only (no name lookups at mount time), so
/// what is bound is exactly what was written. Port 0 picks a free port (the log says which).
///
/// Loopback addresses (127.0.0.0/8, ::1) are the default and the only ones allowed unless
/// `--metrics-allow-remote` says otherwise: the metrics name no files, but they do tell anyone
/// who can reach the port how the mount is used.
import Foundation

struct MetricsAddress: Sendable, Equatable, CustomStringConvertible {
    struct Invalid: Error, CustomStringConvertible { var description: String }

    /// The address as inet_pton reads it ("127.0.0.1", "::1").
    var host: String
    var port: UInt16
    var isIPv6: Bool

    var description: String { isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }

    static func parse(_ text: String) throws(Invalid) -> MetricsAddress {
        let hint = "expected PORT, ADDRESS:PORT or [IPv6]:PORT, e.g. 127.0.0.1:9101"
        var host = "127.0.0.1", portText = Substring(text), isIPv6 = false
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw Invalid(description: "invalid --metrics '\(text)' (\(hint))")
            }
            host = String(text[text.index(after: text.startIndex)..<close])
            portText = text[text.index(close, offsetBy: 2)...]
            isIPv6 = true
        } else if let colon = text.lastIndex(of: ":") {
            host = String(text[..<colon])
            portText = text[text.index(after: colon)...]
            if host == "localhost" { host = "127.0.0.1" }
        }
        guard let port = UInt16(portText) else { throw Invalid(description: "invalid --metrics '\(text)': bad port (\(hint))") }
        let address = MetricsAddress(host: host, port: port, isIPv6: isIPv6)
        guard address.loopbackOrNil != nil else {
            throw Invalid(description: "invalid --metrics '\(text)': '\(host)' is not an IP address (\(hint))")
        }
        return address
    }

    /// Whether the address is the machine's own loopback; nil when it is no address at all.
    private var loopbackOrNil: Bool? {
        if isIPv6 {
            var raw = in6_addr()
            guard inet_pton(AF_INET6, host, &raw) == 1 else { return nil }
            let bytes = withUnsafeBytes(of: raw) { Array($0) }
            return bytes == Array(repeating: 0, count: 15) + [1]
        }
        var raw = in_addr()
        guard inet_pton(AF_INET, host, &raw) == 1 else { return nil }
        return UInt32(bigEndian: raw.s_addr) >> 24 == 127
    }

    var isLoopback: Bool { loopbackOrNil ?? false }
}
