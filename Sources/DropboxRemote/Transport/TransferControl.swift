/// What a caller hands to a transfer to watch and steer it: a cancel handle, a progress callback,
/// and the upload body (a byte source that can be re-read from any offset, so a retry can start
/// over or resume without the client keeping the bytes in memory).
import Foundation
import Synchronization

/// Cancels the transfers it is passed to. Checked in every curl callback and between retries,
/// so a cancel takes effect within one buffer (or one progress tick, ~1 s, on a stalled link).
public final class CancelHandle: Sendable {
    private let flag = Atomic<Bool>(false)
    private let parent: CancelHandle?
    private let otherParent: CancelHandle?
    /// A handle that is also cancelled when `parent` is (used to stop sibling transfers on the
    /// first failure without cancelling the caller's handle).
    public init(parent: CancelHandle? = nil) { self.parent = parent; self.otherParent = nil }
    private init(parent: CancelHandle, otherParent: CancelHandle) { self.parent = parent; self.otherParent = otherParent }
    public func cancel() { flag.store(true, ordering: .releasing) }
    public var isCancelled: Bool {
        flag.load(ordering: .acquiring) || parent?.isCancelled == true || otherParent?.isCancelled == true
    }

    /// A handle cancelled when either is (nil when both are nil; the one when the other is nil).
    static func either(_ one: CancelHandle?, _ other: CancelHandle?) -> CancelHandle? {
        guard let one else { return other }
        guard let other, other !== one else { return one }
        return CancelHandle(parent: one, otherParent: other)
    }
}

/// Bytes done and total of one transfer (total is 0 when unknown). Called on the transferring
/// thread, often: keep it cheap. `done` never goes backwards, even across retries.
public typealias TransferProgress = @Sendable (_ done: UInt64, _ total: UInt64) -> Void

/// Receives downloaded bytes in order. Return false to stop the download (it ends `.cancelled`).
/// The buffer is only valid during the call.
public typealias DownloadSink = (UnsafeRawBufferPointer) -> Bool

/// The bytes of an upload request, readable from any offset.
public enum UploadBody: Sendable {
    case data(Data)
    /// Bytes [offset, offset+length) of a file, read with pread as curl asks for them.
    case file(URL, offset: UInt64, length: UInt64)
    /// A positional reader: fill the buffer with bytes starting at `offset` (relative to this body),
    /// return how many were written (0 only at the end). Throwing aborts the request.
    case reader(length: UInt64, read: @Sendable (_ offset: UInt64, _ into: UnsafeMutableRawBufferPointer) throws -> Int)

    public var length: UInt64 {
        switch self {
        case .data(let d): UInt64(d.count)
        case .file(_, _, let length): length
        case .reader(let length, _): length
        }
    }

    /// Bytes [start, start+count) of this body, without copying file or reader bodies.
    public func slice(from start: UInt64, count: UInt64) -> UploadBody {
        precondition(start + count <= length, "slice beyond the body")
        switch self {
        case .data(let d): return .data(d.subdata(in: d.startIndex + Int(start) ..< d.startIndex + Int(start + count)))
        case .file(let url, let offset, _): return .file(url, offset: offset + start, length: count)
        case .reader(_, let read): return .reader(length: count, read: { offset, buffer in
            let limited = UnsafeMutableRawBufferPointer(rebasing: buffer[0 ..< Int(min(UInt64(buffer.count), count - offset))])
            return try read(offset + start, limited)
        })
        }
    }

    /// The part of this body starting at `start`, for resuming after `incorrect_offset`.
    func suffix(from start: UInt64) -> UploadBody { slice(from: start, count: length - start) }

    public static let empty = UploadBody.data(Data())
}
