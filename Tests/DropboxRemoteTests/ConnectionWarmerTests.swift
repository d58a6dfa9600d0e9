/// Warm connections (issue 15, time to first byte): after a warm-up, the first download goes on a
/// kept-alive connection to the content host, even when the pool's other handles only know the
/// api host; and a warmer stops at once when the network does not answer.
import Foundation
import Synchronization
import Testing
@testable import DropboxRemote

@Suite(.serialized, .enabled(if: Emulator.isAvailable, "scripts/dbx-emulator is missing"))
struct ConnectionWarmerTests {
    /// api and content on two origins (127.0.0.1 and localhost), as api.dropboxapi.com and
    /// content.dropboxapi.com are: a connection to one is no use to the other.
    private func client(_ emulator: Emulator, observer: RecordingObserver) throws -> DropboxClient {
        let port = try #require(emulator.baseURL.split(separator: ":").last)
        let other = "http://localhost:\(port)"
        var configuration = ClientConfiguration(endpoints: Endpoints(api: emulator.baseURL + "/api", content: other + "/content",
                                                                     notify: emulator.baseURL + "/notify", web: emulator.baseURL + "/web"),
                                                retryPolicy: Emulator.fastRetries)
        configuration.observer = observer
        return DropboxClient(configuration: configuration, tokens: TokenProvider(accessToken: emulator.token))
    }

    @Test func theFirstListingAndTheFirstDownloadAfterAWarmUpOpenNoConnection() throws {
        let emulator = try Emulator()
        defer { emulator.stop() }
        _ = try emulator.client().upload(CommitInfo(path: "/big.bin"), body: .data(Data(repeating: 7, count: 300_000)))
        let observer = RecordingObserver()
        let client = try client(emulator, observer: observer)
        let warmer = ConnectionWarmer(client: client)
        for url in warmer.urls { _ = try warmer.warmNow(url).get() }
        // The first listing (a mount's first access) goes on the warmed api connection.
        _ = try client.listFolder(path: "")
        let listing = try #require(observer.attempts.withLock { $0.first { $0.route == "files/list_folder" } })
        #expect(listing.connectionsOpened == 0, "the first listing opened \(listing.connectionsOpened) connection(s)")
        // Listings from several threads at once, as a mount's start does: the pool fills with
        // handles that know the api host, and the warmed handle is somewhere among them.
        DispatchQueue.concurrentPerform(iterations: 6) { _ in _ = try? client.listFolder(path: "") }
        _ = try client.listFolder(path: "")
        observer.attempts.withLock { $0.removeAll() }
        let (_, data) = try client.downloadData(path: "/big.bin", range: 0..<262_144)
        #expect(data.count == 262_144)
        let download = try #require(observer.attempts.withLock { $0.first { $0.route == "files/download" } })
        #expect(download.connectionsOpened == 0, "the download opened \(download.connectionsOpened) connection(s)")
        #expect(warmer.failures == 0)
    }

    /// A mount's first read can come while the warm-up of the content host is still under way
    /// (at WAN latency it takes three round trips): the download waits for that connection rather
    /// than opening one of its own, which would take as long as the whole warm-up.
    @Test func aDownloadDuringTheWarmUpWaitsForItsConnection() throws {
        let emulator = try Emulator(["--latency-ms", "150", "--handshake-round-trips", "2"])
        defer { emulator.stop() }
        _ = try emulator.client().upload(CommitInfo(path: "/f.txt"), body: .data(Data("first byte".utf8)))
        let observer = RecordingObserver()
        let client = try client(emulator, observer: observer)
        let warmer = ConnectionWarmer(client: client)
        let content = try #require(warmer.urls.last)
        let warmed = DispatchSemaphore(value: 0)
        Thread { warmer.warmNow(content); warmed.signal() }.start()
        let deadline = Date(timeIntervalSinceNow: 10)
        while client.transport.warmUpsInFlight(of: content) == 0 && Date() < deadline { usleep(1000) }
        #expect(client.transport.warmUpsInFlight(of: content) == 1)
        #expect(try client.downloadData(path: "/f.txt").1 == Data("first byte".utf8))
        warmed.wait()
        let download = try #require(observer.attempts.withLock { $0.first { $0.route == "files/download" } })
        #expect(download.connectionsOpened == 0, "the download opened \(download.connectionsOpened) connection(s)")
    }

