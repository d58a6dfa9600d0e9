"""Which Dropbox host a request was sent to, and the host each route lives on.

Dropbox serves RPC routes on api.dropboxapi.com, upload and download routes on
content.dropboxapi.com, longpoll on notify.dropboxapi.com, the OAuth token endpoint on the api
host and the authorize page on www.dropbox.com (files.stone route `host` attributes,
stone_cfg.stone). A route sent to another host is refused with a 400, "Incorrect host for API
function files/download.  You must issue the request to content.dropboxapi.com"
(kunalvarma05/dropbox-php-sdk#100).

The emulator serves every host on one port. A client says which host it means either by a path
prefix, `/api`, `/content`, `/notify` or `/web` (so its four bases are `http://127.0.0.1:PORT/api`
and so on), or by the first label of its `Host` header (`api.…`, `content.…`, `notify.…`,
`www.…`). A request with neither (a plain `/2/…` to an IP address) names no host and cannot be
checked: it is served, as from a gateway that fronts all four.
"""

from .errors import BadRequest

PREFIXES = ("api", "content", "notify", "web")
NAMES = {"api": "api.dropboxapi.com", "content": "content.dropboxapi.com",
         "notify": "notify.dropboxapi.com", "web": "www.dropbox.com"}
HOST_LABELS = {"api": "api", "content": "content", "notify": "notify", "www": "web"}


def split(path, host_header):
    """(path without the host prefix, the host asked for or None)."""
    for prefix in PREFIXES:
        if path.startswith("/" + prefix + "/"):
            return path[len(prefix) + 1:], prefix
    name = (host_header or "").split(":")[0].lower()
    if name and not name.replace(".", "").isdigit() and "." in name:
        return path, HOST_LABELS.get(name.split(".")[0])
    return path, None


def route_host(route_name, style):
    """The host a `/2/` route lives on."""
    if route_name == "files/list_folder/longpoll":
        return "notify"
    return "content" if style in ("upload", "download") else "api"


def check(function, expected, asked):
    """Refuses a request sent to a host other than `expected` (when the request names one)."""
    if asked is not None and asked != expected:
        raise BadRequest(f"Incorrect host for API function {function}.  "
                         f"You must issue the request to {NAMES[expected]}")
