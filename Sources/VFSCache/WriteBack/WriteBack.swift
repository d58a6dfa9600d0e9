/// `WriteBackEngine`: the write side of the cache. Files written through the mount live in staging
/// files; on close they are journaled durably and queued; worker threads upload them to Dropbox
/// (one `upload` for a lone small file, `finishBatch` for bursts, a concurrent session for large
/// files) and drop the staging file only once the commit is confirmed with the right content hash.
///
/// The facade calls, per dirty file (paths relative to the mount root, display case):
///   `beginWrite` before the first modification of an open → a `StagingFile` to write and read;
///   `close` when the last writer closes → a generation number; close never waits for the network;
///   `waitUntilCommitted` for fsync; `remove`/`rename` around its own remote namespace calls;
///   `waitForAll` for `dbxfs sync` and unmount; `status` for `dbxfs status`.
/// It learns of commits and conflicted copies through `onEvent`.
///
/// This file holds the public API, the shared state and the dispatcher; the transfers are in
/// SmallFileUploads.swift and LargeFileUploads.swift, the outcome handling in CommitOutcome.swift.
/// All mutable state is guarded by `condition`; worker threads never hold it across a remote call.
import Foundation
import Synchronization

public final class WriteBackEngine: @unchecked Sendable {
    // @unchecked: every `var` below is only read or written with `condition` held; the `let`s
    // are Sendable or internally synchronised (SQLiteDatabase, pools, Atomic).
    public let configuration: WriteBackConfiguration
    public let stagingArea: StagingArea
    let remote: any RemoteStore
    let journal: UploadJournal
    let onEvent: @Sendable (WriteBackEvent) -> Void
    let eventQueue = DispatchQueue(label: "dbxfs.writeback.events")
    let jobPool: WorkerPool
    let chunkPool: WorkerPool
    /// Mirrors `stopped` for progress callbacks, which run without the lock.
    let stopFlag = Atomic<Bool>(false)
    /// Bytes read to hash at commit time (for tests and benchmarks: with the prefix hashed while
    /// the file was written, only the tail should be).
    let bytesHashedAtCommit = Atomic<UInt64>(0)
    /// Sessions kernel streams filled while a file was written (StreamingUpload.swift): used at
    /// the upload after close, or dropped there because the file had changed under them.
    let streamedSessionsUsed = Atomic<Int>(0)
    let streamedSessionsDropped = Atomic<Int>(0)
    /// Bytes Dropbox confirmed receiving, over all transfers (only grows): `dbxfs status` derives
    /// the upload rate from it.
    let bytesSent = Atomic<UInt64>(0)
    /// The staging budget's memory between writes (StagingBudget.swift).
    let backPressure = StagingBackPressure()

    let condition = NSCondition()
    /// Starts the writeback of staging files the kernel writes (lock order: `condition`, then its
    /// own lock; its thread never takes `condition`).
    let stagingWriteback: StagingWriteback
    var files: [String: DirtyFile] = [:]
    /// Path keys held by a `remove`/`rename` in progress (each covers its subtree).
    var heldKeys: [String] = []
    var window: BatchWindow?
    var pausedUntil = Date.distantPast
    var offline = false
    var generationCounter: UInt64
    var stopped = false
    /// Set by `stopAbruptly`: the engine behaves as if the process died (no more journal writes).
    var dead = false
    var activeLargeUploads = 0
    /// Files closed up to this generation are waited for by `dbxfs sync`: no gathering.
    var urgentThrough: UInt64 = 0
    /// No fsync or sync waits past this (set when the daemon starts to stop).
    var waitersDeadline = Date.distantFuture
    /// Some close could not be journaled (FailedCloses.swift); cleared once a pass finds none.
    var closesToRetry = false
    var recentErrors: [UploadErrorReport] = []
    /// Per path key, the revs our own commits moved a base to, so a facade whose metadata has not
    /// yet caught up with a commit event doesn't conflict with our own upload.
    var revisionsAfterCommit: [String: [(from: WriteBase, to: String)]] = [:]
    /// Path keys whose bytes were just committed as a conflicted copy, until the facade shows it
    /// (`conflictShown`, StagingRetention.swift), with the generation committed.
    var conflictsNotShown: [String: UInt64] = [:]
    /// Namespace operations not done on Dropbox yet, oldest first (NamespaceQueue.swift), and the
    /// path keys they touch (uploads there wait for them).
    var namespaceOperations: [NamespaceOperation] = []
    var namespaceKeys = PathOverlapSet()
    /// While a namespace batch gathers: when it closes at the earliest, and the `urgentThrough`
    /// it was gathered under (NamespaceDispatcher.swift, "Gathering").
    var namespaceGathering: (until: Date, urgentThrough: UInt64)?
    /// Operations read back from the journal wait until the facade showed them on the mount
    /// (`holdRecoveredNamespaceOperations`, `releaseRecoveredNamespaceOperations`).
    var namespaceHeld = false
    /// Operations Dropbox would not take, for `dbxfs sync` to report once (through this sequence).
    var undoneOperations: [UndoneOperation] = []
    var undoneReportedThrough: UInt64 = 0
    /// Runs the checks before a delete batch in parallel (NamespaceDispatcher.swift).
    let namespacePool: WorkerPool

