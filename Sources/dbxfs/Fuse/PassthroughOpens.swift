/// Which opens the kernel serves by itself, with FUSE passthrough (Linux ≥ 6.9, root only).
///
/// When the facade offers a backing file (`OpenReply.backingFile`), the file is registered with
/// the kernel and the open answered with FOPEN_PASSTHROUGH: its reads and writes then go from the
/// caller straight to the backing file, at local-file speed, without a request to us
/// (CFusePassthrough does the bytes). Two kinds of backing file:
/// - on a read-only mount, a whole, verified copy of the revision in the disk cache;
/// - on a writable mount, a writer's staging file (`backingTakesWrites`): the kernel writes it,
///   and the facade journals it at flush and release (docs/WRITEBACK.md "Passthrough writes").
///
/// The kernel's rule, per inode (fs/fuse/iomode.c): while any open of it is passthrough, every
/// open of it must be passthrough, with the same backing file; and a passthrough open is refused
/// while page-cached opens remain (a breach fails the open). So, per inode, under one lock:
/// - passthrough when a backing file is offered (not only to join) and no cached open is left;
/// - while passthrough opens remain, every new open is passthrough on the same backing id, even
///   a reader of a newer revision (it reads what the earlier opens read, until they are all
///   closed: the alternative is an error); a writer joins only if its staging file is that very
///   backing file (the engine keeps it so: StagingRetention.swift), else it gets EBUSY, since
///   its writes would land in a file nobody uploads;
/// - the backing id is released with the inode's last passthrough open, and the inode is cached
///   again from then on.
/// An open that fails to register (no CAP_SYS_ADMIN, kernel without passthrough) is an ordinary
/// one; the first such failure is logged.
import CFuse
import CFusePassthrough
import Foundation
import VFSCache

final class PassthroughOpens: @unchecked Sendable {
    // @unchecked: every var is only touched with `lock` held.
    enum Mode: Equatable { case cached, passthrough(backingID: Int32), busy }

    private struct InodeOpens {
        var cached = 0
        var passthrough = 0
        var backingID: Int32 = 0
        /// The file behind `backingID`.
        var backingFile = ""
    }

    private let lock = NSLock()
    private var session: OpaquePointer?
    private var inodes: [InodeNumber: InodeOpens] = [:]
    private var handles: [HandleID: (ino: InodeNumber, mode: Mode)] = [:]
    private var failureLogged = false
    private let log: Logger

    init(log: Logger) { self.log = log }

    /// Passthrough is possible from now on (the hooks are installed on this mounted session).
    func attach(_ session: OpaquePointer) { lock.withLock { self.session = session } }
    func detach() { lock.withLock { session = nil } }

    /// How to answer the open of `ino` as `handle` (`mayWrite`: opened for writing or truncating);
    /// call `released` when it ends (or when the reply could not be sent). `.busy`: refuse it.
    func open(_ ino: InodeNumber, handle: HandleID, reply: OpenReply, mayWrite: Bool) -> Mode {
        lock.lock(); defer { lock.unlock() }
        var opens = inodes[ino] ?? InodeOpens()
        let mode: Mode
        if opens.passthrough > 0 {
            guard !mayWrite || (reply.backingTakesWrites && reply.backingFile == opens.backingFile) else {
                log.warning("open of inode \(ino) for writing refused (EBUSY): the kernel serves its other opens from "
                            + "another file than the one this writer would write; retry once they are closed")
                return .busy
            }
            opens.passthrough += 1
            mode = .passthrough(backingID: opens.backingID)
        } else if let backingFile = reply.backingFile, !reply.backingJoinOnly, opens.cached == 0,
                  let id = backingID(for: &opens, file: backingFile) {
            opens.passthrough += 1
            mode = .passthrough(backingID: id)
        } else {
            opens.cached += 1
            mode = .cached
        }
        inodes[ino] = opens
        handles[handle] = (ino, mode)
        if case .passthrough(let id) = mode { log.debug("open of inode \(ino): passthrough (backing id \(id))") }
        return mode
    }

    /// The open `handle` ended (release, or its reply was never delivered).
    func released(_ handle: HandleID) {
        lock.lock(); defer { lock.unlock() }
        guard let (ino, mode) = handles.removeValue(forKey: handle), var opens = inodes[ino] else { return }
        switch mode {
        case .cached, .busy: opens.cached -= 1
        case .passthrough:
            opens.passthrough -= 1
            if opens.passthrough == 0, let session {
                _ = dbxfs_passthrough_backing_close(UnsafeMutableRawPointer(session), opens.backingID)
                opens.backingID = 0
                opens.backingFile = ""
            }
        }
        inodes[ino] = opens.cached == 0 && opens.passthrough == 0 ? nil : opens
    }

    /// Registers `file` as the inode's backing file (lock held; the inode has no passthrough open).
    private func backingID(for opens: inout InodeOpens, file: String) -> Int32? {
        guard let session, dbxfs_passthrough_negotiated() else { return nil }
        let fd = Glibc.open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }   // evicted since the facade looked: an ordinary open
        defer { close(fd) }   // the kernel holds the file itself from here on
        let id = dbxfs_passthrough_backing_open(UnsafeMutableRawPointer(session), fd)
        guard id > 0 else {
            if !failureLogged {
                failureLogged = true
                log.info("passthrough unavailable (\(String(cString: strerror(-id)))); reads and writes go through dbxfs")
            }
            return nil
        }
        opens.backingID = id
        opens.backingFile = file
        return id
    }
}
