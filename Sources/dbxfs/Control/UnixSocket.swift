/// The few Unix-domain stream socket calls the control channel needs (listen, accept, connect,
/// read a line, write all), with the `sockaddr_un` plumbing Swift makes awkward. The accept loop
/// serves the metrics endpoint's TCP socket too.
import Foundation

enum UnixSocket {
    struct Failure: Error, CustomStringConvertible {
        var description: String
        var code: Int32 = 0
    }

    private static func address(_ path: String) throws(Failure) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else {
            throw Failure(description: "socket path \(path) is longer than \(capacity - 1) bytes")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }

    private static func newSocket() throws(Failure) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "cannot create a socket: \(String(cString: strerror(errno)))", code: errno) }
        return fd
    }

    /// Accepts connections on a listening socket (of any family) until `stopped` says so (asked
    /// at least every 500 ms), handing each one, close-on-exec, to `handle`, which owns it.
    static func acceptLoop(_ listener: Int32, until stopped: () -> Bool, handle: (Int32) -> Void) {
        while !stopped() {
            var poller = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            if poll(&poller, 1, 500) <= 0 { continue }
            let client = accept(listener, nil, nil)
            if client < 0 { continue }
            _ = fcntl(client, F_SETFD, FD_CLOEXEC)
            handle(client)
        }
    }

    static func listen(path: String) throws(Failure) -> Int32 {
        var address = try address(path)
        let fd = try newSocket()
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else {
            let code = errno
            close(fd)
            throw Failure(description: "cannot bind \(path): \(String(cString: strerror(code)))", code: code)
        }
        // The directory is already 0700; this also keeps the socket itself private.
        chmod(path, 0o600)
        guard Glibc.listen(fd, 16) == 0 else {
            let code = errno
            close(fd)
            throw Failure(description: "cannot listen on \(path): \(String(cString: strerror(code)))", code: code)
        }
        return fd
    }

    static func connect(path: String, timeout: TimeInterval) throws(Failure) -> Int32 {
        var address = try address(path)
        let fd = try newSocket()
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            let code = errno
            close(fd)
            throw Failure(description: "cannot connect to \(path): \(String(cString: strerror(code)))", code: code)
        }
        setTimeout(fd, timeout)
        return fd
    }

    static func setTimeout(_ fd: Int32, _ seconds: TimeInterval) {
        let whole = max(0, Int(seconds))
        var value = timeval(tv_sec: whole, tv_usec: Int(((seconds - Double(whole)) * 1_000_000).rounded()))
        if seconds <= 0 { value = timeval(tv_sec: 0, tv_usec: 0) }  // 0 = wait forever
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
    }

    /// The process at the other end of a connected socket, as the kernel recorded it when the
    /// connection was made (SO_PEERCRED): not something the peer can claim.
    struct Peer: Equatable {
        var pid: pid_t
        var uid: uid_t
    }

    /// The peer's pid and uid, nil when unknown. `struct ucred` is {pid, uid, gid}, three 32-bit
    /// fields; glibc only declares it under _GNU_SOURCE, which Swift's Glibc lacks.
    static func peer(_ fd: Int32) -> Peer? {
        var fields: (Int32, UInt32, UInt32) = (0, 0, 0)
        var length = socklen_t(MemoryLayout.size(ofValue: fields))
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &fields, &length) == 0 else { return nil }
        return Peer(pid: fields.0, uid: fields.1)
    }

    /// Reads up to the first newline (or EOF), at most `limit` bytes.
    static func readLine(_ fd: Int32, limit: Int = 1 << 20) throws(Failure) -> Data {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while data.count < limit {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 {
                if errno == EINTR { continue }
                let code = errno
                throw Failure(description: code == EAGAIN ? "timed out waiting for the mount's answer" : String(cString: strerror(code)), code: code)
            }
            if n == 0 { break }
            if let newline = buffer[0..<n].firstIndex(of: 10) {
                data.append(contentsOf: buffer[0..<newline])
                return data
            }
            data.append(contentsOf: buffer[0..<n])
        }
        return data
    }

    static func writeAll(_ fd: Int32, _ data: Data) throws(Failure) {
        var failure: Failure?
        data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if n < 0 {
                    if errno == EINTR { continue }
                    failure = Failure(description: String(cString: strerror(errno)), code: errno)
                    return
                }
                offset += n
            }
        }
        if let failure { throw failure }
    }
}
