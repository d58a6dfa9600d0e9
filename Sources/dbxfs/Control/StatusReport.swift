/// The stable JSON of `dbxfs status --json` and `dbxfs sync` (documented in docs/STATUS.md).
/// These types are both the wire format of the control socket and the `--json` output, so
/// what a script sees is exactly what the mount sent.
///
/// Stability rules: field names are snake_case; fields are only ever added, never renamed or
/// removed, within `version` 1; optional fields are omitted when unknown; times are ISO 8601 UTC;
/// sizes are bytes.
import Foundation

/// `dbxfs status --json`: every live mount the user has (or the one asked for).
struct StatusDocument: Codable, Sendable {
    var version = 1
    var mounts: [MountStatusReport]
}

struct MountStatusReport: Codable, Sendable {
    var mountpoint: String
    var pid: Int32
    var mountedAt: Date
    var account: AccountReport
    /// "Dropbox", or the API base URL of an emulator or gateway.
    var server: String
    /// The Dropbox folder mounted as the root ("" for the whole account).
    var root: String
    var readOnly: Bool
    /// "mounted"; "detached" once the mount was lazily unmounted (`fusermount3 -uz`) while the
    /// daemon still serves files open on it; "unmounted" while the daemon finishes its uploads
    /// before it exits. Omitted by daemons older than this field, which means "mounted".
    var state: String? = nil
    /// Why Dropbox cannot be reached; omitted while online. Offline, the mount serves its cached
    /// tree and blocks, and catches up with remote changes when Dropbox answers again.
    var offline: String? = nil
    /// The link to Dropbox: online, offline or refused, the last error and the next attempt.
    /// Omitted by daemons older than this field.
    var connection: ConnectionReport? = nil
    var cache: CacheReport
    /// nil (omitted) when the mount has no write-back engine: nothing it holds can be pending.
    var uploads: UploadsReport?
    /// The files kept offline (`dbxfs pin`); omitted when nothing is pinned. Added 2026-12-01.
    var pins: PinsStatusReport? = nil
}

struct AccountReport: Codable, Sendable {
    var email: String
    var displayName: String
    var accountId: String?
    /// The stored profile the mount uses; omitted for a bare access token.
    var profile: String?
}

struct ConnectionReport: Codable, Sendable {
    /// "online"; "offline" (Dropbox cannot be reached); "refused" (Dropbox no longer accepts the
    /// mount's access: `message` says what to do).
    var state: String
    /// When the mount went offline or lost its access; omitted while online.
    var since: Date?
    /// For people: what happened and what works meanwhile, or what to do; omitted while online.
    var message: String?
    /// The last failure of any call to Dropbox (retried or not), and when.
    var lastError: String?
    var lastErrorAt: Date?
    /// When the next attempt is due: a retry after a failure, the offline probe, or the end of a
    /// pause of all uploads; omitted when nothing waits.
    var nextRetryAt: Date?
}

struct CacheReport: Codable, Sendable {
    var diskBytes: Int64
    var diskBudget: Int64
    var memoryBytes: Int
    var memoryBudget: Int
    /// Files and folders whose metadata is cached.
    var entries: Int
    var openFiles: Int
}

struct UploadsReport: Codable, Sendable {
    var pendingFiles: Int
    var pendingBytes: UInt64
    /// The last attempt found Dropbox unreachable; uploads resume on their own.
    var offline: Bool
    /// The upload rate of the whole queue (bytes Dropbox confirmed per second, recently), and the
    /// time left at that rate; omitted while unknown.
    var bytesPerSecond: Double? = nil
    var etaSeconds: Double? = nil
    var transfers: [TransferReport]
    var pending: [PendingReport]
    var conflicts: [ConflictReport]
    var errors: [ErrorReport]
    /// Namespace changes (mkdir, unlink, rmdir, rename) not on Dropbox yet; omitted by daemons
    /// older than this field (added 2026-12-02), which sent each change at once.
    var operations: OperationsReport? = nil
    /// Writes waiting for the uploads because more than the staging budget waits for them
    /// (docs/SEMANTICS.md "Staging budget"); omitted when none, and by older daemons.
    var writesHeld: Int? = nil
}

/// The queue of namespace changes not done on Dropbox yet.
struct OperationsReport: Codable, Sendable {
    var pending: Int
    /// When the oldest one was made.
    var oldestAt: Date?
    /// The latest attempt's error of any of them, if one failed.
    var lastError: String?
    /// The oldest ones (at most 10), each with its `operation`.
    var first: [PendingReport]
}

