"""A file's history (files/list_revisions, files/restore) and shared links
(sharing/create_shared_link_with_settings, sharing/list_shared_links), through the official SDK,
which checks every answer against the stone types (docs/EMULATOR.md, "Revisions" and "Shared
links")."""

import datetime

import pytest
from dropbox.exceptions import ApiError
from dropbox.files import ListRevisionsMode
from dropbox.sharing import RequestedVisibility, SharedLinkSettings

from emulator import EmulatorError
from emulator_suite import all_changes, dropbox_hash


def versions(dbx, path, contents):
    """Uploads each content over `path` in turn; returns the FileMetadata of each."""
    from dropbox.files import WriteMode
    return [dbx.files_upload(data, path, mode=WriteMode.overwrite) for data in contents]


# ----- list_revisions -----
def test_revisions_newest_first_with_size_and_hash(dbx, base):
    made = versions(dbx, base + "/n.txt", [b"one", b"two!", b"three"])
    result = dbx.files_list_revisions(base + "/n.txt")
    assert not result.is_deleted and result.server_deleted is None and not result.has_more
    assert [e.rev for e in result.entries] == [m.rev for m in reversed(made)]
    assert [e.size for e in result.entries] == [5, 4, 3]
    assert result.entries[2].content_hash == dropbox_hash(b"one")
    assert all(e.path_display == base + "/n.txt" for e in result.entries)


def test_revisions_page_with_limit_and_before_rev(dbx, base):
    made = versions(dbx, base + "/p.txt", [b"a", b"bb", b"ccc"])
    first = dbx.files_list_revisions(base + "/p.txt", limit=2)
    assert first.has_more and [e.rev for e in first.entries] == [made[2].rev, made[1].rev]
    rest = dbx.files_list_revisions(base + "/p.txt", limit=2, before_rev=first.entries[-1].rev)
    assert not rest.has_more and [e.rev for e in rest.entries] == [made[0].rev]
    with pytest.raises(ApiError) as err:
        dbx.files_list_revisions(base + "/p.txt", before_rev="0123456789ab")
    assert err.value.error.is_invalid_before_rev()
    with pytest.raises(ApiError) as err:
        dbx.files_list_revisions(base + "/p.txt", mode=ListRevisionsMode.id, before_rev=made[1].rev)
    assert err.value.error.is_before_rev_not_supported()


def test_only_four_revisions_are_kept(dbx, base):
    made = versions(dbx, base + "/k.txt", [b"1", b"2", b"3", b"4", b"5", b"6"])
    result = dbx.files_list_revisions(base + "/k.txt", limit=100)
    assert [e.rev for e in result.entries] == [m.rev for m in reversed(made[2:])]


def test_path_mode_and_id_mode_after_a_move(dbx, base):
    old = versions(dbx, base + "/old.txt", [b"v1", b"v2"])
    dbx.files_move_v2(base + "/old.txt", base + "/new.txt")
    by_path = dbx.files_list_revisions(base + "/new.txt")
    # Only the current revision was made at the new path; it shows where the file is now.
    assert [e.rev for e in by_path.entries] == [old[1].rev]
    assert by_path.entries[0].path_display == base + "/new.txt"
    by_id = dbx.files_list_revisions(base + "/new.txt", mode=ListRevisionsMode.id)
    assert [e.rev for e in by_id.entries] == [old[1].rev, old[0].rev]


def test_revisions_of_a_deleted_file(dbx, base):
    made = versions(dbx, base + "/gone.txt", [b"x", b"yy"])
    before = datetime.datetime.utcnow().replace(microsecond=0) - datetime.timedelta(seconds=1)
    dbx.files_delete_v2(base + "/gone.txt")
    result = dbx.files_list_revisions(base + "/gone.txt")
    assert result.is_deleted and result.server_deleted >= before
    assert [e.rev for e in result.entries] == [made[1].rev, made[0].rev]


def test_revisions_errors(dbx, base):
    dbx.files_create_folder_v2(base + "/dir")
    with pytest.raises(ApiError) as err:
        dbx.files_list_revisions(base + "/dir")
    assert err.value.error.get_path().is_not_file()
    with pytest.raises(ApiError) as err:
        dbx.files_list_revisions(base + "/never.txt")
    assert err.value.error.get_path().is_not_found()


# ----- restore -----
def test_restore_makes_an_old_revision_current(dbx, base):
    from dropbox.files import WriteMode
    old = dbx.files_upload(b"old content", base + "/r.txt", client_modified=datetime.datetime(2020, 1, 2, 3, 4, 5))
    current = dbx.files_upload(b"new", base + "/r.txt", mode=WriteMode.overwrite)
    cursor = dbx.files_list_folder_get_latest_cursor(base).cursor
    restored = dbx.files_restore(base + "/r.txt", old.rev)
    assert restored.rev not in (old.rev, current.rev) and restored.id == current.id
    assert restored.size == len(b"old content") and restored.content_hash == old.content_hash
    assert restored.client_modified == datetime.datetime(2020, 1, 2, 3, 4, 5)
    assert dbx.files_download(base + "/r.txt")[1].content == b"old content"
    assert dbx.files_list_revisions(base + "/r.txt").entries[0].rev == restored.rev
    # The change feed reports it like any new revision.
    changed = all_changes(dbx, cursor)[0]
    assert [(e.name, e.rev) for e in changed] == [("r.txt", restored.rev)]


