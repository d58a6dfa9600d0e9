/// TLS: verification is always on. Against the emulator serving a certificate from a private CA,
/// the client refuses the connection until that CA is added with `extraCAFile`.
import Foundation
import Testing
@testable import DropboxRemote

@Suite(.serialized, .enabled(if: Emulator.isAvailable && FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl"),
                             "needs scripts/dbx-emulator and openssl"))
struct EmulatorTLSTests {
    @Test func privateCAIsRefusedUntilAddedAsExtraCAFile() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("dbxfs-client-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let ca = directory.appendingPathComponent("ca.pem").path, caKey = directory.appendingPathComponent("ca.key").path
        let cert = directory.appendingPathComponent("cert.pem").path, key = directory.appendingPathComponent("key.pem").path
        let csr = directory.appendingPathComponent("cert.csr").path, ext = directory.appendingPathComponent("ext.cnf").path
        try "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n".write(toFile: ext, atomically: true, encoding: .utf8)
        try openssl(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", caKey, "-out", ca, "-days", "2", "-subj", "/CN=dbxfs test CA"])
        try openssl(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"])
        try openssl(["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", caKey, "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext])

        let emulator = try Emulator(["--tls-cert", cert, "--tls-key", key])
        defer { emulator.stop() }
        #expect(emulator.baseURL.hasPrefix("https://"))

        let noRetries = RetryPolicy(maxAttempts: 1)
        let untrusting = DropboxClient(configuration: ClientConfiguration(endpoints: Endpoints(overridingAllWith: emulator.baseURL),
                                                                          retryPolicy: noRetries),
                                       tokens: TokenProvider(accessToken: emulator.token))
        #expect { try untrusting.spaceUsage() } throws: {
            // CURLE_PEER_FAILED_VERIFICATION (60): the private CA is not in the system store.
            if case DropboxError.transport(let code, _) = $0 { code == 60 } else { false }
        }
        let trusting = DropboxClient(configuration: ClientConfiguration(endpoints: Endpoints(overridingAllWith: emulator.baseURL),
                                                                        extraCAFile: ca, retryPolicy: noRetries),
                                     tokens: TokenProvider(accessToken: emulator.token))
        #expect(try trusting.spaceUsage().filesystem.size > 0)
        let data = Data("over TLS".utf8)
        _ = try trusting.upload(CommitInfo(path: "/tls.txt"), body: .data(data))
        #expect(try trusting.downloadData(path: "/tls.txt").1 == data)
    }

    private func openssl(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw EmulatorError.unexpected("openssl \(arguments.first ?? "") failed") }
    }
}