    /// Opens (or creates) the journal and staging area in `cacheDirectory` and resumes every
    /// journaled upload. Staging files no journal row refers to are deleted (a crash while a file
    /// was open but never closed: the application never saw its close succeed).
    public init(cacheDirectory: URL, remote: any RemoteStore, configuration: WriteBackConfiguration = WriteBackConfiguration(),
                onEvent: @escaping @Sendable (WriteBackEvent) -> Void = { _ in }) throws(Errno) {
        var configuration = configuration
        stagingWriteback = StagingWriteback(interval: configuration.kernelWritebackInterval,
                                            threshold: configuration.kernelWritebackThreshold,
                                            settle: configuration.kernelStreamSettle,
                                            maxRate: configuration.kernelStreamMaxRate)
        let block = UInt64(DropboxChunkRules.blockSize)
        configuration.chunkSize = max(block, (configuration.chunkSize + block - 1) / block * block)
        configuration.largeFileThreshold = max(configuration.largeFileThreshold, 1)
        configuration.maxBatchEntries = min(max(configuration.maxBatchEntries, 1), 1000)
        self.configuration = configuration
        if let logger = configuration.logger { WriteBackLog.use(logger) }
        self.remote = remote
        self.onEvent = onEvent
        do {
            try FileManager.default.createDirectory(at: cacheDirectory, withIntermediateDirectories: true)
        } catch {
            throw Errno.io
        }
        stagingArea = try StagingArea(cacheDirectory: cacheDirectory)
        let records: [UploadRecord]
        let operations: [NamespaceOperation]
        do {
            journal = try UploadJournal(cacheDirectory: cacheDirectory)
            records = try journal.allRecords()
            operations = try journal.allNamespaceOperations()
            generationCounter = try journal.lastGeneration()
        } catch {
            WriteBackLog.error("cannot open the upload journal in \(cacheDirectory.path): \(error)")
            throw Errno(error)
        }
        jobPool = WorkerPool(name: "dbxfs-upload", threads: configuration.uploadThreads)
        chunkPool = WorkerPool(name: "dbxfs-chunk",
                               threads: configuration.chunksInFlight * configuration.maxConcurrentLargeUploads)
        namespacePool = WorkerPool(name: "dbxfs-namespace", threads: 8)
        recover(records)
        for operation in operations {
            enqueue(operation)
            WriteBackLog.info("resuming \(operation.summary) (not done on Dropbox yet)")
        }
        namespaceHeld = configuration.holdRecoveredNamespaceOperations && !operations.isEmpty
        if configuration.streamKernelWrites {
            stagingWriteback.onGrowth { [weak self] file, settled, size in self?.noteKernelGrowth(file, settled: settled, size: size) }
        }
        // A case-only rename that stopped halfway (CaseOnlyRename.swift) is finished in the
        // background: it needs the network, and the mount must not wait for it.
        if (try? journal.database.query("SELECT 1 FROM case_renames LIMIT 1").isEmpty) == false {
            Thread { [self] in self.resumeCaseRenames() }.start()
        }
        let dispatcher = Thread { [self] in self.dispatchLoop() }
        dispatcher.name = "dbxfs-writeback"
        dispatcher.start()
        let namespaceDispatcher = Thread { [self] in self.namespaceLoop() }
        namespaceDispatcher.name = "dbxfs-namespace"
        namespaceDispatcher.start()
    }

    // MARK: Writing

    /// The staging file to write `path` into, before its first modification since the last close.
    /// A file already dirty keeps its staging file (and its journaled base); any upload of it in
    /// progress is cancelled, since its bytes are about to change. `base` is the rev the facade
    /// opened (`.newFile` for a create), used only for a file not yet dirty.
    /// For an existing file without O_TRUNC the facade fills the new staging file with the old
    /// content before writing.
    ///
    /// `stillCurrent` (run with the engine's lock held: lock order engine, then the facade's
    /// metadata) tells whether the caller's tree still shows the file at `path`; if not, or if a
    /// rename or unlink of the path is under way (`holding`: its bytes may have moved to the new
    /// name already while the tree still shows this one), nothing is begun and EAGAIN is thrown:
    /// the caller asks again with the path its tree shows once the change is shown
    /// (`waitUntilNotHeld`). A file begun at the old name would take the write away from the
    /// moved bytes, and never be closed (the facade's prepareWrite). `stillCurrent` runs last, once
    /// nothing else can fail, so the facade may mark the file as holding local bytes in it.
    public func beginWrite(path: String, base: WriteBase, stillCurrent: (() -> Bool)? = nil) throws(Errno) -> StagingFile {
        let key = Self.key(path)
        condition.lock(); defer { condition.unlock() }
        guard !stopped else { throw Errno.readOnly }
        if let dirty = files[key] {
            guard stillCurrent?() != false else { throw Errno.again }
            if !dirty.writing, let stream = dirty.streaming {
                stream.cancelled.store(true, ordering: .relaxed)
                if !stream.busy { dirty.streaming = nil }
            }
            if !dirty.writing { dirty.dropPrefixHash() }
            dirty.writing = true
            dirty.retainedCommit = nil   // new bytes: no longer just the commit's
            dirty.hardError = nil
            dirty.closeFailure = nil
            dirty.active?.cancelled.store(true, ordering: .relaxed)
            return dirty.file
        }
        if isHeld(key) { throw Errno.again }
        let file = try stagingArea.create()
        guard stillCurrent?() != false else {
            stagingArea.remove(name: file.name)
            throw Errno.again
        }
        files[key] = DirtyFile(path: path, file: file, base: translate(base, key: key))
        return file
    }

    /// Waits (up to `timeout`) until no rename or unlink in progress holds `path`: then the
    /// facade's tree shows where the path's bytes went (see `beginWrite`).
    public func waitUntilNotHeld(path: String, timeout: TimeInterval = 30) {
        let key = Self.key(path)
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock(); defer { condition.unlock() }
        while isHeld(key), !stopped, condition.wait(until: deadline) {}
    }

    /// The staging file of a dirty file, for read-your-writes; nil if `path` has no local changes.
    public func stagingFile(path: String) -> StagingFile? {
        condition.lock(); defer { condition.unlock() }
        return files[Self.key(path)]?.file
    }

    /// The last close: fsyncs the staging file, records it durably in the journal and queues the
    /// upload. Returns the generation to pass to `waitUntilCommitted`. Never waits for the network.
    /// `clientModified` is the file's mtime (nil: now). Throws `.noSpace` if the disk is full:
    /// the file is then closed all the same, held and retried (FailedCloses.swift).
    ///
    /// `durable: false` is for fsync, which then waits until the bytes are on Dropbox: their
    /// durability comes from Dropbox, so the staging file and the journal row are not flushed to
    /// disk (three disk flushes saved per fsync; they survive the process being killed, not a
    /// power cut, and an fsync that fails makes them durable with `makeDurable`).
    @discardableResult
    ///
    /// `staging`: the staging file the caller wrote. A rename from another thread may have moved
    /// it to another path already while the caller's tree still shows `path`; it is found wherever
    /// it is (without it, such a close failed with EBADF and its bytes were never uploaded:
    /// `aCloseRacingARenameSucceedsAndItsBytesReachTheNewName`).
    public func close(path: String, staging: StagingFile? = nil, clientModified: Date? = nil, durable: Bool = true) throws(Errno) -> UInt64 {
        condition.lock()
        let dirty = dirtyFile(path: path, staging: staging)
        condition.unlock()
        guard let dirty else { throw Errno.badFile }
        return try journalClose(dirty, clientModified: clientModified, durable: durable)
    }

