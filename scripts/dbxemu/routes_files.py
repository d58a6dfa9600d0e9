"""files/* routes: metadata, listing and cursors, longpoll, download, upload, delete, move, copy,
and the history of a file (list_revisions, restore).

Every route function takes a `Call` (see http_server) and returns the JSON result, or a
`Download` for the download style. Errors are raised as the exceptions in `errors`.
"""

import errno
import os
import queue
import random
import threading
import time

from . import cursors, listing_order, listing_pages, namespaces, paths
from .cursors import CHANGES, LIST, LIST_DELETED, Cursor
from .errors import BadRequest, RouteError, lookup_error, write_error
from .hashing import ContentHasher
from .storage import check_timestamp, deleted_metadata, metadata

MAX_UPLOAD_REQUEST = 150 * 1024 * 1024
IO_CHUNK = 4 * 1024 * 1024
DEFAULT_PAGE = 2000

# Receive buffers are reused across requests: a fresh 4 MiB bytearray is zero-filled, and a
# client that uploads in 8 MiB requests would otherwise have the emulator zero 1.5 GiB per GiB.
_spare_buffers = []
_spare_lock = threading.Lock()
MAX_SPARE_BUFFERS = 24


def _take_buffer():
    with _spare_lock:
        if _spare_buffers:
            return _spare_buffers.pop()
    return bytearray(IO_CHUNK)


def _give_back_buffers(buffers):
    with _spare_lock:
        room = MAX_SPARE_BUFFERS - len(_spare_buffers)
        _spare_buffers.extend(buffers[:max(0, room)])


# ----- argument helpers -----
def args(call):
    if call.arg is None:
        return {}
    if not isinstance(call.arg, dict):
        raise BadRequest("request body: expected an object")
    return call.arg


def get_field(arg, name, kind, default=None, required=False):
    if name not in arg or arg[name] is None:
        if required:
            raise BadRequest(f'request body: missing required field "{name}"')
        return default
    value = arg[name]
    if kind is bool and not isinstance(value, bool):
        raise BadRequest(f"request body: {name}: expected boolean, got {type(value).__name__}")
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise BadRequest(f"request body: {name}: expected integer, got {type(value).__name__}")
    if kind is str and not isinstance(value, str):
        raise BadRequest(f"request body: {name}: expected string, got {type(value).__name__}")
    return value


def parse_write_mode(value):
    """('add'|'overwrite'|'update', rev or None) from a WriteMode union value."""
    if value is None:
        return "add", None
    if isinstance(value, str):
        value = {".tag": value}
    if not isinstance(value, dict):
        raise BadRequest("request body: mode: expected a union")
    tag = value.get(".tag")
    if tag in ("add", "overwrite"):
        return tag, None
    if tag == "update":
        rev = value.get("update")
        if not isinstance(rev, str) or len(rev) < 9:
            raise BadRequest("request body: mode.update: expected a rev")
        return tag, rev
    raise BadRequest(f"request body: mode: unknown tag '{tag}'")


def parse_commit(arg):
    """CommitInfo fields: (path, mode, autorename, client_modified, strict_conflict)."""
    path = get_field(arg, "path", str, required=True)
    paths.check_pattern("path", path, "write")
    mode = parse_write_mode(arg.get("mode"))
    client_modified = get_field(arg, "client_modified", str)
    if client_modified is not None:
        check_timestamp(client_modified, "client_modified")
    return (path, mode, get_field(arg, "autorename", bool, False), client_modified,
            get_field(arg, "strict_conflict", bool, False))


