"""Edge semantics on the wire, beyond what the SDK reaches: raw HTTP against a plain-HTTP emulator.

Covers argument encodings, transport details (chunked bodies, Expect: 100-continue, keep-alive,
Void routes without a body), exact error shapes, ranges, validation errors the SDK would catch
client-side, path forms (id:/sub, ns:), persistence across restarts, --seed, large pagination
with concurrent changes, and the content_hash check.
"""

import hashlib
import http.client
import json
import os
import socket
import time

import pytest

from emulator import Emulator, EmulatorError

TOKEN = "edge-token"


@pytest.fixture(scope="module")
def seed_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("emu-seed"))
    os.makedirs(os.path.join(d, "many"))
    for i in range(1200):
        with open(os.path.join(d, "many", f"f{i:05d}.txt"), "w") as f:
            f.write(str(i))
    with open(os.path.join(d, "Thumbs.db"), "w") as f:
        f.write("a disallowed name: --seed skips it")
    os.makedirs(os.path.join(d, "Docs", "Deep"))
    with open(os.path.join(d, "Docs", "Deep", "note.md"), "wb") as f:
        f.write(b"seeded note")
    os.utime(os.path.join(d, "Docs", "Deep", "note.md"), (1500000000, 1500000000))
    return d


@pytest.fixture(scope="module")
def plain(seed_dir, tmp_path_factory):
    data = str(tmp_path_factory.mktemp("emu-edge"))
    emu = Emulator(os.path.join(data, "data"), token=TOKEN, seed=seed_dir)
    emu.start()
    yield emu
    emu.stop()