    /// The work of a close (or of its retry after a failure): fsync, then the journal row.
    func journalClose(_ dirty: DirtyFile, clientModified: Date?, retrying: Bool = false, durable: Bool = true) throws(Errno) -> UInt64 {
        let file = dirty.file
        condition.lock()
        let firstClose = dirty.record == nil
        condition.unlock()
        // The fsync runs without the lock, so uploads and other closes go on meanwhile.
        let size: UInt64
        do throws(Errno) {
            size = try file.size()
            if durable { try file.sync() }
        } catch {
            condition.lock(); defer { condition.unlock() }
            noteCloseFailure(dirty, error, clientModified: clientModified, retrying: retrying)
            throw error
        }
        // A new staging file's name must survive a power cut too, not only its bytes.
        if durable && firstClose { stagingArea.syncDirectory() }
        condition.lock(); defer { condition.unlock() }
        let key = Self.key(dirty.path)
        guard files[key] === dirty else { throw Errno.badFile }
        guard !dead else { throw Errno.io }
        // A retry finds the close journaled meanwhile, or the file written again: nothing to do.
        if retrying && (dirty.closeFailure == nil || dirty.writing) { return dirty.record?.generation ?? 0 }
        dirty.active?.cancelled.store(true, ordering: .relaxed)
        let generation = generationCounter + 1
        var record = dirty.record ?? UploadRecord(pathKey: key, path: dirty.path, staging: dirty.file.name, base: dirty.newBase,
                                                  size: 0, generation: 0, state: .pending)
        record.size = size
        record.generation = generation
        record.clientModified = clientModified ?? Date()
        record.contentHash = nil
        record.state = .pending
        record.sessionID = nil
        record.sessionConcurrent = false
        record.sessionClosed = false
        record.lastError = nil
        record.attempts = 0
        let streamedSession = handOverStreaming(dirty, record: &record)
        if !durable { dirty.urgentThrough = max(dirty.urgentThrough, generation) }
        do {
            try journal.database.transaction(durable: durable) {
                try journal.forgetChunks(staging: record.staging, keepingSession: streamedSession)
                try journal.save(record)
                try journal.saveGeneration(generation)
            }
        } catch {
            let failure = (error as? SQLiteError).map { Errno($0) } ?? .io
            WriteBackLog.error("cannot journal \(dirty.path): \(error)")
            noteCloseFailure(dirty, failure, clientModified: clientModified, retrying: retrying)
            throw failure
        }
        generationCounter = generation
        dirty.record = record
        dirty.writing = false
        if dirty.closedSince == nil { dirty.closedSince = Date() }
        dirty.notBefore = .distantPast
        dirty.hardError = nil
        dirty.closeFailure = nil
        dirty.verifyContent = false
        condition.broadcast()
        return generation
    }

    // MARK: Namespace changes

    /// Unlink of `path` (or rmdir of a folder holding dirty files): cancels its uploads, waits
    /// until none is in flight, drops the journal rows, runs `remoteRemove` (the facade's remote
    /// delete, if the file exists there) and then deletes the staging files. If `remoteRemove`
    /// throws, the rows are restored and the uploads resume. The rows go first so that a crash
    /// in between can at worst undo the unlink (the remote keeps its old version), never upload
    /// the removed bytes again.
    public func remove(path: String, whileHeld remoteRemove: () throws(Errno) -> Void) throws(Errno) {
        let key = Self.key(path)
        try holding([key]) { () throws(Errno) in
            condition.lock()
            let doomed = keysUnder(key).compactMap { key in files[key] }
            let rows = doomed.compactMap(\.record)
            do throws(Errno) { try rewriteJournal(deleting: rows.map(\.pathKey), saving: []) } catch { condition.unlock(); throw error }
            condition.unlock()
            do throws(Errno) { try remoteRemove() } catch {
                condition.lock(); defer { condition.unlock() }
                do { try rewriteJournal(deleting: [], saving: rows) } catch { WriteBackLog.error("cannot restore journal rows: \(error)") }
                throw error
            }
            condition.lock(); defer { condition.unlock() }
            discard(doomed)
            // Our earlier commits at these paths say nothing about a file made there later.
            forgetOwnRevisions(under: key)
        }
    }

    /// Rename of a file or folder: cancels uploads under both paths, waits until none is in
    /// flight, moves the journal rows to their new paths, runs `remoteRename` (the facade's remote
    /// move, if the source exists there), then re-queues the files under their new names. A dirty
    /// file replaced at `to` is forgotten. `remoteRename` returns new bases by new path (e.g.
    /// `.revision` of the moved file); a dirty file without one keeps its base. Sessions already
    /// uploaded are kept. If `remoteRename` throws, everything is put back as it was.
    public func rename(from: String, to: String, whileHeld remoteRename: () throws(Errno) -> [String: WriteBase]) throws(Errno) {
        let fromKey = Self.key(from), toKey = Self.key(to)
        try holding(fromKey == toKey ? [fromKey] : [fromKey, toKey]) { () throws(Errno) in
            condition.lock()
            let replaced = fromKey == toKey ? [] : keysUnder(toKey).compactMap { key in files[key] }
            let moves = keysUnder(fromKey).compactMap { key in files[key] }.map { dirty in
                PlannedMove(dirty: dirty, newPath: to + dirty.path.dropFirst(from.count))
            }
            let oldRows = replaced.compactMap(\.record) + moves.compactMap(\.dirty.record)
            let newRows = moves.compactMap(\.newRecord)
            do throws(Errno) { try rewriteJournal(deleting: oldRows.map(\.pathKey), saving: newRows) } catch { condition.unlock(); throw error }
            condition.unlock()
            let bases: [String: WriteBase]
            do throws(Errno) {
                bases = Dictionary(try remoteRename().map { (Self.key($0.key), $0.value) }, uniquingKeysWith: { $1 })
            } catch {
                condition.lock(); defer { condition.unlock() }
                do { try rewriteJournal(deleting: newRows.map(\.pathKey), saving: oldRows) } catch {
                    WriteBackLog.error("cannot restore journal rows: \(error)")
                }
                throw error
            }
            condition.lock(); defer { condition.unlock() }
            discard(replaced)
            // Our earlier commits follow the files (a move keeps their revs): a facade whose view
            // predates one of them still writes over it, not beside it. What was at `to` is gone.
            if fromKey != toKey {
                forgetOwnRevisions(under: toKey)
                moveOwnRevisions(from: fromKey, to: toKey)
            }
            apply(moves, bases: bases)
        }
    }

