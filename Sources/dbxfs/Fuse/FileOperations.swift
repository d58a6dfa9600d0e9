/// FUSE file operations: open, create, read, write, flush, release, fsync.
///
/// Reads reply with the facade's cached bytes as an iovec (`readPieces` + `fuse_reply_iov`): the
/// only copy is the kernel's, into the reader's pages. What close() waits for is the facade's decision (see docs/SEMANTICS.md): flush may
/// report an earlier write-back error, release never waits for the network.
import CFuse
import CFusePassthrough
import Foundation
import VFSCache

enum FileOperations {
    static func install(into ops: inout fuse_lowlevel_ops) {
        ops.open = { req, ino, fi in
            let fs = FuseFilesystem.from(req)
            guard let fi else { return reply(req, error: .invalid) }
            do throws(Errno) {
                let flags = FileOperations.openFlags(fi.pointee.flags)
                let opened = try fs.operations.open(ino, flags: flags)
                if FileOperations.answerOpen(req, ino, fi, opened, flags: flags, fs) != 0 {
                    fs.operations.release(ino, handle: opened.handle)
                }
            } catch {
                reply(req, error: error)
            }
        }
        ops.create = { req, parent, name, _, fi in
            let fs = FuseFilesystem.from(req)
            guard let fi else { return reply(req, error: .invalid) }
            guard let name = decodeName(name) else { return reply(req, error: .illegalSequence) }
            do throws(Errno) {
                let (entry, opened) = try fs.operations.create(parent: parent, name: name,
                                                               flags: FileOperations.openFlags(fi.pointee.flags))
                fi.pointee.fh = opened.handle
                let ino = entry.attributes.ino
                var e = fs.entryParam(entry)
                let mode = fs.passthrough.open(ino, handle: opened.handle, reply: opened, mayWrite: true)
                let sent: Int32
                switch mode {
                case .passthrough(let backingID):
                    fs.operations.servedByKernel(ino, handle: opened.handle)
                    fs.metrics?.opened(servedBy: .passthrough)
                    dbxfs_fi_set_keep_cache(fi, false)
                    dbxfs_fi_set_direct_io(fi, false)
                    sent = dbxfs_passthrough_reply_create(UnsafeMutableRawPointer(req), &e, UnsafeRawPointer(fi), backingID)
                case .cached:
                    fs.metrics?.opened(servedBy: .dbxfs)
                    dbxfs_fi_set_keep_cache(fi, opened.keepCache)
                    dbxfs_fi_set_direct_io(fi, opened.directIO)
                    sent = fuse_reply_create(req, &e, fi)
                case .busy:
                    // O_CREAT of an existing file the kernel serves from another backing file.
                    fuse_reply_err(req, EBUSY)
                    sent = -1
                }
                if sent != 0 {
                    fs.passthrough.released(opened.handle)
                    fs.operations.release(entry.attributes.ino, handle: opened.handle)
                    fs.operations.forget(entry.attributes.ino, count: 1)
                }
            } catch {
                reply(req, error: error)
            }
        }
        ops.read = { req, ino, size, offset, fi in
            let fs = FuseFilesystem.from(req)
            do throws(Errno) {
                // The cached blocks go to the kernel as an iovec: no copy in user space.
                try fs.operations.readPieces(ino, handle: fi?.pointee.fh ?? 0, offset: UInt64(max(0, offset)),
                                             size: size) { pieces in
                    var iov = pieces.map { iovec(iov_base: UnsafeMutableRawPointer(mutating: $0.baseAddress), iov_len: $0.count) }
                    _ = fuse_reply_iov(req, &iov, Int32(iov.count))
                }
            } catch {
                reply(req, error: error)
            }
        }
        ops.write = { req, ino, buf, size, offset, fi in
            let fs = FuseFilesystem.from(req)
            do throws(Errno) {
                let written = try fs.operations.write(ino, handle: fi?.pointee.fh ?? 0,
                                                      offset: UInt64(max(0, offset)),
                                                      data: UnsafeRawBufferPointer(start: buf, count: size))
                fuse_reply_write(req, written)
            } catch {
                reply(req, error: error)
            }
        }
        ops.flush = { req, ino, fi in
            let fs = FuseFilesystem.from(req)
            do throws(Errno) {
                try fs.operations.flush(ino, handle: fi?.pointee.fh ?? 0)
                fuse_reply_err(req, 0)
            } catch {
                reply(req, error: error)
            }
        }
        ops.release = { req, ino, fi in
            let fs = FuseFilesystem.from(req)
            fs.passthrough.released(fi?.pointee.fh ?? 0)
            fs.operations.release(ino, handle: fi?.pointee.fh ?? 0)
            fuse_reply_err(req, 0)
        }
        ops.fsync = { req, ino, _, fi in
            let fs = FuseFilesystem.from(req)
            do throws(Errno) {
                try fs.operations.fsync(ino, handle: fi?.pointee.fh)
                fuse_reply_err(req, 0)
            } catch {
                reply(req, error: error)
            }
        }
    }

    /// Answers an open the facade accepted: served by the kernel from a backing file when
    /// PassthroughOpens says so, else by us. Returns fuse_reply_open's result (0: delivered).
    private static func answerOpen(_ req: fuse_req_t?, _ ino: InodeNumber, _ fi: UnsafeMutablePointer<fuse_file_info>,
                                   _ opened: OpenReply, flags: OpenFlags, _ fs: FuseFilesystem) -> Int32 {
        fi.pointee.fh = opened.handle
        let mayWrite = !flags.isDisjoint(with: [.write, .truncate, .append])
        let sent: Int32
        switch fs.passthrough.open(ino, handle: opened.handle, reply: opened, mayWrite: mayWrite) {
        case .passthrough(let backingID):
            fs.operations.servedByKernel(ino, handle: opened.handle)
            fs.metrics?.opened(servedBy: .passthrough)
            dbxfs_fi_set_keep_cache(fi, false)
            dbxfs_fi_set_direct_io(fi, false)
            sent = dbxfs_passthrough_reply_open(UnsafeMutableRawPointer(req), UnsafeRawPointer(fi), backingID)
        case .cached:
            fs.metrics?.opened(servedBy: opened.keepCache ? .pageCache : .dbxfs)
            dbxfs_fi_set_keep_cache(fi, opened.keepCache)
            dbxfs_fi_set_direct_io(fi, opened.directIO)
            sent = fuse_reply_open(req, fi)
        case .busy:
            fuse_reply_err(req, EBUSY)
            sent = -1
        }
        if sent != 0 { fs.passthrough.released(opened.handle) }
        return sent
    }

    /// open(2) flags as the facade's option set.
    static func openFlags(_ flags: Int32) -> OpenFlags {
        var result: OpenFlags = []
        switch flags & O_ACCMODE {
        case O_RDONLY: result.insert(.read)
        case O_WRONLY: result.insert(.write)
        default: result.formUnion([.read, .write])
        }
        if flags & O_TRUNC != 0 { result.insert(.truncate) }
        if flags & O_APPEND != 0 { result.insert(.append) }
        if flags & O_EXCL != 0 { result.insert(.exclusive) }
        return result
    }
}
