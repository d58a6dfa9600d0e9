"""Namespaces: the team space, the member folder, and the `Dropbox-API-Path-Root` header.

Sources (docs/EMULATOR.md cites them again):
- common.stone (dropbox/dropbox-api-spec): `PathRoot` (home | root | namespace_id), `PathRootError`
  (invalid_root carrying the user's RootInfo | no_permission), `RootInfo`, `TeamRootInfo.home_path`;
- https://www.dropbox.com/developers/reference/path-root-header-modes: without the header (or
  with `home`) calls work in the home namespace; `root` must name the user's root namespace, or
  the answer is 422;
- https://developers.dropbox.com/dbx-team-files-guide: in a team space the root namespace holds
  the team folders and every member's folder; the member's home namespace is their folder;
- kloudless.com/blog/2019/03/21/working-with-dropbox-namespaces: `ns:<team folder>` without the
  header answers path/not_found (a namespace outside the home folder is not reachable);
- rclone issue #5089: an App-folder app that sends the header gets 400 "Path root is not
  supported for sandbox app.".

Model. The store holds ONE tree, the account's root namespace. In the default (personal) mode,
root and home are the same namespace, as for a personal account. With `--team-space`, the tree
is the team root: the member's home namespace is the folder `HOME_PATH` in it, and team folders
are shared folders at its top level (shares.py). Each request works in a `View`: the physical
folder its paths are relative to ("" for the root, `HOME_PATH` for the member folder). The HTTP
layer picks the view from the header and installs it, with the app, as the thread's request
context; `Store.resolve` maps incoming paths through it and `storage.metadata` maps outgoing
ones, so the routes themselves never see a namespace.
"""

import json
import secrets
import threading
from contextlib import contextmanager

from .errors import BadRequest, RouteError, lookup_error

HOME_DISPLAY_NAME = "Emulated User"
HOME_PATH = "/" + HOME_DISPLAY_NAME
LIMIT_TYPES = ("off", "alert_only", "stop_sync")
# users.stone AccountType; "" is the default: pro for a personal account, business in a team space.
ACCOUNT_TYPES = ("", "basic", "pro", "business")


class View:
    """The physical folder a request's paths are relative to, and the namespace that is."""

    __slots__ = ("prefix_lower", "prefix_display", "namespace_id")

    def __init__(self, prefix_lower="", prefix_display="", namespace_id=None):
        self.prefix_lower = prefix_lower
        self.prefix_display = prefix_display
        self.namespace_id = namespace_id

    def contains(self, path_lower):
        p = self.prefix_lower
        return not p or path_lower == p or path_lower.startswith(p + "/")

    def outward(self, path_lower, path_display):
        """A physical (lower, display) pair as this view shows it; None when outside."""
        if not self.prefix_lower:
            return path_lower, path_display
        if not self.contains(path_lower):
            return None
        depth = self.prefix_lower.count("/")
        rest = path_display.split("/")[depth + 1:]
        return path_lower[len(self.prefix_lower):], "".join("/" + part for part in rest)

    def encode(self):
        return [self.prefix_lower, self.prefix_display, self.namespace_id]

    @staticmethod
    def decode(value):
        return View(*value) if value else View()


PERSONAL = View()
_context = threading.local()


@contextmanager
def request_context(app, view):
    """Installs (app, view) for the current thread: what path resolution and rendering use."""
    saved = getattr(_context, "value", None)
    _context.value = (app, view)
    try:
        yield
    finally:
        _context.value = saved


@contextmanager
def using_view(view):
    """Same app, another view (a cursor renders in the view it was made in)."""
    app = current_app()
    with request_context(app, view):
        yield


def current_app():
    value = getattr(_context, "value", None)
    return value[0] if value else None


def current_view():
    value = getattr(_context, "value", None)
    return value[1] if value else PERSONAL