    /// After a failed fsync: the bytes of `path` and its journal row reach the disk, as a close
    /// would have made them (the fsync journaled them without flushing).
    public func makeDurable(path: String, staging: StagingFile? = nil) {
        condition.lock()
        let dirty = dirtyFile(path: path, staging: staging)
        condition.unlock()
        guard let dirty else { return }
        do {
            try dirty.file.sync()
            stagingArea.syncDirectory()
            try journal.database.transaction { try journal.saveGeneration(generationCounterSnapshot()) }
        } catch {
            WriteBackLog.error("cannot make the journal of \(path) durable: \(error)")
        }
    }

    private func generationCounterSnapshot() -> UInt64 {
        condition.lock(); defer { condition.unlock() }
        return generationCounter
    }

    /// Runs every event emitted so far (their handlers included) before returning. The facade
    /// calls it inside `remove`/`rename`, once no upload of the paths is in flight and before
    /// its tree changes: a commit event still queued for the old path would otherwise reach the
    /// tree after the node moved away, and leave it without its rev (a self-conflict at the
    /// next write).
    public func deliverPendingEvents() {
        eventQueue.sync {}
    }

    // MARK: Waiting

    /// The hard failure of the latest upload attempt of `path`, or of its last close, if any: for
    /// flush to report (ENOSPC for insufficient space or a full cache disk) while the file stays
    /// staged and is retried. `staging`: the caller's staging file, followed through renames as
    /// in `close`.
    public func failure(path: String, staging: StagingFile? = nil) -> Errno? {
        condition.lock(); defer { condition.unlock() }
        guard let dirty = dirtyFile(path: path, staging: staging) else { return nil }
        if let failure = dirty.closeFailure, !dirty.writing { return failure }
        return dirty.hardError.map { Errno($0) }
    }

    /// For fsync: returns once `generation` of `path` (or a later one) is committed, or the file
    /// was removed; throws if the latest attempt failed hard, or at the timeout.
    ///
    /// `staging`: the staging file the caller wrote (see `close`). The file is followed by
    /// identity while it waits: a rename from another thread moves it to another path, and the
    /// wait used to look the old path up again, find nothing and return as if the bytes were on
    /// Dropbox (`anFsyncWaitingWhileTheFileIsRenamedReturnsOnlyOnceTheBytesAreOnDropbox`).
    public func waitUntilCommitted(path: String, staging: StagingFile? = nil, generation: UInt64,
                                   timeout: TimeInterval) throws(WriteBackError) {
        let requested = Date().addingTimeInterval(timeout)
        condition.lock(); defer { condition.unlock() }
        let tracked = dirtyFile(path: path, staging: staging)
        // Someone waits: no gathering for a batch (an fsync per SQLite transaction would wait
        // out the window every time).
        if let tracked { tracked.urgentThrough = max(tracked.urgentThrough, generation) }
        condition.broadcast()
        while true {
            // Still the engine's (its path follows renames), and these bytes not on Dropbox yet.
            guard let dirty = tracked, files[Self.key(dirty.path)] === dirty, let record = dirty.record,
                  dirty.committedGeneration < generation, record.generation >= generation else { return }
            if let error = dirty.hardError, !dirty.writing { throw .failed(error) }
            if stopped { throw .stopped }
            // Unmounting: the daemon must exit by its drain bound, so no fsync may wait past it.
            if !condition.wait(until: min(requested, waitersDeadline)) {
                if dirty.committedGeneration >= generation || files[Self.key(dirty.path)] !== dirty { return }
                throw .timedOut(lastError: dirty.lastError)
            }
        }
    }

    /// For `dbxfs sync` and unmount: waits until every file closed before the call is committed,
    /// until every one left has failed hard, or until `deadline`. Returns what is left, with why.
    /// A close that could not be journaled counts as left, failed. With `retryingHeld` (sync),
    /// files held after a hard failure are tried again at once instead of at their slow retry, and
    /// count as failed only once that attempt failed: freeing space and syncing is enough.
    /// When everything is committed, the commit events have also reached the facade (the tree
    /// shows the new revs), so what follows a sync, such as a restore, sees the files as on
    /// Dropbox and not as still having local changes.
    public func waitForAll(deadline: Date, retryingHeld: Bool = false) -> [PendingUpload] {
        let left = waitForAllLocked(deadline: deadline, retryingHeld: retryingHeld)
        // Each commit's event was queued under the lock before its commit could be seen here.
        if left.isEmpty { deliverPendingEvents() }
        return left
    }

