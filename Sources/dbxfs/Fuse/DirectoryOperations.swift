/// FUSE directory operations: opendir, readdir, readdirplus, releasedir, mkdir, rmdir.
///
/// readdir and readdirplus fill the kernel's buffer straight from the facade's page of entries.
/// readdirplus hands the kernel each entry's attributes along with its name, which saves one
/// LOOKUP round trip per entry on `ls -l`/`find`; the price is a facade `lookup` per entry, which
/// is what gives the entry its lookup count (the FUSE contract for readdirplus). "." and ".." are
/// sent without a count, as the kernel ignores them.
import CFuse
import Foundation
import VFSCache

enum DirectoryOperations {
    static func install(into ops: inout fuse_lowlevel_ops) {
        ops.opendir = { req, ino, fi in
            let fs = FuseFilesystem.from(req)
            do throws(Errno) {
                let handle = try fs.operations.openDirectory(ino)
                fi!.pointee.fh = handle
                fuse_reply_open(req, fi)
            } catch {
                reply(req, error: error)
            }
        }
        ops.readdir = { req, ino, size, offset, fi in
            DirectoryOperations.fill(req, ino: ino, size: size, offset: offset, handle: fi?.pointee.fh ?? 0, plus: false)
        }
        ops.readdirplus = { req, ino, size, offset, fi in
            DirectoryOperations.fill(req, ino: ino, size: size, offset: offset, handle: fi?.pointee.fh ?? 0, plus: true)
        }
        ops.releasedir = { req, ino, fi in
            FuseFilesystem.from(req).operations.releaseDirectory(ino, handle: fi?.pointee.fh ?? 0)
            fuse_reply_err(req, 0)
        }
        ops.mkdir = { req, parent, name, _ in
            let fs = FuseFilesystem.from(req)
            guard let name = decodeName(name) else { return reply(req, error: .illegalSequence) }
            do throws(Errno) {
                let entry = try fs.operations.mkdir(parent: parent, name: name)
                var e = fs.entryParam(entry)
                if fuse_reply_entry(req, &e) != 0 { fs.operations.forget(entry.attributes.ino, count: 1) }
            } catch {
                reply(req, error: error)
            }
        }
        ops.rmdir = { req, parent, name in
            let fs = FuseFilesystem.from(req)
            guard let name = decodeName(name) else { return reply(req, error: .illegalSequence) }
            do throws(Errno) {
                try fs.operations.rmdir(parent: parent, name: name)
                fuse_reply_err(req, 0)
            } catch {
                reply(req, error: error)
            }
        }
    }

    /// Smallest kernel dirent (24-byte header + a short name, 8-byte aligned): the most entries
    /// a buffer of `size` bytes can take, so the facade is never asked for far more than fits.
    private static let smallestDirent = 32
    private static let smallestDirentPlus = 160

    fileprivate static func fill(_ req: fuse_req_t?, ino: fuse_ino_t, size: Int, offset: off_t, handle: UInt64, plus: Bool) {
        let fs = FuseFilesystem.from(req)
        let limit = max(1, size / (plus ? smallestDirentPlus : smallestDirent))
        let entries: [DirectoryEntry]
        do throws(Errno) {
            entries = try fs.operations.readDirectory(ino, handle: handle, offset: Int(offset), limit: limit)
        } catch {
            return reply(req, error: error)
        }
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: max(size, 1))
        defer { buffer.deallocate() }
        var used = 0
        var counted: [InodeNumber] = []
        for entry in entries {
            let added: Int = entry.name.withCString { cName in
                let remaining = size - used
                if plus {
                    let needed = fuse_add_direntry_plus(req, nil, 0, cName, nil, 0)
                    guard needed <= remaining else { return 0 }
                    var e: fuse_entry_param
                    if entry.name == "." || entry.name == ".." {
                        e = fuse_entry_param()
                        e.attr = fs.stat(of: entry.attributes)
                    } else {
                        // The facade's lookup is what counts this entry for forget.
                        guard let looked = try? fs.operations.lookup(parent: ino, name: entry.name) else {
                            // Vanished between listing and lookup: skip it, keep going.
                            return -1
                        }
                        e = fs.entryParam(looked)
                        counted.append(looked.attributes.ino)
                    }
                    return fuse_add_direntry_plus(req, buffer + used, remaining, cName, &e, off_t(entry.nextOffset))
                } else {
                    var st = fs.stat(of: entry.attributes)
                    let needed = fuse_add_direntry(req, nil, 0, cName, nil, 0)
                    guard needed <= remaining else { return 0 }
                    return fuse_add_direntry(req, buffer + used, remaining, cName, &st, off_t(entry.nextOffset))
                }
            }
            if added == 0 { break }
            if added > 0 { used += added }
        }
        if fuse_reply_buf(req, buffer, used) != 0 {
            // The kernel never saw these entries (the request was interrupted): hand back the
            // lookup counts taken for them, or those inodes could never be forgotten.
            for counted in counted { fs.operations.forget(counted, count: 1) }
        }
    }
}