def receive_to_file(call, file_path, offset=0, hashers=(), limit=MAX_UPLOAD_REQUEST, too_large_error=None):
    """Streams the request body into file_path at offset; returns the number of bytes.

    Reads in 4 MiB pieces. Hashing and writing run on a helper thread while the next piece is
    read from the socket (hashlib, recv and pwrite all release the GIL), so a large upload
    keeps both cores busy. A body over `limit` raises `too_large_error` (payload_too_large)
    after draining the rest.
    """
    body = call.body
    too_large = too_large_error or RouteError({".tag": "payload_too_large"})
    if body.length is not None and body.length > limit:
        body.drain()
        raise too_large
    fd = os.open(file_path, os.O_WRONLY | os.O_CREAT, 0o644)
    free, work, failure = queue.Queue(), queue.Queue(maxsize=2), []
    owned = [_take_buffer() for _ in range(3)]
    for buf in owned:
        free.put(buf)

    def hash_and_write():
        while True:
            item = work.get()
            if item is None:
                return
            buf, n, at = item
            try:
                if not failure:
                    chunk = memoryview(buf)[:n]
                    for hasher in hashers:
                        hasher.update(chunk)
                    _write_leaving_holes(fd, buf, n, at)
            except OSError as err:
                failure.append(err)
            free.put(buf)

    worker = threading.Thread(target=hash_and_write, daemon=True)
    worker.start()
    received = 0
    try:
        while True:
            buf = free.get()
            n = body.readinto(memoryview(buf))
            if not n:
                break
            if received + n > limit:
                body.drain()
                raise too_large
            work.put((buf, n, offset + received))
            received += n
    finally:
        work.put(None)
        worker.join()
        os.close(fd)
        _give_back_buffers(owned)
    if failure:
        raise failure[0]
    return received


# Zeros that land on a hole of the file are left as holes. A client writing a sparse file
# (fsstress makes 1-2 GB ones with a few blocks of data) uploads its holes as zeros, and each
# revision is a blob of its own: written out, one judge run stored 60 GB. A range that holds bytes
# already (a retried append) is written, zeros or not, or the old bytes would show through.
HOLE_GRAIN = 64 * 1024
_ZEROS = bytes(HOLE_GRAIN)


def _is_hole(fd, offset, length):
    try:
        return os.lseek(fd, offset, os.SEEK_DATA) >= offset + length
    except OSError as err:
        if err.errno == errno.ENXIO:   # no data at or after offset
            return True
        raise


def _write_leaving_holes(fd, buf, n, at):
    pos = 0
    while pos < n:
        step = min(HOLE_GRAIN, n - pos)
        if buf[pos] == 0 and buf[pos:pos + step] == _ZEROS[:step] and _is_hole(fd, at + pos, step):
            pos += step
            continue
        pos += os.pwrite(fd, memoryview(buf)[pos:pos + step], at + pos)
    if os.fstat(fd).st_size < at + n:
        # The range ended in a hole past the end: one zero byte at its last offset gives the file
        # its length without ever shortening it (a concurrent session's later piece may be there).
        os.pwrite(fd, b"\0", at + n - 1)


def verify_hash(arg, hasher):
    expected = arg.get("content_hash")
    if expected is not None and expected != hasher.hexdigest():
        raise RouteError({".tag": "content_hash_mismatch"})


# ----- metadata -----
def get_metadata(call):
    arg = args(call)
    path = get_field(arg, "path", str, required=True)
    paths.check_pattern("path", path, "read")
    store = call.app.store
    with store.lock:
        if path.startswith("rev:"):
            rev = store.get_revision(path[4:])
            if rev is None:
                raise lookup_error("not_found")
            return metadata(rev)
        target = store.resolve(path)
        if target.row is None:
            if get_field(arg, "include_deleted", bool, False):
                tomb = store.db.execute("SELECT * FROM tombstones WHERE path_lower = ?",
                                        (target.path_lower,)).fetchone()
                if tomb is not None:
                    return deleted_metadata(tomb)
            raise lookup_error("not_found")
        return metadata(target.row)


# ----- listing -----
def listing_page(store, cursor):
    """One page for a cursor; returns the ListFolderResult."""
    view = namespaces.View.decode(cursor.view)
    with namespaces.using_view(view):
        return _listing_page(store, cursor, view)


