"""Conformance of metadata, listing, download, upload, delete, move and copy, through the SDK."""

import re
import time

import pytest
from dropbox import files
from dropbox.exceptions import ApiError, BadInputError

from emulator_suite import all_changes, all_entries, dropbox_hash, end_cursor

HEX_REV = re.compile(r"^[0-9a-f]{9,}$")
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def write_error_of(err):
    """The WriteError inside an UploadError (UploadWriteFailed.reason)."""
    assert err.error.is_path()
    return err.error.get_path().reason


# ----- get_metadata -----
def test_get_metadata_file_fields(dbx, base):
    data = b"hello dropbox"
    up = dbx.files_upload(data, base + "/Hello.TXT")
    md = dbx.files_get_metadata(base + "/Hello.TXT")
    assert isinstance(md, files.FileMetadata)
    assert md.name == "Hello.TXT" and md.path_display == base + "/Hello.TXT"
    assert md.path_lower == (base + "/hello.txt").lower()
    assert HEX_REV.match(md.rev) and md.rev == up.rev
    assert md.size == len(data) and md.is_downloadable is True
    assert md.content_hash == dropbox_hash(data)
    assert md.id.startswith("id:") and len(md.id) > 3


def test_get_metadata_timestamps_have_whole_seconds(dbx, base):
    md = dbx.files_upload(b"x", base + "/t.txt")
    raw = dbx.files_get_metadata(base + "/t.txt")
    assert raw.server_modified == md.server_modified
    assert abs((md.server_modified - md.client_modified).total_seconds()) == 0


def test_get_metadata_folder(dbx, base):
    md = dbx.files_get_metadata(base)
    assert isinstance(md, files.FolderMetadata)
    assert md.path_lower == base.lower() and md.id.startswith("id:")


def test_get_metadata_not_found(dbx, base):
    with pytest.raises(ApiError) as exc:
        dbx.files_get_metadata(base + "/missing")
    assert exc.value.error.is_path() and exc.value.error.get_path().is_not_found()


def test_get_metadata_is_case_insensitive_and_case_preserving(dbx, base):
    dbx.files_upload(b"a", base + "/MiXeD.txt")
    md = dbx.files_get_metadata(base.upper() + "/mixed.TXT")
    assert md.name == "MiXeD.txt"


def test_get_metadata_by_id_and_rev(dbx, base):
    first = dbx.files_upload(b"one", base + "/f.txt")
    second = dbx.files_upload(b"two", base + "/f.txt", mode=files.WriteMode.overwrite)
    assert dbx.files_get_metadata(first.id).path_lower == second.path_lower
    old = dbx.files_get_metadata("rev:" + first.rev)
    assert old.rev == first.rev and old.size == 3 and old.content_hash == dropbox_hash(b"one")


def test_get_metadata_include_deleted(dbx, base):
    dbx.files_upload(b"gone", base + "/gone.txt")
    dbx.files_delete_v2(base + "/gone.txt")
    md = dbx.files_get_metadata(base + "/gone.txt", include_deleted=True)
    assert isinstance(md, files.DeletedMetadata) and md.name == "gone.txt"
    with pytest.raises(ApiError):
        dbx.files_get_metadata(base + "/gone.txt")


def test_get_metadata_malformed_path(dbx, base):
    with pytest.raises(ApiError) as exc:
        dbx.files_get_metadata(base + "//x")
    assert exc.value.error.get_path().is_malformed_path()


# ----- list_folder -----
def test_list_folder_direct_children_only(dbx, base):
    dbx.files_upload(b"1", base + "/a.txt")
    dbx.files_upload(b"2", base + "/sub/b.txt")
    names = sorted(e.name for e in all_entries(dbx, dbx.files_list_folder(base)))
    assert names == ["a.txt", "sub"]


