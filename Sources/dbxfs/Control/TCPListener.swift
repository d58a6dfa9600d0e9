/// A listening TCP socket on one numeric IPv4 or IPv6 address: the `dbxfs auth --redirect`
/// listener (Account/LoopbackRedirect) and the metrics endpoint (Metrics/MetricsEndpoint), with
/// the `sockaddr_in`/`sockaddr_in6` plumbing Swift makes awkward.
import Foundation

enum TCPListener {
    struct Failure: Error, CustomStringConvertible { var description: String }

    /// Binds `host:port` (close-on-exec, SO_REUSEADDR) and listens; returns the socket and the
    /// port bound (the kernel's pick for port 0).
    static func open(host: String, port: UInt16, ipv6: Bool, backlog: Int32) throws(Failure) -> (fd: Int32, port: UInt16) {
        let shown = ipv6 ? "[\(host)]:\(port)" : "\(host):\(port)"
        let fd = socket(ipv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "cannot open a socket: \(String(cString: strerror(errno)))") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        let bound: Int32
        if ipv6 {
            var v6 = sockaddr_in6()
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = port.bigEndian
            _ = inet_pton(AF_INET6, host, &v6.sin6_addr)
            bound = bind(fd, v6)
        } else {
            var v4 = sockaddr_in()
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            _ = inet_pton(AF_INET, host, &v4.sin_addr)
            bound = bind(fd, v4)
        }
        guard bound == 0, listen(fd, backlog) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw Failure(description: "cannot listen on \(shown): \(reason)")
        }
        var actual = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        // sin_port and sin6_port sit at the same offset, right after the family.
        return (fd, withUnsafeBytes(of: actual) { UInt16(bigEndian: $0.load(fromByteOffset: 2, as: UInt16.self)) })
    }

    /// bind(2) for a sockaddr_in or sockaddr_in6.
    private static func bind<Address>(_ fd: Int32, _ address: Address) -> Int32 {
        withUnsafePointer(to: address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<Address>.size)) }
        }
    }
}