def _listing_page(store, cursor, view):
    empty, limit = listing_pages.plan(cursor)
    # A view's root folder is listed as "": recursive listings leave it out, as they do the root.
    outside = (lambda r: r["path_lower"] == view.prefix_lower) if view.prefix_lower else (lambda r: False)
    listing = cursor.phase in (LIST, LIST_DELETED)
    with store.lock:
        if listing:
            table = "entries" if cursor.phase == LIST else "tombstones"
            rows = store.list_rows(table, cursor.path_lower, cursor.recursive, cursor.after, limit + 1,
                                   descending=listing_order.descending(cursor))
        else:
            rows = store.changed_rows(cursor.path_lower, cursor.recursive, cursor.position, limit + 1)
        if rows and empty:
            # An empty page with more to come (listing_pages.py); the next answer is a real one.
            return {"entries": [], "cursor": cursors.encode(cursor.copy(rested=True), store.secret), "has_more": True}
        cursor = cursor.copy(rested=False)
        if listing:
            more = len(rows) > limit
            rows = rows[:limit]
            render = metadata if cursor.phase == LIST else deleted_metadata
            entries = listing_order.arrange([render(r) for r in rows if not outside(r)], cursor)
            if more:
                nxt, has_more = cursor.copy(after=rows[-1]["path_lower"]), True
            elif cursor.phase == LIST and cursor.include_deleted:
                nxt, has_more = cursor.copy(phase=LIST_DELETED, after=""), True
            else:
                nxt, has_more = cursor.copy(phase=CHANGES, after="", position=cursor.start_seq), False
        else:
            has_more = len(rows) > limit
            changed = rows[:limit]
            entries = [metadata(r) if kind == "live" else deleted_metadata(r)
                       for _, kind, r in listing_order.arrange_changes([c for c in changed if not outside(c[2])], cursor)]
            nxt = cursor.copy(position=changed[-1][0]) if changed else cursor
        return {"entries": entries, "cursor": cursors.encode(nxt, store.secret), "has_more": has_more}


def start_cursor(call):
    """Validates list_folder-style arguments; returns a fresh LIST cursor."""
    arg = args(call)
    path = get_field(arg, "path", str, required=True)
    paths.check_pattern("path", path, "list")
    limit = get_field(arg, "limit", int)
    if limit is not None and not 1 <= limit <= 2000:
        raise BadRequest(f"request body: limit: {limit} is not within range [1, 2000]")
    store = call.app.store
    with store.lock:
        target = store.resolve(path)
        if not target.is_root:
            if target.row is None:
                raise lookup_error("not_found")
            if not target.row["is_folder"]:
                raise lookup_error("not_folder")
        view = namespaces.current_view()
        return Cursor(store.epoch, target.path_lower if target.is_root else target.row["path_lower"],
                      get_field(arg, "recursive", bool, False), get_field(arg, "include_deleted", bool, False),
                      limit or DEFAULT_PAGE, LIST, "", store.seq, store.seq,
                      view.encode() if view.prefix_lower else None,
                      listing_order.order_for_new_cursor(call.app.settings),
                      listing_pages.pages_for_new_cursor(call.app.settings))


def list_folder(call):
    return listing_page(call.app.store, start_cursor(call))


def list_folder_continue(call):
    arg = args(call)
    store = call.app.store
    cursor = cursors.decode(get_field(arg, "cursor", str, required=True), store.secret, store.epoch)
    return listing_page(store, cursor)


def get_latest_cursor(call):
    cursor = start_cursor(call)
    store = call.app.store
    with store.lock:
        latest = cursor.copy(phase=CHANGES, position=store.seq)
        return {"cursor": cursors.encode(latest, store.secret)}


