/// One HTTP POST over libcurl, on the calling thread, with connections reused across calls.
///
/// A pool of easy handles is kept: a call takes an idle handle (or makes one), resets its options
/// (`curl_easy_reset` keeps the live connection and TLS session), runs `curl_easy_perform`
/// synchronously, and puts the handle back. Since each handle keeps its own connections, N threads
/// in flight use N connections, and a thread that comes back later finds a warm one. A process-wide
/// share handle shares DNS and TLS sessions between handles (not connections: libcurl does not
/// support sharing its connection cache between threads that run at once).
///
/// The pool (HandlePool.swift) hands a call the idle handle that has a connection to its own
/// host, or waits briefly for a warm-up of that host in flight; `warm(_:)` opens such a
/// connection ahead of need (ConnectionWarmer.swift).
///
/// This layer knows HTTP, not Dropbox: it returns the status, headers and collected body, or a
/// `DropboxError` of kind transport / cancelled / localIO. Retries are the caller's business.
import CCurlShim
import Foundation
import Synchronization

/// A request as the transport sees it. Every Dropbox call is a POST; the only other method is the
/// token-less OPTIONS that opens a connection ahead of need (`CurlTransport.warm`).
struct HTTPRequest {
    enum Method { case post, options }
    var url: String
    var headers: [String]
    /// The request body; nil sends an empty body.
    var body: UploadBody?
    /// A total time limit in seconds instead of the low-speed limit (for longpoll, which is silent
    /// by design until it answers).
    var totalTimeout: Int?
    var method: Method = .post
    /// Seconds to establish a connection; nil: the transport's configuration's. (Clients that
    /// share a transport keep their own connect timeouts.)
    var connectTimeout: Int?
    /// On a handle with no connection to the URL's host: a warm-up that opens one more.
    var freshConnection = false
    /// With no idle connection to the host, wait for a warm-up in flight (`ClientConfiguration.waitsForWarmUps`).
    var waitsForWarmUp = true

    init(url: String, headers: [String], body: UploadBody?, totalTimeout: Int? = nil, method: Method = .post,
         connectTimeout: Int? = nil, freshConnection: Bool = false) {
        self.url = url; self.headers = headers; self.body = body; self.totalTimeout = totalTimeout; self.method = method
        self.connectTimeout = connectTimeout; self.freshConnection = freshConnection
    }
}

struct HTTPResponse {
    var status: Int
    /// Header names lowercased; the last occurrence wins.
    var headers: [String: String]
    /// The body, unless it was streamed to a sink (2xx with a sink).
    var body: Data
    /// New connections the request opened (0: it went on a kept-alive one).
    var connectionsOpened = 0
}

final class CurlTransport: Sendable {
    private let configuration: ClientConfiguration
    private let pool: HandlePool
    private let share: CurlPointer?
    /// When a request to each origin last ended (uptime nanoseconds), warm-ups included: what
    /// the warmer goes by.
    private let lastUse = Mutex<[String: UInt64]>([:])
    /// When the last request other than a warm-up ended (uptime nanoseconds; 0: none yet).
    private let lastCall = Atomic<UInt64>(0)

    init(configuration: ClientConfiguration) {
        let code = dbx_global_init_once()
        precondition(code == CURLE_OK, "curl_global_init failed: \(code)")
        self.configuration = configuration
        pool = HandlePool(capacity: configuration.maxIdleHandles)
        // The share handle is deliberately leaked: handles still in flight on other threads might
        // reference it, and there is one client per process in practice.
        share = dbx_share_new().map { CurlPointer(raw: $0) }
    }

    /// How long a call waits for a warm-up of its host in flight before it opens a connection of
    /// its own: a warm-up takes three round trips, well under this even on a slow satellite link.
    static let warmUpWait: TimeInterval = 3

