"""Path arguments: the stone patterns, splitting into components, case folding, disallowed names.

Dropbox paths are case-insensitive and case-preserving. The root is "" (never "/"). A path
argument is one of `/a/b`, `id:<id>` (optionally followed by `/sub/path`), `rev:<hex>` (reads
only) or `ns:<namespace>/a/b`. Pattern failures are 400 text errors (the stone validator runs
before the route); structurally odd paths such as `/a//b` or `/a/` are 409 `malformed_path`.
"""

import re

from .errors import BadRequest

PATTERNS = {
    # files.stone ReadPath (get_metadata, download)
    "read": r"(/(.|[\r\n])*|id:.*)|(rev:[0-9a-f]{9,})|(ns:[0-9]+(/(.|[\r\n])*)?)",
    # ListFolderArg.path: "" is the root
    "list": r"(/(.|[\r\n])*)?|id:.*|(ns:[0-9]+(/(.|[\r\n])*)?)",
    # WritePathOrId (upload, delete, move, copy)
    "write": r"(/(.|[\r\n])*)|(ns:[0-9]+(/(.|[\r\n])*)?)|(id:.*)",
    # WritePath (create_folder)
    "write_path": r"(/(.|[\r\n])*)|(ns:[0-9]+(/(.|[\r\n])*)?)",
}

# Names Dropbox refuses to store (compared case-insensitively); rclone refuses the same list.
DISALLOWED_NAMES = {"desktop.ini", "thumbs.db", ".ds_store", "icon\r", ".dropbox", ".dropbox.attr"}
MAX_NAME_LENGTH = 255


def check_pattern(field, value, kind):
    """Raises the stone validator's 400 when `value` is not a string matching the pattern."""
    if not isinstance(value, str):
        raise BadRequest(f"request body: {field}: expected string, got {type(value).__name__}")
    if kind == "read" and value == "":
        raise BadRequest(f"request body: {field}: The root folder is unsupported.")
    pattern = PATTERNS[kind]
    if not re.fullmatch(pattern, value, flags=re.DOTALL):
        raise BadRequest(f"request body: {field}: '{value}' did not match pattern '{pattern}'")
    if kind == "list" and value == "/":
        raise BadRequest(f'request body: {field}: Specify the root folder as an empty string rather than as "/".')


def lower(path):
    """The case folding used for path_lower and for every lookup."""
    return path.lower()


def split_components(path):
    """Splits `/a/b` into ["a", "b"]; returns None when the path is malformed.

    Malformed: an empty component (`//`, trailing `/`), `.` or `..`, or a name too long.
    "" and the bare root give [].
    """
    if path == "":
        return []
    if not path.startswith("/"):
        return None
    parts = path[1:].split("/")
    for part in parts:
        if part in ("", ".", "..") or len(part) > MAX_NAME_LENGTH or "\x00" in part:
            return None
    return parts


def is_disallowed_name(name):
    return name.lower() in DISALLOWED_NAMES


def parent_of(path_lower):
    """The parent's path_lower; "" for a top-level item."""
    return path_lower.rsplit("/", 1)[0]


def split_ext(name):
    """("report", ".txt") for "report.txt"; a leading dot does not start an extension."""
    dot = name.rfind(".")
    if dot <= 0:
        return name, ""
    return name[:dot], name[dot:]