def longpoll(call):
    arg = args(call)
    store = call.app.store
    timeout = get_field(arg, "timeout", int, 30)
    if not 30 <= timeout <= 480:
        raise BadRequest(f"request body: timeout: {timeout} is not within range [30, 480]")
    cursor = cursors.decode(get_field(arg, "cursor", str, required=True), store.secret, store.epoch)
    # files.stone ListFolderLongpollArg.timeout: the request blocks for "at most this length of
    # time, plus up to 90 seconds of random jitter"; the Python SDK: "The server will respond
    # after <timeout> + random(0, 90) seconds". `longpoll_max_wait` (for fast tests) caps it all.
    wait = timeout + random.uniform(0, call.app.settings["longpoll_jitter"])
    cap = call.app.settings["longpoll_max_wait"]
    deadline = time.monotonic() + (min(wait, cap) if cap else wait)
    changes = cursor.phase != CHANGES
    while not changes:
        with store.changed:
            generation = store.change_generation
        # Never hold `changed` while taking `lock` (writers take them in the other order).
        with store.lock:
            if store.epoch != cursor.epoch:
                raise RouteError({".tag": "reset"})
            changes = store.has_changes(cursor.path_lower, cursor.recursive, cursor.position)
        remaining = deadline - time.monotonic()
        if changes or remaining <= 0:
            break
        with store.changed:
            if store.change_generation == generation:
                store.changed.wait(remaining)
    result = {"changes": changes}
    backoff = call.app.settings["longpoll_backoff"]
    if backoff:
        result["backoff"] = backoff
    return result


# ----- content -----
class Download:
    """What the download route returns: metadata for the Dropbox-API-Result header and the open file."""

    def __init__(self, result, file, size, etag):
        self.result = result
        self.file = file
        self.size = size
        self.etag = etag


def read_file_row(store, path, rev=None):
    """The file a ReadPath names (`/a`, `id:`, `ns:`, `rev:`, or the deprecated `rev` field); call
    with store.lock held. 409 path/not_found, path/not_file."""
    if path.startswith("rev:") or rev:
        row = store.get_revision(path[4:] if path.startswith("rev:") else rev)
        if row is None:
            raise lookup_error("not_found")
        return row
    row = store.resolve(path).row
    if row is None:
        raise lookup_error("not_found")
    if row["is_folder"]:
        raise lookup_error("not_file")
    return row


def download(call):
    arg = args(call)
    path = get_field(arg, "path", str, required=True)
    paths.check_pattern("path", path, "read")
    rev = get_field(arg, "rev", str)
    store = call.app.store
    with store.lock:
        row = read_file_row(store, path, rev)
        call.app.path_states.check(row["path_lower"], "restricted_content", "path")
        call.app.exports.refuse_download(row)
        md = metadata(row, tag=False)
        # Opened under the lock: the data stays readable even if a concurrent overwrite
        # prunes this revision's blob right after.
        return Download(md, open(store.blob_path(row["blob"]), "rb"), row["size"], row["rev"])


def upload_write_failed(err):
    """files/upload wraps a WriteError in UploadWriteFailed {reason, upload_session_id}."""
    if isinstance(err, RouteError) and err.error.get(".tag") == "path" and "path" in err.error:
        return RouteError({".tag": "path", "reason": err.error["path"], "upload_session_id": "pid_upload_session:"})
    return err


def upload(call):
    arg = args(call)
    store = call.app.store
    try:
        path, mode, autorename, client_modified, strict = parse_commit(arg)
        with store.lock:
            target = store.resolve(path, write=True)
    except RouteError as err:
        raise upload_write_failed(err)
    temp = store.new_temp_path()
    hasher = ContentHasher()
    try:
        size = receive_to_file(call, temp, hashers=(hasher,))
        verify_hash(arg, hasher)
        try:
            with store.lock:
                target = store.resolve(path, write=True)
                row = store.commit_file(target, mode, autorename, client_modified, strict, temp, size,
                                        hasher.hexdigest(), quota=call.app.quota())
        except RouteError as err:
            raise upload_write_failed(err)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
    return metadata(row, tag=False)


