/// `dbxfs restore PATH --rev REV` and `dbxfs undelete PATH`: files/restore through the VFS
/// (`VFS.restoreRevision`), so the tree shows the restored revision at once, the write side
/// refuses to restore over bytes it has not uploaded yet, and the kernel forgets the old version.
///
/// Which revisions may be restored: one of the file's own (FileCommandService.revision), so a
/// mistyped rev of another file never puts that file's bytes here.
import DropboxRemote
import Foundation
import VFSCache

extension FileCommandService {
    func restore(_ file: FileRequest, shown: String, mountpoint: String) throws(Failure) -> RestoreReport {
        let vfs = try requireFiles(mountpoint)
        try requireOnline()
        let rev = file.rev ?? ""
        let (wanted, list) = try revision(rev, of: file.path, shown: shown)
        guard !list.isDeleted else {
            throw Failure(message: "\(shown) is deleted: dbxfs undelete brings back its last revision (then restore another one)")
        }
        let current = list.entries.first?.rev
        if current == rev {
            return RestoreReport(path: shown, restoredRev: rev, rev: rev, unchanged: true, size: wanted.size,
                                 contentHash: wanted.contentHash, pid: getpid())
        }
        let entry = try restoring(vfs, file.path, rev: rev, replacing: true, shown: shown, mountpoint: mountpoint)
        return RestoreReport(path: shown, restoredRev: rev, rev: entry.rev ?? "", unchanged: entry.rev == current,
                             size: entry.size, contentHash: entry.contentHash, pid: getpid())
    }

    func undelete(_ file: FileRequest, shown: String, mountpoint: String) throws(Failure) -> RestoreReport {
        let vfs = try requireFiles(mountpoint)
        try requireOnline()
        let list = try revisions(of: file.path, shown: shown, mode: .path, limit: 1,
                                 notFound: "Dropbox has no deleted file at \(shown) (dbxfs trash lists what was deleted in a folder)")
        guard list.isDeleted else {
            throw Failure(message: "\(shown) exists, it is not deleted: to go back to an older version, use dbxfs restore with one of the revisions dbxfs history lists")
        }
        guard let last = list.entries.first else {
            throw Failure(message: "Dropbox keeps no revision of \(shown) to bring back")
        }
        let entry = try restoring(vfs, file.path, rev: last.rev, replacing: false, shown: shown, mountpoint: mountpoint)
        return RestoreReport(path: shown, restoredRev: last.rev, rev: entry.rev ?? "", unchanged: false,
                             size: entry.size, contentHash: entry.contentHash, pid: getpid())
    }

    private func requireFiles(_ mountpoint: String) throws(Failure) -> VFS {
        guard let vfs else { throw Failure(message: "the mount at \(mountpoint) serves no Dropbox files") }
        return vfs
    }

    /// The restore itself: Dropbox's files/restore inside the VFS's restore, then the kernel's
    /// caches. Refusals become sentences.
    private func restoring(_ vfs: VFS, _ path: String, rev: String, replacing: Bool, shown: String,
                           mountpoint: String) throws(Failure) -> RemoteEntry {
        let result: (entry: RemoteEntry, invalidations: [KernelInvalidation])
        var invalidRevision = false
        do throws(RevisionRestoreRefusal) {
            result = try vfs.restoreRevision(at: path, replacing: replacing) { () throws(RemoteError) -> RemoteEntry in
                let restored: FileMetadata
                do throws(DropboxError) {
                    restored = try store.client.restore(path: store.outgoing(path), rev: rev)
                } catch .route(.other(tag: "invalid_revision"), let summary) {
                    invalidRevision = true
                    throw .other(summary)
                } catch {
                    throw store.remoteError(error, shown)
                }
                guard let entry = store.entry(.file(restored)) else {
                    throw .other("\(shown): Dropbox restored the file outside the mount's root")
                }
                return entry
            }
        } catch {
            if invalidRevision {
                throw Failure(message: "Dropbox keeps no revision \(rev) of \(shown) any more (dbxfs history lists the revisions it keeps)")
            }
            throw sentence(error, shown: shown, mountpoint: mountpoint)
        }
        sink.invalidate(result.invalidations)
        logger.info("\(replacing ? "restored" : "undeleted") \(shown): revision \(rev) is current again (now \(result.entry.rev ?? "?"))")
        return result.entry
    }

    private func sentence(_ refusal: RevisionRestoreRefusal, shown: String, mountpoint: String) -> Failure {
        let message: String
        switch refusal {
        case .readOnly:
            message = "the mount at \(mountpoint) is read-only (-o ro), and restoring changes the file on Dropbox: mount it without ro to restore"
        case .localChanges:
            message = "\(shown) has changes written on this mount that are not on Dropbox yet, which would be uploaded over the restored revision: wait for them (dbxfs sync \(mountpoint)) and restore again"
        case .notFound:
            message = "\(shown) does not exist (dbxfs undelete brings back a deleted file)"
        case .isFolder:
            message = "\(shown) is a folder: only files have revisions"
        case .exists:
            message = "\(shown) exists: undelete brings back a deleted file; to go back to an older version, use dbxfs restore"
        case .remote(let error):
            return Self.describe(error)
        case .local(let errno):
            message = "cannot look up \(shown) on the mount: \(errno)"
        }
        return Failure(message: message)
    }
}
