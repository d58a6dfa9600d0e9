"""Giving the account what a plain `--seed` tree cannot express: shared folders (read-only or
not, team folders), export-only files, and the account settings of namespaces.Account.

Two ways in, with the same JSON shapes (docs/EMULATOR.md):
- at run time, `POST /_control/share`, `/_control/export_only` and `/_control/account`;
- at every start, `--seed-manifest FILE`: `{"account": {...}, "share": [{...}],
  "export_only": [{...}]}`, applied after `--seed`.

Paths here are physical: relative to the account's root namespace (in a team space the member
folder is `/Emulated User/...`), since a test seeds the whole account, not one view of it.
"""

import json

from . import namespaces


def _object(body):
    value = json.loads(body or b"{}")
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return value


def _path(value):
    path = value.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError("path must be an absolute Dropbox path, e.g. \"/Shared\"")
    return path


def share(app, value):
    read_only = value.get("read_only", False)
    team_folder = value.get("team_folder", False)
    if not isinstance(read_only, bool) or not isinstance(team_folder, bool):
        raise ValueError("read_only and team_folder must be true or false")
    with namespaces.request_context(app, app.account.root_view()):
        return app.shares.share(_path(value), read_only, team_folder)


def export_only(app, value):
    exports = value.get("exports")
    export_as = value.get("export_as")
    options = value.get("export_options")
    if options is not None and not (isinstance(options, list) and all(isinstance(o, str) for o in options)):
        raise ValueError("export_options must be a list of format names")
    with namespaces.request_context(app, app.account.root_view()):
        return app.exports.create(_path(value), exports, export_as, options)


def account(app, value):
    return app.account.update(value)


CONTROL = {
    "/_control/share": share,
    "/_control/export_only": export_only,
    "/_control/account": account,
}


def handle_control(app, path, method, body):
    """(status, JSON answer) for one of CONTROL's paths; GET /_control/account reads the settings."""
    if path == "/_control/account" and method == "GET":
        return 200, app.account.snapshot()
    if method != "POST":
        return 405, {"error": f"{path} takes POST"}
    try:
        return 200, CONTROL[path](app, _object(body))
    except (ValueError, TypeError) as err:
        return 400, {"error": str(err)}


def apply_manifest(app, manifest_path):
    """--seed-manifest: applies the file's account settings, shares and export-only files."""
    with open(manifest_path) as f:
        manifest = json.load(f)
    if not isinstance(manifest, dict):
        raise ValueError(f"{manifest_path}: expected a JSON object with account, share and export_only")
    unknown = set(manifest) - {"account", "share", "export_only"}
    if unknown:
        raise ValueError(f"{manifest_path}: unknown keys {', '.join(sorted(unknown))}")
    if "account" in manifest:
        account(app, manifest["account"])
    for entry in manifest.get("share", []):
        share(app, entry)
    for entry in manifest.get("export_only", []):
        known = _unchanged_export(app, entry)
        if not known:
            export_only(app, entry)


def _unchanged_export(app, entry):
    """True when an earlier start already made exactly this export-only file (restarts stay quiet)."""
    store = app.store
    with namespaces.request_context(app, app.account.root_view()), store.lock:
        row = store.resolve(_path(entry)).row
        if row is None or row["is_folder"]:
            return False
        known = app.exports.get(row["id"])
    if known is None:
        return False
    export_as, options, blobs = known
    if export_as != entry.get("export_as") or set(blobs) != set(entry.get("exports") or {}):
        return False
    for fmt, content in entry["exports"].items():
        data = content.encode() if isinstance(content, str) else bytes(content)
        with open(store.blob_path(blobs[fmt]), "rb") as f:
            if f.read() != data:
                return False
    return True