    /// A mount's start-up check runs alongside the warm-ups it starts, so it does not wait for
    /// one (that would cost a round trip more than its own connection): it opens its own, and
    /// the warm-up still brings its connection (the first listing's after the mount).
    @Test func aClientThatDoesNotWaitForWarmUpsOpensItsOwnConnection() throws {
        let emulator = try Emulator(["--latency-ms", "150", "--handshake-round-trips", "2"])
        defer { emulator.stop() }
        let observer = RecordingObserver()
        let waiting = try client(emulator, observer: observer)
        var configuration = waiting.configuration
        configuration.waitsForWarmUps = false
        let check = waiting.sharingConnections(configuration: configuration, tokens: TokenProvider(accessToken: emulator.token))
        let warmer = ConnectionWarmer(client: waiting)
        let api = try #require(warmer.urls.first)
        let warmed = DispatchSemaphore(value: 0)
        Thread { warmer.warmNow(api); warmed.signal() }.start()
        let deadline = Date(timeIntervalSinceNow: 10)
        while waiting.transport.warmUpsInFlight(of: api) == 0 && Date() < deadline { usleep(1000) }
        #expect(waiting.transport.warmUpsInFlight(of: api) == 1)
        _ = try check.listFolder(path: "")
        warmed.wait()
        let listing = try #require(observer.attempts.withLock { $0.first { $0.route == "files/list_folder" } })
        #expect(listing.connectionsOpened == 1, "the check opened \(listing.connectionsOpened) connection(s): it waited for the warm-up")
        #expect(waiting.transport.idleConnections(to: api) == 2)
    }

    /// The warm-ups of a start run at once, each on a connection of its own: on two cores
    /// Dispatch's global queue ran two at a time, so the content host's waited for the api
    /// host's (three round trips), and then took the api host's warm handles for three more,
    /// while the mount's first lookups opened new connections (a bench trace at 50 ms).
    @Test func startWarmsEveryHostAtOnceWithoutTakingAnotherHostsConnection() throws {
        let emulator = try Emulator(["--latency-ms", "150", "--handshake-round-trips", "2"])
        defer { emulator.stop() }
        let client = try client(emulator, observer: RecordingObserver())
        _ = try client.listFolder(path: "")   // an idle connection to the api host
        let warmer = ConnectionWarmer(client: client)
        let (api, content) = (try #require(warmer.urls.first), try #require(warmer.urls.last))
        warmer.start()
        defer { warmer.stop() }
        Thread.sleep(forTimeInterval: 0.15)   // well inside the warm-ups' 450 ms
        #expect(client.transport.warmUpsInFlight(of: api) == 1)
        #expect(client.transport.warmUpsInFlight(of: content) == 2)
        #expect(client.transport.idleConnections(to: api) == 1, "a warm-up took the api host's idle connection")
    }

    /// At start, connections are opened until each host has two, counting those already open: a
    /// mount's account check left one to the api host, so one more there and two to content.
    @Test func startOpensTwoConnectionsToEachHostCountingOpenOnes() throws {
        let emulator = try Emulator()
        defer { emulator.stop() }
        let client = try client(emulator, observer: RecordingObserver())
        _ = try client.listFolder(path: "")
        let warmer = ConnectionWarmer(client: client)
        warmer.start()
        defer { warmer.stop() }
        let deadline = Date(timeIntervalSinceNow: 20)
        func open() -> [Int] { warmer.urls.map { client.transport.idleConnections(to: $0) } }
        while open() != [2, 2] && Date() < deadline { usleep(10_000) }
        #expect(open() == [2, 2])
        #expect(try emulator.stats()["connections"]?.int64 == 4)
        #expect(try emulator.stats()["preflights"]?.int64 == 3)
    }

    /// Offline (a host that never answers), `stop()` returns without waiting out the warm-up's
    /// connect timeout, and the failure is counted, not thrown.
    @Test func stopReturnsPromptlyWhileAWarmUpHangs() throws {
        // 10.255.255.1 is not routed here: the connect either hangs or fails at once.
        var configuration = ClientConfiguration(endpoints: Endpoints(overridingAllWith: "http://10.255.255.1:9/{host}"))
        configuration.connectTimeout = 30
        let client = DropboxClient(configuration: configuration, tokens: TokenProvider(accessToken: "unused"))
        let heard = Mutex<[String]>([])
        var options = ConnectionWarmer.Options()
        options.requestTimeout = 30
        let warmer = ConnectionWarmer(client: client, options: options) { url, _ in heard.withLock { $0.append(url) } }
        warmer.start()
        Thread.sleep(forTimeInterval: 0.3)
        let started = Date()
        warmer.stop()
        let waited = Date().timeIntervalSince(started)
        #expect(waited < 10, "stop() waited \(waited) s for a warm-up")
        // Whatever happened to the warm-ups, none is left running and none was retried.
        #expect(warmer.failures <= 4)
        #expect(heard.withLock { $0.count } == warmer.failures)
    }
}
