/// `--metrics ADDR:PORT`: a tiny HTTP/1.0 responder for Prometheus. `GET /metrics` (or `HEAD`)
/// gets the mount's metrics in the text format; any other path 404, any other method 405.
/// One request per connection, answered and closed (`Connection: close`).
///
/// One thread of its own accepts and answers, one connection at a time, with 5 s socket
/// timeouts, so a client that stalls delays other scrapes by at most that and never touches the
/// FUSE loop or its workers. A scrape renders the registry on this thread (MountMetrics.render).
import Foundation
import Synchronization

final class MetricsEndpoint: Sendable {
    struct Failure: Error, CustomStringConvertible { var description: String }

    /// The address actually bound (with the port the kernel chose for port 0).
    let address: MetricsAddress
    private let listener: Int32
    private let stopped = Atomic<Bool>(false)
    private let started = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    private let render: @Sendable () -> String

    /// Binds and listens at once (so a port in use fails the mount before it starts); `start`
    /// begins answering.
    init(address: MetricsAddress, render: @escaping @Sendable () -> String) throws(Failure) {
        self.render = render
        let (fd, port): (Int32, UInt16)
        do throws(TCPListener.Failure) {
            (fd, port) = try TCPListener.open(host: address.host, port: address.port, ipv6: address.isIPv6, backlog: 16)
        } catch {
            throw Failure(description: "--metrics: \(error.description)")
        }
        listener = fd
        self.address = MetricsAddress(host: address.host, port: port, isIPv6: address.isIPv6)
    }

    func start() {
        guard !started.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let thread = Thread { [self] in
            acceptLoop()
            finished.signal()
        }
        thread.name = "dbxfs-metrics"
        thread.start()
    }

    /// Stops answering; returns once the thread has let go of the socket.
    func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        if started.load(ordering: .acquiring) { finished.wait() }
        close(listener)
    }

    private func acceptLoop() {
        UnixSocket.acceptLoop(listener, until: { stopped.load(ordering: .acquiring) }) { client in
            UnixSocket.setTimeout(client, 5)
            answer(client)
            close(client)
        }
    }

    private func answer(_ client: Int32) {
        guard let line = Self.readRequestLine(client) else {
            respond(client, status: "400 Bad Request", body: "bad request\n")
            return
        }
        let parts = line.split(separator: " ")
        guard parts.count >= 2 else {
            respond(client, status: "400 Bad Request", body: "bad request\n")
            return
        }
        let method = parts[0], path = parts[1].split(separator: "?", maxSplits: 1).first ?? ""
        guard method == "GET" || method == "HEAD" else {
            respond(client, status: "405 Method Not Allowed", body: "only GET and HEAD\n", extraHeaders: "Allow: GET, HEAD\r\n")
            return
        }
        guard path == "/metrics" else {
            respond(client, status: "404 Not Found", body: "not found: the metrics are at /metrics\n", headOnly: method == "HEAD")
            return
        }
        respond(client, status: "200 OK", body: render(), contentType: PrometheusText.contentType, headOnly: method == "HEAD")
    }

    /// The request's first line. The rest of the head is read (up to 16 KiB) and ignored; no
    /// request of ours has a body.
    static func readRequestLine(_ client: Int32) -> String? {
        var data = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while data.count < 16 << 10 {
            let n = buffer.withUnsafeMutableBytes { read(client, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            data += buffer[0..<n]
            if data.count >= 4, data.suffix(4) == [13, 10, 13, 10] { break }
            if data.count >= 2, data.suffix(2) == [10, 10] { break }
        }
        guard let end = data.firstIndex(of: 10) else { return nil }
        var line = data[..<end]
        if line.last == 13 { line = line.dropLast() }
        return String(bytes: line, encoding: .utf8)
    }

    private func respond(_ client: Int32, status: String, body: String, contentType: String = "text/plain; charset=utf-8",
                         extraHeaders: String = "", headOnly: Bool = false) {
        let bytes = Array(body.utf8)
        let head = "HTTP/1.0 \(status)\r\nContent-Type: \(contentType)\r\nContent-Length: \(bytes.count)\r\n\(extraHeaders)Connection: close\r\n\r\n"
        var message = Array(head.utf8)
        if !headOnly { message += bytes }
        var sent = 0
        while sent < message.count {
            let n = message.withUnsafeBytes { send(client, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            sent += n
        }
    }
}
