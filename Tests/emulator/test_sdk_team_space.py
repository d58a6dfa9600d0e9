"""A Business team member in a team space (`--team-space`), through the SDK: root_info of tag
team, two namespaces, Dropbox-API-Path-Root honoured and checked, ns: paths, the team's space
usage, and the App-folder refusal of the header (docs/EMULATOR.md, "Namespaces").

The SDK's hosts are fixed when `dropbox` is imported, so this module stops the session's
emulator and runs a team-space one on the same port, then restores the session's.
"""

import os

import dropbox
import pytest
from dropbox import common
from dropbox.exceptions import ApiError, BadInputError, PathRootError

from emulator_suite import APP_KEY, CERT, KEY, PORT, WORK_DIR, all_changes, all_entries, end_cursor
from emulator import Emulator


@pytest.fixture(scope="module")
def team(emu):
    emu.stop()
    team = Emulator(os.path.join(WORK_DIR, "team-data"), token="test-token", tls=True, port=PORT,
                    tls_cert=CERT, tls_key=KEY, extra_args=["--app-key", APP_KEY, "--team-space"])
    team.start()
    team.share("/Team Folder", team_folder=True)
    team.share("/Read Only Team Folder", read_only=True, team_folder=True)
    yield team
    team.stop()
    emu.start()


@pytest.fixture
def member(team):
    client = dropbox.Dropbox(team.token, ca_certs=CERT, max_retries_on_error=0, max_retries_on_rate_limit=0)
    yield client
    client.close()


@pytest.fixture
def rooted(member):
    root = member.users_get_current_account().root_info.root_namespace_id
    return member.with_path_root(common.PathRoot.root(root))


def names(client, result):
    return sorted(entry.name for entry in all_entries(client, result))


def test_account_is_a_team_member_with_two_namespaces(member):
    account = member.users_get_current_account()
    assert account.account_type.is_business()
    info = account.root_info
    assert isinstance(info, common.TeamRootInfo)
    assert info.root_namespace_id != info.home_namespace_id
    assert info.home_path == "/Emulated User"
    assert account.team.name and account.team_member_id


def test_without_the_header_only_the_member_folder_is_seen(member):
    member.files_upload(b"mine", "/own.txt", mode=dropbox.files.WriteMode.overwrite)
    top = names(member, member.files_list_folder(""))
    assert "own.txt" in top and "Team Folder" not in top
    assert member.files_get_metadata("/own.txt").path_display == "/own.txt"


def test_root_header_shows_team_folders_and_the_member_folder(member, rooted):
    member.files_upload(b"mine", "/own2.txt", mode=dropbox.files.WriteMode.overwrite)
    top = names(rooted, rooted.files_list_folder(""))
    assert {"Emulated User", "Team Folder", "Read Only Team Folder"} <= set(top)
    md = rooted.files_get_metadata("/Emulated User/own2.txt")
    assert md.path_display == "/Emulated User/own2.txt"
    rooted.files_upload(b"team", "/Team Folder/t.txt", mode=dropbox.files.WriteMode.overwrite)
    assert rooted.files_download("/Team Folder/t.txt")[1].content == b"team"
    # The team folder carries its sharing_info; the member folder's files keep their paths.
    folder = rooted.files_get_metadata("/Team Folder")
    assert folder.sharing_info.shared_folder_id and not folder.sharing_info.read_only


def test_recursive_listing_and_cursor_in_the_member_view(member):
    member.files_create_folder_v2("/rec")
    member.files_upload(b"1", "/rec/a.txt")
    result = member.files_list_folder("/rec", recursive=True)
    paths = sorted(e.path_display for e in all_entries(member, result))
    assert paths == ["/rec", "/rec/a.txt"]
    member.files_upload(b"2", "/rec/b.txt")
    changes = all_changes(member, end_cursor(member, result))[0]
    assert [e.path_display for e in changes] == ["/rec/b.txt"]


def test_root_listing_of_the_whole_team_space_is_recursive(rooted):
    rooted.files_upload(b"deep", "/Team Folder/deep/x.txt", mode=dropbox.files.WriteMode.overwrite)
    paths = {e.path_lower for e in all_entries(rooted, rooted.files_list_folder("", recursive=True))}
    assert "/team folder/deep/x.txt" in paths and "/emulated user" in paths and "" not in paths