struct TransferReport: Codable, Sendable {
    var path: String
    var bytesDone: UInt64
    var bytesTotal: UInt64
    /// Average since the transfer started.
    var bytesPerSecond: Double
    /// Omitted while the rate is still unknown (zero).
    var etaSeconds: Double?
    var startedAt: Date
    /// Still open for writing: `bytesTotal` grows, `bytesDone` counts chunks streamed meanwhile.
    var writing: Bool
}

extension TransferReport {
    /// The format only grows (docs/STATUS.md): `writing` came later, so a report from a mount
    /// started by an older dbxfs has none, and that means false.
    init(from decoder: any Decoder) throws {
        let fields = try decoder.container(keyedBy: CodingKeys.self)
        path = try fields.decode(String.self, forKey: .path)
        bytesDone = try fields.decode(UInt64.self, forKey: .bytesDone)
        bytesTotal = try fields.decode(UInt64.self, forKey: .bytesTotal)
        bytesPerSecond = try fields.decode(Double.self, forKey: .bytesPerSecond)
        etaSeconds = try fields.decodeIfPresent(Double.self, forKey: .etaSeconds)
        startedAt = try fields.decode(Date.self, forKey: .startedAt)
        writing = try fields.decodeIfPresent(Bool.self, forKey: .writing) ?? false
    }
}

struct PendingReport: Codable, Sendable {
    var path: String
    var size: UInt64
    /// pending, uploading, committing, failed, refused.
    var state: String
    var attempts: Int
    var openForWriting: Bool
    var lastError: String?
    /// Set instead of a file for a namespace change ("mkdir /a", "unlink /a/f", "rmdir /a",
    /// "rename /a → /b"); `size` is 0. Added 2026-12-01.
    var operation: String? = nil
    /// When the next attempt may start, after a failure's back-off; omitted when it may start now.
    var nextAttemptAt: Date? = nil
}

struct ConflictReport: Codable, Sendable {
    /// The path that keeps the other version.
    var path: String
    /// Where our version was kept.
    var copyPath: String
    var at: Date
}

struct ErrorReport: Codable, Sendable {
    var path: String
    var message: String
    var at: Date
}

/// The answer to `dbxfs sync`.
struct SyncReport: Codable, Sendable {
    var mountpoint: String
    /// True when everything written before the request is committed.
    var ok: Bool
    /// False when the mount has no write-back engine (then nothing can be pending).
    var writeBack: Bool
    var waitedSeconds: Double
    /// What is still not committed, with the last error of each (empty when ok).
    var left: [PendingReport]
    /// The daemon that answered (the client checks it is the socket's peer: ControlTrust).
    /// Added 2026-12-01; absent in older daemons.
    var pid: Int32? = nil
}

/// The answer to `metrics` (`dbxfs status --prometheus`): the mount's metric families, which the
/// command prints in the Prometheus text format (Metrics/PrometheusText.swift).
struct MetricsReply: Codable, Sendable {
    var mountpoint: String
    var pid: Int32?
    var families: [MetricFamilySnapshot]
}

/// A request on the control socket: one JSON object on one line.
struct ControlRequest: Codable, Sendable {
    /// "status", "sync", "metrics", or a file command (FileCommandService.commands).
    var command: String
    /// sync: how long to wait (seconds).
    var timeoutSeconds: Double?
    /// A file command's path and options (FileCommandReports.swift).
    var file: FileRequest?
}

/// An error answer on the control socket.
struct ControlErrorReply: Codable, Sendable {
    var error: String
}

enum ReportCoding {
    static func encoder(pretty: Bool = false) -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = pretty ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }

    /// `value` as JSON text. Pretty printing puts empty lists and objects on one line, `[]` and
    /// `{}` (Foundation's encoder writes them as `[`, a blank line, `]`).
    static func json<T: Encodable>(_ value: T, pretty: Bool) -> String {
        guard let data = try? encoder(pretty: pretty).encode(value) else { return "{}" }
        let text = String(decoding: data, as: UTF8.self)
        guard pretty else { return text }
        // Strings never hold a raw newline (JSON escapes it), so this only meets layout.
        return text.replacingOccurrences(of: #"\[\s*\n\s*\]"#, with: "[]", options: .regularExpression)
            .replacingOccurrences(of: #"\{\s*\n\s*\}"#, with: "{}", options: .regularExpression)
    }

    static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}