    private func waitForAllLocked(deadline: Date, retryingHeld: Bool) -> [PendingUpload] {
        condition.lock(); defer { condition.unlock() }
        let target = generationCounter
        // Everything closed so far is waited for: send it without gathering.
        urgentThrough = max(urgentThrough, target)
        // Whoever waits for everything comes after the mount's start-up overlay.
        namespaceHeld = false
        let asked = Date()
        // Closed before the call too, though journaled (with a later generation) only meanwhile.
        let heldCloses = Set(files.values.filter { $0.closeFailure != nil && !$0.writing }.map(ObjectIdentifier.init))
        if retryingHeld {
            for dirty in files.values where dirty.hardError != nil || dirty.closeFailure != nil { dirty.notBefore = .distantPast }
            for index in namespaceOperations.indices where namespaceOperations[index].hardError != nil {
                namespaceOperations[index].notBefore = .distantPast
            }
        }
        condition.broadcast()
        while true {
            let left = files.filter { _, dirty in
                if dirty.closeFailure != nil && !dirty.writing { return true }
                guard let record = dirty.record else { return false }
                let closedBefore = record.generation <= target || heldCloses.contains(ObjectIdentifier(dirty))
                return closedBefore && dirty.committedGeneration < record.generation
            }
            // Namespace operations journaled before the call (NamespaceQueue.swift).
            let leftOperations = namespaceOperations.filter { $0.sequence <= target }
            let stuck = left.values.allSatisfy { dirty in
                (dirty.hardError != nil || dirty.closeFailure != nil) && !dirty.writing && (!retryingHeld || dirty.failedAt >= asked)
            } && leftOperations.allSatisfy { $0.hardError != nil && (!retryingHeld || $0.failedAt >= asked) }
            let done = left.isEmpty && leftOperations.isEmpty
            if done || stuck || stopped || !condition.wait(until: min(deadline, waitersDeadline)) {
                var reports = left.map { report($0.key, $0.value) }.sorted { $0.path < $1.path }
                let queued = Set(leftOperations.map(\.sequence))
                reports += namespaceReports().filter { queued.contains($0.generation) }
                // sync names, once, what Dropbox refused since the last sync.
                if retryingHeld { reports += takeUndone(through: target) }
                return reports
            }
        }
    }

    /// Operations undone through `sequence` not reported yet, as failed `PendingUpload`s (lock held).
    private func takeUndone(through sequence: UInt64) -> [PendingUpload] {
        let reports = undoneOperations.filter { $0.sequence > undoneReportedThrough && $0.sequence <= sequence }.map { undone in
            var report = PendingUpload(path: undone.path, size: 0, generation: undone.sequence, state: .failed,
                                       openForWriting: false, attempts: 0, lastError: "undone: \(undone.reason)")
            report.operation = undone.summary
            return report
        }
        undoneReportedThrough = max(undoneReportedThrough, sequence)
        return reports
    }

    /// Retries now every upload and namespace operation held back by a failure that needs time or
    /// a person (not the refused uploads): the mount learnt the cause is gone (new credentials
    /// after a relink).
    public func retryHeldUploads() {
        condition.lock(); defer { condition.unlock() }
        for dirty in files.values where dirty.hardError != nil && dirty.record?.state != .refused {
            dirty.hardError = nil
            dirty.notBefore = .distantPast
        }
        for index in namespaceOperations.indices where namespaceOperations[index].hardError != nil {
            namespaceOperations[index].notBefore = .distantPast
        }
        condition.broadcast()
    }

    /// Bytes uploaded since the engine started (a counter that only grows).
    public var uploadedBytes: UInt64 { bytesSent.load(ordering: .relaxed) }

    // MARK: Status and shutdown

    public func status() -> WriteBackStatus {
        condition.lock()
        let now = Date()
        var uploads: [PendingUpload] = []
        var transfers: [TransferProgress] = []
        for (key, dirty) in files {
            if dirty.writing {
                // Open for writing: pending with the bytes written so far, and its streamed chunks
                // (if any) as a transfer marked as still being written. Never "all committed".
                var item = report(key, dirty)
                item.size = (try? dirty.file.size()) ?? item.size
                uploads.append(item)
                if let stream = dirty.streaming, !stream.failed, !stream.cancelled.load(ordering: .relaxed) {
                    let elapsed = max(now.timeIntervalSince(stream.startedAt), 0.001)
                    transfers.append(TransferProgress(path: dirty.path, bytesDone: stream.confirmedBytes, bytesTotal: item.size,
                                                      startedAt: stream.startedAt,
                                                      bytesPerSecond: Double(stream.confirmedBytes) / elapsed, writing: true))
                }
                continue
            }
            guard dirty.record != nil || dirty.closeFailure != nil else { continue }
            uploads.append(report(key, dirty))
            if let active = dirty.active {
                let done = active.done.load(ordering: .relaxed)
                let elapsed = max(now.timeIntervalSince(active.startedAt), 0.001)
                transfers.append(TransferProgress(path: dirty.path, bytesDone: done, bytesTotal: active.total,
                                                  startedAt: active.startedAt, bytesPerSecond: Double(done) / elapsed))
            }
        }
        let oldest = files.values.lazy.filter { $0.record != nil || $0.closeFailure != nil }.compactMap(\.closedSince).min()
        let errors = recentErrors
        let isOffline = offline
        let paused = pausedUntil > now ? pausedUntil : nil
        let operations = namespaceReports()
        condition.unlock()
        let conflicts = (try? journal.recentConflicts(limit: 50)) ?? []
        var status = WriteBackStatus(pendingFiles: uploads.count, pendingBytes: uploads.reduce(0) { $0 + $1.size },
                                     transfers: transfers.sorted { $0.path < $1.path }, uploads: uploads.sorted { $0.path < $1.path },
                                     conflicts: conflicts, recentErrors: errors, offline: isOffline, operations: operations)
        status.pausedUntil = paused
        status.writesHeld = backPressure.waitingNow.load(ordering: .relaxed)
        status.oldestPendingSince = oldest
        return status
    }

    /// The daemon is stopping (a signal, an unmount): fsync and sync callers stop waiting at
    /// `deadline` (their uploads go on until the drain ends), so the FUSE loop can end by then.
    public func stopWaiting(by deadline: Date) {
        condition.lock(); defer { condition.unlock() }
        waitersDeadline = min(waitersDeadline, deadline)
        condition.broadcast()
    }

