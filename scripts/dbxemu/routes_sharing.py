"""sharing/* routes for shared links: create_shared_link_with_settings and list_shared_links.

Sources: sharing.stone (dropbox/dropbox-api-spec): `CreateSharedLinkWithSettingsArg`,
`SharedLinkSettings`, `CreateSharedLinkWithSettingsError` (path, email_not_verified,
shared_link_already_exists with optional metadata, settings_error, access_denied, ...),
`SharedLinkSettingsError` (invalid_settings: "the requested visibility is password but the
link_password is missing, expires is set to the past, etc."; not_authorized: "basic users can
only set RequestedVisibility.public as the requested_visibility and cannot set expires"),
`SharedLinkMetadata` / `FileLinkMetadata` / `FolderLinkMetadata`, `LinkPermissions`,
`ListSharedLinksArg` / `ListSharedLinksResult` / `ListSharedLinksError`; the route docs:
list_shared_links with a path "returns a list of all shared links that allow access to the given
path - direct links to the given path and links to parent folders of the given path", and
shared_link_already_exists: "Existing link metadata will not be returned if custom settings were
specified in the request that could make the existing link incompatible".

Model: one link per file or folder, kept by the item's id (so it follows moves), with its expiry
and whether a password protects it (the password itself is kept only to compare settings).
A link to something deleted is not listed. What the emulator does not model: team link
policies (a team member's links are public like anyone's), revoking and modifying links,
audiences other than public, link access levels other than viewer.
"""

import secrets
import time
import urllib.parse

from . import namespaces, paths
from .errors import BadRequest, RouteError, lookup_error
from .routes_files import args, get_field
from .storage import TIMESTAMP_FORMAT, check_timestamp, name_of, now_timestamp

# Created by App at start.
SCHEMA = """CREATE TABLE IF NOT EXISTS shared_links (
    url TEXT PRIMARY KEY, id TEXT NOT NULL UNIQUE, expires TEXT, password TEXT, created TEXT NOT NULL)"""

URL_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def _random(n):
    return "".join(secrets.choice(URL_ALPHABET) for _ in range(n))


def link_permissions(account_type, has_password):
    """LinkPermissions as the link's owner sees it; a basic account may set neither an expiry nor
    a password."""
    basic = account_type == "basic"
    visibility = {".tag": "password" if has_password else "public"}
    password_policy = {"policy": {".tag": "password"}, "resolved_policy": {".tag": "password"}, "allowed": not basic}
    if basic:
        password_policy["disallowed_reason"] = {".tag": "user_account_type"}
    return {
        "resolved_visibility": visibility, "requested_visibility": visibility,
        "can_revoke": True,
        "visibility_policies": [{"policy": {".tag": "public"}, "resolved_policy": {".tag": "public"}, "allowed": True},
                                password_policy],
        "can_set_expiry": not basic, "can_remove_expiry": not basic,
        "allow_download": True, "can_allow_download": True, "can_disallow_download": not basic,
        "allow_comments": True, "team_restricts_comments": False,
        "effective_audience": {".tag": "public"}, "link_access_level": {".tag": "viewer"},
        "can_set_password": not basic, "can_remove_password": not basic, "require_password": has_password,
    }


def link_metadata(app, link, row):
    """SharedLinkMetadata (file or folder, with its `.tag`) of a link to the live entry `row`."""
    md = {".tag": "folder" if row["is_folder"] else "file", "url": link["url"], "id": row["id"],
          "name": name_of(row["path_display"]),
          "link_permissions": link_permissions(app.account.account_type, link["password"] is not None)}
    outward = namespaces.current_view().outward(row["path_lower"], row["path_display"])
    if outward is not None:
        md["path_lower"] = outward[0]
    if link["expires"]:
        md["expires"] = link["expires"]
    if not row["is_folder"]:
        md.update(client_modified=row["client_modified"], server_modified=row["server_modified"],
                  rev=row["rev"], size=row["size"])
    return md


