"""Shared folders (sharing_info, read-only ones refusing every write with no_write_permission),
export-only files (is_downloadable false, export_info, download's unsupported_file,
files/export) and strict_conflict on a deleted target, through the SDK (docs/EMULATOR.md)."""


import dropbox
import pytest
from dropbox.exceptions import ApiError
from dropbox.files import CommitInfo, UploadSessionCursor, UploadSessionFinishArg, WriteMode

from emulator_suite import all_changes, all_entries, dropbox_hash


# ----- shared folders -----
def test_sharing_info_on_the_folder_and_everything_inside(emu, dbx, base):
    dbx.files_upload(b"x", base + "/rw/sub/f.txt")
    answer = emu.share(base + "/rw")
    folder = dbx.files_get_metadata(base + "/rw")
    assert folder.sharing_info.shared_folder_id == answer["shared_folder_id"]
    assert folder.sharing_info.read_only is False
    sub = dbx.files_get_metadata(base + "/rw/sub")
    assert sub.sharing_info.parent_shared_folder_id == answer["shared_folder_id"]
    f = dbx.files_get_metadata(base + "/rw/sub/f.txt")
    assert f.sharing_info.parent_shared_folder_id == answer["shared_folder_id"] and not f.sharing_info.read_only
    assert dbx.files_get_metadata(base).sharing_info is None
    # A writable shared folder takes writes as usual.
    dbx.files_upload(b"y", base + "/rw/g.txt")


def test_sharing_change_is_reported_in_the_feed(emu, dbx, base):
    dbx.files_upload(b"x", base + "/later/f.txt")
    cursor = dbx.files_list_folder_get_latest_cursor(base, recursive=True).cursor
    emu.share(base + "/later", read_only=True)
    changed = {e.path_display: e for e in all_changes(dbx, cursor)[0]}
    assert changed[base + "/later/f.txt"].sharing_info.read_only


@pytest.fixture
def read_only(emu, dbx, base):
    dbx.files_upload(b"old", base + "/ro/f.txt")
    dbx.files_create_folder_v2(base + "/ro/sub")
    emu.share(base + "/ro", read_only=True)
    return base + "/ro"


def test_read_only_folder_shows_read_only(dbx, read_only):
    assert dbx.files_get_metadata(read_only).sharing_info.read_only
    assert dbx.files_get_metadata(read_only + "/f.txt").sharing_info.read_only
    listed = all_entries(dbx, dbx.files_list_folder(read_only))
    assert all(e.sharing_info.read_only for e in listed)
    assert dbx.files_download(read_only + "/f.txt")[1].content == b"old"


def no_write_permission(write_error):
    assert write_error.is_no_write_permission(), write_error


def test_every_write_route_refuses_with_no_write_permission(dbx, base, read_only):
    with pytest.raises(ApiError) as err:
        dbx.files_upload(b"new", read_only + "/new.txt")
    no_write_permission(err.value.error.get_path().reason)
    with pytest.raises(ApiError) as err:
        dbx.files_upload(b"new", read_only + "/f.txt", mode=WriteMode.overwrite)
    no_write_permission(err.value.error.get_path().reason)
    with pytest.raises(ApiError) as err:
        dbx.files_create_folder_v2(read_only + "/dir")
    no_write_permission(err.value.error.get_path())
    with pytest.raises(ApiError) as err:
        dbx.files_delete_v2(read_only + "/f.txt")
    no_write_permission(err.value.error.get_path_write())
    with pytest.raises(ApiError) as err:
        dbx.files_move_v2(read_only + "/f.txt", base + "/moved.txt")
    no_write_permission(err.value.error.get_from_write())
    dbx.files_upload(b"out", base + "/outside.txt")
    with pytest.raises(ApiError) as err:
        dbx.files_move_v2(base + "/outside.txt", read_only + "/in.txt")
    no_write_permission(err.value.error.get_to())
    with pytest.raises(ApiError) as err:
        dbx.files_copy_v2(base + "/outside.txt", read_only + "/in.txt")
    no_write_permission(err.value.error.get_to())
    # Copying out of a read-only folder is a read.
    dbx.files_copy_v2(read_only + "/f.txt", base + "/copied.txt")
    # Upload sessions: finish and each finish_batch_v2 entry.
    session = dbx.files_upload_session_start(b"abc", close=True).session_id
    with pytest.raises(ApiError) as err:
        dbx.files_upload_session_finish(b"", UploadSessionCursor(session, 3), CommitInfo(read_only + "/s.txt"))
    no_write_permission(err.value.error.get_path())
    session = dbx.files_upload_session_start(b"abc", close=True).session_id
    batch = dbx.files_upload_session_finish_batch_v2(
        [UploadSessionFinishArg(UploadSessionCursor(session, 3), CommitInfo(read_only + "/b.txt"))])
    entry = batch.entries[0]
    assert entry.is_failure()
    no_write_permission(entry.get_failure().get_path())
    assert dbx.files_download(read_only + "/f.txt")[1].content == b"old"


