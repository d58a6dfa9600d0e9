"""The emulator is as strict as real Dropbox (issue 13), checked through the official SDK:
write contention in every form Dropbox uses, batch commits one at a time, listings that put
children before their parents. docs/EMULATOR.md ("Stricter than kind") cites the sources."""

import json
import threading
import time

import pytest
from dropbox import files
from dropbox.exceptions import ApiError, RateLimitError
from dropbox.files import CommitInfo, UploadSessionCursor, UploadSessionFinishArg, WriteMode

from emulator_suite import all_entries, all_changes, dropbox_hash, end_cursor
from test_faults_and_control import tls_connection


def contend(emu, form, count=1, retry_after=1):
    emu.config(write_contention_form=form, write_contention_next=count, retry_after=retry_after)


def test_too_many_write_operations_409_in_each_route_union(dbx, emu, base):
    dbx.files_upload(b"x", base + "/x.txt")
    contend(emu, "409")
    with pytest.raises(ApiError) as exc:
        dbx.files_create_folder_v2(base + "/new")
    assert exc.value.error.get_path().is_too_many_write_operations()
    contend(emu, "409")
    with pytest.raises(ApiError) as exc:
        dbx.files_delete_v2(base + "/x.txt")
    assert exc.value.error.is_too_many_write_operations()
    contend(emu, "409")
    with pytest.raises(ApiError) as exc:
        dbx.files_move_v2(base + "/x.txt", base + "/y.txt")
    err = exc.value.error
    assert (err.get_to() if err.is_to() else err.get_from_write()).is_too_many_write_operations()
    contend(emu, "409")
    with pytest.raises(ApiError) as exc:
        dbx.files_upload(b"u", base + "/u.txt")
    assert exc.value.error.get_path().reason.is_too_many_write_operations()
    session = dbx.files_upload_session_start(b"s", close=True).session_id
    contend(emu, "409")
    with pytest.raises(ApiError) as exc:
        dbx.files_upload_session_finish(b"", UploadSessionCursor(session, 1), CommitInfo(base + "/s.txt"))
    assert exc.value.error.is_too_many_write_operations()
    # Nothing was done by a refused call; the next one goes through.
    assert emu.stats()["faults"]["write_contention"] >= 5
    dbx.files_move_v2(base + "/x.txt", base + "/y.txt")
    assert dbx.files_get_metadata(base + "/y.txt").size == 1


def test_too_many_write_operations_429_with_retry_after(dbx, emu, base):
    contend(emu, "429", retry_after=3)
    with pytest.raises(RateLimitError) as exc:
        dbx.files_create_folder_v2(base + "/new")
    assert exc.value.error.reason.is_too_many_write_operations() and exc.value.backoff == 3


def test_too_many_write_operations_429_header_only(emu, base):
    """The wait is in the Retry-After header alone (dropbox/dropbox-sdk-go-unofficial#33)."""
    contend(emu, "429_header_only", retry_after=7)
    conn = tls_connection(emu)
    conn.request("POST", "/2/files/create_folder_v2", body=json.dumps({"path": base + "/n"}),
                 headers={"Authorization": "Bearer " + emu.token, "Content-Type": "application/json"})
    resp = conn.getresponse()
    body = json.loads(resp.read())
    assert resp.status == 429 and resp.getheader("Retry-After") == "7"
    assert body["error"] == {"reason": {".tag": "too_many_write_operations"}}
    assert body["error_summary"].startswith("too_many_write_operations/")


def finish_entries(dbx, base, names):
    entries = []
    for name in names:
        session = dbx.files_upload_session_start(name.encode(), close=True).session_id
        entries.append(UploadSessionFinishArg(UploadSessionCursor(session, len(name)), CommitInfo(base + "/" + name)))
    return entries