    /// Unmount: drains until `deadline` (if given), then stops the workers. Whatever is left stays
    /// journaled for the next mount, except a close that never could be (`journaled` false), and
    /// is returned (and logged, by name).
    @discardableResult
    public func shutdown(drainUntil deadline: Date?) -> [PendingUpload] {
        if deadline != nil { retryHeldClosesBeforeExit() }
        let left = deadline.map { waitForAll(deadline: $0) } ?? []
        condition.lock()
        stopped = true
        stopFlag.store(true, ordering: .relaxed)
        for dirty in files.values { dirty.active?.cancelled.store(true, ordering: .relaxed) }
        condition.broadcast()
        condition.unlock()
        jobPool.stop(dropQueued: true)
        chunkPool.stop(dropQueued: true)
        // Checks already queued run out (the dispatcher waits for them), and find the engine stopped.
        namespacePool.stop(dropQueued: false)
        for item in left where item.journaled {
            WriteBackLog.warning("not uploaded yet, kept in the journal for the next mount: \(item.operation ?? item.path) (\(item.lastError ?? "pending"))")
        }
        for item in left where !item.journaled {
            WriteBackLog.error("lost: \(item.path) was closed but its close could never be journaled (a full cache disk), so it is not kept for the next mount")
        }
        return left
    }

    /// Stops as if the process had been killed: no drain, and no journal write from now on.
    /// For crash-recovery tests.
    func stopAbruptly() {
        condition.lock()
        dead = true
        condition.unlock()
        _ = shutdown(drainUntil: nil)
    }

    deinit { if !stopped { _ = shutdown(drainUntil: nil) } }

    // MARK: Internals (condition held unless noted)

    static func key(_ path: String) -> String { path.lowercased() }

    /// The dirty file at `path`; or, if `staging` is given and is not that one's, the one
    /// holding `staging`, wherever a rename from another thread moved it while the caller's tree
    /// still showed `path` (see `close`).
    func dirtyFile(path: String, staging: StagingFile?) -> DirtyFile? {
        let atPath = files[Self.key(path)]
        guard let staging, atPath?.file !== staging else { return atPath }
        return dirtyFile(holding: staging)
    }

    /// The dirty file whose staging file is `staging`, whatever its path (one file each).
    func dirtyFile(holding staging: StagingFile) -> DirtyFile? {
        files.values.first { $0.file === staging }
    }

    func isHeld(_ key: String) -> Bool {
        heldKeys.contains { key == $0 || key.hasPrefix($0 + "/") || $0.hasPrefix(key + "/") }
    }

    /// Whether someone waits for this upload (fsync, sync): it is sent without gathering.
    func isUrgent(_ dirty: DirtyFile, generation: UInt64) -> Bool {
        generation <= max(urgentThrough, dirty.urgentThrough)
    }

    /// Drops `revisionsAfterCommit` at and under `key` (lock held).
    func forgetOwnRevisions(under key: String) {
        for stale in revisionsAfterCommit.keys where stale == key || stale.hasPrefix(key + "/") {
            revisionsAfterCommit[stale] = nil
        }
    }

    /// Moves `revisionsAfterCommit` at and under `from` to the same places under `to` (lock held).
    func moveOwnRevisions(from: String, to: String) {
        for old in revisionsAfterCommit.keys where old == from || old.hasPrefix(from + "/") {
            revisionsAfterCommit[to + old.dropFirst(from.count)] = revisionsAfterCommit.removeValue(forKey: old)
        }
    }

    func keysUnder(_ key: String) -> [String] {
        files.keys.filter { $0 == key || $0.hasPrefix(key + "/") }
    }

    /// The base to use for a new dirty file whose facade metadata may predate our own commits.
    func translate(_ base: WriteBase, key: String) -> WriteBase {
        var result = base
        for step in revisionsAfterCommit[key] ?? [] where step.from == result { result = .revision(step.to) }
        return result
    }

    func report(_ key: String, _ dirty: DirtyFile) -> PendingUpload {
        let record = dirty.record
        if let failure = dirty.closeFailure, !dirty.writing {
            return PendingUpload(path: dirty.path, size: (try? dirty.file.size()) ?? record?.size ?? 0,
                                 generation: record?.generation ?? 0, state: .failed, openForWriting: false,
                                 attempts: record?.attempts ?? 0,
                                 lastError: "the close could not be journaled (\(failure), in the cache directory): it is "
                                     + "uploaded once it can be; free space there, or delete the file",
                                 journaled: false)
        }
        let now = Date()
        // When the next attempt may start: after this file's back-off and the pause of all uploads.
        let due = max(dirty.notBefore, pausedUntil)
        var upload = PendingUpload(path: dirty.path, size: record?.size ?? 0, generation: record?.generation ?? 0,
                                   state: record?.state ?? .pending, openForWriting: dirty.writing,
                                   attempts: record?.attempts ?? 0, lastError: record?.lastError)
        if !dirty.writing, dirty.active == nil, due > now, due < .distantFuture { upload.nextAttemptAt = due }
        return upload
    }

    /// Runs `body` (without the lock) while `keys` and their subtrees are held: no upload of them
    /// starts, and none is in flight.
    func holding(_ keys: [String], _ body: () throws(Errno) -> Void) throws(Errno) {
        condition.lock()
        while keys.contains(where: isHeld) { condition.wait() }
        heldKeys.append(contentsOf: keys)
        func busy() -> Bool {
            files.contains { key, dirty in
                guard dirty.active != nil || dirty.streaming?.busy == true else { return false }
                return keys.contains { key == $0 || key.hasPrefix($0 + "/") }
            }
        }
        for (key, dirty) in files where keys.contains(where: { key == $0 || key.hasPrefix($0 + "/") }) {
            dirty.active?.cancelled.store(true, ordering: .relaxed)
            dirty.streaming?.cancelled.store(true, ordering: .relaxed)
        }
        // A window still gathering would hold our jobs until it closes: close it now.
        if let window, window.jobs.contains(where: { job in keys.contains { job.key == $0 || job.key.hasPrefix($0 + "/") } }) {
            seal(window)
        }
        let started = Date()
        var reported = false
        while busy() {
            if !condition.wait(until: Date().addingTimeInterval(5)), !reported, Date().timeIntervalSince(started) > 10 {
                // A request that hangs in the network holds up an unlink or rename: say what we wait for.
                reported = true
                for (key, dirty) in files where dirty.active != nil || dirty.streaming?.busy == true {
                    guard keys.contains(where: { key == $0 || key.hasPrefix($0 + "/") }) else { continue }
                    let active = dirty.active
                    WriteBackLog.warning("still waiting for the upload of \(dirty.path) to stop (generation \(active?.generation ?? 0), large \(active?.large ?? false), cancelled \(active?.cancelled.load(ordering: .relaxed) ?? false), finished \(active?.finished.load(ordering: .relaxed) ?? false), in open window \(window?.jobs.contains { $0.key == key } ?? false), streaming busy \(dirty.streaming?.busy ?? false))")
                }
            }
        }
        condition.unlock()
        defer {
            condition.lock()
            for key in keys { if let index = heldKeys.firstIndex(of: key) { heldKeys.remove(at: index) } }
            condition.broadcast()
            condition.unlock()
        }
        try body()
    }

