/// The same operations, with the emulator's faults switched on: 500s, connections reset mid-body,
/// 429 with Retry-After, and expiring access tokens. Everything must still succeed, and the
/// retries absorbed are counted (and printed, for the notes).
import ContentHash
import Foundation
import Synchronization
import Testing
@testable import DropboxRemote

/// Sleeps for real (so the rate limiter's window passes) and records every wait.
final class RealRecordingSleeper: RetrySleeper {
    private let recorded = Mutex<[Double]>([])
    var sleeps: [Double] { recorded.withLock { $0 } }
    func sleep(seconds: Double, cancel: CancelHandle?) -> Bool {
        recorded.withLock { $0.append(seconds) }
        return CancellableSleeper().sleep(seconds: seconds, cancel: cancel)
    }
}

@Suite(.serialized, .enabled(if: Emulator.isAvailable, "scripts/dbx-emulator is missing"))
struct EmulatorFaultTests {
    let emulator: Emulator
    init() throws { emulator = try Emulator() }

    @Test func serverErrorsAndResetsAreAbsorbed() throws {
        let client = emulator.client(retryPolicy: RetryPolicy(maxAttempts: 10, baseDelay: 0.01, maxDelay: 0.1))
        try emulator.configure(["fail_rate": 0.15, "reset_rate": 0.1])

        _ = try client.createFolder(path: "/faulty")
        var hashes: [String: String] = [:]
        for i in 0..<12 {
            let data = Data("file number \(i) ünïcödé".utf8)
            let hash = DropboxContentHasher.hash(data)
            hashes["/faulty/f\(i).txt"] = hash
            let file = try client.upload(CommitInfo(path: "/faulty/f\(i).txt"), body: .data(data), contentHash: hash)
            #expect(file.contentHash == hash)
        }
        var listed = 0
        try client.listFolderPages(path: "/faulty", limit: 5) { page in listed += page.entries.count; return true }
        #expect(listed == 12)

        let big = pseudoRandomBytes(count: 6 * 1024 * 1024 + 77, seed: 11)
        let bigHash = DropboxContentHasher.hash(big)
        _ = try client.uploadFile(CommitInfo(path: "/faulty/big.bin"), body: .data(big), fileContentHash: bigHash,
                                  singleRequestLimit: 1 << 20, chunkSize: 4 << 20, parallelism: 2)
        for _ in 0..<4 {
            let (_, back) = try client.downloadData(path: "/faulty/big.bin")
            #expect(back == big)
            let (_, part) = try client.downloadData(path: "/faulty/big.bin", range: 1_000_000..<5_000_000)
            #expect(part == big.subdata(in: 1_000_000..<5_000_000))
        }
        let moved = try client.move(from: "/faulty/f0.txt", to: "/faulty/moved.txt")
        #expect(moved.name == "moved.txt")
        _ = try client.copy(from: "/faulty/f1.txt", to: "/faulty/copied.txt")
        _ = try client.delete(path: "/faulty/f2.txt")
        #expect(try client.metadataIfExists(path: "/faulty/f2.txt") == nil)
        _ = try client.createFolder(path: "/faulty/sub")

        var entries: [UploadSessionFinishEntry] = []
        for i in 0..<3 {
            let data = Data("batched \(i)".utf8)
            let session = try client.uploadSessionStart(type: .concurrent)
            try client.uploadSessionAppend(sessionID: session, offset: 0, body: .data(data), close: true)
            entries.append(UploadSessionFinishEntry(sessionID: session, length: UInt64(data.count),
                                                    commit: CommitInfo(path: "/faulty/batch\(i).txt"),
                                                    fileContentHash: DropboxContentHasher.hash(data)))
        }
        for result in try client.uploadSessionFinishBatch(entries) { _ = try result.get() }

        try emulator.configure(["fail_rate": 0, "reset_rate": 0])
        let faults = try emulator.stats()["faults"]
        let injected = (faults?["fail"]?.int64 ?? 0) + (faults?["reset"]?.int64 ?? 0)
        let absorbed = client.statistics.snapshot
        print("fault run: emulator injected \(injected) faults (\(faults?.encoded() ?? "")); client absorbed \(absorbed)")
        #expect(injected > 0)
        #expect(absorbed.retries > 0)
        #expect(absorbed.serverErrors + absorbed.transportErrors == absorbed.retries)
        // Everything written is there, with the right bytes.
        for (path, hash) in hashes where !path.hasSuffix("f0.txt") && !path.hasSuffix("f2.txt") {
            #expect(try client.getMetadata(path: path).file?.contentHash == hash)
        }
    }

