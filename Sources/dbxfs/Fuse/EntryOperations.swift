/// FUSE entry and attribute operations: lookup, forget, forget_multi, getattr, setattr.
/// Each callback recovers the filesystem, calls the facade on this worker thread, and replies.
import CFuse
import Foundation
import VFSCache

enum EntryOperations {
    static func install(into ops: inout fuse_lowlevel_ops) {
        ops.lookup = { req, parent, name in
            let fs = FuseFilesystem.from(req)
            guard let name = decodeName(name) else { return reply(req, error: .illegalSequence) }
            do throws(Errno) {
                let entry = try fs.operations.lookup(parent: parent, name: name)
                var e = fs.entryParam(entry)
                // If the kernel is gone (interrupted request) the entry's lookup count must be
                // given back, or the inode would never be forgotten.
                if fuse_reply_entry(req, &e) != 0 { fs.operations.forget(entry.attributes.ino, count: 1) }
            } catch {
                reply(req, error: error)
            }
        }
        ops.forget = { req, ino, nlookup in
            FuseFilesystem.from(req).operations.forget(ino, count: nlookup)
            fuse_reply_none(req)
        }
        ops.forget_multi = { req, count, forgets in
            let fs = FuseFilesystem.from(req)
            if let forgets {
                for i in 0..<count { fs.operations.forget(forgets[i].ino, count: forgets[i].nlookup) }
            }
            fuse_reply_none(req)
        }
        ops.getattr = { req, ino, _ in
            let fs = FuseFilesystem.from(req)
            do throws(Errno) {
                let (attributes, timeout) = try fs.operations.getattr(ino)
                var st = fs.stat(of: attributes)
                fuse_reply_attr(req, &st, timeout)
            } catch {
                reply(req, error: error)
            }
        }
        ops.setattr = { req, ino, attr, toSet, fi in
            let fs = FuseFilesystem.from(req)
            guard let attr else { return reply(req, error: .invalid) }
            var changes = AttributeChanges()
            if toSet & DBXFS_SET_ATTR_SIZE != 0 { changes.size = UInt64(max(0, attr.pointee.st_size)) }
            if toSet & DBXFS_SET_ATTR_MTIME_NOW != 0 {
                changes.mtime = Date()
            } else if toSet & DBXFS_SET_ATTR_MTIME != 0 {
                changes.mtime = attr.pointee.st_mtim.date
            }
            if toSet & DBXFS_SET_ATTR_MODE != 0 { changes.mode = attr.pointee.st_mode }
            if toSet & DBXFS_SET_ATTR_UID != 0 { changes.uid = attr.pointee.st_uid }
            if toSet & DBXFS_SET_ATTR_GID != 0 { changes.gid = attr.pointee.st_gid }
            // atime alone is not stored anywhere (Dropbox has none); it falls through as a no-op
            // that still answers the current attributes, so `touch -a` succeeds.
            do throws(Errno) {
                let attributes = try fs.operations.setattr(ino, changes: changes, handle: fi?.pointee.fh)
                var st = fs.stat(of: attributes)
                fuse_reply_attr(req, &st, 0)
            } catch {
                reply(req, error: error)
            }
        }
    }
}