def test_restore_brings_a_deleted_file_back_with_its_id(dbx, base):
    made = dbx.files_upload(b"keep me", base + "/d.txt")
    dbx.files_delete_v2(base + "/d.txt")
    last = dbx.files_list_revisions(base + "/d.txt").entries[0]
    back = dbx.files_restore(base + "/d.txt", last.rev)
    assert back.id == made.id and dbx.files_download(base + "/d.txt")[1].content == b"keep me"
    assert not dbx.files_list_revisions(base + "/d.txt").is_deleted


def test_restore_errors(emu, dbx, base):
    made = dbx.files_upload(b"z", base + "/e.txt")
    with pytest.raises(ApiError) as err:
        dbx.files_restore(base + "/e.txt", "0123456789ab")
    assert err.value.error.is_invalid_revision()
    dbx.files_create_folder_v2(base + "/folder")
    with pytest.raises(ApiError) as err:
        dbx.files_restore(base + "/folder", made.rev)
    assert err.value.error.get_path_write().get_conflict().is_folder()
    # The SDK refuses a malformed rev itself; the server answers 400 as the stone validator does.
    with pytest.raises(EmulatorError) as raw:
        emu.api("files/restore", {"path": base + "/e.txt", "rev": "not-a-rev"})
    assert raw.value.status == 400


# ----- shared links -----
def test_a_link_is_made_once_and_then_found(dbx, base):
    dbx.files_upload(b"share me", base + "/s.txt")
    link = dbx.sharing_create_shared_link_with_settings(base + "/s.txt")
    assert link.url.startswith("https://") and link.name == "s.txt" and link.path_lower == base.lower() + "/s.txt"
    assert link.expires is None and link.link_permissions.resolved_visibility.is_public()
    with pytest.raises(ApiError) as err:
        dbx.sharing_create_shared_link_with_settings(base + "/s.txt")
    assert err.value.error.is_shared_link_already_exists()
    assert err.value.error.get_shared_link_already_exists().get_metadata().url == link.url
    listed = dbx.sharing_list_shared_links(path=base + "/s.txt", direct_only=True).links
    assert [l.url for l in listed] == [link.url]
    # The link follows the file.
    dbx.files_move_v2(base + "/s.txt", base + "/moved.txt")
    assert [l.url for l in dbx.sharing_list_shared_links(path=base + "/moved.txt").links] == [link.url]


def test_links_to_folders_cover_what_is_inside(dbx, base):
    dbx.files_upload(b"x", base + "/dir/f.txt")
    folder = dbx.sharing_create_shared_link_with_settings(base + "/dir")
    assert "/scl/fo/" in folder.url
    assert [l.url for l in dbx.sharing_list_shared_links(path=base + "/dir/f.txt").links] == [folder.url]
    assert dbx.sharing_list_shared_links(path=base + "/dir/f.txt", direct_only=True).links == []
    assert folder.url in [l.url for l in dbx.sharing_list_shared_links().links]


def test_expiry_and_password_where_the_account_allows(emu, dbx, base):
    dbx.files_upload(b"p", base + "/p.txt")
    dbx.files_upload(b"q", base + "/q.txt")
    expires = datetime.datetime.utcnow().replace(microsecond=0) + datetime.timedelta(days=7)
    link = dbx.sharing_create_shared_link_with_settings(
        base + "/p.txt", SharedLinkSettings(expires=expires, require_password=True, link_password="s3cret",
                                            requested_visibility=RequestedVisibility.password))
    assert link.expires == expires and link.link_permissions.require_password
    # Other settings for a file that has a link: no metadata (it might not match them).
    with pytest.raises(ApiError) as err:
        dbx.sharing_create_shared_link_with_settings(base + "/p.txt", SharedLinkSettings(expires=expires))
    assert err.value.error.is_shared_link_already_exists()
    assert err.value.error.get_shared_link_already_exists() is None
    past = datetime.datetime.utcnow().replace(microsecond=0) - datetime.timedelta(days=1)
    for bad in (SharedLinkSettings(expires=past), SharedLinkSettings(require_password=True)):
        with pytest.raises(ApiError) as err:
            dbx.sharing_create_shared_link_with_settings(base + "/q.txt", bad)
        assert err.value.error.get_settings_error().is_invalid_settings()
    emu.account(account_type="basic")
    try:
        with pytest.raises(ApiError) as err:
            dbx.sharing_create_shared_link_with_settings(base + "/q.txt", SharedLinkSettings(expires=expires))
        assert err.value.error.get_settings_error().is_not_authorized()
        plain = dbx.sharing_create_shared_link_with_settings(base + "/q.txt")
        assert not plain.link_permissions.can_set_expiry
        assert dbx.users_get_current_account().account_type.is_basic()
    finally:
        emu.account(account_type="")


def test_link_errors(emu, dbx, base):
    with pytest.raises(ApiError) as err:
        dbx.sharing_create_shared_link_with_settings(base + "/missing.txt")
    assert err.value.error.get_path().is_not_found()
    with pytest.raises(ApiError) as err:
        dbx.sharing_list_shared_links(path=base + "/missing.txt")
    assert err.value.error.get_path().is_not_found()
    dbx.files_upload(b"v", base + "/v.txt")
    emu.account(email_verified=False)
    try:
        with pytest.raises(ApiError) as err:
            dbx.sharing_create_shared_link_with_settings(base + "/v.txt")
        assert err.value.error.is_email_not_verified()
    finally:
        emu.account(email_verified=True)