def test_list_folder_recursive_parents_first(dbx, base, emu):
    """With listing_order "path" (not the default: see test_real_dropbox.py for the shuffled one)."""
    dbx.files_upload(b"1", base + "/x/y/z.txt")
    dbx.files_upload(b"2", base + "/x b/w.txt")
    emu.config(listing_order="path")
    try:
        lowers = [e.path_lower for e in all_entries(dbx, dbx.files_list_folder(base, recursive=True))]
    finally:
        emu.config(listing_order="shuffled")
    assert lowers[0] == base.lower()
    for i, p in enumerate(lowers):
        parent = p.rsplit("/", 1)[0]
        if parent != base.lower().rsplit("/", 1)[0]:
            assert parent in lowers[:i], f"{p} listed before its parent"
    assert set(lowers) >= {base.lower() + s for s in ("/x", "/x/y", "/x/y/z.txt", "/x b", "/x b/w.txt")}


def test_list_folder_root(dbx, base):
    names = {e.path_lower for e in all_entries(dbx, dbx.files_list_folder(""))}
    assert base.lower() in names


def test_list_folder_pagination(dbx, base):
    for i in range(7):
        dbx.files_upload(str(i).encode(), f"{base}/f{i}.txt")
    res = dbx.files_list_folder(base, limit=3)
    seen = [e.name for e in res.entries]
    pages = 1
    assert res.has_more
    while res.has_more:
        res = dbx.files_list_folder_continue(res.cursor)
        seen += [e.name for e in res.entries]
        pages += 1
    # At least 2 pages: a page may hold slightly more than `limit` (listing_pages.py).
    assert sorted(seen) == [f"f{i}.txt" for i in range(7)] and pages >= 2


def test_list_folder_not_found_and_not_folder(dbx, base):
    dbx.files_upload(b"f", base + "/file")
    with pytest.raises(ApiError) as exc:
        dbx.files_list_folder(base + "/nope")
    assert exc.value.error.get_path().is_not_found()
    with pytest.raises(ApiError) as exc:
        dbx.files_list_folder(base + "/file")
    assert exc.value.error.get_path().is_not_folder()


def test_list_folder_slash_root_is_bad_input(dbx):
    with pytest.raises(BadInputError):
        dbx.files_list_folder("/")


def test_continue_reports_new_and_modified(dbx, base):
    dbx.files_upload(b"v1", base + "/m.txt")
    cursor = end_cursor(dbx, dbx.files_list_folder(base))
    dbx.files_upload(b"v2", base + "/m.txt", mode=files.WriteMode.overwrite)
    dbx.files_upload(b"n", base + "/new.txt")
    by_name = {e.name: e for e in all_changes(dbx, cursor)[0]}
    assert set(by_name) == {"m.txt", "new.txt"}
    assert by_name["m.txt"].size == 2 and by_name["m.txt"].content_hash == dropbox_hash(b"v2")


def test_continue_reports_deletes_without_include_deleted(dbx, base):
    dbx.files_upload(b"1", base + "/d/one.txt")
    dbx.files_upload(b"2", base + "/keep.txt")
    cursor = end_cursor(dbx, dbx.files_list_folder(base, recursive=True))
    dbx.files_delete_v2(base + "/d")
    changed = all_changes(dbx, cursor)[0]
    deleted = {e.path_lower for e in changed if isinstance(e, files.DeletedMetadata)}
    assert base.lower() + "/d" in deleted
    assert all(isinstance(e, files.DeletedMetadata) for e in changed)


def test_continue_reports_moves_as_delete_plus_add(dbx, base):
    up = dbx.files_upload(b"1", base + "/old.txt")
    cursor = end_cursor(dbx, dbx.files_list_folder(base))
    dbx.files_move_v2(base + "/old.txt", base + "/new.txt")
    changed = all_changes(dbx, cursor)[0]
    kinds = {(type(e).__name__, e.name) for e in changed}
    assert ("DeletedMetadata", "old.txt") in kinds and ("FileMetadata", "new.txt") in kinds
    moved = [e for e in changed if e.name == "new.txt"][0]
    assert moved.id == up.id


def test_continue_with_no_changes_is_empty(dbx, base):
    cursor = end_cursor(dbx, dbx.files_list_folder(base))
    res = dbx.files_list_folder_continue(cursor)
    assert res.entries == [] and res.has_more is False