def test_wrong_root_is_422_invalid_root_with_the_current_root_info(member):
    wrong = member.with_path_root(common.PathRoot.root("1"))
    with pytest.raises(PathRootError) as err:
        wrong.files_list_folder("")
    assert err.value.error.is_invalid_root()
    assert isinstance(err.value.error.get_invalid_root(), common.TeamRootInfo)


def test_namespace_id_header(member, rooted):
    folder = rooted.files_get_metadata("/Team Folder")
    ns = folder.sharing_info.shared_folder_id
    inside = member.with_path_root(common.PathRoot.namespace_id(ns))
    inside.files_upload(b"ns", "/via-ns.txt", mode=dropbox.files.WriteMode.overwrite)
    assert rooted.files_get_metadata("/Team Folder/via-ns.txt").size == 2
    nowhere = member.with_path_root(common.PathRoot.namespace_id("77"))
    with pytest.raises(PathRootError) as err:
        nowhere.files_list_folder("")
    assert err.value.error.is_no_permission()


def test_ns_paths_reach_only_namespaces_in_the_view(member, rooted):
    info = member.users_get_current_account().root_info
    team_ns = rooted.files_get_metadata("/Team Folder").sharing_info.shared_folder_id
    # Outside the member folder: not found without the header (kloudless, "Working with Dropbox namespaces").
    with pytest.raises(ApiError) as err:
        member.files_list_folder("ns:" + team_ns)
    assert err.value.error.get_path().is_not_found()
    with pytest.raises(ApiError) as err:
        member.files_list_folder("ns:" + info.root_namespace_id)
    assert err.value.error.get_path().is_not_found()
    # With the root header every namespace under the root is reachable.
    assert isinstance(rooted.files_list_folder("ns:" + team_ns), dropbox.files.ListFolderResult)
    member.files_upload(b"h", "/home-ns.txt", mode=dropbox.files.WriteMode.overwrite)
    assert "home-ns.txt" in names(rooted, rooted.files_list_folder("ns:" + info.home_namespace_id))


def test_read_only_team_folder_refuses_writes(rooted):
    with pytest.raises(ApiError) as err:
        rooted.files_upload(b"no", "/Read Only Team Folder/x.txt")
    assert err.value.error.get_path().reason.is_no_write_permission()


def test_team_space_usage(member, team):
    team.account(team_used_by_others=5_000_000, member_space_limit=0, member_limit_type="off")
    usage = member.users_get_space_usage()
    assert usage.allocation.is_team()
    alloc = usage.allocation.get_team()
    assert alloc.used >= usage.used + 5_000_000
    assert alloc.user_within_team_space_allocated == 0
    team.account(member_space_limit=1 << 30, member_limit_type="stop_sync")
    alloc = member.users_get_space_usage().allocation.get_team()
    assert alloc.user_within_team_space_allocated == 1 << 30
    assert alloc.user_within_team_space_limit_type.is_stop_sync()
    team.account(team_used_by_others=0, member_space_limit=0, member_limit_type="off")


def test_app_folder_app_may_not_send_the_header(member, rooted, team):
    team.account(app_folder=True)
    try:
        with pytest.raises(BadInputError) as err:
            rooted.files_list_folder("")
        assert "Path root is not supported for sandbox app" in str(err.value)
        assert member.files_list_folder("").entries is not None
    finally:
        team.account(app_folder=False)


def test_malformed_header_is_400(member):
    bad = member.with_path_root(common.PathRoot.home)
    assert bad.files_list_folder("").entries is not None   # home is valid
    import requests
    resp = requests.post(f"https://127.0.0.1:{PORT}/2/files/list_folder", verify=CERT,
                         headers={"Authorization": "Bearer test-token", "Content-Type": "application/json",
                                  "Dropbox-API-Path-Root": '{".tag": "sideways"}'}, data='{"path": ""}')
    assert resp.status_code == 400 and "Dropbox-API-Path-Root" in resp.text