    @Test func rateLimitWaitsForRetryAfter() throws {
        let sleeper = RealRecordingSleeper()
        let client = emulator.client(retryPolicy: RetryPolicy(maxRateLimitWaits: 30, maxRateLimitDelay: 5, sleeper: sleeper))
        _ = try client.createFolder(path: "/rl")
        try emulator.configure(["rate_limit": 20])
        let failures = Atomic<Int>(0)
        let group = DispatchGroup()
        for _ in 0..<4 {
            group.enter()
            Thread {
                defer { group.leave() }
                for _ in 0..<15 {
                    do { _ = try client.getMetadata(path: "/rl") } catch { failures.add(1, ordering: .relaxed) }
                }
            }.start()
        }
        group.wait()
        try emulator.configure(["rate_limit": 0])
        let limited = try emulator.stats()["faults"]?["rate_limited"]?.int64 ?? 0
        print("rate-limit run: emulator answered 429 \(limited) times; client waited \(client.statistics.snapshot.rateLimitWaits) times")
        #expect(failures.load(ordering: .relaxed) == 0)
        #expect(limited > 0)
        #expect(client.statistics.snapshot.rateLimitWaits == Int(limited))
        // Every wait was at least the server's Retry-After (the emulator says 1 s), jittered.
        #expect(!sleeper.sleeps.isEmpty && sleeper.sleeps.allSatisfy { $0 >= 1 && $0 <= 5 })
    }

    @Test func expiredTokensAreRefreshedOnceForAllThreads() throws {
        try emulator.configure(["token_ttl": 1.5])
        let bootstrap = emulator.client()
        let pkce = PKCE()
        let code = try emulator.authorizationCode(for: bootstrap.authorizeURL(appKey: emulator.appKey, pkce: pkce))
        var token = try bootstrap.exchangeCode(code, appKey: emulator.appKey, pkce: pkce)
        // Forget the expiry so the client cannot refresh ahead of time: the 401 path is under test.
        token.expiresAt = nil
        let persisted = Mutex<[OAuthToken]>([])
        let provider = TokenProvider(token: token, appKey: emulator.appKey, persist: { t in persisted.withLock { $0.append(t) } })
        let client = emulator.client(tokens: provider)
        _ = try client.createFolder(path: "/tok")
        Thread.sleep(forTimeInterval: 1.7)  // the access token is now expired

        let failures = Atomic<Int>(0)
        let group = DispatchGroup()
        for i in 0..<6 {
            group.enter()
            Thread {
                defer { group.leave() }
                do {
                    _ = try client.upload(CommitInfo(path: "/tok/\(i).txt"), body: .data(Data("t\(i)".utf8)))
                } catch { failures.add(1, ordering: .relaxed) }
            }.start()
        }
        group.wait()
        let expired = try emulator.stats()["faults"]?["expired"]?.int64 ?? 0
        let refreshes = persisted.withLock { $0.count }
        print("token run: \(expired) requests met an expired token; \(refreshes) refresh(es), \(client.statistics.snapshot.tokenRefreshes) retries after refresh")
        #expect(failures.load(ordering: .relaxed) == 0)
        #expect(expired >= 1)
        // Single flight: one refresh for the burst (two if the 1.5 s token expired again meanwhile).
        #expect(refreshes >= 1 && refreshes <= 2)
        #expect(provider.current.accessToken != token.accessToken && provider.current.refreshToken == token.refreshToken)
        #expect(try client.allEntries(path: "/tok").count == 6)
    }

    /// A mount's reads are made through a client cancelled when the mount stops, so a lookup or a
    /// download waiting for a slow server ends at once instead of holding the stopping daemon
    /// (before: the daemon waited the download's whole time). The caller's own handle is nil here.
    @Test func aClientCancelledByAStopEndsCallsWaitingOnASlowServer() throws {
        let stop = CancelHandle()
        let client = emulator.client().cancelled(by: stop)
        _ = try emulator.client().upload(CommitInfo(path: "/stop.txt"), body: .data(Data("slow".utf8)))
        try emulator.configure(["latency_ms": 20000])
        defer { try? emulator.configure(["latency_ms": 0]) }
        func ended(_ call: () throws(DropboxError) -> Void) -> (error: DropboxError?, seconds: Double) {
            let started = Date()
            let stopper = Thread { Thread.sleep(forTimeInterval: 0.5); stop.cancel() }
            stopper.start()
            do throws(DropboxError) {
                try call()
                return (nil, Date().timeIntervalSince(started))
            } catch {
                return (error, Date().timeIntervalSince(started))
            }
        }
        let lookup = ended { () throws(DropboxError) in _ = try client.getMetadata(path: "/stop.txt") }
        #expect(lookup.error == .cancelled)
        #expect(lookup.seconds < 5)
        let download = ended { () throws(DropboxError) in _ = try client.downloadData(path: "/stop.txt") }
        #expect(download.error == .cancelled)
        #expect(download.seconds < 5)
    }
}