def test_include_deleted_lists_tombstones(dbx, base):
    dbx.files_upload(b"1", base + "/was.txt")
    dbx.files_delete_v2(base + "/was.txt")
    res = dbx.files_list_folder(base, include_deleted=True)
    while res.has_more:
        more = dbx.files_list_folder_continue(res.cursor)
        res.entries += more.entries
        res.has_more, res.cursor = more.has_more, more.cursor
    assert any(isinstance(e, files.DeletedMetadata) and e.name == "was.txt" for e in res.entries)
    assert not any(e.name == "was.txt" for e in all_entries(dbx, dbx.files_list_folder(base)))


def test_get_latest_cursor_sees_only_later_changes(dbx, base):
    dbx.files_upload(b"before", base + "/before.txt")
    cursor = dbx.files_list_folder_get_latest_cursor(base).cursor
    dbx.files_upload(b"after", base + "/after.txt")
    assert [e.name for e in all_changes(dbx, cursor)[0]] == ["after.txt"]


def test_continue_scope_excludes_other_folders(dbx, base):
    dbx.files_create_folder_v2(base + "/watched")
    cursor = end_cursor(dbx, dbx.files_list_folder(base + "/watched"))
    dbx.files_upload(b"x", base + "/elsewhere.txt")
    assert all_changes(dbx, cursor)[0] == []


def test_continue_after_reset_cursors(dbx, emu, base):
    cursor = dbx.files_list_folder(base).cursor
    emu.reset_cursors()
    with pytest.raises(ApiError) as exc:
        dbx.files_list_folder_continue(cursor)
    assert exc.value.error.is_reset()


def test_continue_garbage_cursor_is_bad_input(dbx):
    with pytest.raises(BadInputError):
        dbx.files_list_folder_continue("AAnot-a-cursor")


# ----- download -----
def test_download_content_and_metadata(dbx, base):
    data = bytes(range(256)) * 1000
    dbx.files_upload(data, base + "/bin.dat")
    md, resp = dbx.files_download(base + "/bin.dat")
    assert resp.content == data and md.size == len(data) and md.content_hash == dropbox_hash(data)


def test_download_unicode_name(dbx, base):
    path = base + "/Ünïcødé 文件 ☺.txt"
    dbx.files_upload("héllo".encode(), path)
    md, resp = dbx.files_download(path.lower())
    assert md.name == "Ünïcødé 文件 ☺.txt" and resp.content == "héllo".encode()


def test_download_old_revision(dbx, base):
    first = dbx.files_upload(b"first", base + "/r.txt")
    dbx.files_upload(b"second", base + "/r.txt", mode=files.WriteMode.overwrite)
    md, resp = dbx.files_download("rev:" + first.rev)
    assert resp.content == b"first" and md.rev == first.rev


def test_download_folder_is_not_file(dbx, base):
    with pytest.raises(ApiError) as exc:
        dbx.files_download(base)
    assert exc.value.error.get_path().is_not_file()


def test_download_missing(dbx, base):
    with pytest.raises(ApiError) as exc:
        dbx.files_download(base + "/none")
    assert exc.value.error.get_path().is_not_found()


# ----- upload -----
def test_upload_creates_parents(dbx, base):
    dbx.files_upload(b"deep", base + "/a/b/c/deep.txt")
    assert isinstance(dbx.files_get_metadata(base + "/a/b"), files.FolderMetadata)


def test_upload_add_conflict(dbx, base):
    dbx.files_upload(b"1", base + "/c.txt")
    with pytest.raises(ApiError) as exc:
        dbx.files_upload(b"2", base + "/c.txt")
    reason = write_error_of(exc.value)
    assert reason.is_conflict() and reason.get_conflict().is_file()


def test_upload_overwrite_makes_new_rev(dbx, base):
    a = dbx.files_upload(b"1", base + "/o.txt")
    b = dbx.files_upload(b"22", base + "/o.txt", mode=files.WriteMode.overwrite)
    assert a.rev != b.rev and a.id == b.id and b.size == 2


