/// FUSE namespace operations: unlink and rename (with renameat2's RENAME_NOREPLACE and
/// RENAME_EXCHANGE). Links and symlinks are not offered at all (the kernel answers ENOSYS→EPERM).
import CFuse
import Foundation
import VFSCache

enum NamespaceOperations {
    static func install(into ops: inout fuse_lowlevel_ops) {
        ops.unlink = { req, parent, name in
            let fs = FuseFilesystem.from(req)
            guard let name = decodeName(name) else { return reply(req, error: .illegalSequence) }
            do throws(Errno) {
                try fs.operations.unlink(parent: parent, name: name)
                fuse_reply_err(req, 0)
            } catch {
                reply(req, error: error)
            }
        }
        ops.rename = { req, parent, name, newParent, newName, flags in
            let fs = FuseFilesystem.from(req)
            guard let name = decodeName(name), let newName = decodeName(newName) else {
                return reply(req, error: .illegalSequence)
            }
            // RENAME_WHITEOUT is for overlay filesystems; nothing here can represent a whiteout.
            if flags & DBXFS_RENAME_WHITEOUT != 0 { return reply(req, error: .invalid) }
            var renameFlags: RenameFlags = []
            if flags & DBXFS_RENAME_NOREPLACE != 0 { renameFlags.insert(.noReplace) }
            if flags & DBXFS_RENAME_EXCHANGE != 0 { renameFlags.insert(.exchange) }
            do throws(Errno) {
                try fs.operations.rename(parent: parent, name: name, newParent: newParent, newName: newName,
                                         flags: renameFlags)
                fuse_reply_err(req, 0)
            } catch {
                reply(req, error: error)
            }
        }
    }
}
