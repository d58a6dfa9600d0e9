"""Shared set-up of the emulator suite, under a module name no other suite uses.

(pytest imports every folder's conftest.py as the module `conftest`, so when the project's test
command runs several suites in one process, `from conftest import ...` picks up whichever
conftest was loaded last. Anything the tests import lives here instead.)

At import: a throwaway certificate made with the openssl CLI, a free port, and the SDK's host
variables. The Python SDK reads DROPBOX_API_HOST / _CONTENT_HOST / _NOTIFY_HOST /
DROPBOX_WEB_HOST once, when `dropbox` is first imported, and always speaks https, so this
module must be imported before `dropbox` (conftest.py does that).
"""

import atexit
import hashlib
import os
import shutil
import socket
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "support"))

from emulator import make_certificate  # noqa: E402

APP_KEY = "test-app-key"
WORK_DIR = tempfile.mkdtemp(prefix="emu-suite-")
# Gone when the run ends, also when no test used the suite's emulator (conftest removes it then).
atexit.register(shutil.rmtree, WORK_DIR, True)
CERT, KEY = make_certificate(WORK_DIR)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT = _free_port()
HOST = f"127.0.0.1:{PORT}"
# Each host gets its own path prefix, so the emulator checks that every route goes to its own
# host, as Dropbox does (scripts/dbxemu/hosts.py). The SDK builds https://{host}/2/{route}.
for var, prefix in (("DROPBOX_API_HOST", "api"), ("DROPBOX_API_CONTENT_HOST", "content"),
                    ("DROPBOX_API_NOTIFY_HOST", "notify"), ("DROPBOX_WEB_HOST", "web")):
    os.environ[var] = f"{HOST}/{prefix}"


def dropbox_hash(data):
    """Independent content hash: SHA-256 of the concatenated SHA-256s of 4 MiB blocks."""
    block = 4 * 1024 * 1024
    digests = b"".join(hashlib.sha256(data[i:i + block]).digest() for i in range(0, len(data), block))
    return hashlib.sha256(digests).hexdigest()


# Dropbox's pages are uneven: more entries than `limit`, or none with has_more (files.stone on
# `limit`; dropbox/dropbox-sdk-java#281), and the emulator does the same by default
# (scripts/dbxemu/listing_pages.py). A test reads a listing or the changes whole, as a client must.
def all_entries(dbx, result):
    """Every entry of a listing (or of the changes) from its first page on, following has_more."""
    entries = list(result.entries)
    while result.has_more:
        result = dbx.files_list_folder_continue(result.cursor)
        entries += result.entries
    return entries


def end_cursor(dbx, result):
    """The cursor once the listing that `result` starts is read to its end: changes come after it."""
    while result.has_more:
        result = dbx.files_list_folder_continue(result.cursor)
    return result.cursor


def all_changes(dbx, cursor):
    """Every change since `cursor`, following has_more; returns (entries, the last page)."""
    result = dbx.files_list_folder_continue(cursor)
    entries = list(result.entries)
    while result.has_more:
        result = dbx.files_list_folder_continue(result.cursor)
        entries += result.entries
    return entries, result