def test_too_many_write_operations_per_batch_entry(dbx, emu, base):
    entries = finish_entries(dbx, base, ["a", "b", "c"])
    contend(emu, "batch_entry", count=2)
    result = dbx.files_upload_session_finish_batch_v2(entries).entries
    failed = [r for r in result if r.is_failure()]
    assert len(failed) == 2 and all(r.get_failure().is_too_many_write_operations() for r in failed)
    ok = [e for e, r in zip(entries, result) if r.is_success()]
    assert len(ok) == 1 and dbx.files_get_metadata(ok[0].commit.path).size == 1
    for entry, outcome in zip(entries, result):
        if outcome.is_failure():
            with pytest.raises(ApiError):
                dbx.files_get_metadata(entry.commit.path)   # a refused entry commits nothing
    # A failed entry's session is still there: committing it again works.
    retry = dbx.files_upload_session_finish_batch_v2([e for e, r in zip(entries, result) if r.is_failure()])
    assert all(r.is_success() for r in retry.entries)


def test_overlapping_batch_commits_are_refused(dbx, emu, base):
    """Dropbox commits one batch at a time per namespace (files.stone finish_batch, rclone batcher.go)."""
    first = finish_entries(dbx, base, ["one"])
    second = finish_entries(dbx, base, ["two"])
    emu.config(latency_ms=600)
    emu.reset_stats()
    outcome = {}

    def commit():
        outcome["first"] = dbx.files_upload_session_finish_batch_v2(first)

    thread = threading.Thread(target=commit)
    thread.start()
    time.sleep(0.2)
    with pytest.raises(RateLimitError) as exc:
        dbx.files_upload_session_finish_batch_v2(second)
    thread.join()
    assert exc.value.error.reason.is_too_many_write_operations()
    assert outcome["first"].entries[0].is_success()
    assert emu.stats()["faults"]["batch_overlap"] == 1
    emu.config(latency_ms=0)
    assert dbx.files_upload_session_finish_batch_v2(second).entries[0].is_success()


def test_listing_puts_children_before_parents_reproducibly(dbx, emu, base):
    for i in range(6):
        dbx.files_upload(b"f", f"{base}/d{i}/sub/f{i}.txt")
    emu.config(listing_seed=42)
    first = [e.path_lower for e in all_entries(dbx, dbx.files_list_folder(base, recursive=True, limit=5))]
    second = [e.path_lower for e in all_entries(dbx, dbx.files_list_folder(base, recursive=True, limit=5))]
    assert first == second   # same seed, same order
    expected = {base.lower()} | {f"{base.lower()}/d{i}" + s for i in range(6) for s in ("", "/sub", f"/sub/f{i}.txt")}
    assert set(first) == expected and len(first) == len(expected)
    # Pages walk the tree children first: no child is on a later page than its parent.
    pages = {}
    result = dbx.files_list_folder(base, recursive=True, limit=5)
    number = 0
    while True:
        pages.update({e.path_lower: number for e in result.entries})
        if not result.has_more:
            break
        result, number = dbx.files_list_folder_continue(result.cursor), number + 1
    assert number >= 3
    for path, page in pages.items():
        parent = path.rsplit("/", 1)[0]
        assert pages.get(parent, page) >= page, f"{path} listed on a page after its parent's"
    assert any(first.index(p.rsplit("/", 1)[0]) > i for i, p in enumerate(first) if p != base.lower())
    emu.config(listing_seed=7)
    page = [e.path_lower for e in all_entries(dbx, dbx.files_list_folder(base + "/d0/sub", limit=2000))]
    assert page == [base.lower() + "/d0/sub/f0.txt"]