def test_upload_identical_content_is_noop(dbx, base):
    a = dbx.files_upload(b"same", base + "/s.txt", client_modified=None)
    b = dbx.files_upload(b"same", base + "/s.txt", mode=files.WriteMode.add)
    assert a.rev == b.rev and a.client_modified == b.client_modified


def test_upload_strict_conflict_on_identical(dbx, base):
    dbx.files_upload(b"same", base + "/s.txt")
    with pytest.raises(ApiError) as exc:
        dbx.files_upload(b"same", base + "/s.txt", mode=files.WriteMode.overwrite, strict_conflict=True)
    assert write_error_of(exc.value).is_conflict()


def test_upload_update_mode(dbx, base):
    a = dbx.files_upload(b"1", base + "/u.txt")
    b = dbx.files_upload(b"2", base + "/u.txt", mode=files.WriteMode.update(a.rev))
    assert b.rev != a.rev
    with pytest.raises(ApiError) as exc:
        dbx.files_upload(b"3", base + "/u.txt", mode=files.WriteMode.update(a.rev))
    assert write_error_of(exc.value).get_conflict().is_file()
    c = dbx.files_upload(b"3", base + "/u.txt", mode=files.WriteMode.update(a.rev), autorename=True)
    assert c.name == "u (conflicted copy).txt"


def test_upload_autorename(dbx, base):
    dbx.files_upload(b"1", base + "/doc.txt")
    b = dbx.files_upload(b"2", base + "/doc.txt", autorename=True)
    c = dbx.files_upload(b"3", base + "/doc.txt", autorename=True)
    assert (b.name, c.name) == ("doc (1).txt", "doc (2).txt")


def test_upload_onto_folder_conflicts(dbx, base):
    dbx.files_create_folder_v2(base + "/dir")
    with pytest.raises(ApiError) as exc:
        dbx.files_upload(b"x", base + "/dir", mode=files.WriteMode.overwrite)
    assert write_error_of(exc.value).get_conflict().is_folder()


def test_upload_under_a_file_is_file_ancestor(dbx, base):
    dbx.files_upload(b"x", base + "/plain")
    with pytest.raises(ApiError) as exc:
        dbx.files_upload(b"y", base + "/plain/child.txt")
    assert write_error_of(exc.value).get_conflict().is_file_ancestor()


def test_upload_disallowed_name(dbx, base):
    with pytest.raises(ApiError) as exc:
        dbx.files_upload(b"x", base + "/desktop.ini")
    assert write_error_of(exc.value).is_disallowed_name()


def test_upload_keeps_client_modified(dbx, base):
    import datetime
    when = datetime.datetime(2020, 5, 17, 10, 11, 12)
    md = dbx.files_upload(b"x", base + "/cm.txt", client_modified=when)
    assert md.client_modified == when and md.server_modified != when


def test_upload_case_insensitive_unicode(dbx, base):
    dbx.files_upload(b"x", base + "/ÉTÉ.txt")
    with pytest.raises(ApiError):
        dbx.files_upload(b"y", base + "/été.txt")
    assert dbx.files_get_metadata(base + "/été.TXT").name == "ÉTÉ.txt"


def test_upload_empty_file(dbx, base):
    md = dbx.files_upload(b"", base + "/empty")
    assert md.size == 0 and md.content_hash == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


# ----- delete -----
def test_delete_file_returns_metadata(dbx, base):
    up = dbx.files_upload(b"x", base + "/del.txt")
    res = dbx.files_delete_v2(base + "/del.txt")
    assert isinstance(res.metadata, files.FileMetadata) and res.metadata.rev == up.rev


def test_delete_folder_recursively(dbx, base):
    dbx.files_upload(b"x", base + "/tree/a/b.txt")
    res = dbx.files_delete_v2(base + "/tree")
    assert isinstance(res.metadata, files.FolderMetadata)
    for p in ("/tree", "/tree/a", "/tree/a/b.txt"):
        with pytest.raises(ApiError):
            dbx.files_get_metadata(base + p)


