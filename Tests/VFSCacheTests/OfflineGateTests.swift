/// The offline gate: fails fast while offline, lets one probe through per interval, and a probe
/// that reaches Dropbox ends offline mode (so a retry after the network returns succeeds at once).
import Foundation
import Testing
@testable import VFSCache

@Suite struct OfflineGateTests {
    @Test func offlineCallsFailFastExceptOneProbePerInterval() throws {
        let remote = InMemoryRemote()
        remote.externalWrite("/a.txt", "a")
        let down = FailingRemote(remote, rule: { _, _ in .unavailable("connection refused") })
        let state = OfflineState(offline: true, reason: "test")
        let gate = OfflineGatedRemote(down, state: state, probeInterval: .seconds(60))

        // The first call is the probe: it reaches the (still failing) remote.
        #expect(throws: RemoteError.unavailable("connection refused")) { try gate.metadata(path: "/a.txt") }
        // Within the interval, calls fail at once with the offline reason, without a remote call.
        remote.resetCounts()
        #expect(throws: RemoteError.unavailable("the mount is offline: test")) { try gate.metadata(path: "/a.txt") }
        #expect(remote.calls("metadata") == 0)
        #expect(state.isOffline)
    }

    @Test func aProbeThatReachesDropboxEndsOfflineMode() throws {
        let remote = InMemoryRemote()
        remote.externalWrite("/a.txt", "a")
        let state = OfflineState(offline: true, reason: "test")
        let gate = OfflineGatedRemote(remote, state: state, probeInterval: .seconds(60))
        #expect(try gate.metadata(path: "/a.txt")?.name == "a.txt")
        #expect(!state.isOffline)
        // Online, nothing is gated: the next calls all go through.
        #expect(try gate.metadata(path: "/a.txt") != nil)
        #expect(try gate.metadata(path: "/missing") == nil)
        #expect(remote.calls("metadata") == 3)
    }

    @Test func aRefusalAlsoProvesTheNetworkIsBack() {
        let remote = InMemoryRemote()
        let state = OfflineState(offline: true, reason: "test")
        let gate = OfflineGatedRemote(remote, state: state, probeInterval: .seconds(60))
        #expect(throws: RemoteError.self) { try gate.listFolder(path: "/nope", recursive: false, limit: nil) }
        #expect(!state.isOffline)
    }
}