    /// Runs one request. `sink` receives the body of a 2xx answer as it arrives; other answers are
    /// collected into `HTTPResponse.body`. `onSent`/`onReceived` are told the running byte counts of
    /// this request's body and response body (for progress).
    /// `onResponseStart` sees the status and headers of a 2xx answer before the first body byte
    /// reaches the sink; returning an error aborts the transfer with it.
    /// `traffic`, if given, is set to the body bytes sent and received and the connections opened,
    /// whatever the outcome.
    func perform(_ request: HTTPRequest, sink: DownloadSink? = nil, cancel: CancelHandle? = nil,
                 onSent: ((UInt64) -> Void)? = nil, onReceived: ((UInt64) -> Void)? = nil,
                 onResponseStart: ((Int, [String: String]) -> DropboxError?)? = nil,
                 traffic: UnsafeMutablePointer<(sent: UInt64, received: UInt64, connections: Int)>? = nil) -> Result<HTTPResponse, DropboxError> {
        if cancel?.isCancelled == true { return .failure(.cancelled) }
        let origin = Self.origin(of: request.url)
        let isWarmUp = request.method == .options
        if isWarmUp { pool.beginWarmUp(origin) }
        // A warm-up never waits for another: the second one at a mount's start opens a second connection.
        let waitsForWarmUp = !isWarmUp && request.waitsForWarmUp
        var (handle, origins) = pool.checkout(for: origin, waitingForWarmUpUntil: waitsForWarmUp ? Date(timeIntervalSinceNow: Self.warmUpWait) : nil,
                                              fresh: request.freshConnection)
        defer {
            origins.insert(origin)
            pool.checkin(handle, origins: origins, endingWarmUpOf: isWarmUp ? origin : nil)
            let now = DispatchTime.now().uptimeNanoseconds
            lastUse.withLock { $0[origin] = now }
            if request.method == .post { lastCall.store(now, ordering: .relaxed) }
        }
        return withoutActuallyEscaping(sink ?? { _ in true }) { escapableSink in
            let state = TransferState(body: request.body ?? .empty, sink: sink == nil ? nil : escapableSink,
                                      cancel: cancel, onSent: onSent, onReceived: onReceived)
            state.onResponseStart = onResponseStart
            defer { traffic?.pointee = (state.bodyBytesSent, state.bodyBytesReceived, state.connectionsOpened) }
            return run(request, on: handle.raw, state: state)
        }
    }