def test_pages_hold_more_than_the_limit_or_nothing_as_on_dropbox(dbx, emu, base):
    """files.stone on `limit`: "an approximate number and there can be slightly more entries
    returned"; Dropbox staff in dropbox/dropbox-sdk-java#281: a page may be empty while has_more
    is true. Both happen, listings and changes alike, and following has_more still gives every
    entry exactly once."""
    names = {f"f{i:02}.txt" for i in range(40)}
    for name in sorted(names):
        dbx.files_upload(b"p", f"{base}/{name}")
    sizes, empties = [], 0
    for seed in range(8):
        emu.config(listing_seed=seed)
        result = dbx.files_list_folder(base, limit=4)
        listed = list(result.entries)
        sizes.append(len(result.entries))
        while result.has_more:
            empties += not result.entries
            result = dbx.files_list_folder_continue(result.cursor)
            sizes.append(len(result.entries))
            listed += result.entries
        assert sorted(e.name for e in listed) == sorted(names), seed
    assert max(sizes) > 4, sizes
    assert empties > 0, sizes
    cursor = dbx.files_list_folder_get_latest_cursor(base).cursor
    for i in range(30):
        dbx.files_upload(b"q", f"{base}/f{i:02}.txt", mode=WriteMode.overwrite)
    changed, last = all_changes(dbx, cursor)
    assert sorted(e.name for e in changed) == sorted(f"f{i:02}.txt" for i in range(30)) and not last.has_more
    emu.config(listing_pages="exact")
    try:
        result = dbx.files_list_folder(base, limit=4)
        exact = [len(result.entries)]
        while result.has_more:
            result = dbx.files_list_folder_continue(result.cursor)
            exact.append(len(result.entries))
        assert exact == [4] * 10, exact
    finally:
        emu.config(listing_pages="uneven")


def test_changes_page_is_shuffled_but_complete(dbx, emu, base):
    cursor = dbx.files_list_folder_get_latest_cursor(base, recursive=True).cursor
    for i in range(12):
        dbx.files_upload(b"n", f"{base}/new/f{i:02}.txt")
    emu.config(listing_seed=3)
    entries = [e.path_lower for e in all_entries(dbx, dbx.files_list_folder_continue(cursor))]
    assert set(entries) == {base.lower() + "/new"} | {f"{base.lower()}/new/f{i:02}.txt" for i in range(12)}
    assert entries != sorted(entries)


@pytest.mark.parametrize("name", ["space ", "tab\t", "back\\slash", "del\x7f", "emoji \U0001F600"])
def test_names_dropbox_refuses_are_malformed(dbx, base, name):
    with pytest.raises(ApiError) as exc:
        dbx.files_upload(b"x", f"{base}/{name}")
    assert exc.value.error.get_path().reason.is_malformed_path()
    with pytest.raises(ApiError) as exc:
        dbx.files_create_folder_v2(f"{base}/{name}")
    assert exc.value.error.get_path().is_malformed_path()
    dbx.files_upload(b"x", f"{base}/ok.txt")
    with pytest.raises(ApiError) as exc:
        dbx.files_move_v2(f"{base}/ok.txt", f"{base}/{name}")
    assert exc.value.error.get_to().is_malformed_path()


def test_names_dropbox_accepts(dbx, base):
    """A trailing dot, a leading space and BMP symbols are fine (rclone encodes none of them)."""
    for name in ("dot.", " leading", "snow ☃ ☺"):
        assert dbx.files_upload(b"x", f"{base}/{name}").name == name


def test_nfc_and_nfd_spellings_are_one_file(dbx, base):
    nfd, nfc = "cafe\u0301.txt", "caf\u00e9.txt"
    up = dbx.files_upload(b"1", f"{base}/{nfd}")
    assert up.name == nfc and up.path_display == f"{base}/{nfc}"   # stored composed
    assert dbx.files_get_metadata(f"{base}/{nfc}").id == up.id
    with pytest.raises(ApiError) as exc:
        dbx.files_upload(b"2", f"{base}/{nfc}")
    assert exc.value.error.get_path().reason.get_conflict().is_file()


def test_path_lower_is_dropbox_lowercasing(dbx, base):
    """Character by character, simple mappings, old Unicode (samschott/maestral PR #409)."""
    md = dbx.files_upload(b"x", f"{base}/ΣΟΦΟΣ İ Ꙋ.txt")
    assert md.path_lower == f"{base.lower()}/σοφοσ i Ꙋ.txt"
    assert dbx.files_get_metadata(f"{base}/σοφοσ i Ꙋ.TXT").id == md.id


