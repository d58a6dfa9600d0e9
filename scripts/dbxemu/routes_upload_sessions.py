"""files/upload_session/*: start, append_v2, finish, start_batch, finish_batch(_v2), finish_batch/check.

A session's data grows in `sessions/<id>` under --data and is renamed into blobs/ on finish,
so a 1 GiB upload is never copied. Sequential sessions hash as the data arrives (the hasher
lives in memory and is rebuilt from the file after a restart). Concurrent sessions take
4 MiB-aligned pieces in any order, written with pwrite; each piece is hashed as it arrives
(a piece starts on a block boundary, so its block digests are the file's), and finish only hashes
blocks whose digest is unknown (after an emulator restart, or a piece that failed midway). Real
Dropbox answers finish without re-reading the file either.
"""

import hashlib
import json
import os
import secrets
import threading
import time

from . import routes_files
from .errors import BadRequest, RouteError
from .hashing import BLOCK_SIZE, ContentHasher
from .routes_files import (MAX_UPLOAD_REQUEST, args, batch_entries, entry_results, get_field, parse_commit, receive_to_file,
                          verify_hash)
from .storage import metadata

MAX_SESSION_SIZE = (1 << 41) - (1 << 22)

SCHEMA = """CREATE TABLE IF NOT EXISTS upload_sessions (
    id TEXT PRIMARY KEY, type TEXT NOT NULL, offset INTEGER NOT NULL DEFAULT 0,
    closed INTEGER NOT NULL DEFAULT 0, closed_end INTEGER, pieces TEXT NOT NULL DEFAULT '[]',
    created REAL NOT NULL)"""