def raw(emu, route, body=b"", headers=None, method="POST", path=None, conn=None):
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", emu.port, timeout=30)
    conn.request(method, path or "/2/" + route, body=body, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    if own:
        conn.close()
    return resp.status, resp, data


def auth(extra=None):
    h = {"Authorization": "Bearer " + TOKEN}
    h.update(extra or {})
    return h


def rpc(emu, route, arg, extra=None):
    return raw(emu, route, json.dumps(arg).encode(), auth({"Content-Type": "application/json", **(extra or {})}))


def dropbox_hash(data):
    block = 4 * 1024 * 1024
    return hashlib.sha256(b"".join(hashlib.sha256(data[i:i + block]).digest()
                                   for i in range(0, len(data), block))).hexdigest()


# ----- argument encodings -----
def test_arg_header_raw_utf8(plain):
    arg = json.dumps({"path": "/raw/naïve ✓.txt"}, ensure_ascii=False).encode("utf-8")
    status, _, body = raw(plain, "files/upload", b"raw", auth({"Content-Type": "application/octet-stream",
                                                                "Dropbox-API-Arg": arg}))
    assert status == 200 and json.loads(body)["name"] == "naïve ✓.txt"


def test_arg_header_escaped(plain):
    arg = json.dumps({"path": "/raw/esc\u00e9.txt"})  # ASCII with \u escapes, as the SDK sends
    assert "\\u00e9" in arg
    status, _, body = raw(plain, "files/upload", b"e", auth({"Content-Type": "application/octet-stream",
                                                              "Dropbox-API-Arg": arg}))
    assert status == 200 and json.loads(body)["name"] == "escé.txt"


def test_arg_url_parameter_and_get_download(plain):
    from urllib.parse import quote
    plain.upload("/q/param.txt", b"by query")
    path = "/2/files/download?arg=" + quote(json.dumps({"path": "/q/param.txt"})) + "&authorization=Bearer%20" + TOKEN
    status, resp, body = raw(plain, None, method="GET", path=path)
    assert status == 200 and body == b"by query"
    assert json.loads(resp.getheader("Dropbox-API-Result"))["name"] == "param.txt"


def test_missing_arg_is_400_text(plain):
    status, resp, body = raw(plain, "files/download", b"", auth())
    assert status == 400 and resp.getheader("Content-Type").startswith("text/plain")
    assert b'Must provide HTTP header "Dropbox-API-Arg" or URL parameter "arg"' in body


def test_void_route_without_body_or_content_type(plain):
    status, resp, body = raw(plain, "users/get_space_usage", b"", auth())
    assert status == 200 and resp.getheader("Content-Type") == "application/json" and "used" in json.loads(body)
    status, _, body = raw(plain, "users/get_space_usage", b"null", auth({"Content-Type": "application/json"}))
    assert status == 200


def test_bad_json_is_400(plain):
    status, _, body = raw(plain, "files/get_metadata", b"{nope", auth({"Content-Type": "application/json"}))
    assert status == 400 and b"could not decode input as JSON" in body


def test_upload_wrong_content_type_is_400(plain):
    status, _, body = raw(plain, "files/upload", b"x", auth({"Content-Type": "application/json",
                                                              "Dropbox-API-Arg": '{"path":"/ct.txt"}'}))
    assert status == 400 and b'Bad HTTP "Content-Type" header' in body


def test_cors_hack_content_type_accepted(plain):
    status, _, _ = raw(plain, "files/upload", b"x", auth({"Content-Type": "text/plain; charset=dropbox-cors-hack",
                                                           "Dropbox-API-Arg": '{"path":"/cors.txt"}'}))
    assert status == 200


def test_unknown_fields_and_path_root_header_ignored(plain):
    status, _, body = rpc(plain, "files/list_folder", {"path": "", "brand_new_field": 1},
                          {"Dropbox-API-Path-Root": '{".tag": "home"}'})
    assert status == 200 and "entries" in json.loads(body)


# ----- transport -----
def test_chunked_upload_body(plain):
    data = os.urandom(300_000)
    conn = http.client.HTTPConnection("127.0.0.1", plain.port, timeout=30)
    pieces = (data[i:i + 70_000] for i in range(0, len(data), 70_000))
    conn.request("POST", "/2/files/upload", body=pieces, encode_chunked=True,
                 headers=auth({"Content-Type": "application/octet-stream", "Dropbox-API-Arg": '{"path":"/chunked.bin"}'}))
    resp = conn.getresponse()
    md = json.loads(resp.read())
    assert resp.status == 200 and md["size"] == len(data) and md["content_hash"] == dropbox_hash(data)
    # Same connection still usable after a chunked body (keep-alive).
    status, _, body = raw(plain, "files/download", headers=auth({"Dropbox-API-Arg": '{"path":"/chunked.bin"}'}),
                          conn=conn)
    assert status == 200 and body == data


def test_expect_100_continue(plain):
    body = b"expect body"
    arg = json.dumps({"path": "/expect.txt"})
    with socket.create_connection(("127.0.0.1", plain.port), timeout=10) as s:
        s.sendall((f"POST /2/files/upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                   f"Content-Type: application/octet-stream\r\nDropbox-API-Arg: {arg}\r\n"
                   f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n").encode())
        first = s.recv(100)
        assert first.startswith(b"HTTP/1.1 100 Continue")
        s.sendall(body)
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            reply += s.recv(65536)
    assert b"HTTP/1.1 200" in reply and b'"size": 11' in reply


def test_keep_alive_many_requests_one_connection(plain):
    conn = http.client.HTTPConnection("127.0.0.1", plain.port, timeout=30)
    for _ in range(20):
        status, _, _ = raw(plain, "users/get_space_usage", b"", auth(), conn=conn)
        assert status == 200
    conn.close()


def test_unknown_route_is_404(plain):
    status, _, _ = raw(plain, "files/no_such_route", b"{}", auth({"Content-Type": "application/json"}))
    assert status == 404


# ----- auth and error shapes -----
def test_missing_authorization_is_400(plain):
    status, _, body = raw(plain, "users/get_space_usage", b"")
    assert status == 400 and b'Must provide HTTP header "Authorization"' in body


def test_invalid_token_401_shape(plain):
    status, resp, body = raw(plain, "users/get_space_usage", b"", {"Authorization": "Bearer bogus"})
    assert status == 401 and resp.getheader("Content-Type") == "application/json"
    assert json.loads(body) == {"error_summary": "invalid_access_token/..", "error": {".tag": "invalid_access_token"}}


def test_409_shape(plain):
    status, resp, body = rpc(plain, "files/get_metadata", {"path": "/does/not/exist"})
    parsed = json.loads(body)
    assert status == 409 and resp.getheader("Content-Type") == "application/json"
    assert parsed["error"] == {".tag": "path", "path": {".tag": "not_found"}}
    assert parsed["error_summary"].startswith("path/not_found/")


def test_upload_conflict_summary_chains_tags(plain):
    plain.upload("/chain.txt", b"1")
    with pytest.raises(EmulatorError) as exc:
        plain.upload("/chain.txt", b"2")
    assert exc.value.status == 409
    assert exc.value.body["error_summary"].startswith("path/conflict/file/")
    assert exc.value.body["error"]["reason"] == {".tag": "conflict", "conflict": {".tag": "file"}}
    assert "upload_session_id" in exc.value.body["error"]


def test_validation_400s(plain):
    status, _, body = rpc(plain, "files/get_metadata", {"path": ""})
    assert status == 400 and b"The root folder is unsupported" in body
    status, _, body = rpc(plain, "files/get_metadata", {"path": "relative/path"})
    assert status == 400 and b"did not match pattern" in body
    status, _, body = rpc(plain, "files/list_folder", {"path": "/"})
    assert status == 400 and b"Specify the root folder as an empty string" in body
    status, _, body = rpc(plain, "files/list_folder", {"path": "", "limit": 5000})
    assert status == 400
    status, _, body = rpc(plain, "files/list_folder/longpoll", {"cursor": "x", "timeout": 10})
    assert status == 400
    status, _, body = rpc(plain, "files/list_folder/continue", {"cursor": "AAgarbage"})
    assert status == 400


def test_malformed_paths_409(plain):
    for path in ("/a//b", "/trailing/", "/a/./b", "/a/../b"):
        status, _, body = rpc(plain, "files/get_metadata", {"path": path})
        assert status == 409 and json.loads(body)["error"]["path"][".tag"] == "malformed_path", path


def test_content_hash_mismatch(plain):
    arg = json.dumps({"path": "/hash.txt", "content_hash": "0" * 64})
    status, _, body = raw(plain, "files/upload", b"data", auth({"Content-Type": "application/octet-stream",
                                                                 "Dropbox-API-Arg": arg}))
    assert status == 409 and json.loads(body)["error"][".tag"] == "content_hash_mismatch"
    arg = json.dumps({"path": "/hash.txt", "content_hash": dropbox_hash(b"data")})
    status, _, _ = raw(plain, "files/upload", b"data", auth({"Content-Type": "application/octet-stream",
                                                              "Dropbox-API-Arg": arg}))
    assert status == 200


# ----- ranges -----
def test_ranges(plain):
    plain.upload("/range.bin", b"0123456789")
    assert plain.download("/range.bin", "bytes=2-4") == b"234"
    assert plain.download("/range.bin", "bytes=7-") == b"789"
    assert plain.download("/range.bin", "bytes=-3") == b"789"
    assert plain.download("/range.bin", "bytes=8-100") == b"89"
    status, resp, _ = raw(plain, "files/download", b"", auth({"Dropbox-API-Arg": '{"path":"/range.bin"}',
                                                               "Range": "bytes=3-5"}))
    assert status == 206 and resp.getheader("Content-Range") == "bytes 3-5/10"
    status, resp, _ = raw(plain, "files/download", b"", auth({"Dropbox-API-Arg": '{"path":"/range.bin"}',
                                                               "Range": "bytes=10-"}))
    assert status == 416 and resp.getheader("Content-Range") == "bytes */10"


def test_download_etag_not_modified(plain):
    md = plain.upload("/etag.txt", b"etag")
    status, _, _ = raw(plain, "files/download", b"", auth({"Dropbox-API-Arg": '{"path":"/etag.txt"}',
                                                            "If-None-Match": md["rev"]}))
    assert status == 304


# ----- path forms -----
def test_id_with_subpath_and_namespace_paths(plain):
    folder = plain.api("files/create_folder_v2", {"path": "/idroot/inner"})["metadata"]
    top = plain.api("files/get_metadata", {"path": "/idroot"})
    plain.upload("/idroot/inner/f.txt", b"f")
    md = plain.api("files/get_metadata", {"path": top["id"] + "/inner/f.txt"})
    assert md["path_display"] == "/idroot/inner/f.txt"
    ns = plain.api("users/get_current_account", None)["root_info"]["root_namespace_id"]
    md = plain.api("files/get_metadata", {"path": f"ns:{ns}/idroot/inner"})
    assert md["id"] == folder["id"]


def test_rev_format_and_uniqueness(plain):
    revs = {plain.upload("/revs.txt", str(i).encode(), mode="overwrite")["rev"] for i in range(5)}
    assert len(revs) == 5 and all(len(r) >= 9 and all(c in "0123456789abcdef" for c in r) for r in revs)


# ----- seed, pagination, persistence -----
def test_seed_imported_with_mtime(plain):
    with pytest.raises(EmulatorError):
        plain.api("files/get_metadata", {"path": "/Thumbs.db"})
    md = plain.api("files/get_metadata", {"path": "/docs/deep/note.md"})
    assert md["path_display"] == "/Docs/Deep/note.md" and md["client_modified"] == "2017-07-14T02:40:00Z"
    assert md["content_hash"] == dropbox_hash(b"seeded note")


def test_large_pagination_with_changes_midway(plain):
    res = plain.api("files/list_folder", {"path": "/many", "limit": 500})
    names = [e["name"] for e in res["entries"]]
    plain.upload("/many/zz-added-midway.txt", b"late")
    plain.api("files/delete_v2", {"path": "/many/f00001.txt"})
    while res["has_more"]:
        res = plain.api("files/list_folder/continue", {"cursor": res["cursor"]})
        names += [e["name"] for e in res["entries"]]
    assert len(names) == len(set(names))
    assert {f"f{i:05d}.txt" for i in range(2, 1200)} <= set(names)
    # Whatever happened during paging shows up on the next continue at the latest.
    later = plain.changes(res["cursor"])
    assert "zz-added-midway.txt" in names + [e["name"] for e in later]
    assert any(e[".tag"] == "deleted" and e["name"] == "f00001.txt" for e in later)


def test_restart_keeps_account_and_cursors(plain):
    md = plain.upload("/persist/p.txt", b"persist")
    cursor = plain.api("files/list_folder/get_latest_cursor", {"path": "/persist"})["cursor"]
    account = plain.api("users/get_current_account", None)["account_id"]
    port = plain.port
    plain.stop()
    plain.port = port
    plain.start()
    again = plain.api("files/get_metadata", {"path": "/persist/p.txt"})
    assert (again["id"], again["rev"], again["content_hash"]) == (md["id"], md["rev"], md["content_hash"])
    assert plain.download("/persist/p.txt") == b"persist"
    assert plain.api("users/get_current_account", None)["account_id"] == account
    plain.upload("/persist/q.txt", b"q")
    assert [e["name"] for e in plain.changes(cursor)] == ["q.txt"]


def test_sigterm_stops_cleanly(tmp_path):
    emu = Emulator(str(tmp_path / "data"), token=TOKEN)
    emu.start()
    proc = emu.proc
    proc.terminate()
    assert proc.wait(5) == 0
    emu.stop()


def test_start_batch_bounds(plain):
    status, _, _ = rpc(plain, "files/upload_session/start_batch", {"num_sessions": 0})
    assert status == 400
    status, _, body = rpc(plain, "files/upload_session/start_batch", {"num_sessions": 2})
    assert status == 200 and len(json.loads(body)["session_ids"]) == 2


def test_concurrent_append_hash_check_and_finish_rejects_data(plain):
    sid = json.loads(raw(plain, "files/upload_session/start", b"", auth({
        "Content-Type": "application/octet-stream",
        "Dropbox-API-Arg": json.dumps({"session_type": "concurrent"})}))[2])["session_id"]
    arg = {"cursor": {"session_id": sid, "offset": 0}, "close": True, "content_hash": "f" * 64}
    status, _, body = raw(plain, "files/upload_session/append_v2", b"abc", auth({
        "Content-Type": "application/octet-stream", "Dropbox-API-Arg": json.dumps(arg)}))
    assert status == 409 and json.loads(body)["error"][".tag"] == "content_hash_mismatch"
    arg = {"cursor": {"session_id": sid, "offset": 0}, "close": True}
    status, _, _ = raw(plain, "files/upload_session/append_v2", b"abc", auth({
        "Content-Type": "application/octet-stream", "Dropbox-API-Arg": json.dumps(arg)}))
    assert status == 200
    finish = {"cursor": {"session_id": sid, "offset": 3}, "commit": {"path": "/conc.txt"}}
    status, _, body = raw(plain, "files/upload_session/finish", b"extra", auth({
        "Content-Type": "application/octet-stream", "Dropbox-API-Arg": json.dumps(finish)}))
    assert status == 409 and json.loads(body)["error"][".tag"] == "concurrent_session_data_not_allowed"
    status, _, body = raw(plain, "files/upload_session/finish", b"", auth({
        "Content-Type": "application/octet-stream", "Dropbox-API-Arg": json.dumps(finish)}))
    assert status == 200 and json.loads(body)["content_hash"] == dropbox_hash(b"abc")


def test_upload_over_150_mib_is_payload_too_large(plain):
    size = 150 * 1024 * 1024 + 1
    block = b"\0" * (1 << 20)

    def body():
        sent = 0
        while sent < size:
            piece = block[: min(len(block), size - sent)]
            sent += len(piece)
            yield piece

    conn = http.client.HTTPConnection("127.0.0.1", plain.port, timeout=60)
    conn.request("POST", "/2/files/upload", body=body(), headers=auth({
        "Content-Type": "application/octet-stream", "Dropbox-API-Arg": '{"path": "/too-big.bin"}',
        "Content-Length": str(size)}))
    resp = conn.getresponse()
    assert resp.status == 409 and json.loads(resp.read())["error"][".tag"] == "payload_too_large"
    conn.close()


def test_longpolls_and_writers_together_do_not_deadlock(plain):
    """Many longpolls re-checking while many writers commit: everything must finish."""
    import threading
    plain.config(longpoll_max_wait=0.2)
    cursor = plain.api("files/list_folder/get_latest_cursor", {"path": "", "recursive": True})["cursor"]
    stop = threading.Event()
    errors = []

    def poller():
        conn = http.client.HTTPConnection("127.0.0.1", plain.port, timeout=20)
        try:
            while not stop.is_set():
                status, _, _ = raw(plain, "files/list_folder/longpoll", json.dumps({"cursor": cursor}).encode(),
                                   {"Content-Type": "application/json"}, conn=conn)
                assert status == 200
        except Exception as exc:
            errors.append(exc)

    def writer(n):
        try:
            for i in range(40):
                plain.upload(f"/stress/w{n}/{i}.txt", b"x" * i)
        except Exception as exc:
            errors.append(exc)

    pollers = [threading.Thread(target=poller) for _ in range(8)]
    writers = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    try:
        for t in pollers + writers:
            t.start()
        for t in writers:
            t.join(60)
        assert not any(t.is_alive() for t in writers), "writers stuck"
    finally:
        stop.set()
        for t in pollers:
            t.join(30)
        plain.config(longpoll_max_wait=0)
    assert errors == [] and not any(t.is_alive() for t in pollers)


def test_upload_session_survives_restart(plain):
    first, second = os.urandom(5 * 1024 * 1024 + 3), os.urandom(1234)
    octet = {"Content-Type": "application/octet-stream"}
    status, _, body = raw(plain, "files/upload_session/start", first, auth({**octet, "Dropbox-API-Arg": "{}"}))
    sid = json.loads(body)["session_id"]
    port = plain.port
    plain.stop()
    plain.port = port
    plain.start()
    arg = {"cursor": {"session_id": sid, "offset": len(first)}, "commit": {"path": "/restarted.bin"}}
    status, _, body = raw(plain, "files/upload_session/finish", second, auth({**octet, "Dropbox-API-Arg": json.dumps(arg)}))
    assert status == 200 and json.loads(body)["content_hash"] == dropbox_hash(first + second)
    assert plain.download("/restarted.bin") == first + second


@pytest.mark.parametrize("restart", [False, True])
def test_concurrent_session_hash_covers_resent_pieces_and_restart(plain, restart):
    """Pieces are hashed as they arrive; a re-sent piece replaces its digests, and blocks whose
    digests were lost in a restart are hashed from the file at finish."""
    block = 4 * 1024 * 1024
    octet = {"Content-Type": "application/octet-stream"}

    def append(sid, offset, data, close=False):
        arg = {"cursor": {"session_id": sid, "offset": offset}, "close": close}
        status, _, body = raw(plain, "files/upload_session/append_v2", data,
                              auth({**octet, "Dropbox-API-Arg": json.dumps(arg)}))
        assert status == 200, body

    sid = json.loads(raw(plain, "files/upload_session/start", b"", auth({
        **octet, "Dropbox-API-Arg": json.dumps({"session_type": "concurrent"})}))[2])["session_id"]
    first, stale, second, last = (os.urandom(block), os.urandom(2 * block), os.urandom(2 * block),
                                  os.urandom(999))
    append(sid, block, stale)
    append(sid, block, second)  # the same range again, new bytes
    if restart:
        port = plain.port
        plain.stop()
        plain.port = port
        plain.start()
    append(sid, 0, first)
    append(sid, 3 * block, last, close=True)
    arg = {"cursor": {"session_id": sid, "offset": 3 * block + len(last)}, "commit": {"path": f"/conc-{restart}.bin"}}
    status, _, body = raw(plain, "files/upload_session/finish", b"", auth({**octet, "Dropbox-API-Arg": json.dumps(arg)}))
    expected = first + second + last
    assert status == 200 and json.loads(body)["content_hash"] == dropbox_hash(expected)
    assert plain.download(f"/conc-{restart}.bin") == expected
