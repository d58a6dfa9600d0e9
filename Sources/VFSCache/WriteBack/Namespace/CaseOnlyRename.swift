/// Case-only renames (`mv readme README`) on Dropbox. `move_v2` "does not currently support
/// case-only renaming" (files.stone); asked anyway it answers success and keeps the old case, and
/// the change feed never reports a case-only change (takezoh/obsidian-air-sync#47). So the rename
/// goes through a temporary name in the same folder: readme → `.readme.dbxfs-case-1a2b3c4d` →
/// README. Two real moves: the server keeps the id, nothing is copied or deleted.
///
/// The step is journaled (table `case_renames` of the upload journal: temporary path, source,
/// target) before the first move and forgotten after the second, so if it stops in between (the
/// second move failed past the client's retries, or the process died) the next attempt finishes
/// it: `resumeCaseRenames` runs at start-up and before every new case-only rename. Until then the
/// file or folder shows under its temporary name; nothing is lost.
import Foundation

extension WriteBackEngine {
    /// Whether renaming `from` to `to` only changes the case of its name.
    public static func isCaseOnlyRename(from: String, to: String) -> Bool {
        from != to && key(from) == key(to)
    }

    /// Renames `from` to `to` (same path but for case) through a temporary name, with `remote`'s
    /// moves (the facade passes its own, whose waits are bounded for the FUSE caller). Returns the
    /// entry at `to`. On failure before the first move nothing changed; after it, the rename is
    /// left journaled and finished later.
    public func renameChangingCase(from: String, to: String, using remote: any RemoteStore) throws(RemoteError) -> RemoteEntry {
        resumeCaseRenames(using: remote)
        let folder = InodeTable.parentPath(to)
        let name = InodeTable.lastName(to)
        var attempt = 0
        while true {
            attempt += 1
            let temporary = folder + "/" + Self.temporaryName(for: name)
            try recordCaseRename(temporary: temporary, source: from, target: to)
            do throws(RemoteError) {
                _ = try remote.move(from: from, to: temporary)
            } catch {
                forgetCaseRename(temporary: temporary)
                // Someone else's file holds that name (vanishingly unlikely): pick another.
                if case .conflict = error, attempt < 3 { continue }
                throw error
            }
            do throws(RemoteError) {
                let entry = try remote.move(from: temporary, to: to)
                forgetCaseRename(temporary: temporary)
                return entry
            } catch {
                WriteBackLog.error("case-only rename \(from) → \(to): the second move failed (\(error)); it is on Dropbox as \(temporary) until dbxfs finishes the rename (at the next rename, or the next mount)")
                throw error
            }
        }
    }

    /// Finishes case-only renames that stopped after their first move. Best effort: a row whose
    /// move fails stays for the next call.
    func resumeCaseRenames(using remote: (any RemoteStore)? = nil) {
        let remote = remote ?? self.remote
        let rows: [SQLiteRow]
        do { rows = try journal.database.query("SELECT temporary, source, target FROM case_renames") } catch {
            WriteBackLog.error("cannot read the journal's case-only renames: \(error)")
            return
        }
        for row in rows {
            guard let temporary = row.text("temporary"), let target = row.text("target") else { continue }
            do throws(RemoteError) {
                if try remote.metadata(path: temporary) != nil {
                    _ = try remote.move(from: temporary, to: target)
                    WriteBackLog.info("finished the case-only rename of \(row.text("source") ?? "?") → \(target) (it was left as \(temporary))")
                }
                forgetCaseRename(temporary: temporary)
            } catch {
                if case .conflict = error {
                    // Something else took the name meanwhile: the item stays visible where it is.
                    WriteBackLog.warning("cannot finish the case-only rename to \(target): something else is there now; the item stays as \(temporary)")
                    forgetCaseRename(temporary: temporary)
                } else {
                    WriteBackLog.warning("cannot finish the case-only rename to \(target) yet (\(error)); it stays as \(temporary) for now")
                }
            }
        }
    }

    /// What every temporary name contains (the change feed recognises our own steps by it).
    static let caseRenameMarker = ".dbxfs-case-"

    /// `.name.dbxfs-case-<8 hex digits>`, or a shorter form when the name is long.
    static func temporaryName(for name: String) -> String {
        let tag = caseRenameMarker + String(UInt32.random(in: .min ... .max), radix: 16)
        let full = "." + name + tag
        return full.utf8.count <= 255 ? full : tag
    }

    private func recordCaseRename(temporary: String, source: String, target: String) throws(RemoteError) {
        do {
            try journal.database.run("INSERT OR REPLACE INTO case_renames(temporary, source, target) VALUES(?, ?, ?)",
                                     [temporary, source, target])
        } catch {
            throw .other("cannot journal the case-only rename of \(source): \(error)")
        }
    }

    private func forgetCaseRename(temporary: String) {
        do { try journal.database.run("DELETE FROM case_renames WHERE temporary = ?", [temporary]) } catch {
            WriteBackLog.error("cannot update the journal's case-only renames: \(error)")
        }
    }
}