def test_delete_missing(dbx, base):
    with pytest.raises(ApiError) as exc:
        dbx.files_delete_v2(base + "/none")
    assert exc.value.error.is_path_lookup() and exc.value.error.get_path_lookup().is_not_found()


def test_delete_with_stale_parent_rev(dbx, base):
    a = dbx.files_upload(b"1", base + "/pr.txt")
    dbx.files_upload(b"2", base + "/pr.txt", mode=files.WriteMode.overwrite)
    with pytest.raises(ApiError) as exc:
        dbx.files_delete_v2(base + "/pr.txt", parent_rev=a.rev)
    assert exc.value.error.is_path_write()


def test_delete_batch_and_check(dbx, base):
    dbx.files_upload(b"1", base + "/b1")
    dbx.files_upload(b"2", base + "/b2")
    launch = dbx.files_delete_batch([files.DeleteArg(base + "/b1"), files.DeleteArg(base + "/b2"),
                                     files.DeleteArg(base + "/nope")])
    assert launch.is_async_job_id()
    status = dbx.files_delete_batch_check(launch.get_async_job_id())
    assert status.is_complete()
    entries = status.get_complete().entries
    assert [e.is_success() for e in entries] == [True, True, False]
    assert entries[0].get_success().metadata.name == "b1"
    assert entries[2].get_failure().is_path_lookup()


def test_delete_batch_check_unknown_job(dbx):
    with pytest.raises(ApiError) as exc:
        dbx.files_delete_batch_check("dbjid:unknown")
    assert exc.value.error.is_invalid_async_job_id()


def test_delete_batch_with_parent_rev(dbx, base):
    """DeleteArg.parent_rev in a batch: a file changed since that rev is kept (path_write
    conflict), one still at it is deleted."""
    first = dbx.files_upload(b"1", base + "/kept")
    dbx.files_upload(b"2", base + "/kept", mode=files.WriteMode.overwrite)
    gone = dbx.files_upload(b"3", base + "/gone")
    launch = dbx.files_delete_batch([files.DeleteArg(base + "/kept", parent_rev=first.rev),
                                     files.DeleteArg(base + "/gone", parent_rev=gone.rev)])
    entries = dbx.files_delete_batch_check(launch.get_async_job_id()).get_complete().entries
    assert entries[0].is_failure() and entries[0].get_failure().is_path_write()
    assert entries[0].get_failure().get_path_write().get_conflict().is_file()
    assert entries[1].is_success() and entries[1].get_success().metadata.rev == gone.rev
    assert dbx.files_download(base + "/kept")[1].content == b"2"


def test_delete_batch_entries_meet_write_contention(dbx, emu, base):
    dbx.files_upload(b"1", base + "/c1")
    dbx.files_upload(b"2", base + "/c2")
    emu.config(write_contention_next=1, write_contention_form="batch_entry")
    launch = dbx.files_delete_batch([files.DeleteArg(base + "/c1"), files.DeleteArg(base + "/c2")])
    entries = dbx.files_delete_batch_check(launch.get_async_job_id()).get_complete().entries
    assert entries[0].get_failure().is_too_many_write_operations()
    assert entries[1].is_success()


# ----- create_folder_batch -----
def test_create_folder_batch_small_is_synchronous(dbx, base):
    dbx.files_upload(b"x", base + "/taken")
    launch = dbx.files_create_folder_batch([base + "/n1", base + "/deep/n2", base + "/N1", base + "/taken"])
    assert launch.is_complete()
    entries = launch.get_complete().entries
    assert [e.is_success() for e in entries] == [True, True, True, False]
    assert entries[0].get_success().metadata.name == "n1"
    # "Duplicate path arguments in the batch are considered only once".
    assert entries[2].get_success().metadata.id == entries[0].get_success().metadata.id
    assert isinstance(dbx.files_get_metadata(base + "/deep"), files.FolderMetadata)
    failure = entries[3].get_failure()
    assert failure.is_path() and failure.get_path().get_conflict().is_file()