class Account:
    """The account's kind and the space settings of a team (persisted in the store's meta table).

    `team_space` is fixed when the data directory is created (`--team-space`): the layout of
    the tree depends on it. The rest can change at run time through POST /_control/account.
    """

    SETTINGS = {
        # An App-folder ("sandbox") app: the Path-Root header is refused with a 400.
        "app_folder": False,
        # Bytes the other members of the team use (they count in the team's `used`).
        "team_used_by_others": 0,
        # The member's own limit inside the team allocation (0: none) and its type.
        "member_space_limit": 0,
        "member_limit_type": "off",
        # users.stone AccountType ("" = pro, or business in a team space). A basic account may
        # not set a shared link's expiry or password (sharing.stone SharedLinkSettingsError).
        "account_type": "",
        # FullAccount.email_verified; shared links need a verified email (email_not_verified).
        "email_verified": True,
    }

    def __init__(self, store, team_space):
        self.store = store
        self._lock = threading.Lock()
        with store.lock:
            saved = store.meta_get("team_space")
            if saved is None:
                store.meta_set("team_space", int(bool(team_space)))
            elif bool(int(saved)) != bool(team_space):
                raise SystemExit(
                    f"dbx-emulator: the data directory {store.data_dir} holds a "
                    f"{'team-space' if int(saved) else 'personal'} account; start it "
                    f"{'with' if int(saved) else 'without'} --team-space, or use another --data")
            self.team_space = bool(team_space)
            self.home_namespace_id = store.meta_get_or_create(
                "home_namespace_id", lambda: str(1000000000 + secrets.randbelow(8999999999)))
            self.settings = dict(self.SETTINGS)
            self.settings.update(json.loads(store.meta_get("account_settings", "{}")))
        if self.team_space:
            self._ensure_home_folder()

    @property
    def root_namespace_id(self):
        return self.store.namespace_id

    def _ensure_home_folder(self):
        store = self.store
        with store.lock:
            if store.get(HOME_PATH.lower()) is None:
                with store.write():
                    store.create_folder(store.resolve(HOME_PATH, write=True), False)

    def update(self, changes):
        """Validates and applies POST /_control/account; raises ValueError on bad input."""
        clean = {}
        for key, value in changes.items():
            if key not in self.SETTINGS:
                raise ValueError(f"unknown account setting {key!r} (known: {', '.join(sorted(self.SETTINGS))})")
            if key in ("app_folder", "email_verified"):
                if not isinstance(value, bool):
                    raise ValueError(f"{key} must be true or false")
            elif key == "account_type":
                if value not in ACCOUNT_TYPES:
                    raise ValueError("account_type must be one of basic, pro, business, or \"\" (the default)")
            elif key == "member_limit_type":
                if value not in LIMIT_TYPES:
                    raise ValueError(f"member_limit_type must be one of {', '.join(LIMIT_TYPES)}")
            elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{key} must be a non-negative integer (bytes)")
            clean[key] = value
        with self._lock:
            self.settings.update(clean)
            snapshot = dict(self.settings)
        with self.store.write():
            self.store.meta_set("account_settings", json.dumps(snapshot))
        return self.snapshot()

    def snapshot(self):
        with self._lock:
            return {"team_space": self.team_space, "root_namespace_id": self.root_namespace_id,
                    "home_namespace_id": self.home_namespace_id if self.team_space else self.root_namespace_id,
                    **self.settings}

    def __getitem__(self, key):
        with self._lock:
            return self.settings[key]

    @property
    def account_type(self):
        """users.stone AccountType tag: the setting, else pro (business in a team space)."""
        return self["account_type"] or ("business" if self.team_space else "pro")

    # ----- views and the Path-Root header -----
    def home_view(self):
        if not self.team_space:
            return View(namespace_id=self.root_namespace_id)
        return View(HOME_PATH.lower(), HOME_PATH, self.home_namespace_id)

    def root_view(self):
        return View(namespace_id=self.root_namespace_id)

    def root_info(self):
        if self.team_space:
            return {".tag": "team", "root_namespace_id": self.root_namespace_id,
                    "home_namespace_id": self.home_namespace_id, "home_path": HOME_PATH}
        return {".tag": "user", "root_namespace_id": self.root_namespace_id,
                "home_namespace_id": self.root_namespace_id}

    def view_for_header(self, raw, shares):
        """The view a request's `Dropbox-API-Path-Root` header (or its absence) selects.

        Raises BadRequest (400) for a header that is not a PathRoot, and RouteError with status
        422 for a PathRootError (a stale root, a namespace the user cannot reach).
        """
        if raw is None:
            return self.home_view()
        if self["app_folder"]:
            raise BadRequest("Path root is not supported for sandbox app.")
        try:
            value = json.loads(raw)
        except ValueError:
            raise BadRequest("Dropbox-API-Path-Root: could not decode input as JSON")
        if isinstance(value, str):
            value = {".tag": value}
        tag = value.get(".tag") if isinstance(value, dict) else None
        if tag == "home":
            return self.home_view()
        if tag == "root":
            ns = value.get("root")
            if not isinstance(ns, str):
                raise BadRequest("Dropbox-API-Path-Root: root: expected a namespace id")
            if ns != self.root_namespace_id:
                raise RouteError({".tag": "invalid_root", "invalid_root": self.root_info()}, status=422)
            return self.root_view()
        if tag == "namespace_id":
            ns = value.get("namespace_id")
            if not isinstance(ns, str):
                raise BadRequest("Dropbox-API-Path-Root: namespace_id: expected a namespace id")
            found = self.namespace_folder(ns, shares)
            if found is None:
                raise RouteError({".tag": "no_permission"}, status=422)
            return View(found[0], found[1], ns)
        raise BadRequest(f"Dropbox-API-Path-Root: unknown tag '{tag}'")

    def namespace_folder(self, ns, shares):
        """(path_lower, path_display) of the folder that namespace `ns` is, or None."""
        if ns == self.root_namespace_id:
            return "", ""
        if self.team_space and ns == self.home_namespace_id:
            return HOME_PATH.lower(), HOME_PATH
        return shares.folder_of_namespace(ns) if shares is not None else None

    def resolve_ns(self, ns, shares, wrapper):
        """The physical folder of an `ns:<id>` path in the current view; not_found outside it."""
        found = self.namespace_folder(ns, shares)
        if found is None or not current_view().contains(found[0]):
            raise lookup_error("not_found", wrapper)
        return found

    # ----- space usage (users.stone SpaceUsage, TeamSpaceAllocation) -----
    def space_usage(self, quota):
        store = self.store
        with store.lock:
            total = store.used_bytes
            if not self.team_space:
                return {"used": total, "allocation": {".tag": "individual", "allocated": quota}}
            prefix = HOME_PATH.lower()
            own = store.db.execute(
                "SELECT COALESCE(SUM(size), 0) FROM entries WHERE is_folder = 0 AND path_lower >= ? AND path_lower < ?",
                (prefix + "/", prefix + "0")).fetchone()[0]
        with self._lock:
            others = self.settings["team_used_by_others"]
            limit = self.settings["member_space_limit"]
            limit_type = self.settings["member_limit_type"]
        return {"used": own,
                "allocation": {".tag": "team", "used": total + others, "allocated": quota,
                               "user_within_team_space_allocated": limit,
                               "user_within_team_space_limit_type": {".tag": limit_type},
                               "user_within_team_space_used_cached": own}}

    def team_quota(self, allocated):
        """What the tree may hold: the team allocation less what the other members use."""
        if not self.team_space:
            return allocated
        return max(0, allocated - self["team_used_by_others"])
