/// Starts the disk writeback of staging files the kernel writes by itself (FUSE passthrough,
/// docs/WRITEBACK.md "Passthrough writes") while it writes them, so the fdatasync of the close
/// (our durability contract) waits only for the tail instead of the whole file: 1 GiB left in the
/// page cache took 0.6-0.8 s to fdatasync on this machine's disk, against 0.04-0.1 s when its
/// writeback had been started behind the writer (docs/BENCHMARKS.md "Writes").
///
/// One thread for every watched file, running only while any is watched: every `interval` it
/// reads each file's size (fstat) and, once `threshold` bytes were added since the last start,
/// starts the writeback of those bytes (sync_file_range, never waiting). The daemon sees nothing
/// of the kernel's writes, so growth is all it can go by.
///
/// The same look tells the engine how far such a file has settled, so it can upload a file the
/// kernel writes while it is written (StreamingUpload.swift, "kernel streams"): the bytes below the
/// size seen `settle` seconds earlier, if the file grew since, but by less than `maxRate` a second
/// (a file set to its final size first and filled in afterwards never settles). A fast writer
/// (`cp` writes 1 GiB in about a second) is left alone: it is done soon, and sharing the CPU with
/// its own upload made its `cp` return up to twice as late on 2 cores, the upload no sooner
/// (docs/BENCHMARKS.md, "Uploading while the kernel writes"). A slower writer's file (a recording,
/// a download, a backup) is mostly on Dropbox by its close.
import Foundation
import Synchronization

final class StagingWriteback: Sendable {
    private struct Watched {
        let file: StagingFile
        /// Opens the kernel serves from the file (watch minus unwatch).
        var opens: Int
        /// Where the next start begins: every byte below was handed to the disk.
        var startedUpTo: UInt64
        /// The looks of the last `settle` seconds (and the newest older one), and the settled
        /// prefix reported so far.
        var looks: [(at: TimeInterval, size: UInt64)] = []
        var settled: UInt64 = 0
    }

    private struct State {
        var watched: [ObjectIdentifier: Watched] = [:]
        var threadRunning = false
        /// Bytes whose writeback was started, and how many starts (for tests and the log).
        var bytesStarted: UInt64 = 0
        var starts = 0
    }

    private let interval: TimeInterval
    private let threshold: UInt64
    private let settle: TimeInterval
    private let maxRate: Double
    private let state = Mutex(State())
    /// Told each time a watched file grew or shrank: (file, settled prefix, size). Set once by the
    /// engine, before anything is watched.
    private let growth = Mutex<(@Sendable (StagingFile, UInt64, UInt64) -> Void)?>(nil)

    /// - Parameters:
    ///   - interval: how often a watched file's size is read (seconds).
    ///   - threshold: bytes added before their writeback is started (0: never start; the files are
    ///     then watched only for `onGrowth`, if it was set).
    ///   - settle: how long bytes must have been there, in a file still growing, to count as
    ///     settled for `onGrowth`.
    ///   - maxRate: a file growing faster than this (bytes a second, over `settle`) settles nothing.
    init(interval: TimeInterval, threshold: UInt64, settle: TimeInterval = 1, maxRate: UInt64 = .max) {
        self.interval = interval
        self.threshold = threshold
        self.settle = settle
        self.maxRate = Double(maxRate)
    }

    /// Sets who hears of a watched file's growth (see the top of the file).
    func onGrowth(_ handler: @escaping @Sendable (_ file: StagingFile, _ settled: UInt64, _ size: UInt64) -> Void) {
        growth.withLock { $0 = handler }
    }

    /// An open the kernel serves from `file` began: watch it until the matching `unwatch`.
    func watch(_ file: StagingFile) {
        guard threshold > 0 || growth.withLock({ $0 != nil }) else { return }
        let startThread = state.withLock { state -> Bool in
            state.watched[ObjectIdentifier(file), default: Watched(file: file, opens: 0, startedUpTo: 0)].opens += 1
            guard !state.threadRunning else { return false }
            state.threadRunning = true
            return true
        }
        guard startThread else { return }
        let thread = Thread { [self] in self.run() }
        thread.name = "dbxfs-writeback-start"
        thread.start()
    }

    /// An open counted by `watch` ended; the last one stops the watching (the close's fdatasync
    /// does the rest).
    func unwatch(_ file: StagingFile) {
        state.withLock { state in
            let key = ObjectIdentifier(file)
            guard var watched = state.watched[key] else { return }
            watched.opens -= 1
            state.watched[key] = watched.opens > 0 ? watched : nil
        }
    }

    func isWatching(_ file: StagingFile) -> Bool {
        state.withLock { $0.watched[ObjectIdentifier(file)] != nil }
    }

    /// Bytes whose writeback was started so far, and in how many calls.
    var started: (bytes: UInt64, starts: Int) {
        state.withLock { ($0.bytesStarted, $0.starts) }
    }

    /// Whether the thread runs (it ends soon after the last file stops being watched).
    var threadRunning: Bool { state.withLock { $0.threadRunning } }

    private func run() {
        while true {
            Thread.sleep(forTimeInterval: interval)
            let files = state.withLock { state -> [StagingFile]? in
                if state.watched.isEmpty {
                    state.threadRunning = false
                    return nil
                }
                return state.watched.values.map(\.file)
            }
            guard let files else { return }
            for file in files { startIfGrown(file) }
        }
    }

    private func startIfGrown(_ file: StagingFile) {
        guard let size = try? file.size() else { return }
        let key = ObjectIdentifier(file)
        let look = state.withLock { state -> (range: (from: UInt64, count: UInt64)?, settled: UInt64?) in
            guard var watched = state.watched[key] else { return (nil, nil) }
            defer { state.watched[key] = watched }
            var settled: UInt64?
            let now = ProcessInfo.processInfo.systemUptime
            if let last = watched.looks.last, size < last.size {
                // Shrunk: the writer went back; what was there before counts for nothing.
                watched.looks.removeAll()
                watched.settled = min(watched.settled, size)
                settled = watched.settled
            }
            watched.looks.append((now, size))
            while watched.looks.count >= 2, now - watched.looks[1].at >= settle { watched.looks.removeFirst() }
            if let old = watched.looks.first, now - old.at >= settle, size > old.size, old.size > watched.settled,
               Double(size - old.size) <= maxRate * (now - old.at) {
                watched.settled = old.size
                settled = old.size
            }
            // Truncated meanwhile: what is left below the new size was started already.
            let from = min(watched.startedUpTo, size)
            watched.startedUpTo = from
            guard threshold > 0, size - from >= threshold else { return (nil, settled) }
            watched.startedUpTo = size
            state.bytesStarted += size - from
            state.starts += 1
            return ((from, size - from), settled)
        }
        if let range = look.range { file.startWriteback(from: range.from, count: range.count) }
        if let settled = look.settled, let handler = growth.withLock({ $0 }) { handler(file, settled, size) }
    }
}
