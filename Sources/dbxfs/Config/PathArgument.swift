/// Paths a user types (`--ca-file`, `--log-file`, `--token-file`, `--cache-dir`, and the config
/// file's `ca_file`, `cache_dir`, `log_file`) made absolute at once. The mount daemon moves to `/`
/// once it has detached, and keeps opening some of them long after (libcurl reads the CA file for
/// every new connection; the log file is opened then), so a path left relative would silently mean
/// another file. A relative path is relative to the directory dbxfs was started in (on the
/// command line) or to the config file's folder (in the config file); `~` and `~/...` mean the
/// home directory, also where no shell expanded them (`--cache-dir=~/x`, the config file).
import Foundation

enum PathArgument {
    static func absolute(_ path: String, relativeTo base: String = FileManager.default.currentDirectoryPath,
                         home: String = XDGPaths().home) -> String {
        var expanded = path
        if expanded == "~" {
            expanded = home
        } else if expanded.hasPrefix("~/") {
            expanded = home + expanded.dropFirst(1)
        }
        guard !expanded.hasPrefix("/") else { return expanded }
        // Joined as it is, without folding `..` (which would change the meaning through a symlink).
        while expanded.hasPrefix("./") { expanded.removeFirst(2) }
        if expanded == "." || expanded.isEmpty { return base }
        return (base.hasSuffix("/") ? base : base + "/") + expanded
    }
}
