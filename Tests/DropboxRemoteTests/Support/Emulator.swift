/// Starts `scripts/dbx-emulator` for one test: a fresh `--data` directory, `--port 0`, a known
/// access token and control token. `stop()` (also run on deinit) kills it, waits, and
/// removes the directory, so a failing test still cleans up.
import Foundation
import Testing
@testable import DropboxRemote

final class Emulator: @unchecked Sendable {
    // @unchecked: all stored properties are set once in init; `stopped` is only touched by stop(),
    // which tests call from the one thread that owns the emulator.
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let script = repositoryRoot.appendingPathComponent("scripts/dbx-emulator")
    static var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: script.path) }

    let token = "test-token-" + UUID().uuidString
    let controlToken = "control-" + UUID().uuidString
    let appKey = "testappkey"
    let dataDirectory: URL
    let baseURL: String
    private let process = Process()
    private var stopped = false

    init(_ extraArguments: [String] = []) throws {
        dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("dbxfs-client-emu-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dataDirectory, withIntermediateDirectories: true)
        process.executableURL = Self.script
        process.arguments = ["--data", dataDirectory.appendingPathComponent("data").path, "--port", "0",
                             "--token", token, "--control-token", controlToken, "--app-key", appKey] + extraArguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        // The first stdout line is the contract: `listening on http://HOST:PORT`.
        var line = Data()
        let deadline = Date().addingTimeInterval(20)
        while !line.contains(UInt8(ascii: "\n")) && Date() < deadline {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line.append(chunk)
        }
        // Keep draining so a chatty emulator never blocks on a full pipe.
        output.fileHandleForReading.readabilityHandler = { handle in _ = handle.availableData }
        let text = String(decoding: line, as: UTF8.self)
        guard let range = text.range(of: "listening on ") else {
            process.terminate()
            throw EmulatorError.didNotStart(text)
        }
        baseURL = String(text[range.upperBound...].prefix { !$0.isNewline })
    }

    deinit { stop() }

    func stop() {
        guard !stopped else { return }
        stopped = true
        if process.isRunning {
            // SIGKILL, not SIGTERM: Foundation's Process starts the child with the spawning
            // thread's signal mask, and Dispatch/Swift-Testing worker threads block SIGTERM, so
            // the emulator would never see it. Its data directory is thrown away anyway.
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: dataDirectory)
    }

    /// A client for this emulator with a fast retry policy (short backoff, so fault tests run fast).
    func client(tokens: TokenProvider? = nil, retryPolicy: RetryPolicy = Emulator.fastRetries) -> DropboxClient {
        // One path prefix per host: the emulator refuses a route sent to the wrong one.
        DropboxClient(configuration: ClientConfiguration(endpoints: Endpoints(overridingAllWith: baseURL + "/{host}"),
                                                         retryPolicy: retryPolicy),
                      tokens: tokens ?? TokenProvider(accessToken: token))
    }

    static let fastRetries = RetryPolicy(maxAttempts: 8, baseDelay: 0.02, maxDelay: 0.2, maxRateLimitDelay: 2)

    /// Changes fault and limit settings through the control endpoint.
    func configure(_ settings: [String: JSON]) throws {
        _ = try control("POST", "/_control/config", body: JSON.object(settings).encoded())
    }

    /// `GET /_control/stats`.
    func stats() throws -> JSON { try control("GET", "/_control/stats") }

    /// Runs the OAuth code flow with PKCE the way a user would (approve on the authorize page) and
    /// returns the code.
    func authorizationCode(for authorizeURL: String) throws -> String {
        let page = try Self.curl(["-s", authorizeURL + "&approve=1"])
        let text = String(decoding: page, as: UTF8.self)
        guard let start = text.range(of: "<code id=\"auth-code\">"), let end = text.range(of: "</code>", range: start.upperBound..<text.endIndex) else {
            throw EmulatorError.unexpected("no code on the authorize page: \(text.prefix(300))")
        }
        return String(text[start.upperBound..<end.lowerBound])
    }

    /// `POST /_control/<name>` with a JSON body (share, export_only, account: docs/EMULATOR.md).
    @discardableResult
    func control(_ name: String, _ body: JSON) throws -> JSON {
        try control("POST", "/_control/" + name, body: body.encoded())
    }

    private func control(_ method: String, _ path: String, body: String? = nil) throws -> JSON {
        var arguments = ["-s", "-f", "-X", method, "-H", "Authorization: Bearer \(controlToken)", baseURL + path]
        if let body { arguments += ["-H", "Content-Type: application/json", "--data-binary", body] }
        return try JSON.parse(Self.curl(arguments))
    }

    static func curl(_ arguments: [String]) throws -> Data {
        let curl = Process()
        curl.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        curl.arguments = arguments
        let output = Pipe()
        curl.standardOutput = output
        try curl.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        curl.waitUntilExit()
        guard curl.terminationStatus == 0 else { throw EmulatorError.unexpected("curl \(arguments) exited \(curl.terminationStatus)") }
        return data
    }
}

enum EmulatorError: Error {
    case didNotStart(String)
    case unexpected(String)
}

/// Deterministic pseudo-random bytes (xorshift), so large test files need no storage and differ
/// in every block (a repeated pattern would hide block-order bugs).
func pseudoRandomBytes(count: Int, seed: UInt64) -> Data {
    var state = seed | 1
    var data = Data(count: count)
    data.withUnsafeMutableBytes { buffer in
        let words = buffer.bindMemory(to: UInt64.self)
        for i in 0..<words.count {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17
            words[i] = state
        }
        for i in (words.count * 8)..<count { buffer[i] = UInt8(truncatingIfNeeded: i &* 31) }
    }
    return data
}

/// Writes `count` pseudo-random bytes to a new temporary file, 8 MiB at a time.
func temporaryFile(count: Int, seed: UInt64) throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("dbxfs-client-\(UUID().uuidString).bin")
    _ = FileManager.default.createFile(atPath: url.path, contents: nil)
    let handle = try FileHandle(forWritingTo: url)
    defer { try? handle.close() }
    var written = 0
    var block: UInt64 = 0
    while written < count {
        let n = min(8 << 20, count - written)
        try handle.write(contentsOf: pseudoRandomBytes(count: n, seed: seed &+ block &* 0x9E37_79B9_7F4A_7C15))
        written += n
        block += 1
    }
    return url
}
