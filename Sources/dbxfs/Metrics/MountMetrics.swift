/// Every metric a mount exports (`--metrics`, `dbxfs status --prometheus`; listed with what to
/// alert on in docs/STATUS.md), and the observers that feed them: the client's
/// (`RequestObserver`: API requests by route and outcome, retries, 429 waits, bytes, latency),
/// the cache's (`CacheObserver`: hits, misses, evictions), the FUSE glue's (operations by kind
/// and their latency through `TimedFilesystem`, opens by who serves them), and gauges read at
/// scrape time from what the mount already knows (write-back queue, cache use, change-feed lag,
/// connection state).
///
/// Every mount has one (`--metrics` only adds the HTTP endpoint); the hidden `--no-metrics` makes
/// none, and then there is no observer and no timing at all (to measure what they cost).
import DropboxRemote
import Foundation
import Synchronization
import VFSCache

final class MountMetrics: Sendable {
    let registry = MetricsRegistry()

    // API requests (one per HTTP attempt).
    private let requests: LabelledFamily<Counter>
    private let requestSeconds: LabelledFamily<Histogram>
    private let transferSeconds: LabelledFamily<Histogram>
    private let retries: LabelledFamily<Counter>
    private let failedCalls: LabelledFamily<Counter>
    private let rateLimitWait: LabelledFamily<Counter>
    private let downloadedBytes: Counter
    private let uploadedBytes: Counter
    // Caches.
    // Resolved once: a memory hit is counted on every FUSE read.
    private let memoryHits: Counter
    private let diskHits: Counter
    private let misses: Counter
    private let memoryEvictions: Counter
    private let diskEvictions: Counter
    private let opens: [Counter]   // index: ServedBy's position
    // FUSE operations, resolved once per kind (index: FuseOperation.rawValue).
    private let operationSeconds: [Histogram]
    private let operationErrors: [Counter]

    /// Latency buckets (seconds) for network requests: 5 ms to 2 minutes.
    static let requestBuckets: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120]
    /// FUSE operations: from a memory hit (tens of µs) to a request waiting on the network.
    static let operationBuckets: [Double] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30]

    init() {
        let r = registry
        requests = r.counters("dbxfs_api_requests_total", help: "HTTP requests to the Dropbox API by route and outcome (ok, conflict with the route error's tag, rate_limited, server_error, transport_error, auth_error, access_denied, bad_request, cancelled, other).",
                              labels: ["route", "outcome", "tag"])
        requestSeconds = r.histograms("dbxfs_api_request_duration_seconds", help: "Duration of each HTTP request to the Dropbox API, by route.",
                                      labels: ["route"], upperBounds: Self.requestBuckets)
        transferSeconds = r.histograms("dbxfs_transfer_duration_seconds", help: "Duration of each content upload or download request (upload and download latency).",
                                       labels: ["direction"], upperBounds: Self.requestBuckets)
        retries = r.counters("dbxfs_api_retries_total", help: "Requests sent again after a failure, by the failure's kind.", labels: ["reason"])
        failedCalls = r.counters("dbxfs_api_failed_calls_total", help: "Calls that failed for good (after their retries), by the last failure's kind.", labels: ["outcome"])
        rateLimitWait = r.counters("dbxfs_api_rate_limit_wait_seconds_total", help: "Seconds spent waiting because of 429s: Retry-After waits before a retry, and the request pacer's waits after 429s.",
                                   labels: ["wait"], scale: 1e9)
        downloadedBytes = r.counter("dbxfs_downloaded_bytes_total", help: "File content bytes received from Dropbox (download requests).")
        uploadedBytes = r.counter("dbxfs_uploaded_bytes_total", help: "File content bytes sent to Dropbox (upload requests, retries included).")
        let hits = r.counters("dbxfs_cache_hits_total", help: "Blocks found in a cache instead of downloaded: memory (a reader's block) or disk (a reader's or read-ahead's).",
                          labels: ["tier"])
        misses = r.counter("dbxfs_cache_misses_total", help: "Blocks downloaded because no cache held them (for readers and read-ahead).")
        let evictions = r.counters("dbxfs_cache_evictions_total", help: "Blocks evicted to keep a cache within its budget.", labels: ["tier"])
        let opens = r.counters("dbxfs_file_opens_total", help: "Opens of files, by what serves their reads: dbxfs, the kernel page cache (kept from an earlier open), or the kernel from a backing file (passthrough).",
                           labels: ["served_by"])
        let seconds = r.histograms("dbxfs_fuse_operation_duration_seconds", help: "Time dbxfs spent on each FUSE operation, by kind (the _count is the number of operations).",
                                   labels: ["operation"], upperBounds: Self.operationBuckets)
        let errors = r.counters("dbxfs_fuse_operation_errors_total", help: "FUSE operations answered with an error, by kind (a lookup of a missing name counts).",
                                labels: ["operation"])
        operationSeconds = FuseOperation.allCases.map { seconds.labels($0.label) }
        operationErrors = FuseOperation.allCases.map { errors.labels($0.label) }
        memoryHits = hits.labels("memory"); diskHits = hits.labels("disk")
        memoryEvictions = evictions.labels("memory"); diskEvictions = evictions.labels("disk")
        self.opens = ServedBy.allCases.map { opens.labels($0.rawValue) }
        // Present from the first scrape, so a rate over them starts at zero.
        _ = rateLimitWait.labels("retry_after"); _ = rateLimitWait.labels("pacing")
    }

    /// The scrape: every family in the text format.
    func render() -> String { PrometheusText.render(registry.collect()) }

    // MARK: FUSE

    func recordOperation(_ operation: FuseOperation, sinceUptimeNanoseconds start: UInt64, failed: Bool) {
        operationSeconds[operation.rawValue].observe(sinceUptimeNanoseconds: start)
        if failed { operationErrors[operation.rawValue].add() }
    }

    enum ServedBy: String, CaseIterable { case dbxfs, pageCache = "page_cache", passthrough }

    func opened(servedBy: ServedBy) { opens[ServedBy.allCases.firstIndex(of: servedBy)!].add() }

    // MARK: Gauges read at scrape time

    /// What the mount knows about itself, asked at each scrape. Each may answer nil (unknown,
    /// or the mount has none: an in-memory mount has no cache, uploads or connection).
    struct Sources: Sendable {
        var cacheUsage: @Sendable () -> CacheUsage? = { nil }
        var writeBack: @Sendable () -> WriteBackStatus? = { nil }
        var feedLag: @Sendable () -> Double? = { nil }
        /// "online", "offline" or "refused".
        var connectionState: @Sendable () -> String? = { nil }
    }

    static let connectionStates = ["online", "offline", "refused"]

    func addGauges(_ sources: Sources) {
        let r = registry
        r.gauges("dbxfs_connection_state", help: "The mount's link to Dropbox: 1 for the current state (online, offline, refused), 0 for the others.",
                 labels: ["state"]) {
            guard let current = sources.connectionState() else { return [] }
            return Self.connectionStates.map { (labels: [$0], value: $0 == current ? 1 : 0) }
        }
        r.gauge("dbxfs_change_feed_lag_seconds", help: "How far behind Dropbox the mount's tree may be: 0 while a long-poll waits on a current cursor, else seconds since it was last known in step.") {
            sources.feedLag()
        }
        r.gauges("dbxfs_cache_bytes", help: "Bytes held by each block cache.", labels: ["tier"]) {
            guard let usage = sources.cacheUsage() else { return [] }
            return [(["memory"], Double(usage.memoryBytes)), (["disk"], Double(usage.diskBytes))]
        }
        r.gauges("dbxfs_cache_budget_bytes", help: "The byte budget of each block cache.", labels: ["tier"]) {
            guard let usage = sources.cacheUsage() else { return [] }
            return [(["memory"], Double(usage.memoryBudget)), (["disk"], Double(usage.diskBudget))]
        }
        r.gauges("dbxfs_open_files", help: "Files open on the mount.") {
            sources.cacheUsage().map { [(labels: [], value: Double($0.openFiles))] } ?? []
        }
        // One status snapshot per scrape serves the three write-back gauges.
        let status = WriteBackScrape(read: sources.writeBack)
        r.gauges("dbxfs_writeback_pending_files", help: "Files closed (or open for writing) whose bytes are not all on Dropbox yet: the write-back queue depth.") {
            status.take().map { [(labels: [], value: Double($0.pendingFiles))] } ?? []
        }
        r.gauges("dbxfs_writeback_pending_bytes", help: "Bytes of the files in the write-back queue.") {
            status.current.map { [(labels: [], value: Double($0.pendingBytes))] } ?? []
        }
        r.gauges("dbxfs_writeback_writes_held", help: "Writes waiting for uploads because more than the staging budget (--staging-budget) waits for them.") {
            status.current.map { [(labels: [], value: Double($0.writesHeld))] } ?? []
        }
        r.gauges("dbxfs_writeback_oldest_pending_age_seconds", help: "Seconds since the oldest file in the write-back queue was first closed (0 when the queue is empty).") {
            status.current.map { [(labels: [], value: $0.oldestPendingSince.map { max(0, Date().timeIntervalSince($0)) } ?? 0)] } ?? []
        }
    }
}