# ----- namespace changes -----
def delete_one(app, arg):
    path = get_field(arg, "path", str, required=True)
    paths.check_pattern("path", path, "write")
    parent_rev = get_field(arg, "parent_rev", str)
    store = app.store
    with store.lock:
        target = store.resolve(path, wrapper="path_lookup")
        if target.row is None:
            raise lookup_error("not_found", "path_lookup")
        app.path_states.check(target.row["path_lower"], "locked", "path_lookup")
        store.check_writable(target.row["path_lower"], "path_write")
        if parent_rev is not None and (target.row["is_folder"] or target.row["rev"] != parent_rev):
            raise write_error("conflict", "path_write", "file")
        return {"metadata": metadata(store.delete(target.row))}


def delete_v2(call):
    return delete_one(call.app, args(call))


def batch_entries(arg, limit=1000):
    entries = get_field(arg, "entries", list, required=True)
    if not isinstance(entries, list) or len(entries) > limit:
        raise BadRequest(f"request body: entries: expected a list of at most {limit} items")
    for entry in entries:
        if not isinstance(entry, dict):
            raise BadRequest("request body: entries: expected objects")
    return entries


def entry_results(call, entries, one, failure=lambda error: error, contended=lambda error: error):
    """A batch's results, one per entry in order: `success` with what `one(entry)` returns, or
    `failure` with the entry's error (`failure` wraps it in the batch's error union; `contended`
    wraps write contention's `too_many_write_operations`, which may refuse any entry)."""
    results = []
    for entry in entries:
        refused = call.app.contention.entry_failure()
        if refused is not None:
            results.append({".tag": "failure", "failure": contended(refused)})
            continue
        try:
            results.append({".tag": "success", **one(entry)})
        except RouteError as err:
            results.append({".tag": "failure", "failure": failure(err.error)})
    return results


def job_check(call):
    job_id = get_field(args(call), "async_job_id", str, required=True)
    return call.app.load_job(job_id)


def create_folder_v2(call):
    arg = args(call)
    path = get_field(arg, "path", str, required=True)
    paths.check_pattern("path", path, "write_path")
    store = call.app.store
    with store.lock:
        target = store.resolve(path, write=True)
        row = store.create_folder(target, get_field(arg, "autorename", bool, False))
    return {"metadata": metadata(row, tag=False)}


def relocate_one(app, arg, copy, autorename=None):
    """One move or copy (a RelocationArg, or a RelocationPath of a batch); returns the new top row."""
    from_path = get_field(arg, "from_path", str, required=True)
    to_path = get_field(arg, "to_path", str, required=True)
    paths.check_pattern("from_path", from_path, "write")
    paths.check_pattern("to_path", to_path, "write")
    if autorename is None:
        autorename = get_field(arg, "autorename", bool, False)
    store = app.store
    with store.lock:
        src = store.resolve(from_path, wrapper="from_lookup")
        if src.row is None:
            raise lookup_error("not_found", "from_lookup")
        if not copy:
            app.path_states.check(src.row["path_lower"], "locked", "from_lookup")
        dst = store.resolve(to_path, wrapper="to", write=True)
        return store.relocate(src.row, dst, autorename, copy,
                              quota=app.quota(), max_entries=app.settings["move_limit"])


def relocate(call, copy):
    return {"metadata": metadata(relocate_one(call.app, args(call), copy))}


def move_v2(call):
    return relocate(call, copy=False)


def copy_v2(call):
    return relocate(call, copy=True)


# ----- revisions -----
def parse_revisions_mode(value):
    """ListRevisionsMode: `path` (the default) or `id`."""
    if value is None:
        return "path"
    tag = value.get(".tag") if isinstance(value, dict) else value
    if tag not in ("path", "id"):
        raise BadRequest(f"request body: mode: unknown tag '{tag}'")
    return tag


