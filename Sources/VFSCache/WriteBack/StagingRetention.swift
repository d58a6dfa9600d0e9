/// Staging files the kernel writes and reads by itself (FUSE passthrough, docs/WRITEBACK.md
/// "Passthrough writes"): the facade names such an open's staging file as the kernel's backing
/// file, and the kernel then requires every later open of that inode, until the last one closes,
/// to use the same file. So the engine must not swap the file for a new one under those opens: a
/// commit that lands while any is left keeps the staging file (without a journal row: its bytes
/// are on Dropbox), the next write of the path reuses it, and it goes with the last such open.
///
/// While such opens are left, the file's disk writeback is started behind the kernel's writes
/// (StagingWriteback.swift), so the fdatasync at close waits for the tail only.
///
/// Also the staging budget: how many bytes may wait for their upload before new opens for
/// writing stop being handed to the kernel (and go through the daemon, which the upload paces).
import Foundation

extension WriteBackEngine {
    /// An open the kernel serves from `file`, `path`'s staging file, began. False if that is not
    /// `path`'s staging file (any more): the facade then serves the open itself.
    public func retainStaging(path: String, file: StagingFile) -> Bool {
        condition.lock(); defer { condition.unlock() }
        guard let dirty = files[Self.key(path)], dirty.file === file else { return false }
        dirty.kernelOpens += 1
        stagingWriteback.watch(file)
        return true
    }

    /// An open counted by `retainStaging` ended (`file`: its staging file, whatever the path is
    /// now). The last one lets a file committed meanwhile go, and announces that commit again so
    /// the facade shows the file as on Dropbox.
    public func releaseStaging(_ file: StagingFile) {
        condition.lock(); defer { condition.unlock() }
        // Also for a file the engine dropped meanwhile (a conflict): the kernel may still write it.
        stagingWriteback.unwatch(file)
        guard let (key, dirty) = files.first(where: { $0.value.file === file }) else { return }
        dirty.kernelOpens = max(0, dirty.kernelOpens - 1)
        guard dirty.kernelOpens == 0, !dirty.writing, dirty.record == nil, dirty.closeFailure == nil,
              let commit = dirty.retainedCommit else { return }
        files[key] = nil
        stagingArea.remove(name: file.name)
        emit(.committed(path: dirty.path, generation: commit.generation, entry: commit.entry))
    }

    /// Bytes closed or being written that Dropbox does not have yet (for the staging budget).
    public var bytesNotUploaded: UInt64 {
        condition.lock(); defer { condition.unlock() }
        return files.values.reduce(0) { sum, dirty in
            guard dirty.writing || dirty.record != nil || dirty.closeFailure != nil else { return sum }
            let size = dirty.writing ? (try? dirty.file.size()) ?? 0 : dirty.record?.size ?? 0
            let sent = dirty.active?.done.load(ordering: .relaxed) ?? 0
            return sum + (size > sent ? size - sent : 0)
        }
    }
}