# ----- export-only files -----
@pytest.fixture
def paper(emu, base):
    md = emu.export_only(base + "/Plan.paper", {"md": "# Plan\n\n- one\n", "html": "<h1>Plan</h1>"},
                         export_as="md", export_options=["md", "html"])
    return base + "/Plan.paper", md


def test_export_only_file_is_listed_as_not_downloadable(dbx, base, paper):
    path, _ = paper
    listed = {e.name: e for e in all_entries(dbx, dbx.files_list_folder(base))}
    entry = listed["Plan.paper"]
    assert entry.is_downloadable is False
    assert entry.export_info.export_as == "md" and entry.export_info.export_options == ["md", "html"]
    # The listed size is not the size of the export a reader gets.
    assert entry.size != len("# Plan\n\n- one\n")
    assert dbx.files_get_metadata(path).is_downloadable is False


def test_download_of_export_only_file_is_unsupported_file(dbx, paper):
    path, md = paper
    with pytest.raises(ApiError) as err:
        dbx.files_download(path)
    assert err.value.error.is_unsupported_file()
    with pytest.raises(ApiError) as err:
        dbx.files_download("rev:" + md["rev"])
    assert err.value.error.is_unsupported_file()


def test_export_in_the_default_and_in_another_format(dbx, paper):
    path, md = paper
    result, resp = dbx.files_export(path)
    assert resp.content == b"# Plan\n\n- one\n"
    assert result.export_metadata.name == "Plan.md"
    assert result.export_metadata.size == len(resp.content)
    assert result.export_metadata.export_hash == dropbox_hash(resp.content)
    assert result.file_metadata.id == md["id"] and result.file_metadata.is_downloadable is False
    result, resp = dbx.files_export(md["id"], export_format="html")
    assert resp.content == b"<h1>Plan</h1>" and result.export_metadata.name == "Plan.html"
    with pytest.raises(ApiError) as err:
        dbx.files_export(path, export_format="docx")
    assert err.value.error.is_invalid_export_format()


def test_export_of_ordinary_file_or_non_exportable_is_refused(emu, dbx, base):
    dbx.files_upload(b"plain", base + "/plain.txt")
    with pytest.raises(ApiError) as err:
        dbx.files_export(base + "/plain.txt")
    assert err.value.error.is_non_exportable()
    emu.export_only(base + "/odd.gdoc", {}, export_as=None, export_options=[])
    entry = dbx.files_get_metadata(base + "/odd.gdoc")
    assert entry.is_downloadable is False and entry.export_info.export_as is None
    with pytest.raises(ApiError) as err:
        dbx.files_export(base + "/odd.gdoc")
    assert err.value.error.is_non_exportable()
    with pytest.raises(ApiError) as err:
        dbx.files_export(base + "/missing.paper")
    assert err.value.error.get_path().is_not_found()


def test_web_shortcut_exports_as_url(emu, dbx, base):
    emu.export_only(base + "/Site.web", {"url": '{"url": "https://example.com/"}'}, export_as="url")
    result, resp = dbx.files_export(base + "/Site.web")
    assert resp.json() == {"url": "https://example.com/"} and result.export_metadata.name == "Site.url"


def test_export_only_file_moves_with_its_id(dbx, base, paper):
    path, md = paper
    moved = dbx.files_move_v2(path, base + "/Renamed.paper").metadata
    assert moved.is_downloadable is False and moved.id == md["id"]
    assert dbx.files_export(base + "/Renamed.paper")[1].content.startswith(b"# Plan")


# ----- strict_conflict on a deleted target (files.stone CommitInfo.strict_conflict) -----
def test_update_of_deleted_file_with_strict_conflict_conflicts(dbx, base):
    rev = dbx.files_upload(b"v1", base + "/gone.txt").rev
    dbx.files_delete_v2(base + "/gone.txt")
    with pytest.raises(ApiError) as err:
        dbx.files_upload(b"v2", base + "/gone.txt", mode=WriteMode.update(rev), strict_conflict=True)
    assert err.value.error.get_path().reason.get_conflict().is_file()
    # Without strict_conflict the stale update writes the file, as before.
    md = dbx.files_upload(b"v2", base + "/gone.txt", mode=WriteMode.update(rev))
    assert md.size == 2
    # With autorename the strict conflict lands as a conflicted copy.
    dbx.files_delete_v2(base + "/gone.txt")
    md = dbx.files_upload(b"v3", base + "/gone.txt", mode=WriteMode.update(rev), strict_conflict=True,
                          autorename=True)
    assert md.name == "gone (conflicted copy).txt"
