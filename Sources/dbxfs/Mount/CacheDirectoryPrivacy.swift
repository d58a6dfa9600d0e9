/// A cache directory holds the account's email (`account.json`), the whole tree with paths, sizes
/// and hashes (`metadata.sqlite3`), the upload journal, file contents (`blocks/`, `staging/`) and
/// the log: it is private to its user. Three rules keep it so:
///
/// - the mount runs with umask 077 (MountCommand), so everything it creates there is 0600 or 0700
///   whatever umask it was started with, and whatever the mode of a `--cache-dir` that existed;
/// - a cache directory that is not the user's, or that other users can write to, is refused in
///   one line before anything is created in it: whoever can write there can plant or swap files
///   the daemon then trusts (the journal says what to upload where). Only the directory itself is
///   checked, like the runtime directory of the control sockets;
/// - files and folders an older dbxfs (or a looser umask) left readable by others are made
///   private when the directory is next mounted, once its lock is held.
import Foundation
import VFSCache

enum CacheDirectoryPrivacy {
    struct Refused: Error, CustomStringConvertible { var description: String }

    static func check(_ path: String) throws(Refused) {
        var st = stat()
        guard stat(path, &st) == 0 else {
            throw Refused(description: "cannot use the cache directory \(path): \(String(cString: strerror(errno)))")
        }
        guard st.st_mode & S_IFMT == S_IFDIR else { throw Refused(description: "the cache directory \(path) is not a directory") }
        guard st.st_uid == geteuid() else {
            throw Refused(description: "the cache directory \(path) belongs to uid \(st.st_uid), not to you (uid \(geteuid())): use a directory of your own (--cache-dir)")
        }
        if st.st_mode & 0o022 != 0 {
            let mode = String(st.st_mode & 0o7777, radix: 8)
            throw Refused(description: "other users can write to the cache directory \(path) (mode \(mode)), so they could plant or replace the files dbxfs trusts there: run 'chmod go-w \(path)', or use another --cache-dir")
        }
    }

    /// Clears the group and other bits of everything under `path` that has any (not the
    /// directory itself: its mode is the user's choice, and check() vouched for it). Symlinks are
    /// neither followed nor changed. Returns how many entries were changed.
    @discardableResult
    static func tighten(_ path: String, logger: Logger? = nil) -> Int {
        var changed = 0
        var folders = [path]
        while let folder = folders.popLast() {
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { continue }
            for name in names {
                let entry = folder + "/" + name
                var st = stat()
                guard lstat(entry, &st) == 0, st.st_uid == geteuid() else { continue }
                let kind = st.st_mode & S_IFMT
                guard kind == S_IFDIR || kind == S_IFREG else { continue }
                if kind == S_IFDIR { folders.append(entry) }
                if st.st_mode & 0o077 != 0, chmod(entry, st.st_mode & 0o700) == 0 { changed += 1 }
            }
        }
        if changed > 0 {
            logger?.info("made \(changed) file(s) and folder(s) in the cache directory \(path) private to their owner (left readable by others by an older dbxfs or a loose umask)")
        }
        return changed
    }
}