    private func run(_ request: HTTPRequest, on curl: UnsafeMutableRawPointer, state: TransferState) -> Result<HTTPResponse, DropboxError> {
        if let error = state.openBody() { return .failure(error) }
        defer { state.closeBody() }

        var headerList: UnsafeMutablePointer<curl_slist>? = nil
        // An empty `Expect:` stops libcurl waiting for `100 Continue` before large bodies.
        for header in request.headers + ["Expect:"] { headerList = curl_slist_append(headerList, header) }
        defer { curl_slist_free_all(headerList) }

        curl_easy_reset(curl)
        let config = configuration
        dbx_setopt_str(curl, CURLOPT_URL, request.url)
        switch request.method {
        case .post:
            dbx_setopt_long(curl, CURLOPT_POST, 1)
            dbx_setopt_off_t(curl, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(state.body.length))
        case .options:
            dbx_setopt_str(curl, CURLOPT_CUSTOMREQUEST, "OPTIONS")
        }
        dbx_setopt_slist(curl, CURLOPT_HTTPHEADER, headerList)
        dbx_setopt_str(curl, CURLOPT_USERAGENT, config.userAgent)
        dbx_setopt_long(curl, CURLOPT_NOSIGNAL, 1)  // required with threads: no SIGALRM for DNS timeouts
        dbx_setopt_long(curl, CURLOPT_HTTP_VERSION, dbx_http_version_2tls())
        dbx_setopt_long(curl, CURLOPT_SSL_VERIFYPEER, 1)
        dbx_setopt_long(curl, CURLOPT_SSL_VERIFYHOST, 2)
        if let ca = config.extraCAFile {
            // CAINFO alone would replace the system store; CAPATH keeps it trusted as well.
            dbx_setopt_str(curl, CURLOPT_CAINFO, ca)
            dbx_setopt_str(curl, CURLOPT_CAPATH, "/etc/ssl/certs")
        }
        dbx_setopt_long(curl, CURLOPT_CONNECTTIMEOUT, request.connectTimeout ?? config.connectTimeout)
        if let total = request.totalTimeout {
            dbx_setopt_long(curl, CURLOPT_TIMEOUT, total)
        } else {
            dbx_setopt_long(curl, CURLOPT_LOW_SPEED_LIMIT, 1)
            dbx_setopt_long(curl, CURLOPT_LOW_SPEED_TIME, config.lowSpeedTimeout)
        }
        dbx_setopt_long(curl, CURLOPT_TCP_KEEPALIVE, 1)
        dbx_setopt_long(curl, CURLOPT_TCP_NODELAY, 1)
        // Large buffers: fewer callbacks per byte on gigabyte transfers.
        dbx_setopt_long(curl, CURLOPT_BUFFERSIZE, 512 * 1024)
        dbx_setopt_long(curl, CURLOPT_UPLOAD_BUFFERSIZE, 2 * 1024 * 1024)
        if let share { dbx_setopt_share(curl, share.raw) }
        dbx_setopt_ptr(curl, CURLOPT_ERRORBUFFER, state.errorBuffer)
        state.curl = curl

        let context = Unmanaged.passUnretained(state).toOpaque()
        dbx_set_write_callback(curl, { buffer, size, count, userdata in
            let state = Unmanaged<TransferState>.fromOpaque(userdata!).takeUnretainedValue()
            return state.receive(UnsafeRawBufferPointer(start: buffer, count: size * count))
        }, context)
        dbx_set_header_callback(curl, { buffer, size, count, userdata in
            let state = Unmanaged<TransferState>.fromOpaque(userdata!).takeUnretainedValue()
            state.header(UnsafeRawBufferPointer(start: buffer, count: size * count))
            return size * count
        }, context)
        dbx_set_read_callback(curl, { buffer, size, count, userdata in
            let state = Unmanaged<TransferState>.fromOpaque(userdata!).takeUnretainedValue()
            return state.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: size * count))
        }, context)
        dbx_set_xferinfo_callback(curl, { userdata, _, _, _, _ in
            let state = Unmanaged<TransferState>.fromOpaque(userdata!).takeUnretainedValue()
            return state.shouldAbort ? 1 : 0
        }, context)

        let code = withExtendedLifetime(state) { curl_easy_perform(curl) }
        state.curl = nil
        var opened = 0
        dbx_getinfo_long(curl, CURLINFO_NUM_CONNECTS, &opened)
        state.connectionsOpened = opened

        if let localError = state.responseStartError { return .failure(localError) }
        if state.shouldAbort { return .failure(.cancelled) }
        if let localError = state.localError { return .failure(localError) }
        guard code == CURLE_OK else {
            let detail = String(validatingCString: state.errorBuffer) ?? ""
            let message = detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
            return .failure(.transport(code: Int(code.rawValue), message: message))
        }
        var status = 0
        dbx_getinfo_long(curl, CURLINFO_RESPONSE_CODE, &status)
        return .success(HTTPResponse(status: status, headers: state.headers, body: state.collected, connectionsOpened: opened))
    }

    // MARK: Warm connections

    /// Opens a connection to `url`'s origin, or confirms a kept one, with an OPTIONS request that
    /// carries no token and no body: Dropbox answers OPTIONS on its API hosts (browsers' CORS
    /// preflights), and whatever the status, the connection stays for the next call. (libcurl's
    /// CURLOPT_CONNECT_ONLY would skip the request, but libcurl never hands a connect-only
    /// connection to a later transfer.) `fresh`: on a handle with no connection there, so it opens
    /// one more. Returns the new connections it opened, or the error.
    func warm(_ url: String, timeout: Int, fresh: Bool = false, cancel: CancelHandle? = nil) -> Result<Int, DropboxError> {
        perform(HTTPRequest(url: url, headers: [], body: nil, totalTimeout: timeout, method: .options, freshConnection: fresh),
                cancel: cancel)
            .map(\.connectionsOpened)
    }

    /// Idle handles with a connection to `url`'s origin.
    func idleConnections(to url: String) -> Int { pool.idleConnections(to: Self.origin(of: url)) }

    /// Warm-ups of `url`'s origin in flight (for tests).
    func warmUpsInFlight(of url: String) -> Int { pool.warmUpsInFlight(Self.origin(of: url)) }

    /// Seconds since the last request other than a warm-up ended; nil if none has.
    var secondsSinceLastCall: Double? {
        let last = lastCall.load(ordering: .relaxed)
        return last == 0 ? nil : Double(DispatchTime.now().uptimeNanoseconds - last) / 1e9
    }

    /// Seconds since a request to `url`'s origin last ended; nil if none has.
    func idleSeconds(of url: String) -> Double? {
        let origin = Self.origin(of: url)
        guard let last = lastUse.withLock({ $0[origin] }) else { return nil }
        return Double(DispatchTime.now().uptimeNanoseconds - last) / 1e9
    }

    /// "https://content.dropboxapi.com" of "https://content.dropboxapi.com/2/files/download":
    /// scheme, host and port, what libcurl tells its connections apart by.
    static func origin(of url: String) -> String {
        guard let schemeEnd = url.range(of: "://") else { return url }
        let rest = url[schemeEnd.upperBound...]
        let hostEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
        return String(url[..<hostEnd]).lowercased()
    }
}

/// The per-request state curl's callbacks work on. Used only by the thread running
/// `curl_easy_perform`, so it needs no locking.
private final class TransferState {
    let body: UploadBody
    let sink: DownloadSink?
    let cancel: CancelHandle?
    let onSent: ((UInt64) -> Void)?
    let onReceived: ((UInt64) -> Void)?
    var curl: UnsafeMutableRawPointer?
    var headers: [String: String] = [:]
    var collected = Data()
    /// curl writes its detailed message here; heap memory so its address is stable during perform.
    let errorBuffer: UnsafeMutablePointer<CChar> = {
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        buffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        return buffer
    }()
    var localError: DropboxError?
    /// New connections the transfer opened (CURLINFO_NUM_CONNECTS), once it ended.
    var connectionsOpened = 0
    var onResponseStart: ((Int, [String: String]) -> DropboxError?)?
    var responseStartError: DropboxError?
    private(set) var shouldAbortBySink = false
    private var fileDescriptor: Int32 = -1
    private var sent: UInt64 = 0
    private var received: UInt64 = 0
    private var statusIsSuccess: Bool?

