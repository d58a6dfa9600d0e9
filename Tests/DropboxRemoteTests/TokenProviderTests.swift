/// The single-flight token refresh: many threads meeting an expired token cause one refresh, one
/// persisted token, and all of them continue with the new token.
import Foundation
import Synchronization
import Testing
@testable import DropboxRemote

@Suite struct TokenProviderTests {
    @Test func concurrentRefreshesCollapseIntoOne() throws {
        let persisted = Mutex<[OAuthToken]>([])
        let provider = TokenProvider(token: OAuthToken(accessToken: "old", refreshToken: "r1"), appKey: "key",
                                     persist: { token in persisted.withLock { $0.append(token) } })
        let refreshCalls = Atomic<Int>(0)
        let results = Mutex<[String]>([])
        let group = DispatchGroup()
        for _ in 0..<8 {
            group.enter()
            Thread {
                defer { group.leave() }
                let fresh = try? provider.refresh(replacing: "old") { (refreshToken) throws(DropboxError) -> OAuthToken in
                    refreshCalls.add(1, ordering: .relaxed)
                    #expect(refreshToken == "r1")
                    Thread.sleep(forTimeInterval: 0.2)  // long enough for every thread to pile up
                    return OAuthToken(accessToken: "new")
                }
                results.withLock { $0.append(fresh ?? "error") }
            }.start()
        }
        group.wait()
        #expect(refreshCalls.load(ordering: .relaxed) == 1)
        #expect(results.withLock { $0 } == Array(repeating: "new", count: 8))
        #expect(persisted.withLock { $0 } == [OAuthToken(accessToken: "new", refreshToken: "r1")])
        #expect(provider.current.refreshToken == "r1")
    }

    @Test func failedRefreshIsReportedAndCanBeRetried() throws {
        let provider = TokenProvider(token: OAuthToken(accessToken: "old", refreshToken: "r"), appKey: "key")
        #expect(throws: DropboxError.self) {
            try provider.refresh(replacing: "old") { (_) throws(DropboxError) -> OAuthToken in
                throw .auth(.other("invalid_grant"), summary: "revoked")
            }
        }
        let second = try provider.refresh(replacing: "old") { (_) throws(DropboxError) -> OAuthToken in OAuthToken(accessToken: "n2") }
        #expect(second == "n2")
    }

    @Test func withoutRefreshTokenExpiryIsAnAuthError() {
        let provider = TokenProvider(accessToken: "static")
        #expect(throws: DropboxError.auth(.expiredAccessToken, summary: "access token expired and no refresh token is configured")) {
            try provider.refresh(replacing: "static") { (_) throws(DropboxError) -> OAuthToken in OAuthToken(accessToken: "x") }
        }
    }

    @Test func proactiveRefreshOnlyNearExpiry() {
        let soon = TokenProvider(token: OAuthToken(accessToken: "a", refreshToken: "r", expiresAt: Date().addingTimeInterval(30)), appKey: "k")
        let later = TokenProvider(token: OAuthToken(accessToken: "a", refreshToken: "r", expiresAt: Date().addingTimeInterval(3600)), appKey: "k")
        #expect(!later.needsProactiveRefresh() && later.needsProactiveRefresh(now: Date().addingTimeInterval(3570)))
        // A 30 s token: the margin shrinks to a quarter of its life (7.5 s), not the default 60 s.
        #expect(!soon.needsProactiveRefresh() && soon.needsProactiveRefresh(now: Date().addingTimeInterval(25)))
        #expect(!soon.needsProactiveRefresh(now: Date().addingTimeInterval(20)))
    }
}
