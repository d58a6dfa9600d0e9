/// Measures the DropboxRemote client against a server (the emulator), for scripts/bench-client,
/// which runs the same operations through the curl CLI and compares. One measurement per run,
/// printed as one line of `key=value` figures so the script can parse it.
///
///   dbxfs-client-bench BASE_URL TOKEN download PATH
///   dbxfs-client-bench BASE_URL TOKEN upload-session FILE PATH CHUNK_MIB PARALLEL
///   dbxfs-client-bench BASE_URL TOKEN metadata PATH COUNT
import DropboxRemote
import Foundation

nonisolated func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("dbxfs-client-bench: \(message)\n".utf8))
    exit(2)
}

nonisolated func run(_ arguments: [String]) throws(DropboxError) {
    guard arguments.count >= 4 else { fail("usage: BASE_URL TOKEN (download|upload-session|metadata) ARGS...") }
    let client = DropboxClient(accessToken: arguments[1], baseURL: arguments[0])
    let rest = Array(arguments[3...])
    switch arguments[2] {
    case "download":
        guard rest.count == 1 else { fail("download PATH") }
        var bytes: UInt64 = 0
        let start = Date()
        // The sink only counts, like `curl -o /dev/null`.
        try client.download(path: rest[0]) { buffer in bytes += UInt64(buffer.count); return true }
        let seconds = Date().timeIntervalSince(start)
        print("bytes=\(bytes) seconds=\(seconds) mib_per_s=\(Double(bytes) / seconds / 1_048_576)")

    case "upload-session":
        guard rest.count == 4, let chunkMiB = UInt64(rest[2]), let parallel = Int(rest[3]) else {
            fail("upload-session FILE PATH CHUNK_MIB PARALLEL")
        }
        let file = URL(fileURLWithPath: rest[0])
        guard let size = (try? FileManager.default.attributesOfItem(atPath: file.path)[.size] as? NSNumber)?.uint64Value else {
            fail("cannot stat \(file.path)")
        }
        let chunk = chunkMiB << 20
        let body = UploadBody.file(file, offset: 0, length: size)
        let start = Date()
        let session: String
        if parallel <= 1 {
            // Sequential session: exactly the request sequence the curl CLI run makes.
            session = try client.uploadSessionStart()
            var offset: UInt64 = 0
            while offset < size {
                let count = min(chunk, size - offset)
                try client.uploadSessionAppend(sessionID: session, offset: offset, body: body.slice(from: offset, count: count))
                offset += count
            }
        } else {
            session = try client.uploadSessionStart(type: .concurrent)
            try client.appendInParallel(sessionID: session, body: body, chunkSize: chunk, parallelism: parallel)
        }
        let file_ = try client.uploadSessionFinish(sessionID: session, offset: size, commit: CommitInfo(path: rest[1], mode: .overwrite))
        let seconds = Date().timeIntervalSince(start)
        print("bytes=\(file_.size) seconds=\(seconds) mib_per_s=\(Double(size) / seconds / 1_048_576)")

    case "metadata":
        guard rest.count == 2, let count = Int(rest[1]), count > 0 else { fail("metadata PATH COUNT") }
        _ = try client.getMetadata(path: rest[0])  // warm the connection, as curl's first URL does
        var samples: [Double] = []
        for _ in 0..<count {
            let start = DispatchTime.now().uptimeNanoseconds
            _ = try client.getMetadata(path: rest[0])
            samples.append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6)
        }
        samples.sort()
        print("median_ms=\(samples[count / 2]) p90_ms=\(samples[count * 9 / 10]) min_ms=\(samples[0])")

    default:
        fail("unknown measurement \(arguments[2])")
    }
}

do {
    try run(Array(CommandLine.arguments.dropFirst()))
} catch {
    fail("\(error)")
}