    /// Deletes rows and saves rows in one durable transaction.
    private func rewriteJournal(deleting keys: [String], saving rows: [UploadRecord]) throws(Errno) {
        guard !keys.isEmpty || !rows.isEmpty else { return }
        do {
            try journal.database.transaction {
                for key in keys { try journal.delete(pathKey: key) }
                for row in rows { try journal.save(row) }
            }
        } catch let error as SQLiteError { throw Errno(error) } catch { throw Errno.io }
    }

    /// Forgets dirty files whose rows are already gone: chunks, staging files, memory.
    func discard(_ doomed: [DirtyFile]) {
        for dirty in doomed {
            let key = Self.key(dirty.path)
            try? journal.forgetChunks(staging: dirty.file.name)
            stagingArea.remove(name: dirty.file.name)
            if files[key] === dirty { files[key] = nil }
            revisionsAfterCommit[key] = nil
        }
        if !doomed.isEmpty { retryFailedClosesSoon() }
        condition.broadcast()
    }

    /// Puts moved dirty files under their new keys, with the bases the facade returned.
    func apply(_ moves: [PlannedMove], bases: [String: WriteBase]) {
        // A committed file let go while the rename's remote call ran has nothing left to move:
        // its staging file is gone or handed over, and it must not come back under the new name.
        let moves = moves.filter { !$0.dirty.letGo }
        for move in moves {
            let oldKey = Self.key(move.dirty.path)
            if files[oldKey] === move.dirty { files[oldKey] = nil }
        }
        for move in moves {
            let newKey = Self.key(move.newPath)
            let dirty = move.dirty
            dirty.path = move.newPath
            dirty.record = move.newRecord
            dirty.notBefore = .distantPast
            dirty.hardError = nil
            if let base = bases[newKey] {
                if dirty.record != nil {
                    dirty.record!.base = base
                    do { try journal.save(dirty.record!) } catch { WriteBackLog.error("cannot update the journal for \(move.newPath): \(error)") }
                } else {
                    dirty.newBase = base
                }
            }
            files[newKey] = dirty
        }
        condition.broadcast()
    }

    /// Loads journaled rows at start-up and sweeps orphaned staging files.
    private func recover(_ records: [UploadRecord]) {
        var referenced = Set<String>()
        for var record in records {
            guard let file = try? stagingArea.open(name: record.staging) else {
                // The bytes are gone (someone deleted the cache's staging folder): nothing left to
                // upload. Say so loudly rather than keep a row that can never complete.
                WriteBackLog.error("staging file \(record.staging) of \(record.path) is missing: its pending upload cannot be resumed")
                try? journal.delete(pathKey: record.pathKey)
                continue
            }
            referenced.insert(record.staging)
            if let size = try? file.size(), size != record.size {
                // Crashed while the file was being rewritten: upload what is on disk now.
                record.size = size
                record.contentHash = nil
            }
            let dirty = DirtyFile(path: record.path, file: file, base: record.base)
            dirty.writing = false
            dirty.closedSince = Date()   // the journal keeps no time: pending since this start, at least
            dirty.record = record
            dirty.verifyContent = true
            files[record.pathKey] = dirty
            WriteBackLog.info("resuming the upload of \(record.path) (\(record.size) bytes, \(record.state.rawValue))")
        }
        for name in stagingArea.names() where !referenced.contains(name) { stagingArea.remove(name: name) }
        stagingArea.removeCommittedLeftovers()
        try? journal.forgetOrphanChunks()
    }

    // MARK: Dispatcher

    private func dispatchLoop() {
        condition.lock()
        defer { condition.unlock() }
        while !stopped {
            let now = Date()
            var wake = now.addingTimeInterval(5)
            retryFailedCloses(now: now, wake: &wake)
            if pausedUntil > now {
                wake = min(wake, pausedUntil)
            } else {
                let ready = files.filter { key, dirty in
                    dirty.record != nil && !dirty.writing && dirty.active == nil && dirty.closeFailure == nil && !isHeld(key)
                        && !waitsForNamespace(key)
                }.sorted { $0.value.record!.generation < $1.value.record!.generation }
                for (key, dirty) in ready {
                    // A session streamed while the file was written counts from its start, so the
                    // rate status shows is not inflated by the chunks sent before close.
                    var streamedSince: Date?
                    var streamed: StreamedChunks?
                    if let stream = dirty.streaming {
                        // Appends still in flight from the writing phase: wait for them.
                        if stream.busy { continue }
                        if stream.handedOver && dirty.record?.sessionID != nil { streamedSince = stream.startedAt }
                        if stream.handedOver, stream.fromKernel, !stream.failed, !stream.cancelled.load(ordering: .relaxed),
                           let id = stream.sessionID, !stream.checkedChunks.isEmpty {
                            streamed = StreamedChunks(sessionID: id, digests: stream.checkedChunks, startedAt: stream.startedAt)
                        }
                        dirty.streaming = nil
                    }
                    if dirty.notBefore > now { wake = min(wake, dirty.notBefore); continue }
                    // The snapshot may be stale by now within this pass: never start a file twice.
                    guard dirty.active == nil, !dirty.writing, dirty.record != nil else { continue }
                    let record = dirty.record!
                    if UploadPlanner.isLarge(record, configuration: configuration) {
                        guard activeLargeUploads < configuration.maxConcurrentLargeUploads else { continue }
                        activeLargeUploads += 1
                        let job = start(key, dirty, large: true, since: streamedSince ?? streamed?.startedAt, streamed: streamed)
                        jobPool.submit { self.runLargeUpload(job) }
                    } else {
                        addToWindow(start(key, dirty, large: false), now: now)
                    }
                }
                // Everything ready is in the window now: if someone waits for one of its files
                // (fsync, sync), send it without gathering more.
                if let window, window.jobs.contains(where: { job in
                    files[job.key].map { isUrgent($0, generation: job.record.generation) } ?? false
                }) {
                    seal(window)
                }
            }
            if let window {
                let closeAt = min(window.lastArrival.addingTimeInterval(configuration.gatherDelay),
                                  window.opened.addingTimeInterval(configuration.maxGatherTime))
                if closeAt <= now { seal(window) } else { wake = min(wake, closeAt) }
            }
            _ = condition.wait(until: wake)
        }
    }