class SessionStore:
    """Upload session records (sqlite) plus per-session locks and in-memory hashers."""

    def __init__(self, store, settings):
        self.store = store
        self.settings = settings
        with store.lock:
            store.db.execute(SCHEMA)
        self._lock = threading.Lock()
        self._locks = {}
        self._hashers = {}
        self._block_digests = {}

    def path(self, session_id):
        return os.path.join(self.store.data_dir, "sessions", session_id.split(":")[-1])

    def create(self, session_type, closed):
        session_id = "pid_upload_session:" + secrets.token_urlsafe(36)
        open(self.path(session_id), "wb").close()
        with self.store.write() as db:
            db.execute("INSERT INTO upload_sessions (id, type, closed, created) VALUES (?, ?, ?, ?)",
                       (session_id, session_type, int(closed), time.time()))
        return session_id

    def get(self, session_id):
        """The session's record, or None: unknown, or expired. files.stone upload_session/start:
        "An upload session can be used for a maximum of 7 days", after which its routes answer
        not_found (`upload_session_ttl`, 7 days by default)."""
        with self.store.lock:
            row = self.store.db.execute("SELECT * FROM upload_sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return None
        ttl = self.settings["upload_session_ttl"]
        if ttl and time.time() - row["created"] > ttl:
            self.remove(session_id)
            return None
        return dict(row)

    def update(self, session_id, **fields):
        with self.store.write() as db:
            sets = ", ".join(f"{k} = ?" for k in fields)
            db.execute(f"UPDATE upload_sessions SET {sets} WHERE id = ?", tuple(fields.values()) + (session_id,))

    def remove(self, session_id):
        with self.store.write() as db:
            db.execute("DELETE FROM upload_sessions WHERE id = ?", (session_id,))
        try:
            os.unlink(self.path(session_id))
        except FileNotFoundError:
            pass
        with self._lock:
            self._hashers.pop(session_id, None)
            self._block_digests.pop(session_id, None)
            self._locks.pop(session_id, None)

    def lock_for(self, session_id):
        with self._lock:
            return self._locks.setdefault(session_id, threading.Lock())

    def hasher(self, session_id, size):
        """A copy of the running hasher of a sequential session (rebuilt if lost)."""
        with self._lock:
            hasher = self._hashers.get(session_id)
        if hasher is None or hasher.length != size:
            hasher = ContentHasher()
            with open(self.path(session_id), "rb") as f:
                remaining = size
                while remaining:
                    chunk = f.read(min(BLOCK_SIZE, remaining))
                    if not chunk:
                        break
                    hasher.update(chunk)
                    remaining -= len(chunk)
        return hasher.copy()

    def keep_hasher(self, session_id, hasher):
        with self._lock:
            self._hashers[session_id] = hasher

    def keep_piece_digests(self, session_id, offset, digests):
        """Records the block digests of a concurrent session's piece at `offset` (block-aligned)."""
        first = offset // BLOCK_SIZE
        with self._lock:
            known = self._block_digests.setdefault(session_id, {})
            for i, digest in enumerate(digests):
                known[first + i] = digest

    def forget_piece_digests(self, session_id, offset, length):
        """Drops what is known of a range a failed piece may have half-overwritten."""
        with self._lock:
            known = self._block_digests.get(session_id, {})
            for index in range(offset // BLOCK_SIZE, (offset + length + BLOCK_SIZE - 1) // BLOCK_SIZE):
                known.pop(index, None)

    def concurrent_content_hash(self, session_id, size):
        """The content hash of a concurrent session's first `size` bytes, hashing only unknown blocks."""
        with self._lock:
            known = dict(self._block_digests.get(session_id, {}))
        digests = []
        with open(self.path(session_id), "rb") as f:
            for index in range((size + BLOCK_SIZE - 1) // BLOCK_SIZE):
                digest = known.get(index)
                if digest is None:
                    f.seek(index * BLOCK_SIZE)
                    digest = hashlib.sha256(f.read(min(BLOCK_SIZE, size - index * BLOCK_SIZE))).digest()
                digests.append(digest)
        return hashlib.sha256(b"".join(digests)).hexdigest()


def session_type_of(arg):
    value = arg.get("session_type")
    if value is None:
        return "sequential"
    tag = value if isinstance(value, str) else (value.get(".tag") if isinstance(value, dict) else None)
    if tag not in ("sequential", "concurrent"):
        raise BadRequest("request body: session_type: unknown tag")
    return tag


def append_data(call, session_id, offset, close, wrap, content_hash=None):
    """Adds this request's body to a session at `offset`. `wrap` turns a lookup error into the route's shape."""
    sessions = call.app.sessions
    sess = sessions.get(session_id)
    if sess is None:
        raise wrap({".tag": "not_found"})
    body_hasher = ContentHasher()
    if sess["type"] == "sequential":
        with sessions.lock_for(session_id):
            sess = sessions.get(session_id)
            if sess is None:
                raise wrap({".tag": "not_found"})
            if sess["closed"]:
                raise wrap({".tag": "closed"})
            if offset != sess["offset"]:
                raise wrap({".tag": "incorrect_offset", "correct_offset": sess["offset"]})
            hasher = sessions.hasher(session_id, sess["offset"])
            aligned = hasher.at_block_boundary
            feed = (body_hasher,) if aligned else (hasher, body_hasher) if content_hash else (hasher,)
            n = receive_to_file(call, sessions.path(session_id), offset, feed)
            if aligned:
                hasher.extend(body_hasher)
            if content_hash is not None and content_hash != body_hasher.hexdigest():
                raise RouteError({".tag": "content_hash_mismatch"})
            if offset + n > MAX_SESSION_SIZE:
                raise wrap({".tag": "too_large"})
            sessions.keep_hasher(session_id, hasher)
            sessions.update(session_id, offset=offset + n, closed=int(close))
        return
    # Concurrent: pieces may arrive in parallel, so only the bookkeeping is locked.
    if offset % BLOCK_SIZE:
        raise wrap({".tag": "concurrent_session_invalid_offset"})
    try:
        n = receive_to_file(call, sessions.path(session_id), offset, (body_hasher,))
    except BaseException:
        sessions.forget_piece_digests(session_id, offset, MAX_UPLOAD_REQUEST)
        raise
    if content_hash is not None and content_hash != body_hasher.hexdigest():
        raise RouteError({".tag": "content_hash_mismatch"})
    if n % BLOCK_SIZE and not close:
        raise wrap({".tag": "concurrent_session_invalid_data_size"})
    if offset + n > MAX_SESSION_SIZE:
        raise wrap({".tag": "too_large"})
    with sessions.lock_for(session_id):
        sess = sessions.get(session_id)
        if sess is None:
            raise wrap({".tag": "not_found"})
        pieces = json.loads(sess["pieces"])
        pieces.append([offset, n])
        fields = {"pieces": json.dumps(pieces)}
        if close:
            fields.update(closed=1, closed_end=offset + n)
        sessions.update(session_id, **fields)
    sessions.keep_piece_digests(session_id, offset, body_hasher.all_block_digests())


def start(call):
    arg = args(call)
    session_type = session_type_of(arg)
    close = get_field(arg, "close", bool, False)
    body = call.body
    if session_type == "concurrent":
        if close:
            raise RouteError({".tag": "concurrent_session_close_not_allowed"})
        if body.length:
            raise RouteError({".tag": "concurrent_session_data_not_allowed"})
    sessions = call.app.sessions
    session_id = sessions.create(session_type, False)
    hasher = ContentHasher()
    n = receive_to_file(call, sessions.path(session_id), 0, (hasher,))
    if session_type == "concurrent" and n:
        sessions.remove(session_id)
        raise RouteError({".tag": "concurrent_session_data_not_allowed"})
    try:
        verify_hash(arg, hasher)
    except RouteError:
        sessions.remove(session_id)
        raise
    sessions.keep_hasher(session_id, hasher)
    sessions.update(session_id, offset=n, closed=int(close))
    return {"session_id": session_id}


def parse_cursor(arg):
    cursor = get_field(arg, "cursor", dict, required=True)
    if not isinstance(cursor, dict):
        raise BadRequest("request body: cursor: expected an object")
    session_id = get_field(cursor, "session_id", str, required=True)
    offset = get_field(cursor, "offset", int, required=True)
    return session_id, offset


def append_v2(call):
    arg = args(call)
    session_id, offset = parse_cursor(arg)
    append_data(call, session_id, offset, get_field(arg, "close", bool, False), RouteError,
                arg.get("content_hash"))
    return None


def lookup_failed(error):
    return RouteError({".tag": "lookup_failed", "lookup_failed": error})


def finish_one(call, entry, with_body):
    """Commits one session (the body of files/upload_session/finish, or a batch entry)."""
    app = call.app
    sessions = app.sessions
    session_id, offset = parse_cursor(entry)
    commit = get_field(entry, "commit", dict, required=True)
    if not isinstance(commit, dict):
        raise BadRequest("request body: commit: expected an object")
    path, mode, autorename, client_modified, strict = parse_commit(commit)
    sess = sessions.get(session_id)
    if sess is None:
        raise lookup_failed({".tag": "not_found"})
    # files.stone UploadSessionFinishArg.content_hash: "A hash of the file content uploaded in this
    # call". A finish that sends no data (a closed or concurrent session) uploads nothing, so only
    # the empty content's hash matches, never the whole file's.
    empty_body_hash = with_body and entry.get("content_hash") is not None and not call.body.length
    if sess["type"] == "sequential":
        if with_body and sess["closed"] and call.body.length:
            raise lookup_failed({".tag": "closed"})
        if with_body and not sess["closed"]:
            append_data(call, session_id, offset, True, lookup_failed, entry.get("content_hash"))
            empty_body_hash = False
        elif not sess["closed"]:
            raise lookup_failed({".tag": "not_closed"})
        elif offset != sess["offset"]:
            raise lookup_failed({".tag": "incorrect_offset", "correct_offset": sess["offset"]})
        sess = sessions.get(session_id)
        size = sess["offset"]
        content_hash = sessions.hasher(session_id, size).hexdigest()
    else:
        if with_body and call.body.length:
            raise RouteError({".tag": "concurrent_session_data_not_allowed"})
        if not sess["closed"]:
            raise RouteError({".tag": "concurrent_session_not_closed"})
        size = sess["closed_end"]
        covered = 0
        for piece_offset, piece_len in sorted(json.loads(sess["pieces"])):
            if piece_offset > covered:
                break
            covered = max(covered, piece_offset + piece_len)
        if covered < size:
            raise RouteError({".tag": "concurrent_session_missing_data"})
        content_hash = None
    if empty_body_hash:
        verify_hash(entry, ContentHasher())
    data_path = sessions.path(session_id)
    with sessions.lock_for(session_id):
        with open(data_path, "r+b") as f:
            f.truncate(size)
        if content_hash is None:
            content_hash = sessions.concurrent_content_hash(session_id, size)
        store = app.store
        with store.lock:
            target = store.resolve(path, write=True)
            row = store.commit_file(target, mode, autorename, client_modified, strict, data_path, size,
                                    content_hash, quota=app.quota())
    sessions.remove(session_id)
    return metadata(row, tag=False)


def finish(call):
    return finish_one(call, args(call), with_body=True)


def finish_entries(call):
    return entry_results(call, batch_entries(args(call)), lambda entry: finish_one(call, entry, with_body=False))


def finish_batch_v2(call):
    return {"entries": finish_entries(call)}


def finish_batch(call):
    job = {".tag": "complete", "entries": finish_entries(call)}
    return {".tag": "async_job_id", "async_job_id": call.app.save_job(job)}


def start_batch(call):
    arg = args(call)
    count = get_field(arg, "num_sessions", int, required=True)
    if not 1 <= count <= 1000:
        raise BadRequest(f"request body: num_sessions: {count} is not within range [1, 1000]")
    session_type = session_type_of(arg)
    return {"session_ids": [call.app.sessions.create(session_type, False) for _ in range(count)]}


ROUTES = {
    "files/upload_session/start": ("upload", True, False, start),
    "files/upload_session/append_v2": ("upload", True, False, append_v2),
    "files/upload_session/finish": ("upload", True, True, finish),
    "files/upload_session/start_batch": ("rpc", True, False, start_batch),
    "files/upload_session/finish_batch": ("rpc", True, True, finish_batch),
    "files/upload_session/finish_batch_v2": ("rpc", True, True, finish_batch_v2),
    "files/upload_session/finish_batch/check": ("rpc", True, False, routes_files.job_check),
}