def test_create_folder_batch_large_or_forced_is_a_job(dbx, emu, base):
    launch = dbx.files_create_folder_batch([base + "/forced"], force_async=True)
    assert launch.is_async_job_id()
    status = dbx.files_create_folder_batch_check(launch.get_async_job_id())
    assert status.is_complete() and status.get_complete().entries[0].is_success()
    emu.config(batch_async_over=2)
    launch = dbx.files_create_folder_batch([base + "/j1", base + "/j2", base + "/forced"])
    assert launch.is_async_job_id()
    entries = dbx.files_create_folder_batch_check(launch.get_async_job_id()).get_complete().entries
    assert [e.is_success() for e in entries] == [True, True, False]
    assert entries[2].get_failure().get_path().get_conflict().is_folder()


def test_create_folder_batch_entries_meet_write_contention(dbx, emu, base):
    emu.config(write_contention_next=1, write_contention_form="batch_entry")
    entries = dbx.files_create_folder_batch([base + "/w1", base + "/w2"]).get_complete().entries
    assert entries[0].get_failure().get_path().is_too_many_write_operations()
    assert entries[1].is_success()


def test_create_folder_batch_check_unknown_job(dbx):
    with pytest.raises(ApiError) as exc:
        dbx.files_create_folder_batch_check("dbjid:unknown")
    assert exc.value.error.is_invalid_async_job_id()


# ----- move_batch_v2 -----
def test_move_batch_v2_moves_and_reports_each_entry(dbx, base):
    up = dbx.files_upload(b"m", base + "/a.txt")
    dbx.files_upload(b"n", base + "/dir/in.txt")
    dbx.files_upload(b"t", base + "/taken.txt")
    dbx.files_upload(b"u", base + "/b.txt")
    launch = dbx.files_move_batch_v2([files.RelocationPath(base + "/a.txt", base + "/sub/a2.txt"),
                                      files.RelocationPath(base + "/dir", base + "/dir2"),
                                      files.RelocationPath(base + "/none", base + "/x"),
                                      files.RelocationPath(base + "/b.txt", base + "/taken.txt")])
    assert launch.is_complete()
    entries = launch.get_complete().entries
    moved = entries[0].get_success()
    assert isinstance(moved, files.FileMetadata) and moved.id == up.id and moved.rev == up.rev
    assert moved.path_display == base + "/sub/a2.txt"
    assert isinstance(entries[1].get_success(), files.FolderMetadata)
    assert dbx.files_download(base + "/dir2/in.txt")[1].content == b"n"
    missing = entries[2].get_failure()
    assert missing.is_relocation_error() and missing.get_relocation_error().get_from_lookup().is_not_found()
    taken = entries[3].get_failure().get_relocation_error()
    assert taken.is_to() and taken.get_to().get_conflict().is_file()
    assert dbx.files_download(base + "/taken.txt")[1].content == b"t"


def test_move_batch_v2_large_is_a_job_and_meets_contention(dbx, emu, base):
    for name in ("p", "q", "r"):
        dbx.files_upload(name.encode(), f"{base}/{name}")
    emu.config(batch_async_over=2, write_contention_next=1, write_contention_form="batch_entry")
    launch = dbx.files_move_batch_v2([files.RelocationPath(f"{base}/{n}", f"{base}/moved/{n}") for n in ("p", "q", "r")])
    assert launch.is_async_job_id()
    status = dbx.files_move_batch_check_v2(launch.get_async_job_id())
    entries = status.get_complete().entries
    assert entries[0].get_failure().is_too_many_write_operations()
    assert entries[1].is_success() and entries[2].is_success()
    assert dbx.files_download(base + "/moved/q")[1].content == b"q"


# ----- create_folder -----
def test_create_folder(dbx, base):
    res = dbx.files_create_folder_v2(base + "/New Folder")
    assert res.metadata.name == "New Folder" and res.metadata.path_lower == base.lower() + "/new folder"