    /// Marks `dirty` as having a job in flight and returns that job.
    private func start(_ key: String, _ dirty: DirtyFile, large: Bool, since: Date? = nil, streamed: StreamedChunks? = nil) -> UploadJob {
        let record = dirty.record!
        let active = ActiveUpload(generation: record.generation, total: record.size, large: large, startedAt: since ?? Date())
        dirty.active = active
        return UploadJob(key: key, record: record, file: dirty.file, active: active, verifyContent: dirty.verifyContent,
                         streamed: streamed)
    }
}

/// One file with local changes not yet on Dropbox. Only touched with the engine's lock held.
final class DirtyFile {
    var path: String
    let file: StagingFile
    /// The journal row; nil until the first close.
    var record: UploadRecord?
    /// Open for writing since the last close: not uploadable, its bytes are changing.
    var writing = true
    /// Base of the first commit, until a journal row exists.
    var newBase: WriteBase
    var notBefore = Date.distantPast
    var active: ActiveUpload?
    /// The latest attempt's error if it was a hard one (reported by fsync and sync).
    var hardError: RemoteError?
    /// The last close could not be journaled: closed, held and retried (FailedCloses.swift),
    /// with the client_modified to journal it with.
    var closeFailure: Errno?
    var closeModified: Date?
    /// When `hardError` or `closeFailure` was last set (sync waits for a retry it asked for).
    var failedAt = Date.distantPast
    var lastError: RemoteError?
    var committedGeneration: UInt64 = 0
    /// fsync waits for generations up to this one: they are sent without gathering.
    var urgentThrough: UInt64 = 0
    var conflictIndex = 0
    /// Loaded from the journal after a restart: recheck the bytes before trusting hash and session.
    var verifyContent = false
    /// A session started while the file was still being written (StreamingUpload.swift).
    var streaming: StreamingUpload?
    /// A kernel stream of this file sent chunks the writer changed afterwards: it writes in place,
    /// so it is not streamed again while the engine keeps the file (each would be sent twice).
    var rewritesInPlace = false
    /// Digests of the blocks final while the file was written (PrefixHash.swift).
    var prefixHash: PrefixHash?
    /// When a close first left bytes not on Dropbox yet (the age of the oldest pending upload, for
    /// the metrics); nil while the file was never closed.
    var closedSince: Date?
    /// Opens the kernel serves from this staging file by itself (FUSE passthrough): while any is
    /// left, a commit keeps the file (StagingRetention.swift).
    var kernelOpens = 0
    /// The commit of the file's latest bytes, while the file is kept after it (until the facade
    /// showed it and the kernel's opens ended, StagingRetention.swift); nil once a writer took
    /// the file over.
    var retainedCommit: RetainedCommit?
    /// Let go after its commit (StagingRetention.swift): no longer the engine's, whatever a
    /// rename that listed it before will do.
    var letGo = false

    init(path: String, file: StagingFile, base: WriteBase) {
        self.path = path; self.file = file; self.newBase = base
    }

    /// The digests taken while the file was written no longer describe it: the commit hashes it
    /// whole (PrefixHash.swift). A holder of the old object sees it marked invalid.
    func dropPrefixHash() {
        prefixHash?.invalid = true
        prefixHash = nil
    }
}

/// The in-flight marker of one upload attempt; cancelling it makes the transfer stop at its next
/// progress callback and forbids its commit.
final class ActiveUpload: Sendable {
    let generation: UInt64
    let total: UInt64
    let large: Bool
    let startedAt: Date
    let cancelled = Atomic<Bool>(false)
    let done = Atomic<UInt64>(0)
    /// Set by the one `finishLocked` call that ends the job.
    let finished = Atomic<Bool>(false)
    init(generation: UInt64, total: UInt64, large: Bool, startedAt: Date = Date()) {
        self.generation = generation; self.total = total; self.large = large; self.startedAt = startedAt
    }
}

/// What a worker gets: a copy of the row, which it updates and persists through the engine.
struct UploadJob: Sendable {
    let key: String
    var record: UploadRecord
    let file: StagingFile
    let active: ActiveUpload
    let verifyContent: Bool
    /// What a kernel stream sent while the file was written (StreamingUpload.swift).
    var streamed: StreamedChunks?
}

enum DropboxChunkRules {
    /// Appends to a concurrent session must be multiples of this, at offsets that are multiples.
    static let blockSize = 4 * 1024 * 1024
}

/// One dirty file of a rename, with its row as it will be under the new path. The hashes of our
/// earlier commits stay with it: the move takes a commit that landed unheard along (Dropbox moves
/// keep the file), so its conflict at the new path is still recognised as our own.
struct PlannedMove {
    let dirty: DirtyFile
    let newPath: String
    var newRecord: UploadRecord?

    init(dirty: DirtyFile, newPath: String) {
        self.dirty = dirty
        self.newPath = newPath
        if var record = dirty.record {
            record.pathKey = WriteBackEngine.key(newPath)
            record.path = newPath
            record.commitPath = nil
            record.state = .pending
            record.lastError = nil
            newRecord = record
        }
    }
}
