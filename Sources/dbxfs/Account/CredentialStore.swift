/// Reads, writes and deletes stored credentials: `$XDG_CONFIG_HOME/dbxfs/accounts/PROFILE.json`.
///
/// The directories are 0700 and the file 0600 from its first byte (created with that mode, not
/// chmod'ed after). Writes are atomic: a temporary file in the same directory, fsync, rename,
/// then fsync of the directory, so a crash leaves either the old or the new file, never half of
/// one. Nothing here ever prints or logs a token.
import Foundation

struct CredentialStore: Sendable {
    struct Failure: Error, CustomStringConvertible { var description: String }

    static let defaultProfile = "default"
    let directory: String

    init(paths: XDGPaths = XDGPaths()) { directory = paths.accountsDirectory }

    /// Profile names become file names: keep them to a safe alphabet.
    static func isValidProfileName(_ name: String) -> Bool {
        !name.isEmpty && name.count <= 64 && !name.hasPrefix(".")
            && name.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "._-".unicodeScalars.contains($0)) }
    }

    func path(profile: String) -> String { directory + "/" + profile + ".json" }

    func exists(profile: String) -> Bool { FileManager.default.fileExists(atPath: path(profile: profile)) }

    /// nil when the profile was never linked (or was unlinked).
    func load(profile: String) throws(Failure) -> StoredCredentials? {
        let file = path(profile: profile)
        guard FileManager.default.fileExists(atPath: file) else { return nil }
        guard let data = FileManager.default.contents(atPath: file) else {
            throw Failure(description: "cannot read \(file)")
        }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        do {
            return try decoder.decode(StoredCredentials.self, from: data)
        } catch {
            throw Failure(description: "\(file) is damaged; run 'dbxfs auth --profile \(profile)' again")
        }
    }

    func save(_ credentials: StoredCredentials) throws(Failure) {
        do throws(XDGPaths.PrivateDirectoryError) {
            try XDGPaths.makePrivateDirectory((directory as NSString).deletingLastPathComponent)
            try XDGPaths.makePrivateDirectory(directory)
        } catch {
            throw Failure(description: error.description)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        let data: Data
        do { data = try encoder.encode(credentials) } catch { throw Failure(description: "cannot encode credentials: \(error)") }
        try writeAtomically(data + Data("\n".utf8), to: path(profile: credentials.profile))
    }

    /// Removes the profile's file. Returns false when there was none.
    @discardableResult
    func delete(profile: String) throws(Failure) -> Bool {
        let file = path(profile: profile)
        if unlink(file) == 0 {
            syncDirectory()
            return true
        }
        if errno == ENOENT { return false }
        throw Failure(description: "cannot delete \(file): \(String(cString: strerror(errno)))")
    }

    /// Every stored profile name.
    func profiles() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasSuffix(".json") && !$0.hasPrefix(".") }.map { String($0.dropLast(5)) }.sorted()
    }

    private func writeAtomically(_ data: Data, to file: String) throws(Failure) {
        let temporary = directory + "/.\(UUID().uuidString).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Failure(description: "cannot create \(temporary): \(String(cString: strerror(errno)))") }
        var ok = true
        data.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let n = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                if n < 0 { if errno == EINTR { continue }; ok = false; return }
                offset += n
            }
        }
        let code = errno
        if ok && fsync(fd) != 0 { ok = false }
        close(fd)
        guard ok, rename(temporary, file) == 0 else {
            let reason = String(cString: strerror(ok ? errno : code))
            unlink(temporary)
            throw Failure(description: "cannot write \(file): \(reason)")
        }
        syncDirectory()
    }

    /// Makes a rename or unlink in the directory durable.
    private func syncDirectory() {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 { fsync(fd); close(fd) }
    }
}