def test_create_folder_conflicts(dbx, base):
    dbx.files_create_folder_v2(base + "/f")
    dbx.files_upload(b"x", base + "/file")
    with pytest.raises(ApiError) as exc:
        dbx.files_create_folder_v2(base + "/F")
    assert exc.value.error.get_path().get_conflict().is_folder()
    with pytest.raises(ApiError) as exc:
        dbx.files_create_folder_v2(base + "/file")
    assert exc.value.error.get_path().get_conflict().is_file()


def test_create_folder_autorename(dbx, base):
    dbx.files_create_folder_v2(base + "/f")
    res = dbx.files_create_folder_v2(base + "/f", autorename=True)
    assert res.metadata.name == "f (1)"


# ----- move and copy -----
def test_move_file_keeps_id(dbx, base):
    up = dbx.files_upload(b"m", base + "/m.txt")
    res = dbx.files_move_v2(base + "/m.txt", base + "/sub/renamed.txt")
    assert res.metadata.id == up.id and res.metadata.path_display == base + "/sub/renamed.txt"
    with pytest.raises(ApiError):
        dbx.files_get_metadata(base + "/m.txt")


def test_move_folder_moves_children(dbx, base):
    up = dbx.files_upload(b"c", base + "/src/in/c.txt")
    dbx.files_move_v2(base + "/src", base + "/dst")
    md = dbx.files_get_metadata(base + "/dst/in/c.txt")
    assert md.id == up.id and md.path_display == base + "/dst/in/c.txt"


def test_move_case_only_rename_changes_nothing(dbx, base):
    """As on Dropbox (files.stone on move_v2; takezoh/obsidian-air-sync#47): success, old case kept,
    nothing in the change feed."""
    up = dbx.files_upload(b"c", base + "/case.txt")
    cursor = dbx.files_list_folder_get_latest_cursor(base, recursive=True).cursor
    res = dbx.files_move_v2(base + "/case.txt", base + "/CASE.txt")
    assert res.metadata.name == "case.txt" and res.metadata.id == up.id
    assert dbx.files_get_metadata(base + "/CASE.TXT").path_display == base + "/case.txt"
    assert all_changes(dbx, cursor)[0] == []


def test_move_errors(dbx, base):
    dbx.files_upload(b"1", base + "/a.txt")
    dbx.files_upload(b"2", base + "/b.txt")
    dbx.files_create_folder_v2(base + "/dir/inner")
    with pytest.raises(ApiError) as exc:
        dbx.files_move_v2(base + "/none", base + "/x")
    assert exc.value.error.is_from_lookup() and exc.value.error.get_from_lookup().is_not_found()
    with pytest.raises(ApiError) as exc:
        dbx.files_move_v2(base + "/a.txt", base + "/b.txt")
    assert exc.value.error.is_to() and exc.value.error.get_to().get_conflict().is_file()
    with pytest.raises(ApiError) as exc:
        dbx.files_move_v2(base + "/dir", base + "/dir/inner/x")
    assert exc.value.error.is_cant_move_folder_into_itself()


def test_move_autorename(dbx, base):
    dbx.files_upload(b"1", base + "/a.txt")
    dbx.files_upload(b"2", base + "/b.txt")
    res = dbx.files_move_v2(base + "/a.txt", base + "/b.txt", autorename=True)
    assert res.metadata.name == "b (1).txt"


def test_copy_file_gets_new_id(dbx, base):
    up = dbx.files_upload(b"copy me", base + "/orig.txt")
    res = dbx.files_copy_v2(base + "/orig.txt", base + "/copy.txt")
    assert res.metadata.id != up.id and res.metadata.content_hash == up.content_hash
    assert dbx.files_download(base + "/copy.txt")[1].content == b"copy me"
    assert dbx.files_get_metadata(base + "/orig.txt").id == up.id