def test_leading_double_slash_is_one(dbx, base):
    """rclone mounting a whole account asks for `//folder`: the stone pattern admits it."""
    dbx.files_upload(b"x", f"{base}/in.txt")
    names = [e.name for e in dbx.files_list_folder("/" + base).entries]
    assert names == ["in.txt"]
    assert dbx.files_get_metadata("/" + base + "/in.txt").path_display == base + "/in.txt"


def test_restricted_content_and_locked_paths(dbx, emu, base):
    dbx.files_upload(b"secret", base + "/restricted.bin")
    dbx.files_upload(b"held", base + "/locked.txt")
    emu.path_state(base + "/RESTRICTED.bin", "restricted_content")
    emu.path_state(base + "/locked.txt", "locked")
    try:
        with pytest.raises(ApiError) as exc:
            dbx.files_download(base + "/restricted.bin")
        assert exc.value.error.get_path().is_restricted_content()
        assert dbx.files_get_metadata(base + "/restricted.bin").size == 6   # listed, not served
        with pytest.raises(ApiError) as exc:
            dbx.files_delete_v2(base + "/locked.txt")
        assert exc.value.error.get_path_lookup().is_locked()
        with pytest.raises(ApiError) as exc:
            dbx.files_move_v2(base + "/locked.txt", base + "/moved.txt")
        assert exc.value.error.get_from_lookup().is_locked()
    finally:
        emu.path_state(base + "/restricted.bin", None)
        emu.path_state(base + "/locked.txt", None)
    assert dbx.files_download(base + "/restricted.bin")[1].content == b"secret"


def test_moves_over_the_entry_limit_are_too_many_files(dbx, emu, base):
    for i in range(4):
        dbx.files_upload(b"x", f"{base}/big/f{i}.txt")
    emu.config(move_limit=4)   # the folder and its 4 files: 5 entries
    with pytest.raises(ApiError) as exc:
        dbx.files_move_v2(base + "/big", base + "/moved")
    assert exc.value.error.is_too_many_files()
    with pytest.raises(ApiError) as exc:
        dbx.files_copy_v2(base + "/big", base + "/copied")
    assert exc.value.error.is_too_many_files()
    emu.config(move_limit=5)
    dbx.files_move_v2(base + "/big", base + "/moved")


@pytest.mark.parametrize("url, host", [("/content/2/files/list_folder", None), ("/api/2/files/upload", None),
                                       ("/api/2/files/list_folder/longpoll", None),
                                       ("/2/files/list_folder", "content.dropboxapi.com")])
def test_a_route_on_the_wrong_host_is_refused(emu, url, host):
    """Each route lives on one host (scripts/dbxemu/hosts.py; kunalvarma05/dropbox-php-sdk#100)."""
    conn = tls_connection(emu)
    headers = {"Authorization": "Bearer " + emu.token, "Content-Type": "application/json"}
    if host:
        headers["Host"] = host
    conn.request("POST", url, body=json.dumps({"path": ""}), headers=headers)
    resp = conn.getresponse()
    text = resp.read().decode()
    assert resp.status == 400 and text.startswith("Incorrect host for API function"), text


def test_routes_on_their_own_host_or_unnamed_pass(emu):
    conn = tls_connection(emu)
    headers = {"Authorization": "Bearer " + emu.token, "Content-Type": "application/json"}
    for url in ("/api/2/files/list_folder", "/2/files/list_folder"):
        conn.request("POST", url, body=json.dumps({"path": ""}), headers=headers)
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        resp.read()


@pytest.mark.parametrize("status, form, content_type", [(500, "text", "text/plain"), (502, "html", "text/html"),
                                                        (503, "empty", "text/plain")])
