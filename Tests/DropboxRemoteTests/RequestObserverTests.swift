/// What the client tells a `RequestObserver` about each HTTP request (route, kind, outcome with a
/// 409's tag, body bytes), checked against the emulator with a 409 and a retried 500; and the
/// tag kept from an error_summary, which must never carry a path.
import Foundation
import Synchronization
import Testing
@testable import DropboxRemote

final class RecordingObserver: RequestObserver {
    let attempts = Mutex<[RequestAttempt]>([])
    let retries = Mutex<[String]>([])
    func willRetry(after error: DropboxError, in seconds: Double) { retries.withLock { $0.append(RequestOutcome(error).label) } }
    func failed(_ error: DropboxError) {}
    func succeeded() {}
    func attempted(_ attempt: RequestAttempt) { attempts.withLock { $0.append(attempt) } }
}

struct RequestOutcomeTagTests {
    @Test func theTagIsTheSummarysFirstTwoLevels() {
        #expect(RequestOutcome.tag(ofSummary: "path/not_found/..") == "path/not_found")
        #expect(RequestOutcome.tag(ofSummary: "path/not_found/") == "path/not_found")
        #expect(RequestOutcome.tag(ofSummary: "to/conflict/file/...") == "to/conflict")
        #expect(RequestOutcome.tag(ofSummary: "reset/...") == "reset")
        #expect(RequestOutcome.tag(ofSummary: "") == "unknown")
        // Anything that is not a spec tag (a path, a message) stops the tag there.
        #expect(RequestOutcome.tag(ofSummary: "path/Some File.txt") == "path")
        #expect(RequestOutcome.tag(ofSummary: "/home/me") == "unknown")
    }

    @Test func outcomesOfErrors() {
        #expect(RequestOutcome(.rateLimited(reason: "too_many_requests", retryAfter: 1)) == .rateLimited)
        #expect(RequestOutcome(.server(status: 503, message: "")) == .serverError)
        #expect(RequestOutcome(.transport(code: 7, message: "refused")).label == "transport_error")
        #expect(RequestOutcome(.cancelled).label == "cancelled")
    }
}

@Suite(.serialized, .enabled(if: Emulator.isAvailable, "scripts/dbx-emulator is missing"))
struct RequestObserverEmulatorTests {
    let emulator: Emulator
    init() throws { emulator = try Emulator() }

    @Test func everyRequestIsReportedWithItsRouteOutcomeAndBytes() throws {
        let observer = RecordingObserver()
        let plain = emulator.client()
        var configuration = plain.configuration
        configuration.observer = observer
        let client = DropboxClient(configuration: configuration, tokens: plain.tokens)

        let data = Data(repeating: 7, count: 100_000)
        _ = try client.upload(CommitInfo(path: "/observed.bin"), body: .data(data))
        let (_, back) = try client.downloadData(path: "/observed.bin")
        #expect(back == data)
        #expect(try client.metadataIfExists(path: "/never-was") == nil)
        try emulator.configure(["fail_next": 1])
        _ = try client.metadataIfExists(path: "/observed.bin")

        let seen = observer.attempts.withLock { $0 }
        let upload = try #require(seen.first { $0.route == "files/upload" })
        #expect(upload.kind == .upload && upload.outcome == .ok && upload.bytesSent == 100_000)
        let download = try #require(seen.first { $0.route == "files/download" })
        #expect(download.kind == .download && download.outcome == .ok && download.bytesReceived == 100_000)
        #expect(seen.contains { $0.route == "files/get_metadata" && $0.outcome == .conflict(tag: "path/not_found") && $0.kind == .rpc })
        #expect(seen.contains { $0.route == "files/get_metadata" && $0.outcome == .serverError })
        #expect(seen.allSatisfy { $0.seconds >= 0 && $0.seconds < 60 })
        #expect(observer.retries.withLock { $0 } == ["server_error"])
    }
}
