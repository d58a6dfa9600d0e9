"""Files that cannot be downloaded, only exported: Paper docs, Google Docs/Sheets/Slides, `.web`
shortcuts; and the `files/export` route.

Sources:
- files.stone `FileMetadata.is_downloadable` ("If true, file can be downloaded directly; else
  the file must be exported") and `export_info` ("must be set if is_downloadable is false");
  `ExportInfo` (export_as, export_options); `DownloadError.unsupported_file` ("This file type
  cannot be downloaded directly; use export instead"); `route export` (content host, download
  style; "only supports exporting files that cannot be downloaded directly and whose
  ExportResult.file_metadata has ExportInfo.export_as populated"); `ExportArg` (path,
  export_format), `ExportResult` (export_metadata, file_metadata), `ExportMetadata` (name, size,
  export_hash), `ExportError` (path, non_exportable, invalid_export_format, retry_error);
- rclone issue #8370 (such files are listed and their download fails), PR #8371 (Paper docs
  exported as html or md; the export name carries the format's extension, `Doc.paper` ->
  `Doc.md`), issue #8391 (`.web` shortcuts export only as "url", a small JSON document).

An export-only file is an ordinary entry (id, rev, a `size` and a content hash of a stand-in
blob, so its listed size is NOT the size of any export, as on Dropbox) plus a row here with its
formats and one blob per format. Tests make them with POST /_control/export_only or a
`--seed-manifest` entry. An upload over one (same id) makes it an ordinary file again.
"""

import json
import os
import threading

from .errors import RouteError
from .hashing import ContentHasher
from .routes_files import Download, args, get_field, read_file_row
from .storage import metadata
from . import paths

SCHEMA = """CREATE TABLE IF NOT EXISTS export_only (
    id TEXT PRIMARY KEY, export_as TEXT, export_options TEXT NOT NULL, blobs TEXT NOT NULL)"""


class ExportOnlyFiles:
    """The registry of export-only files, by file id (moves keep it)."""

    def __init__(self, store):
        self.store = store
        self._lock = threading.Lock()
        with store.lock:
            store.db.execute(SCHEMA)
            self._files = {row[0]: (row[1], json.loads(row[2]), json.loads(row[3])) for row in store.db.execute(
                "SELECT id, export_as, export_options, blobs FROM export_only")}

    def get(self, file_id):
        with self._lock:
            return self._files.get(file_id)

    def forget(self, file_id):
        """Content was committed over it: an ordinary file from now on."""
        with self._lock:
            if self._files.pop(file_id, None) is None:
                return
        with self.store.write() as db:
            db.execute("DELETE FROM export_only WHERE id = ?", (file_id,))

    def create(self, path, exports, export_as, export_options=None):
        """Creates (or replaces) the export-only file at physical `path`.

        `exports` maps each format to the text (or bytes) its export yields; `export_as` is the
        default format, or None for a file that cannot be exported either.
        """
        if not isinstance(exports, dict) or not all(isinstance(k, str) for k in exports):
            raise ValueError("exports must map format names to their content")
        if export_as is not None and export_as not in exports:
            raise ValueError(f"export_as {export_as!r} has no content in exports")
        options = list(export_options) if export_options is not None else sorted(exports)
        store = self.store
        blobs = {}
        for fmt, content in exports.items():
            data = content.encode() if isinstance(content, str) else bytes(content)
            temp = store.new_temp_path()
            with open(temp, "wb") as f:
                f.write(data)
            blobs[fmt] = store.adopt_blob(temp)
        # The stand-in the listing describes: not any export's bytes (Dropbox's listed size of a
        # Paper doc is not its export's size either).
        stand_in = json.dumps({"export_only": True, "formats": options}, sort_keys=True).encode() * 3
        temp = store.new_temp_path()
        with open(temp, "wb") as f:
            f.write(stand_in)
        hasher = ContentHasher()
        hasher.update(stand_in)
        with store.lock:
            target = store.resolve(path, write=True)
            if target.row is not None and not target.row["is_folder"]:
                self.forget(target.row["id"])
            row = store.commit_file(target, ("overwrite", None), False, None, False, temp, len(stand_in),
                                    hasher.hexdigest())
            with store.write() as db:
                db.execute("INSERT OR REPLACE INTO export_only (id, export_as, export_options, blobs) VALUES (?, ?, ?, ?)",
                           (row["id"], export_as, json.dumps(options), json.dumps(blobs)))
                # Listed again with is_downloadable false.
                db.execute("UPDATE entries SET seq = ? WHERE id = ?", (store.next_seq(), row["id"]))
            with self._lock:
                self._files[row["id"]] = (export_as, options, blobs)
            return metadata(store.get_by_id(row["id"]), tag=False)

    def decorate(self, md, row):
        """Adds is_downloadable false and export_info to a FileMetadata of an export-only file."""
        known = self.get(row["id"])
        if known is None:
            return
        export_as, options, _ = known
        md["is_downloadable"] = False
        info = {"export_options": options}
        if export_as is not None:
            info["export_as"] = export_as
        md["export_info"] = info

    def refuse_download(self, row):
        """files/download of an export-only file: 409 unsupported_file."""
        if row is not None and not row["is_folder"] and self.get(row["id"]) is not None:
            raise RouteError({".tag": "unsupported_file"})


def export_name(name, fmt):
    stem, _ = paths.split_ext(name)
    return f"{stem}.{fmt}"


def export(call):
    arg = args(call)
    path = get_field(arg, "path", str, required=True)
    paths.check_pattern("path", path, "read")
    fmt = get_field(arg, "export_format", str)
    app = call.app
    store = app.store
    with store.lock:
        row = read_file_row(store, path)
        known = app.exports.get(row["id"])
        if known is None:
            raise RouteError({".tag": "non_exportable"})
        export_as, options, blobs = known
        chosen = fmt or export_as
        if chosen is None:
            raise RouteError({".tag": "non_exportable"})
        if chosen not in blobs or (fmt is not None and fmt not in options and fmt != export_as):
            raise RouteError({".tag": "invalid_export_format"})
        blob = store.blob_path(blobs[chosen])
        size = os.path.getsize(blob)
        hasher = ContentHasher()
        with open(blob, "rb") as f:
            hasher.update(f.read())
        result = {"export_metadata": {"name": export_name(row["path_display"].rsplit("/", 1)[1], chosen),
                                      "size": size, "export_hash": hasher.hexdigest()},
                  "file_metadata": metadata(row, tag=False)}
        return Download(result, open(blob, "rb"), size, None)


# name: (style, needs auth, is a write commit, function)
ROUTES = {
    "files/export": ("download", True, False, export),
}