def test_server_errors_come_as_text_html_or_nothing(dbx, emu, status, form, content_type):
    from dropbox.exceptions import InternalServerError
    emu.config(fail_next=1, fail_status=status, fail_body=form)
    with pytest.raises(InternalServerError) as exc:
        dbx.users_get_space_usage()
    assert exc.value.status_code == status
    emu.config(fail_next=1, fail_status=status, fail_body=form)
    conn = tls_connection(emu)
    conn.request("POST", "/api/2/users/get_space_usage", headers={"Authorization": "Bearer " + emu.token})
    resp = conn.getresponse()
    body = resp.read()
    assert resp.status == status and resp.getheader("Content-Type").startswith(content_type)
    assert (body == b"") == (form == "empty") and (b"<html>" in body) == (form == "html")


def test_missing_scope_and_forbidden(dbx, emu):
    from dropbox.exceptions import AuthError
    """Write commits refused as for an app without files.content.write, or a 403 AccessError."""
    emu.config(deny_next=1, deny_form="missing_scope")
    assert dbx.users_get_space_usage().used >= 0   # reads pass
    with pytest.raises(AuthError) as exc:
        dbx.files_create_folder_v2("/denied")
    assert exc.value.error.is_missing_scope()
    assert exc.value.error.get_missing_scope().required_scope == "files.content.write"
    emu.config(deny_next=1, deny_form="forbidden")
    conn = tls_connection(emu)
    conn.request("POST", "/api/2/files/create_folder_v2", body=json.dumps({"path": "/denied"}),
                 headers={"Authorization": "Bearer " + emu.token, "Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 403 and json.loads(resp.read())["error"] == {".tag": "no_permission"}
    assert emu.stats()["faults"]["denied"] >= 2


def removed_folders_feed(dbx, base, remove, count=20):
    """Folders /f<i>, each holding x.txt and sub/y.txt, removed by `remove` after a recursive
    cursor was taken; returns (the changes, the lowercased base)."""
    for i in range(count):
        dbx.files_upload(b"x", f"{base}/f{i}/x.txt")
        dbx.files_upload(b"y", f"{base}/f{i}/sub/y.txt")
    cursor = end_cursor(dbx, dbx.files_list_folder(base, recursive=True))
    for i in range(count):
        remove(f"{base}/f{i}")
    return all_changes(dbx, cursor)[0], base.lower()


def test_a_deleted_folder_is_sometimes_reported_without_its_contents(dbx, emu, base):
    """Dropbox reports a deleted folder's descendants only sometimes: the v1 delta docs
    (dropbox/dropbox-sdk-python dropbox/client.py, removed in 3f109f5: "you will sometimes also
    get 'delete' delta entries for the children, but this is not guaranteed"); files.stone
    list_folder tells clients to remove "it and all its children" on a DeletedMetadata."""
    changes, lower = removed_folders_feed(dbx, base, dbx.files_delete_v2)
    deleted = {e.path_lower for e in changes if isinstance(e, files.DeletedMetadata)}
    assert all(isinstance(e, files.DeletedMetadata) for e in changes)
    assert all(f"{lower}/f{i}" in deleted for i in range(20))
    with_contents = [i for i in range(20) if f"{lower}/f{i}/x.txt" in deleted]
    # All or nothing per folder: its sub-folder's contents go with it.
    for i in range(20):
        each = {f"{lower}/f{i}/x.txt", f"{lower}/f{i}/sub", f"{lower}/f{i}/sub/y.txt"}
        assert each <= deleted if i in with_contents else not (each & deleted)
    assert 0 < len(with_contents) < 20
    emu.config(change_feed="each")
    try:
        changes, lower = removed_folders_feed(dbx, base + "/each", dbx.files_delete_v2, count=3)
        deleted = {e.path_lower for e in changes}
        assert all(f"{lower}/f{i}/sub/y.txt" in deleted for i in range(3))
    finally:
        emu.config(change_feed="varied")


def test_a_folder_moved_away_is_sometimes_reported_without_its_contents(dbx, base):
    """A move is a delete plus an add: the old place follows the rule of a delete (above); the
    new place is reported whole (nothing else tells the client what is there)."""
    changes, lower = removed_folders_feed(dbx, base, lambda p: dbx.files_move_v2(p, p + "-moved"))
    deleted = {e.path_lower for e in changes if isinstance(e, files.DeletedMetadata)}
    live = {e.path_lower for e in changes if not isinstance(e, files.DeletedMetadata)}
    assert all(f"{lower}/f{i}" in deleted for i in range(20))
    assert all({f"{lower}/f{i}-moved", f"{lower}/f{i}-moved/x.txt", f"{lower}/f{i}-moved/sub/y.txt"} <= live
               for i in range(20))
    assert 0 < sum(f"{lower}/f{i}/sub/y.txt" in deleted for i in range(20)) < 20


def state_of(entries, lower):
    """{path below `lower`: rev (a file) or None (a folder)} of a listing's entries."""
    return {e.path_lower: getattr(e, "rev", None) for e in entries
            if not isinstance(e, files.DeletedMetadata) and e.path_lower.startswith(lower + "/")}


def apply_feed(state, changes):
    """Applies changes in order as files.stone's list_folder says a client keeps its state: a file
    replaces what is at its path and that thing's children; a folder replaces a file; a
    DeletedMetadata removes the path "and all its children"."""
    for e in changes:
        p = e.path_lower
        below = [q for q in state if q.startswith(p + "/")]
        if isinstance(e, files.DeletedMetadata):
            for q in below + ([p] if p in state else []):
                del state[q]
        elif isinstance(e, files.FileMetadata):
            for q in below:
                del state[q]
            state[p] = e.rev
        else:
            state[p] = None
    return state


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_applying_the_changes_in_order_gives_the_tree(dbx, emu, base, seed):
    """Whatever the feed leaves out (a removed folder's contents) or adds, a client that applies it
    in order as files.stone says ends with Dropbox's tree."""
    emu.config(listing_seed=seed)
    lower = base.lower()
    for name in ("a", "b", "c", "d"):
        dbx.files_upload(b"1", f"{base}/{name}/x.txt")
        dbx.files_upload(b"2", f"{base}/{name}/sub/y.txt")
    first = dbx.files_list_folder(base, recursive=True, limit=3)
    state = state_of(all_entries(dbx, first), lower)
    cursor = end_cursor(dbx, dbx.files_list_folder(base, recursive=True, limit=3))
    dbx.files_delete_v2(base + "/a")
    dbx.files_create_folder_v2(base + "/a")                 # made again, empty
    dbx.files_delete_v2(base + "/b")
    dbx.files_upload(b"new", base + "/b/sub/z.txt")          # made again by a file deep in it
    dbx.files_move_v2(base + "/c", base + "/c2")
    dbx.files_move_v2(base + "/c2/sub", base + "/c")         # its sub-folder back at the old name
    dbx.files_delete_v2(base + "/d")
    dbx.files_upload(b"file now", base + "/d")               # a file where the folder was
    apply_feed(state, all_changes(dbx, cursor)[0])
    assert state == state_of(all_entries(dbx, dbx.files_list_folder(base, recursive=True)), lower)


def test_a_path_deleted_and_made_again_is_sometimes_reported_twice_in_order(dbx, emu, base):
    """Dropbox "will sometimes report multiple changes per path" (samschott/maestral sync.py,
    _clean_remote_changes): the deletion, then the new entry, in the order a client must apply."""
    emu.config(listing_seed=11)
    lower = base.lower()
    for i in range(20):
        dbx.files_upload(b"old", f"{base}/p{i}.txt")
        dbx.files_upload(b"old", f"{base}/d{i}/x.txt")
    cursor = end_cursor(dbx, dbx.files_list_folder(base, recursive=True, limit=4))
    for i in range(20):
        dbx.files_delete_v2(f"{base}/p{i}.txt")
        dbx.files_upload(b"new", f"{base}/p{i}.txt")
        dbx.files_delete_v2(f"{base}/d{i}")
        dbx.files_create_folder_v2(f"{base}/d{i}")
    changes = all_changes(dbx, cursor)[0]
    kinds = {}
    for e in changes:
        kinds.setdefault(e.path_lower, []).append(type(e).__name__)
    twice = [p for p in kinds if len(kinds[p]) == 2]
    assert all(kinds[p] == ["DeletedMetadata", "FileMetadata"] for p in twice if p.endswith(".txt"))
    assert all(kinds[p] == ["DeletedMetadata", "FolderMetadata"] for p in twice if not p.endswith(".txt"))
    assert all(len(k) <= 2 for k in kinds.values())
    files_twice = sum(f"{lower}/p{i}.txt" in twice for i in range(20))
    folders_twice = sum(f"{lower}/d{i}" in twice for i in range(20))
    assert 0 < files_twice < 20 and 0 < folders_twice < 20
    # A deleted path made again is not a deleted path in an include_deleted listing.
    listing = all_entries(dbx, dbx.files_list_folder(base, include_deleted=True))
    assert not any(isinstance(e, files.DeletedMetadata) and e.name.startswith(("p", "d")) for e in listing)


def test_finish_content_hash_covers_only_its_own_body(dbx, base):
    """files.stone UploadSessionFinishArg.content_hash: "A hash of the file content uploaded in
    this call. If provided and the uploaded content does not match this hash, an error will be
    returned." A finish with no body uploads nothing: the whole file's hash does not match."""
    data = b"closed before finish"
    for session_type in (files.UploadSessionType.sequential, files.UploadSessionType.concurrent):
        concurrent = session_type.is_concurrent()
        start = dbx.files_upload_session_start(b"" if concurrent else data, close=not concurrent,
                                               session_type=session_type)
        if concurrent:
            dbx.files_upload_session_append_v2(data, UploadSessionCursor(start.session_id, 0), close=True)
        cursor = UploadSessionCursor(start.session_id, len(data))
        with pytest.raises(ApiError) as exc:
            dbx.files_upload_session_finish(b"", cursor, CommitInfo(base + "/f.txt"), content_hash=dropbox_hash(data))
        assert exc.value.error.is_content_hash_mismatch()
        md = dbx.files_upload_session_finish(b"", cursor, CommitInfo(base + "/f.txt", mode=WriteMode.overwrite),
                                             content_hash=dropbox_hash(b""))
        assert md.content_hash == dropbox_hash(data)


def test_upload_sessions_expire(dbx, emu, base):
    """files.stone upload_session/start: "An upload session can be used for a maximum of 7 days",
    then `not_found` (UploadSessionLookupError: "not found or has expired"). The emulator's 7
    days are `upload_session_ttl` seconds."""
    emu.config(upload_session_ttl=1)
    try:
        start = dbx.files_upload_session_start(b"abc")
        other = dbx.files_upload_session_start(b"abc", close=True)
        time.sleep(1.2)
        with pytest.raises(ApiError) as exc:
            dbx.files_upload_session_append_v2(b"d", UploadSessionCursor(start.session_id, 3))
        assert exc.value.error.is_not_found()
        with pytest.raises(ApiError) as exc:
            dbx.files_upload_session_finish(b"", UploadSessionCursor(other.session_id, 3), CommitInfo(base + "/x"))
        assert exc.value.error.is_lookup_failed() and exc.value.error.get_lookup_failed().is_not_found()
    finally:
        emu.config(upload_session_ttl=None)
    assert emu.config()["upload_session_ttl"] == 7 * 24 * 3600


def test_a_longpoll_without_changes_outlasts_its_timeout(dbx, emu, base):
    """files.stone ListFolderLongpollArg.timeout: the request blocks "at most this length of
    time, plus up to 90 seconds of random jitter" (dropbox/dropbox-sdk-python dropbox_client.py:
    "The server will respond after <timeout> + random(0, 90) seconds"). A client whose read
    timeout is the longpoll's own fails on Dropbox. Takes 30 s (the shortest timeout there is);
    the jitter is 0..4 s here (`longpoll_jitter`), so four polls are all under 30.3 s once in
    30,000 runs."""
    emu.config(longpoll_max_wait=0, longpoll_jitter=4)
    cursor = dbx.files_list_folder_get_latest_cursor(base).cursor
    waited = []

    def poll():
        conn = tls_connection(emu)
        conn.timeout = 60
        started = time.monotonic()
        conn.request("POST", "/notify/2/files/list_folder/longpoll", body=json.dumps({"cursor": cursor, "timeout": 30}),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["changes"] is False
        waited.append(time.monotonic() - started)

    try:
        polls = [threading.Thread(target=poll) for _ in range(4)]
        for t in polls:
            t.start()
        for t in polls:
            t.join(60)
    finally:
        emu.config(longpoll_jitter=None)
    assert len(waited) == 4 and min(waited) >= 29.9 and max(waited) > 30.3, waited


def test_identical_listings_at_once_are_refused(dbx, emu, base):
    """files.stone list_folder: "auth.RateLimitError may be returned if multiple list_folder or
    list_folder/continue calls with same parameters are made simultaneously by same API app for
    same user"; the emulator always refuses one that arrives while an identical one is served
    (from its arrival, latency included, until its answer is ready)."""
    dbx.files_upload(b"x", base + "/x.txt")
    cursor = dbx.files_list_folder(base).cursor
    emu.reset_stats()
    headers = {"Authorization": "Bearer " + emu.token, "Content-Type": "application/json"}

    def call(route, arg, answers):
        conn = tls_connection(emu)
        conn.request("POST", "/api/2/" + route, body=json.dumps(arg), headers=headers)
        resp = conn.getresponse()
        answers.append((resp.status, json.loads(resp.read())))
        conn.close()

    emu.config(latency_ms=1500)
    try:
        for route, arg, other in (("files/list_folder", {"path": base}, {"path": base, "limit": 5}),
                                  ("files/list_folder/continue", {"cursor": cursor}, None)):
            first, same, different = [], [], []
            thread = threading.Thread(target=call, args=(route, arg, first))
            thread.start()
            time.sleep(0.5)
            call(route, arg, same)
            if other:
                call(route, other, different)
            thread.join(30)
            assert first[0][0] == 200 and all(status == 200 for status, _ in different)
            assert same[0][0] == 429 and same[0][1]["error"]["reason"][".tag"] == "too_many_requests"
            again = []
            call(route, arg, again)   # once the first is answered
            assert again[0][0] == 200
    finally:
        emu.config(latency_ms=0)
    assert emu.stats()["faults"]["identical_listing"] == 2
    emu.config(refuse_identical_listings=0, latency_ms=1500)
    try:
        first, same = [], []
        thread = threading.Thread(target=call, args=("files/list_folder", {"path": base}, first))
        thread.start()
        time.sleep(0.5)
        call("files/list_folder", {"path": base}, same)
        thread.join(30)
        assert first[0][0] == 200 and same[0][0] == 200
    finally:
        emu.config(refuse_identical_listings=1, latency_ms=0)


@pytest.mark.parametrize("seed", range(8))
def test_a_deletion_keeps_its_place_among_entries_above_and_below_it(dbx, emu, base, seed):
    """A folder moved away and back (a case-only rename through a temporary name, as clients
    do): every deletion under it comes before the folder's entry, as in the change log. A
    shuffled page that put one after would delete a file the client was told came back."""
    emu.config(listing_seed=seed)
    dbx.files_upload(b"jpeg", base + "/photos/2024/a.jpg")
    cursor = dbx.files_list_folder_get_latest_cursor(base, recursive=True).cursor
    dbx.files_move_v2(base + "/photos", base + "/.photos.tmp")
    dbx.files_move_v2(base + "/.photos.tmp", base + "/Photos")
    changes = all_changes(dbx, cursor)[0]
    lower = base.lower() + "/photos"
    back = [i for i, e in enumerate(changes) if e.path_lower == lower and not isinstance(e, files.DeletedMetadata)]
    late = [e.path_lower for e in changes[back[0]:]
            if isinstance(e, files.DeletedMetadata) and e.path_lower.startswith(lower + "/")]
    assert late == []
