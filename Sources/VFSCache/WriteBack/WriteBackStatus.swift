/// What the write-back engine tells the rest of dbxfs: events after each commit (so the facade can
/// update its metadata), a status snapshot for `dbxfs status`, and the errors fsync/sync report.
import Foundation

/// Delivered in order on one background queue, after the journal was updated.
public enum WriteBackEvent: Sendable, Equatable {
    /// `generation` of `path` is on Dropbox as `entry` (new rev, id, size, content hash).
    case committed(path: String, generation: UInt64, entry: RemoteEntry)
    /// Dropbox had another version of `path`; ours was kept as `entry` at `copyPath`, and `path`
    /// keeps the other version. Never an overwrite.
    case conflicted(path: String, copyPath: String, generation: UInt64, entry: RemoteEntry)
    /// An attempt failed; the file stays journaled. `willRetry` is false only while the engine is
    /// stopping.
    case failed(path: String, generation: UInt64, error: RemoteError, willRetry: Bool)
    /// Queued namespace operation `sequence` is over: done on Dropbox (`entry`: what a mkdir or a
    /// move made, if known), or undone. `refresh` lists the paths whose state on Dropbox is not
    /// what the operation made: the facade fetches them again.
    case namespaceSettled(sequence: UInt64, refresh: [String], entry: RemoteEntry?)
}

/// Why a wait for the write-back ended without the commit.
public enum WriteBackError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The latest attempt failed with an error that retrying soon won't fix (insufficient space,
    /// a refused name, auth). The file stays journaled and is retried later.
    case failed(RemoteError)
    /// Still pending at the deadline; `lastError` says why, if an attempt failed.
    case timedOut(lastError: RemoteError?)
    /// The engine was shut down.
    case stopped

    /// What fsync's warning says.
    public var description: String { description(about: nil) }

    /// The sentence for a line that already names `path` (RemoteError.description(about:)).
    public func description(about path: String?) -> String {
        func told(_ error: RemoteError) -> String { path.map { error.description(about: $0) } ?? "\(error)" }
        return switch self {
        case .failed(let error): told(error)
        case .timedOut(let error): "not on Dropbox yet after the wait\(error.map { " (the last attempt: \(told($0)))" } ?? "")"
        case .stopped: "the uploads stopped (the mount is shutting down); the file stays journaled for the next mount"
        }
    }

    /// For fsync: ENOSPC for insufficient space, EIO otherwise.
    public var errno: Errno {
        switch self {
        case .failed(let error): return Errno(error)
        case .timedOut, .stopped: return .io
        }
    }
}

/// One transfer in progress.
public struct TransferProgress: Sendable, Equatable {
    public var path: String
    public var bytesDone: UInt64
    public var bytesTotal: UInt64
    public var startedAt: Date
    /// Average since the transfer started.
    public var bytesPerSecond: Double
    /// The file is still open for writing: `bytesTotal` is what was written so far, and
    /// `bytesDone` the chunks streamed while it is written (StreamingUpload.swift).
    public var writing: Bool = false
}

/// One file that is not yet committed: journaled, or open for writing (then `size` is the bytes
/// written so far and `generation` 0 until its first close).
public struct PendingUpload: Sendable, Equatable {
    public var path: String
    public var size: UInt64
    public var generation: UInt64
    public var state: UploadState
    /// Still open for writing through the mount (its latest bytes are not closed yet).
    public var openForWriting: Bool
    public var attempts: Int
    public var lastError: String?
    /// False for a close that could not be journaled (FailedCloses.swift): not crash-safe, and
    /// not kept for the next mount if the daemon exits first.
    public var journaled = true
    /// Set for a queued namespace operation instead of a file ("mkdir /a", "unlink /a/f",
    /// "rmdir /a", "rename /a → /b"); `generation` is its sequence.
    public var operation: String?
    /// When that operation was journaled.
    public var queuedAt: Date?
    /// When the next attempt may start (after a failure's back-off); nil when it may start now.
    public var nextAttemptAt: Date? = nil
}

public struct UploadErrorReport: Sendable, Equatable {
    public var path: String
    public var message: String
    public var at: Date
}

/// A snapshot for `dbxfs status`.
public struct WriteBackStatus: Sendable, Equatable {
    public var pendingFiles: Int
    public var pendingBytes: UInt64
    public var transfers: [TransferProgress]
    public var uploads: [PendingUpload]
    public var conflicts: [ConflictRecord]
    public var recentErrors: [UploadErrorReport]
    /// The last attempt found Dropbox unreachable; uploads resume on their own.
    public var offline: Bool
    /// Namespace operations not done on Dropbox yet, oldest first.
    public var operations: [PendingUpload] = []
    /// Every upload waits until then (Dropbox unreachable, or asking to slow down); nil: none do.
    public var pausedUntil: Date? = nil
    /// Writes waiting for uploads because more than the staging budget waits (StagingBudget.swift).
    public var writesHeld: Int = 0
    /// When the oldest pending upload's file was first closed with bytes not on Dropbox (nil: none
    /// pending). Within one run: uploads resumed from the journal count from the mount's start.
    public var oldestPendingSince: Date? = nil
}
