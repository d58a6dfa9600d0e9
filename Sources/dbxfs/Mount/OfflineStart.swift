/// Starting a mount while Dropbox cannot be reached. Online mounts remember who they are (the
/// account, in `<cache dir>/account.json`) and where their cache is (an index file under the
/// cache base, keyed by server, credentials and root, since the default cache directory is named
/// after the account id, which an offline start cannot ask for). An offline start finds both
/// and mounts if that cache holds a saved metadata tree (`MetadataStore`); otherwise it fails
/// with the usual "cannot reach" line.
import ContentHash
import DropboxRemote
import Foundation
import VFSCache

enum OfflineStart {
    /// Who the mount is, saved at every online start.
    struct SavedAccount: Codable {
        var email: String
        var displayName: String
        var accountID: String
        /// The team root namespace the mount used (Dropbox-API-Path-Root), nil for none: an
        /// offline start must ask for its saved cursor in the same namespace.
        var pathRootNamespace: String?
    }

    /// True for failures that mean "Dropbox is not there" (as opposed to "Dropbox said no").
    static func isUnreachable(_ error: Error) -> Bool {
        (error as? DropboxError)?.isUnreachable == true
    }

    /// The index file for this server, credentials and root.
    static func indexFile(options: MountOptions, profile: String?) -> String {
        var key = "\(options.apiBase ?? "dropbox")\n\(profile ?? "")\n\(options.tokenFile ?? "")\n\(options.root.lowercased())"
        if options.memberFolder { key += "\nmember-folder" }
        return cacheBase() + "/dbxfs/last-mount-" + String(hex(sha256(Array(key.utf8))).prefix(16))
    }

    /// Records who the mount is in its cache directory, at an online start (best effort).
    static func saveAccount(_ account: SavedAccount, in cacheDirectory: URL) {
        if let data = try? JSONEncoder().encode(account) {
            try? data.write(to: cacheDirectory.appendingPathComponent("account.json"), options: .atomic)
        }
    }

    /// Once an online mount is live: records where the cache of this server, credentials and
    /// root is, for an offline start. Only for the default cache directory: with `--cache-dir`
    /// the offline start is given the directory, and an index per explicit directory would only
    /// pile up (tests use a new one each time). Index files whose cache directory is gone are
    /// removed on the way, so there is at most one per server, credentials and root that exists.
    static func remember(cacheDirectory: URL, options: MountOptions, profile: String?) {
        let base = cacheBase() + "/dbxfs"
        for name in (try? FileManager.default.contentsOfDirectory(atPath: base)) ?? [] where name.hasPrefix("last-mount-") {
            let file = base + "/" + name
            guard let target = try? String(contentsOfFile: file, encoding: .utf8) else { continue }
            if !FileManager.default.fileExists(atPath: target + "/account.json") { try? FileManager.default.removeItem(atPath: file) }
        }
        guard options.cacheDirectory == nil else { return }
        let index = indexFile(options: options, profile: profile)
        try? FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try? Data(cacheDirectory.path.utf8).write(to: URL(fileURLWithPath: index), options: .atomic)
    }

    /// The cache directory and account of an earlier online start, if it saved a metadata tree.
    static func find(options: MountOptions, profile: String?) -> (cacheDirectory: URL, account: SavedAccount)? {
        let path = options.cacheDirectory
            ?? (try? String(contentsOfFile: indexFile(options: options, profile: profile), encoding: .utf8))
        guard let path, !path.isEmpty else { return nil }
        let directory = URL(fileURLWithPath: path)
        guard let data = try? Data(contentsOf: directory.appendingPathComponent("account.json")),
              let account = try? JSONDecoder().decode(SavedAccount.self, from: data),
              let store = try? MetadataStore(directory: directory) else { return nil }
        defer { store.close() }
        guard (try? store.cursor()) != nil else { return nil }
        return (directory, account)
    }

    /// $XDG_CACHE_HOME, else ~/.cache (the same base as the default cache directories).
    static func cacheBase() -> String {
        let environment = ProcessInfo.processInfo.environment
        return environment["XDG_CACHE_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? ((environment["HOME"] ?? NSHomeDirectory()) + "/.cache")
    }
}