    init(body: UploadBody, sink: DownloadSink?, cancel: CancelHandle?, onSent: ((UInt64) -> Void)?, onReceived: ((UInt64) -> Void)?) {
        self.body = body; self.sink = sink; self.cancel = cancel; self.onSent = onSent; self.onReceived = onReceived
    }

    deinit { errorBuffer.deallocate() }

    var shouldAbort: Bool { shouldAbortBySink || cancel?.isCancelled == true }

    var bodyBytesSent: UInt64 { sent }
    /// What the sink took plus what was collected (error bodies, rpc answers).
    var bodyBytesReceived: UInt64 { received + UInt64(collected.count) }

    func openBody() -> DropboxError? {
        guard case .file(let url, _, _) = body else { return nil }
        fileDescriptor = open(url.path, O_RDONLY | O_CLOEXEC)
        return fileDescriptor < 0 ? .localIO("cannot open \(url.path): \(String(cString: strerror(errno)))") : nil
    }

    func closeBody() {
        if fileDescriptor >= 0 { close(fileDescriptor); fileDescriptor = -1 }
    }

    /// One header line, parsed on bytes (no Foundation string bridging: this runs for every
    /// header of every call and showed up in the get_metadata latency profile).
    func header(_ line: UnsafeRawBufferPointer) {
        let bytes = line.bindMemory(to: UInt8.self)
        if bytes.count >= 5, bytes[0] == UInt8(ascii: "H"), bytes[1] == UInt8(ascii: "T"), bytes[2] == UInt8(ascii: "T"),
           bytes[3] == UInt8(ascii: "P"), bytes[4] == UInt8(ascii: "/") {
            headers.removeAll(keepingCapacity: true)   // a new response (after 100 Continue or a redirect)
            statusIsSuccess = nil
            return
        }
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")) else { return }
        func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0D || b == 0x0A }
        var start = colon + 1, end = bytes.count
        while start < end, isSpace(bytes[start]) { start += 1 }
        while end > start, isSpace(bytes[end - 1]) { end -= 1 }
        // Header names are ASCII; lowercase them byte by byte.
        let name = String(unsafeUninitializedCapacity: colon) { buffer in
            for i in 0..<colon {
                let b = bytes[i]
                buffer[i] = (b >= 0x41 && b <= 0x5A) ? b + 0x20 : b
            }
            return colon
        }
        headers[name] = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)
    }

    func receive(_ buffer: UnsafeRawBufferPointer) -> Int {
        if shouldAbort { return 0 }
        if statusIsSuccess == nil {
            var status = 0
            if let curl { dbx_getinfo_long(curl, CURLINFO_RESPONSE_CODE, &status) }
            statusIsSuccess = (200...299).contains(status)
            if statusIsSuccess == true, let check = onResponseStart, let error = check(status, headers) {
                responseStartError = error
                return 0
            }
        }
        if statusIsSuccess == true, let sink {
            guard sink(buffer) else { shouldAbortBySink = true; return 0 }
            received += UInt64(buffer.count)
            onReceived?(received)
        } else {
            collected.append(buffer.assumingMemoryBound(to: UInt8.self))
        }
        return buffer.count
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        if shouldAbort { return dbx_readfunc_abort() }
        let remaining = body.length - sent
        let want = Int(min(UInt64(buffer.count), remaining))
        if want == 0 { return 0 }
        let target = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want])
        var produced = 0
        switch body {
        case .data(let data):
            let start = data.startIndex + Int(sent)
            data.copyBytes(to: target.assumingMemoryBound(to: UInt8.self), from: start ..< start + want)
            produced = want
        case .file(let url, let offset, _):
            while produced < want {
                let n = pread(fileDescriptor, target.baseAddress! + produced, want - produced, off_t(offset + sent) + off_t(produced))
                if n < 0 && errno == EINTR { continue }
                if n <= 0 {
                    localError = .localIO("read \(url.path): \(n == 0 ? "file shorter than expected" : String(cString: strerror(errno)))")
                    return dbx_readfunc_abort()
                }
                produced += n
            }
        case .reader(_, let reader):
            do {
                produced = try reader(sent, target)
            } catch {
                localError = .localIO("upload source: \(error)")
                return dbx_readfunc_abort()
            }
            if produced <= 0 {
                localError = .localIO("upload source ended early at \(sent) of \(body.length)")
                return dbx_readfunc_abort()
            }
        }
        sent += UInt64(produced)
        onSent?(sent)
        return produced
    }
}
