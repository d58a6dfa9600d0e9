/// `ExportedFiles`: the content of files Dropbox cannot download (Paper docs, Google Docs, `.web`
/// shortcuts: `RemoteEntry.Flags.exportOnly`), as `RemoteStore.export` gives it, cached by file id
/// and rev.
///
/// Why a cache of its own: such a file's listed size is not the size of its export, and the
/// mount promises never to show a wrong size (docs/SEMANTICS.md, "Files Dropbox cannot
/// download"). So the first stat of each revision exports it, and the read that follows (cp, cat,
/// grep) must not export it again. Exports are documents, small next to the files the block
/// store streams, so they live in memory whole, up to `budget` bytes (least recently used go
/// first); sizes are kept after their bytes are dropped, so a later stat costs nothing.
/// Concurrent askers of one revision share one export (`SingleFlight`).
import Foundation
import Synchronization

final class ExportedFiles: Sendable {
    private struct Cached {
        var data: [UInt8]?
        var size: UInt64
        var lastUse: UInt64
    }

    private struct State {
        var entries: [String: Cached] = [:]
        var bytes = 0
        var tick: UInt64 = 0
    }

    private let state = Mutex(State())
    private let flights = SingleFlight<String, [UInt8]>()
    private let remote: any RemoteStore
    private let budget: Int
    private let log: Logger

    init(remote: any RemoteStore, budget: Int = 64 << 20, log: Logger) {
        self.remote = remote
        self.budget = budget
        self.log = log
    }

    private static func key(_ id: String, _ rev: String) -> String { id + "\n" + rev }

    /// The export's size, if this revision was exported before.
    func knownSize(id: String, rev: String) -> UInt64? {
        state.withLock { $0.entries[Self.key(id, rev)]?.size }
    }

    /// The export's size, exporting it now if it never was (the bytes stay cached for the read
    /// that usually follows a stat).
    func size(id: String, rev: String, path: String) throws(Errno) -> UInt64 {
        if let size = knownSize(id: id, rev: rev) { return size }
        return UInt64(try content(id: id, rev: rev, path: path).count)
    }

    /// The export's bytes for this revision of the file `id` (`path` names it in log lines).
    func content(id: String, rev: String, path: String) throws(Errno) -> [UInt8] {
        let key = Self.key(id, rev)
        let cached: [UInt8]? = state.withLock { s in
            guard var entry = s.entries[key], let data = entry.data else { return nil }
            s.tick += 1
            entry.lastUse = s.tick
            s.entries[key] = entry
            return data
        }
        if let cached { return cached }
        return try flights.run(key) { () throws(Errno) -> [UInt8] in
            let exported: ExportedFile
            do throws(RemoteError) {
                exported = try remote.export(path: id)
            } catch {
                log.warning("cannot export \(path) (a file Dropbox only exports): \(error)")
                throw Errno(error) == .noEntry ? .noEntry : .io
            }
            if exported.rev != rev {
                // Changed on Dropbox since we listed it: these bytes belong to the newer rev,
                // which the change feed brings; serve them, but remember them under their own rev.
                log.debug("export of \(path): listed rev \(rev), exported rev \(exported.rev)")
            }
            store(exported.data, key: Self.key(id, exported.rev))
            if exported.rev != rev { store(exported.data, key: key) }
            return exported.data
        }
    }

    private func store(_ data: [UInt8], key: String) {
        state.withLock { s in
            s.tick += 1
            if let old = s.entries[key]?.data { s.bytes -= old.count }
            s.entries[key] = Cached(data: data, size: UInt64(data.count), lastUse: s.tick)
            s.bytes += data.count
            // Over budget: drop the least recently used bytes (never the ones just stored).
            while s.bytes > budget {
                guard let victim = s.entries.filter({ $0.key != key && $0.value.data != nil })
                        .min(by: { $0.value.lastUse < $1.value.lastUse }) else { break }
                s.bytes -= victim.value.data?.count ?? 0
                s.entries[victim.key]?.data = nil
            }
        }
    }
}
