/// `Errno`: the one error type the filesystem facade throws, and the one place where remote
/// failures become errno values (swift-system style). The FUSE glue replies `-errno.rawValue`.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

public struct Errno: Error, Sendable, Equatable, CustomStringConvertible {
    public var rawValue: Int32
    public init(_ rawValue: Int32) { self.rawValue = rawValue }

    public static let noEntry = Errno(ENOENT)
    public static let exists = Errno(EEXIST)
    public static let notDirectory = Errno(ENOTDIR)
    public static let isDirectory = Errno(EISDIR)
    public static let notEmpty = Errno(ENOTEMPTY)
    public static let invalid = Errno(EINVAL)
    public static let io = Errno(EIO)
    public static let noSpace = Errno(ENOSPC)
    public static let nameTooLong = Errno(ENAMETOOLONG)
    public static let permission = Errno(EPERM)
    public static let accessDenied = Errno(EACCES)
    public static let notSupported = Errno(ENOTSUP)
    public static let noData = Errno(ENODATA)
    public static let range = Errno(ERANGE)
    public static let badFile = Errno(EBADF)
    public static let readOnly = Errno(EROFS)
    public static let busy = Errno(EBUSY)
    public static let illegalSequence = Errno(EILSEQ)
    public static let timedOut = Errno(ETIMEDOUT)
    public static let again = Errno(EAGAIN)
    public static let crossDevice = Errno(EXDEV)
    public static let notImplemented = Errno(ENOSYS)
    public static let networkUnreachable = Errno(ENETUNREACH)
    /// An inode the kernel still names is gone from the tree (deleted elsewhere): the kernel then
    /// looks the name up again and retries the call once.
    public static let stale = Errno(ESTALE)

    public var description: String { String(cString: strerror(rawValue)) }

    /// The single mapping from classified remote failures to errno.
    public init(_ error: RemoteError) {
        switch error {
        case .notFound: self = .noEntry
        case .notFolder: self = .notDirectory
        case .notFile: self = .isDirectory
        case .conflict: self = .exists
        case .insufficientSpace: self = .noSpace
        case .disallowedName, .malformedPath: self = .invalid
        case .invalidOperation: self = .invalid
        case .restrictedContent: self = .accessDenied
        case .locked: self = .busy
        // Not one rename on Dropbox: `mv` then copies and removes, as across filesystems.
        case .tooManyFiles: self = .crossDevice
        case .cursorReset, .sessionGone: self = .io
        case .auth, .permissionDenied: self = .accessDenied
        // Dropbox kept refusing for longer than a waiting caller is kept waiting: try again later.
        case .rateLimited: self = .again
        case .unavailable, .other: self = .io
        case .cancelled: self = Errno(ECANCELED)
        }
    }

    /// For the changes that go to Dropbox at once and cannot wait in the upload journal (mkdir,
    /// rmdir, unlink, rename): while Dropbox cannot be reached they fail with ENETUNREACH,
    /// "Network is unreachable", which is what cp, mv, rm, mkdir and rsync then print; EIO would
    /// read as a failing disk, EAGAIN as "try again at once". Otherwise as `init(_:)`.
    public init(namespaceChange error: RemoteError) {
        if case .unavailable = error { self = .networkUnreachable } else { self.init(error) }
    }
}