def parse_settings(raw, account_type):
    """The SharedLinkSettings a request asks for, as (expires, password); raises settings_error."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise BadRequest("request body: settings: expected an object")

    def settings_error(tag):
        return RouteError({".tag": "settings_error", "settings_error": {".tag": tag}})

    expires = get_field(raw, "expires", str)
    if expires is not None:
        check_timestamp(expires, "settings.expires")
    password = get_field(raw, "link_password", str)
    require = get_field(raw, "require_password", bool)
    visibility = raw.get("requested_visibility")
    visibility = visibility.get(".tag") if isinstance(visibility, dict) else visibility
    audience = raw.get("audience")
    audience = audience.get(".tag") if isinstance(audience, dict) else audience
    wants_password = bool(require) or visibility == "password"
    if wants_password and not password:
        raise settings_error("invalid_settings")
    if expires is not None and expires <= time.strftime(TIMESTAMP_FORMAT, time.gmtime()):
        raise settings_error("invalid_settings")
    restricted = wants_password or expires is not None or visibility not in (None, "public") \
        or audience not in (None, "public")
    if account_type == "basic" and restricted:
        raise settings_error("not_authorized")
    return expires, (password if wants_password else None)


def _live_row(store, target):
    if target.is_root or target.row is None:
        raise lookup_error("not_found")
    return target.row


def create_shared_link_with_settings(call):
    arg = args(call)
    path = get_field(arg, "path", str, required=True)
    paths.check_pattern("path", path, "read")
    app, store = call.app, call.app.store
    with store.lock:
        row = _live_row(store, store.resolve(path))
        if not app.account["email_verified"]:
            raise RouteError({".tag": "email_not_verified"})
        settings = parse_settings(arg.get("settings"), app.account.account_type)
        existing = store.db.execute("SELECT * FROM shared_links WHERE id = ?", (row["id"],)).fetchone()
        if existing is not None:
            same = settings is None or settings == (existing["expires"], existing["password"])
            error = {".tag": "shared_link_already_exists"}
            if same:
                error["shared_link_already_exists"] = {".tag": "metadata", "metadata": link_metadata(app, existing, row)}
            raise RouteError(error)
        expires, password = settings or (None, None)
        kind = "fo" if row["is_folder"] else "fi"
        url = (f"https://www.dropbox.com/scl/{kind}/{_random(21)}/"
               f"{urllib.parse.quote(name_of(row['path_display']))}?rlkey={_random(25)}&dl=0")
        with store.write() as db:
            db.execute("INSERT INTO shared_links (url, id, expires, password, created) VALUES (?, ?, ?, ?, ?)",
                       (url, row["id"], expires, password, now_timestamp()))
        link = store.db.execute("SELECT * FROM shared_links WHERE url = ?", (url,)).fetchone()
        return link_metadata(app, link, row)


def list_shared_links(call):
    """With a path: the links to it and (unless direct_only) to its folders; without one, every
    link of the account in this view. Cursors are not needed: everything fits one page."""
    arg = args(call)
    path = get_field(arg, "path", str)
    if path is not None:
        paths.check_pattern("path", path, "read")
    cursor = get_field(arg, "cursor", str)
    if cursor is not None and cursor != "":
        raise RouteError({".tag": "reset"})
    direct_only = get_field(arg, "direct_only", bool, False)
    app, store = call.app, call.app.store
    view = namespaces.current_view()
    with store.lock:
        links = []
        if path is not None:
            row = _live_row(store, store.resolve(path))
            wanted = [row["path_lower"]]
            if not direct_only:
                parts = row["path_lower"].split("/")
                wanted += ["/".join(parts[:i]) for i in range(len(parts) - 1, 1, -1)]
            for path_lower in wanted:
                entry = store.get(path_lower)
                link = entry and store.db.execute("SELECT * FROM shared_links WHERE id = ?", (entry["id"],)).fetchone()
                if link is not None and entry is not None and view.contains(entry["path_lower"]):
                    links.append(link_metadata(app, link, entry))
        else:
            for link in store.db.execute("SELECT * FROM shared_links ORDER BY created, url").fetchall():
                entry = store.get_by_id(link["id"])
                if entry is not None and view.contains(entry["path_lower"]):
                    links.append(link_metadata(app, link, entry))
        return {"links": links, "has_more": False}


# name: (style, needs auth, is a write commit, function)
ROUTES = {
    "sharing/create_shared_link_with_settings": ("rpc", True, False, create_shared_link_with_settings),
    "sharing/list_shared_links": ("rpc", True, False, list_shared_links),
}