def test_copy_folder_and_conflict(dbx, base):
    dbx.files_upload(b"x", base + "/f/x.txt")
    dbx.files_copy_v2(base + "/f", base + "/g")
    assert dbx.files_download(base + "/g/x.txt")[1].content == b"x"
    with pytest.raises(ApiError) as exc:
        dbx.files_copy_v2(base + "/f", base + "/g")
    assert exc.value.error.get_to().get_conflict().is_folder()


def test_copy_then_overwrite_leaves_original(dbx, base):
    dbx.files_upload(b"original", base + "/o.txt")
    dbx.files_copy_v2(base + "/o.txt", base + "/c.txt")
    dbx.files_upload(b"changed", base + "/c.txt", mode=files.WriteMode.overwrite)
    assert dbx.files_download(base + "/o.txt")[1].content == b"original"


# ----- longpoll -----
def test_longpoll_wakes_on_change(dbx, base):
    import threading
    cursor = dbx.files_list_folder_get_latest_cursor(base).cursor
    timer = threading.Timer(0.5, lambda: dbx.files_upload(b"wake", base + "/wake.txt"))
    started = time.monotonic()
    timer.start()
    res = dbx.files_list_folder_longpoll(cursor, timeout=30)
    elapsed = time.monotonic() - started
    timer.join()
    assert res.changes is True and elapsed < 2.0


def test_longpoll_immediate_when_already_stale(dbx, base):
    cursor = dbx.files_list_folder_get_latest_cursor(base).cursor
    dbx.files_upload(b"x", base + "/x.txt")
    started = time.monotonic()
    assert dbx.files_list_folder_longpoll(cursor).changes is True
    assert time.monotonic() - started < 1.0


def test_longpoll_times_out_and_backoff(dbx, emu, base):
    emu.config(longpoll_max_wait=0.5, longpoll_backoff=7)
    cursor = dbx.files_list_folder_get_latest_cursor(base).cursor
    res = dbx.files_list_folder_longpoll(cursor, timeout=30)
    assert res.changes is False and res.backoff == 7


def test_longpoll_ignores_changes_elsewhere(dbx, emu, base):
    emu.config(longpoll_max_wait=0.5)
    dbx.files_create_folder_v2(base + "/quiet")
    cursor = dbx.files_list_folder_get_latest_cursor(base + "/quiet").cursor
    dbx.files_upload(b"x", base + "/noise.txt")
    assert dbx.files_list_folder_longpoll(cursor, timeout=30).changes is False


def test_longpoll_reset(dbx, emu, base):
    cursor = dbx.files_list_folder_get_latest_cursor(base).cursor
    emu.reset_cursors()
    with pytest.raises(ApiError) as exc:
        dbx.files_list_folder_longpoll(cursor)
    assert exc.value.error.is_reset()


def test_get_latest_cursor_not_found(dbx, base):
    with pytest.raises(ApiError) as exc:
        dbx.files_list_folder_get_latest_cursor(base + "/absent")
    assert exc.value.error.get_path().is_not_found()


def test_copy_missing_source(dbx, base):
    with pytest.raises(ApiError) as exc:
        dbx.files_copy_v2(base + "/absent", base + "/x")
    assert exc.value.error.is_from_lookup() and exc.value.error.get_from_lookup().is_not_found()


def test_download_by_id(dbx, base):
    up = dbx.files_upload(b"by id", base + "/id.txt")
    md, resp = dbx.files_download(up.id)
    assert resp.content == b"by id" and md.id == up.id


def test_recursive_continue_after_folder_move(dbx, base):
    dbx.files_upload(b"1", base + "/src/a/one.txt")
    cursor = end_cursor(dbx, dbx.files_list_folder(base, recursive=True))
    dbx.files_move_v2(base + "/src", base + "/dst")
    changed = all_changes(dbx, cursor)[0]
    deleted = {e.path_lower for e in changed if isinstance(e, files.DeletedMetadata)}
    live = {e.path_lower for e in changed if not isinstance(e, files.DeletedMetadata)}
    prefix = base.lower()
    assert prefix + "/src" in deleted
    assert {prefix + "/dst", prefix + "/dst/a", prefix + "/dst/a/one.txt"} <= live
