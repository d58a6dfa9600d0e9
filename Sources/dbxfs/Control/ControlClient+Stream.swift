/// The control channel for `dbxfs cat`: one request line, then a header line (`CatHeader`, or an
/// error answer), then the revision's bytes until the daemon closes the connection. The header
/// line is read a byte at a time so no byte of the content is taken with it.
import Foundation

extension ControlClient {
    /// Sends `request`, returns the header once every byte after it went to `body` (which returns
    /// false to stop early). The caller compares what it got with `header.size`.
    static func stream(_ request: ControlRequest, socket: String, timeout: TimeInterval,
                       body: (UnsafeRawBufferPointer) -> Bool) throws(Failure) -> CatHeader {
        let (fd, peer) = try connect(socket: socket, timeout: timeout)
        defer { close(fd) }
        var line = Data()
        do {
            try UnixSocket.writeAll(fd, try ReportCoding.encoder().encode(request) + Data("\n".utf8))
            var byte: UInt8 = 0
            while line.count < 1 << 20 {
                let n = recv(fd, &byte, 1, 0)
                if n < 0 && errno == EINTR { continue }
                if n < 0 { throw UnixSocket.Failure(description: String(cString: strerror(errno)), code: errno) }
                if n == 0 || byte == 10 { break }
                line.append(byte)
            }
        } catch let error as UnixSocket.Failure {
            throw Failure(description: "talking to the mount: \(error.description)")
        } catch {
            throw Failure(description: "talking to the mount: \(error)")
        }
        let header = try answer(line, as: CatHeader.self, peer: peer, socket: socket)
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            let more = buffer.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            if !more { break }
        }
        return header
    }
}