def list_revisions(call):
    """files.stone list_revisions. Path mode: the kept revisions committed at the path (any file
    id), plus the revision of the file there now (or last deleted there), which may have come by
    a move; id mode: the kept revisions of the file now at the path (or last deleted there),
    wherever they were. `is_deleted` when no file is at the path now, with `server_deleted` the
    time of its deletion. Only REVISIONS_KEPT_PER_FILE revisions of each file are kept."""
    arg = args(call)
    path = get_field(arg, "path", str, required=True)
    paths.check_pattern("path", path, "path_or_id")
    mode = parse_revisions_mode(arg.get("mode"))
    limit = get_field(arg, "limit", int, 10)
    if not 1 <= limit <= 100:
        raise BadRequest(f"request body: limit: {limit} is not within range [1, 100]")
    before_rev = get_field(arg, "before_rev", str)
    if before_rev is not None:
        paths.check_rev("before_rev", before_rev)
    restorable = get_field(arg, "include_restorable_info", bool, False)
    store = call.app.store
    with store.lock:
        target = store.resolve(path)
        row = target.row
        if target.is_root or (row is not None and row["is_folder"]):
            raise lookup_error("not_file")
        tomb = store.tombstone(target.path_lower) if row is None else None
        if mode == "id":
            if before_rev is not None:
                raise RouteError({".tag": "before_rev_not_supported"})
            deleted_rev = tomb["rev"] if tomb is not None else None
            at_path = [] if row is not None else store.revisions_at(target.path_lower, deleted_rev)
            file_id = row["id"] if row is not None else (at_path[0]["id"] if at_path else None)
            revisions = store.revisions_of(file_id) if file_id else []
        else:
            revisions = store.revisions_at(target.path_lower,
                                           row["rev"] if row is not None else (tomb["rev"] if tomb is not None else None))
        if not revisions:
            raise lookup_error("not_found")
        if before_rev is not None:
            if before_rev not in {r["rev"] for r in revisions}:
                raise RouteError({".tag": "invalid_before_rev"})
            revisions = [r for r in revisions if r["rev"] < before_rev]
        entries = []
        for revision in revisions[:limit]:
            # The current revision shows where the file is now (it may have moved since).
            md = metadata(row if row is not None and row["rev"] == revision["rev"] else revision, tag=False)
            if restorable:
                md["is_restorable"] = True
            entries.append(md)
        result = {"is_deleted": row is None, "entries": entries, "has_more": len(revisions) > limit}
        if row is None and tomb is not None and tomb["server_deleted"]:
            result["server_deleted"] = tomb["server_deleted"]
        return result


def restore(call):
    """files.stone restore: the revision becomes the file at `path` (Store.restore). A rev
    Dropbox does not keep is `invalid_revision`."""
    arg = args(call)
    path = get_field(arg, "path", str, required=True)
    paths.check_pattern("path", path, "write_path")
    rev = get_field(arg, "rev", str, required=True)
    paths.check_rev("rev", rev)
    store = call.app.store
    with store.lock:
        target = store.resolve(path, wrapper="path_write", write=True)
        if target.is_root:
            raise write_error("malformed_path", "path_write")
        revision = store.get_revision(rev)
        if revision is None:
            raise RouteError({".tag": "invalid_revision"})
        row = store.restore(target, revision, quota=call.app.quota())
    return metadata(row, tag=False)


# name: (style, needs auth, is a write commit, function)
ROUTES = {
    "files/get_metadata": ("rpc", True, False, get_metadata),
    "files/list_folder": ("rpc", True, False, list_folder),
    "files/list_folder/continue": ("rpc", True, False, list_folder_continue),
    "files/list_folder/get_latest_cursor": ("rpc", True, False, get_latest_cursor),
    "files/list_folder/longpoll": ("rpc", False, False, longpoll),
    "files/download": ("download", True, False, download),
    "files/upload": ("upload", True, True, upload),
    "files/delete_v2": ("rpc", True, True, delete_v2),
    "files/create_folder_v2": ("rpc", True, True, create_folder_v2),
    "files/move_v2": ("rpc", True, True, move_v2),
    "files/copy_v2": ("rpc", True, True, copy_v2),
    "files/list_revisions": ("rpc", True, False, list_revisions),
    "files/restore": ("rpc", True, True, restore),
}