/// The write-back status taken once per scrape by the first of its gauges and read by the others
/// (the families are collected in order, one scrape at a time per caller).
private final class WriteBackScrape: Sendable {
    private let read: @Sendable () -> WriteBackStatus?
    private let latest = Mutex<WriteBackStatus?>(nil)

    init(read: @escaping @Sendable () -> WriteBackStatus?) { self.read = read }

    func take() -> WriteBackStatus? {
        let status = read()
        latest.withLock { $0 = status }
        return status
    }

    var current: WriteBackStatus? { latest.withLock { $0 } }
}

// MARK: The client's observer

extension MountMetrics: RequestObserver {
    func attempted(_ attempt: RequestAttempt) {
        let tag = if case .conflict(let tag) = attempt.outcome { tag } else { "" }
        requests.labels(attempt.route, attempt.outcome.label, tag).add()
        requestSeconds.labels(attempt.route).observe(attempt.seconds)
        switch attempt.kind {
        case .download:
            downloadedBytes.add(attempt.bytesReceived)
            transferSeconds.labels("download").observe(attempt.seconds)
        case .upload:
            uploadedBytes.add(attempt.bytesSent)
            transferSeconds.labels("upload").observe(attempt.seconds)
        case .rpc:
            break
        }
    }

    func willRetry(after error: DropboxError, in seconds: Double) {
        let reason = RequestOutcome(error)
        retries.labels(reason.label).add()
        if reason == .rateLimited { rateLimitWait.labels("retry_after").add(scaled: seconds) }
    }

    func paced(seconds: Double) { rateLimitWait.labels("pacing").add(scaled: seconds) }

    func failed(_ error: DropboxError) { failedCalls.labels(RequestOutcome(error).label).add() }

    func succeeded() {}
}

// MARK: The cache's observer

extension MountMetrics: CacheObserver {
    func blockHit(in tier: CacheTier) { (tier == .memory ? memoryHits : diskHits).add() }
    func blockDownloaded() { misses.add() }
    func blocksEvicted(_ count: Int, from tier: CacheTier) {
        (tier == .memory ? memoryEvictions : diskEvictions).add(UInt64(count))
    }
}
