"""Path arguments: the stone patterns, splitting into components, case folding, disallowed names.

Dropbox paths are case-insensitive and case-preserving. The root is "" (never "/"). A path
argument is one of `/a/b`, `id:<id>` (optionally followed by `/sub/path`), `rev:<hex>` (reads
only) or `ns:<namespace>/a/b`. Pattern failures are 400 text errors (the stone validator runs
before the route); structurally odd paths such as `/a//b` or `/a/` are 409 `malformed_path`.
"""

import functools
import re
import unicodedata

from .errors import BadRequest

PATTERNS = {
    # files.stone ReadPath (get_metadata, download)
    "read": r"(/(.|[\r\n])*|id:.*)|(rev:[0-9a-f]{9,})|(ns:[0-9]+(/(.|[\r\n])*)?)",
    # ListFolderArg.path: "" is the root
    "list": r"(/(.|[\r\n])*)?|id:.*|(ns:[0-9]+(/(.|[\r\n])*)?)",
    # WritePathOrId (upload, delete, move, copy)
    "write": r"(/(.|[\r\n])*)|(ns:[0-9]+(/(.|[\r\n])*)?)|(id:.*)",
    # WritePath (create_folder, restore)
    "write_path": r"(/(.|[\r\n])*)|(ns:[0-9]+(/(.|[\r\n])*)?)",
    # PathOrId (list_revisions)
    "path_or_id": r"/(.|[\r\n])*|id:.*|(ns:[0-9]+(/(.|[\r\n])*)?)",
}

# files.stone `Rev`: String(min_length=9, pattern="[0-9a-f]+").
REV_PATTERN = r"[0-9a-f]{9,}"


def check_rev(field, value):
    """The stone validator's 400 for a rev that is not 9 or more lowercase hex digits."""
    if not isinstance(value, str):
        raise BadRequest(f"request body: {field}: expected string, got {type(value).__name__}")
    if not re.fullmatch(REV_PATTERN, value):
        raise BadRequest(f"request body: {field}: '{value}' did not match pattern '[0-9a-f]+' with at least 9 characters")

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
    """The case folding used for path_lower and for every lookup: Dropbox's own, which is Python
    2.5's unicode.lower() (samschott/maestral PR #409): character by character (so a final sigma
    is σ, never ς), simple mappings only (İ becomes i), and only for characters its old Unicode
    database knows (U+A64A Ꙋ stays as it is). Approximated with the Unicode 3.2 database Python
    still ships (Dropbox's is 4.1; the few cased letters added in 4.0-4.1 differ)."""
    if path.isascii():
        return path.lower()
    return "".join(_lower_char(c) for c in path)


@functools.lru_cache(maxsize=4096)
def _lower_char(c):
    if c == "\u0130":
        return "i"
    if unicodedata.ucd_3_2_0.category(c) == "Cn":
        return c
    folded = c.lower()
    return folded if len(folded) == 1 else c


def nfc(text):
    """Dropbox stores names composed (NFC), in path_display too (maestral sync.py,
    get_index_entry_for_local_path), so "é" typed as e + U+0301 and as U+00E9 is one file."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def refused_name(name):
    """Why Dropbox answers malformed_path for this name, or None. Sources (docs/EMULATOR.md):
    trailing whitespace ("Paths may not end with a slash or whitespace", Dropbox staff in
    dropbox/dropbox-sdk-obj-c#277; MarquisLP/World-Scribe#57; rclone#3481), backslash and DEL
    (rclone's Dropbox encoder: "names with trailing spaces and the DEL character don't work",
    backend/dropbox/dropbox.go), characters outside the Basic Multilingual Plane such as most
    emoji (Dropbox staff in dropbox/dropbox-sdk-java#42; rclone#6199)."""
    if name[-1:].isspace():
        return "ends with whitespace"
    if "\\" in name:
        return "contains a backslash"
    if "\x7f" in name:
        return "contains DEL"
    if any(ord(c) > 0xFFFF for c in name):
        return "has a character outside the Basic Multilingual Plane"
    return None


def split_components(path):
    """Splits `/a/b` into ["a", "b"] (NFC); returns None when the path is malformed.

    Malformed: an empty component (`//` inside, trailing `/`), `.` or `..`, a name too long, or a
    name Dropbox refuses (`refused_name`). "" and the bare root give []. A path that starts with
    several slashes (`//tree`, which rclone sends for its root) is read with one: the stone
    pattern admits it and Dropbox answers it.
    """
    if path == "":
        return []
    if not path.startswith("/"):
        return None
    path = "/" + path.lstrip("/")
    if path == "/":
        return []
    parts = nfc(path[1:]).split("/")
    for part in parts:
        if part in ("", ".", "..") or len(part) > MAX_NAME_LENGTH or "\x00" in part or refused_name(part):
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
