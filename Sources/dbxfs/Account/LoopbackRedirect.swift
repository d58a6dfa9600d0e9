/// The desktop form of `dbxfs auth --redirect`: a one-shot HTTP listener on 127.0.0.1 that
/// receives the browser's redirect `GET /?code=...&state=...` after the user clicks "Allow",
/// answers with a short page, and hands back the code.
///
/// Only 127.0.0.1 is bound, so nothing off the machine can reach it, and the `state` value must
/// match the one sent in the authorize URL, so another local page cannot inject its own code.
/// Requests without a code or an error (a favicon, a browser's speculative connection) get a 404
/// and the listener keeps waiting.
import Foundation

final class LoopbackRedirect {
    struct Failure: Error, CustomStringConvertible { var description: String }

    private let fd: Int32
    let port: UInt16

    /// Binds 127.0.0.1:`port` (0 picks a free port).
    init(port: UInt16) throws(Failure) {
        do throws(TCPListener.Failure) {
            (fd, self.port) = try TCPListener.open(host: "127.0.0.1", port: port, ipv6: false, backlog: 4)
        } catch {
            throw Failure(description: error.description)
        }
    }

    deinit { close(fd) }

    var redirectURI: String { "http://127.0.0.1:\(port)/" }

    /// Waits (up to `timeout` seconds) for the redirect carrying `state`, and returns its code.
    func waitForCode(state: String, timeout: TimeInterval) throws(Failure) -> String {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else { throw Failure(description: "no answer from the browser within \(Int(timeout)) s") }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, Int32(min(remaining, 1) * 1000))
            if ready <= 0 { continue }
            let client = accept(fd, nil, nil)
            if client < 0 { continue }
            _ = fcntl(client, F_SETFD, FD_CLOEXEC)
            defer { close(client) }
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            guard let target = readRequestTarget(client) else { continue }
            let query = URLComponents(string: "http://127.0.0.1" + target)?.queryItems ?? []
            func item(_ name: String) -> String? { query.first { $0.name == name }?.value }
            if let error = item("error") {
                respond(client, status: "400 Bad Request", body: "dbxfs was not linked (\(error)). You can close this page.")
                let detail = item("error_description").map { ": \($0)" } ?? ""
                throw Failure(description: "authorization refused in the browser (\(error)\(detail))")
            }
            guard let code = item("code") else {
                respond(client, status: "404 Not Found", body: "Not found.")
                continue
            }
            guard item("state") == state else {
                respond(client, status: "400 Bad Request", body: "This link does not belong to the running 'dbxfs auth'.")
                continue
            }
            respond(client, status: "200 OK", body: "dbxfs is linked. You can close this page and return to the terminal.")
            return code
        }
    }

    /// The request line's target ("/?code=..."), or nil for anything that is not a GET.
    private func readRequestTarget(_ client: Int32) -> String? {
        var data = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while data.count < 16384 {
            let n = buffer.withUnsafeMutableBytes { read(client, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            data += buffer[0..<n]
            if data.count >= 4, data.suffix(4) == [13, 10, 13, 10] { break }
            if data.contains(10) { break }  // the request line is all we need
        }
        let line = String(decoding: data.prefix { $0 != 13 && $0 != 10 }, as: UTF8.self)
        let parts = line.split(separator: " ")
        guard parts.count >= 2, parts[0] == "GET" else { return nil }
        return String(parts[1])
    }

    private func respond(_ client: Int32, status: String, body: String) {
        let html = "<!doctype html><html><head><meta charset=\"utf-8\"><title>dbxfs</title></head><body><p>\(body)</p></body></html>"
        let message = "HTTP/1.1 \(status)\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: \(html.utf8.count)\r\nConnection: close\r\n\r\n\(html)"
        let bytes = Array(message.utf8)
        _ = bytes.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }
}
