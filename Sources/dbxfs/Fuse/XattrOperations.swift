/// FUSE extended-attribute operations. The facade exposes read-only `user.dropbox.*` attributes
/// (content_hash, rev, id); setting or removing any attribute answers ENOTSUP, which `cp -a` and
/// `rsync -X` treat as "this filesystem has no xattrs" rather than as a failure.
import CFuse
import Foundation
import VFSCache

enum XattrOperations {
    static func install(into ops: inout fuse_lowlevel_ops) {
        ops.getxattr = { req, ino, name, size in
            let fs = FuseFilesystem.from(req)
            guard let name = decodeName(name) else { return reply(req, error: .noData) }
            do throws(Errno) {
                let value = try fs.operations.getxattr(ino, name: name)
                XattrOperations.replyXattr(req, value, size: size)
            } catch {
                reply(req, error: error)
            }
        }
        ops.listxattr = { req, ino, size in
            let fs = FuseFilesystem.from(req)
            do throws(Errno) {
                var list: [UInt8] = []
                for name in try fs.operations.listxattr(ino) {
                    list.append(contentsOf: Array(name.utf8))
                    list.append(0)
                }
                XattrOperations.replyXattr(req, list, size: size)
            } catch {
                reply(req, error: error)
            }
        }
        ops.setxattr = { req, _, _, _, _, _ in reply(req, error: .notSupported) }
        ops.removexattr = { req, _, _ in reply(req, error: .notSupported) }
    }

    /// The xattr size protocol: size 0 asks for the length, a short buffer is ERANGE.
    fileprivate static func replyXattr(_ req: fuse_req_t?, _ value: [UInt8], size: Int) {
        if size == 0 {
            fuse_reply_xattr(req, value.count)
        } else if value.count > size {
            reply(req, error: .range)
        } else {
            value.withUnsafeBufferPointer { buffer in
                buffer.withMemoryRebound(to: CChar.self) { _ = fuse_reply_buf(req, $0.baseAddress, $0.count) }
            }
        }
    }
}
