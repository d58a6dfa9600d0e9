"""Shared folders: `sharing_info` on everything inside one, and read-only ones refusing writes.

Sources:
- files.stone `SharingInfo.read_only` ("True if the file or folder is inside a read-only shared
  folder"), `FileSharingInfo` (parent_shared_folder_id, modified_by), `FolderSharingInfo`
  (parent_shared_folder_id, shared_folder_id on the mount point, traverse_only, no_access);
- files.stone `WriteError.no_write_permission` ("the user doesn't have permissions to write to
  the target location"), inside every write route's error union (upload's UploadWriteFailed,
  UploadSessionFinishError.path, CreateFolderError.path, DeleteError.path_write,
  RelocationError.from_write and .to);
- dbx-team-files-guide: team folders are shared folders (namespaces) at the top of a team space.

A shared folder is a folder (by id, so it survives moves) with its own namespace id. Tests make
one with POST /_control/share or a `--seed-manifest` entry. What the emulator does not model:
members, invitations, and leaving a folder (deleting or moving the mount point of a read-only
folder is refused like any other write in it; Dropbox would unmount it).
"""

import secrets
import threading

from .errors import write_error

SCHEMA = """CREATE TABLE IF NOT EXISTS shared_folders (
    folder_id TEXT PRIMARY KEY, namespace_id TEXT NOT NULL UNIQUE,
    read_only INTEGER NOT NULL, team_folder INTEGER NOT NULL DEFAULT 0)"""


class Share:
    __slots__ = ("folder_id", "namespace_id", "read_only", "team_folder")

    def __init__(self, folder_id, namespace_id, read_only, team_folder):
        self.folder_id = folder_id
        self.namespace_id = namespace_id
        self.read_only = bool(read_only)
        self.team_folder = bool(team_folder)


class Shares:
    """The shared folders of the account, with their current paths cached per change seq."""

    def __init__(self, store):
        self.store = store
        self._lock = threading.Lock()
        with store.lock:
            store.db.execute(SCHEMA)
            self._shares = [Share(*row) for row in store.db.execute(
                "SELECT folder_id, namespace_id, read_only, team_folder FROM shared_folders")]
        self._paths = None      # [(path_lower, path_display, share)], deepest first
        self._paths_seq = -1

    def share(self, path, read_only, team_folder=False):
        """Makes the folder at `path` (physical, created if missing) a shared folder; returns it."""
        store = self.store
        with store.lock:
            target = store.resolve(path, write=True)
            row = target.row
            if row is None:
                row = store.create_folder(target, False)
            elif not row["is_folder"]:
                raise ValueError(f"{path} is a file, not a folder")
            with self._lock:
                existing = next((s for s in self._shares if s.folder_id == row["id"]), None)
                ns = existing.namespace_id if existing else str(1000000000 + secrets.randbelow(8999999999))
            with store.write() as db:
                db.execute("INSERT OR REPLACE INTO shared_folders (folder_id, namespace_id, read_only, team_folder) "
                           "VALUES (?, ?, ?, ?)", (row["id"], ns, int(read_only), int(team_folder)))
                # Everything inside now carries other sharing_info: report it in the change feed.
                for r in store.subtree(row):
                    db.execute("UPDATE entries SET seq = ? WHERE id = ?", (store.next_seq(), r["id"]))
            with self._lock:
                self._shares = [s for s in self._shares if s.folder_id != row["id"]]
                self._shares.append(Share(row["id"], ns, read_only, team_folder))
                self._paths_seq = -1
            return {"shared_folder_id": ns, "path_display": row["path_display"], "read_only": bool(read_only)}

    def _current(self):
        """[(path_lower, path_display, share)] deepest first; recomputed when the tree changed."""
        store = self.store
        with self._lock:
            if not self._shares:
                return []
            if self._paths_seq == store.seq and self._paths is not None:
                return self._paths
            shares = list(self._shares)
        paths = []
        with store.lock:
            for share in shares:
                row = store.get_by_id(share.folder_id)
                if row is not None:
                    paths.append((row["path_lower"], row["path_display"], share))
        paths.sort(key=lambda item: item[0].count("/"), reverse=True)
        with self._lock:
            self._paths, self._paths_seq = paths, store.seq
        return paths

    def enclosing(self, path_lower):
        """The shared folders holding `path_lower` (itself included), innermost first."""
        return [(p, share) for p, _, share in self._current()
                if path_lower == p or path_lower.startswith(p + "/")]

    def folder_of_namespace(self, ns):
        for lower, display, share in self._current():
            if share.namespace_id == ns:
                return lower, display
        return None

    def check_writable(self, path_lower, wrapper):
        """Raises `<wrapper>/no_write_permission` inside a read-only shared folder."""
        if not self._shares:
            return
        inner = self.enclosing(path_lower)
        if inner and inner[0][1].read_only:
            raise write_error("no_write_permission", wrapper)

    def sharing_info(self, row, account_id):
        """FileSharingInfo / FolderSharingInfo for an entry, or None outside shared folders."""
        if not self._shares:
            return None
        inner = self.enclosing(row["path_lower"])
        if not inner:
            return None
        path, share = inner[0]
        if row["is_folder"]:
            info = {"read_only": share.read_only, "traverse_only": False, "no_access": False}
            if path == row["path_lower"]:
                info["shared_folder_id"] = share.namespace_id
                if len(inner) > 1:
                    info["parent_shared_folder_id"] = inner[1][1].namespace_id
            else:
                info["parent_shared_folder_id"] = share.namespace_id
            return info
        return {"read_only": share.read_only, "parent_shared_folder_id": share.namespace_id,
                "modified_by": account_id}
