/// The retry policy as pure logic (injected random source and sleeper), and the retry loop against
/// a port nobody listens on, which needs no server.
import Foundation
import Synchronization
import Testing
@testable import DropboxRemote

/// Records requested sleeps instead of sleeping.
final class RecordingSleeper: RetrySleeper {
    private let recorded = Mutex<[Double]>([])
    var sleeps: [Double] { recorded.withLock { $0 } }
    func sleep(seconds: Double, cancel: CancelHandle?) -> Bool {
        recorded.withLock { $0.append(seconds) }
        return cancel?.isCancelled != true
    }
}

@Suite struct RetryPolicyTests {
    @Test func rateLimitWaitsForRetryAfterAndIsCapped() {
        let policy = RetryPolicy(maxRateLimitWaits: 2, maxRateLimitDelay: 60, random: { 0 })
        var tally = RetryPolicy.Tally()
        let error = DropboxError.rateLimited(reason: "too_many_requests", retryAfter: 3)
        #expect(policy.decide(after: error, tally: tally) == .retry(after: 3))
        #expect(policy.decide(after: .rateLimited(reason: "x", retryAfter: 1000), tally: tally) == .retry(after: 60))
        tally.rateLimits = 2
        #expect(policy.decide(after: error, tally: tally) == .fail)
    }

    @Test func rateLimitWaitsAreJitteredUpwardsAndGrow() {
        let low = RetryPolicy(maxRateLimitDelay: 300, random: { 0 })
        let high = RetryPolicy(maxRateLimitDelay: 300, random: { 0.999999 })
        // Never shorter than retry_after, at most half as long again.
        #expect(low.rateLimitDelay(retryAfter: 2, waits: 1) == 2)
        #expect(abs(high.rateLimitDelay(retryAfter: 2, waits: 1) - 3) < 0.001)
        // Repeated 429s in one call wait longer: ×1.5 each, up to 1.5^6.
        #expect(abs(low.rateLimitDelay(retryAfter: 2, waits: 3) - 4.5) < 0.001)
        #expect(low.rateLimitDelay(retryAfter: 2, waits: 40) == low.rateLimitDelay(retryAfter: 2, waits: 7))
    }

    @Test func aCallWithAWaitBudgetGivesUpInsteadOfWaitingLonger() {
        let sleeper = RecordingSleeper()
        var policy = RetryPolicy(maxRateLimitWaits: 20, sleeper: sleeper, random: { 0 })
        policy.maxTotalWait = 5
        var configuration = ClientConfiguration(endpoints: Endpoints(overridingAllWith: "http://127.0.0.1:9"), retryPolicy: policy)
        configuration.adaptivePacing = false
        let client = DropboxClient(configuration: configuration, tokens: TokenProvider(accessToken: "t"))
        var attempts = 0
        #expect(throws: DropboxError.rateLimited(reason: "too_many_write_operations", retryAfter: 2)) {
            try client.withRetries(route: .rpc("files/create_folder_v2")) { (_) throws(DropboxError) -> Void in
                attempts += 1
                throw .rateLimited(reason: "too_many_write_operations", retryAfter: 2)
            }
        }
        // 2 s, then 3 s (2 × 1.5): the next wait would pass the 5 s budget.
        #expect(sleeper.sleeps == [2, 3] && attempts == 3)
        // The same client without a budget would have gone on; bounded(maxWait:) sets one.
        #expect(client.bounded(maxWait: 30).configuration.retryPolicy.maxTotalWait == 30)
    }

    @Test func backoffIsExponentialJitteredAndCapped() {
        let top = RetryPolicy(baseDelay: 0.5, maxDelay: 4, random: { 0.999999 })
        #expect(abs(top.backoff(failures: 1) - 0.5) < 0.001)
        #expect(abs(top.backoff(failures: 3) - 2.0) < 0.001)
        #expect(abs(top.backoff(failures: 10) - 4.0) < 0.001)
        let bottom = RetryPolicy(baseDelay: 0.5, maxDelay: 4, random: { 0 })
        #expect(bottom.backoff(failures: 5) == 0)
    }

    @Test func transientFailuresAreBoundedAndOthersFailAtOnce() {
        let policy = RetryPolicy(maxAttempts: 3, random: { 0.5 })
        var tally = RetryPolicy.Tally()
        let server = DropboxError.server(status: 503, message: "")
        for _ in 0..<2 {
            let decision = policy.decide(after: server, tally: tally)
            guard case .retry = decision else { Issue.record("expected retry, got \(decision)"); return }
            RetryPolicy.record(server, decision: decision, in: &tally)
        }
        #expect(policy.decide(after: server, tally: tally) == .fail)
        #expect(policy.decide(after: .route(.path(.notFound), summary: ""), tally: RetryPolicy.Tally()) == .fail)
        #expect(policy.decide(after: .badInput("x"), tally: RetryPolicy.Tally()) == .fail)
        #expect(policy.decide(after: .auth(.invalidAccessToken, summary: ""), tally: RetryPolicy.Tally()) == .fail)
    }

    @Test func expiredTokenRefreshesABoundedNumberOfTimes() {
        let policy = RetryPolicy(maxTokenRefreshes: 1)
        var tally = RetryPolicy.Tally()
        let expired = DropboxError.auth(.expiredAccessToken, summary: "")
        #expect(policy.decide(after: expired, tally: tally) == .refreshToken)
        RetryPolicy.record(expired, decision: .refreshToken, in: &tally)
        #expect(policy.decide(after: expired, tally: tally) == .fail)
    }

    @Test func retryLoopCountsTransportRetriesAgainstAClosedPort() throws {
        let sleeper = RecordingSleeper()
        let policy = RetryPolicy(maxAttempts: 4, baseDelay: 1, maxDelay: 8, sleeper: sleeper, random: { 0.5 })
        let client = DropboxClient(configuration: ClientConfiguration(endpoints: Endpoints(overridingAllWith: "http://127.0.0.1:\(closedPort())"),
                                                                      connectTimeout: 2, retryPolicy: policy),
                                   tokens: TokenProvider(accessToken: "t"))
        #expect {
            try client.getMetadata(path: "/x")
        } throws: { error in
            guard case DropboxError.transport(let code, _) = error else { return false }
            return code == 7  // CURLE_COULDNT_CONNECT
        }
        #expect(sleeper.sleeps == [0.5, 1.0, 2.0])
        #expect(client.statistics.snapshot.transportErrors == 3)
        #expect(client.statistics.snapshot.retries == 3)
    }

    @Test func cancelStopsTheRetryLoop() {
        let cancel = CancelHandle()
        cancel.cancel()
        let client = DropboxClient(accessToken: "t", baseURL: "http://127.0.0.1:\(closedPort())")
        #expect(throws: DropboxError.cancelled) {
            try client.download(path: "/x", cancel: cancel) { _ in true }
        }
    }

    /// A loopback port with nothing listening (bound, then closed).
    private func closedPort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
