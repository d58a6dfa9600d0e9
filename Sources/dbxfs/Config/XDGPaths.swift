/// Where dbxfs keeps things, per the XDG base directory spec: configuration and credentials under
/// `$XDG_CONFIG_HOME/dbxfs` (default ~/.config/dbxfs), the per-mount control sockets under
/// `$XDG_RUNTIME_DIR/dbxfs` (else /run/user/UID/dbxfs when it exists and is ours, else
/// ~/.cache/dbxfs/run). Every directory dbxfs creates here is 0700: credentials and the status
/// channel are private to the user.
import Foundation

struct XDGPaths: Sendable {
    let environment: [String: String]

    init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.environment = environment
    }

    private func value(_ name: String) -> String? {
        guard let v = environment[name], v.hasPrefix("/") else { return nil }  // the spec ignores relative paths
        return v
    }

    var home: String { environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory() }

    /// `$XDG_CONFIG_HOME/dbxfs`.
    var configDirectory: String { (value("XDG_CONFIG_HOME") ?? home + "/.config") + "/dbxfs" }

    /// The config file: `$DBXFS_CONFIG` if set, else `$XDG_CONFIG_HOME/dbxfs/config`.
    var configFile: String { environment["DBXFS_CONFIG"].flatMap { $0.isEmpty ? nil : $0 } ?? configDirectory + "/config" }

    /// Stored credentials, one file per profile.
    var accountsDirectory: String { configDirectory + "/accounts" }

    /// The control sockets' directory.
    var runtimeDirectory: String {
        if let runtime = value("XDG_RUNTIME_DIR") { return runtime + "/dbxfs" }
        let userRun = "/run/user/\(getuid())"
        var st = stat()
        if stat(userRun, &st) == 0, st.st_uid == getuid(), st.st_mode & S_IFMT == S_IFDIR { return userRun + "/dbxfs" }
        return (value("XDG_CACHE_HOME") ?? home + "/.cache") + "/dbxfs/run"
    }

    /// Creates `path` (and parents) and makes sure the last component is 0700 and owned by us,
    /// so nobody else can list or enter it.
    static func makePrivateDirectory(_ path: String) throws(PrivateDirectoryError) {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw PrivateDirectoryError(description: "cannot create \(path): \(error.localizedDescription)")
        }
        var st = stat()
        guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
            throw PrivateDirectoryError(description: "\(path) is not a directory")
        }
        guard st.st_uid == geteuid() else { throw PrivateDirectoryError(description: "\(path) belongs to another user") }
        if st.st_mode & 0o077 != 0, chmod(path, 0o700) != 0 {
            throw PrivateDirectoryError(description: "cannot make \(path) private: \(String(cString: strerror(errno)))")
        }
    }

    struct PrivateDirectoryError: Error, CustomStringConvertible { var description: String }
}
