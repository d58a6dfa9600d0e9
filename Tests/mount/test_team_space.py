"""A Business account with a team space (issue 13, items 1 and 5), end to end: the emulator runs
with --team-space (the member's files in `/Emulated User`, team folders beside it), and the
mount must show the team root by default, take `--root "/Team Folder"`, keep following changes
in team folders, mount the member folder alone with --member-folder, fall back to the member
folder for App-folder apps (which may not send Dropbox-API-Path-Root), and report the team's
free space in df. Every mount is unmounted in teardown (Mount is a context manager)."""

import os
import subprocess
import time

import pytest

from mount_support import TOKEN, Emulator, mount_of

GIB = 1 << 30


@pytest.fixture
def team(tmp_path):
    seed = tmp_path / "seed"
    (seed / "mine").mkdir(parents=True)
    (seed / "mine" / "note.txt").write_text("member file\n")
    e = Emulator(tmp_path / "data", token=TOKEN, seed=str(seed),
                 extra_args=["--team-space", "--quota", str(10 * GIB)]).start()
    e.config(longpoll_max_wait=5)
    e.share("/Team Folder", team_folder=True)
    e.upload("/Team Folder/plan.txt", b"team plan\n", path_root=root_header(e))
    yield e
    e.stop()


def root_header(emu):
    ns = emu.api("users/get_current_account")["root_info"]["root_namespace_id"]
    return '{".tag": "root", "root": "%s"}' % ns


def wait_for(predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.05)
    assert predicate()


def test_default_mount_shows_the_team_root(dbxfs_binary, team, tmp_path):
    with mount_of(dbxfs_binary, team, tmp_path) as m:
        top = sorted(os.listdir(m.path))
        assert top == ["Emulated User", "Team Folder"], top + [m.read_log()]
        with open(os.path.join(m.path, "Team Folder", "plan.txt")) as f:
            assert f.read() == "team plan\n"
        with open(os.path.join(m.path, "Emulated User", "mine", "note.txt")) as f:
            assert f.read() == "member file\n"
        # Writes land in the team space, where the other members see them.
        with open(os.path.join(m.path, "Team Folder", "from-mount.txt"), "w") as f:
            f.write("written\n")
        subprocess.run([dbxfs_binary, "sync", m.path], check=True, capture_output=True, timeout=120)
        md = team.api("files/get_metadata", {"path": "/Team Folder/from-mount.txt"}, path_root=root_header(team))
        assert md["size"] == 8
        # Changes other members make in a team folder show up (the cursor and longpoll carry the
        # path root).
        team.upload("/Team Folder/later.txt", b"later\n", path_root=root_header(team))
        wait_for(lambda: os.path.exists(os.path.join(m.path, "Team Folder", "later.txt")))


def test_root_may_be_a_team_folder(dbxfs_binary, team, tmp_path):
    with mount_of(dbxfs_binary, team, tmp_path, "tf", "--root", "/Team Folder") as m:
        assert sorted(os.listdir(m.path)) == ["plan.txt"], m.read_log()
        with open(os.path.join(m.path, "new.txt"), "w") as f:
            f.write("in the team folder\n")
        subprocess.run([dbxfs_binary, "sync", m.path], check=True, capture_output=True, timeout=120)
        md = team.api("files/get_metadata", {"path": "/Team Folder/new.txt"}, path_root=root_header(team))
        assert md["size"] == 19


def test_member_folder_option_mounts_the_member_folder_alone(dbxfs_binary, team, tmp_path):
    with mount_of(dbxfs_binary, team, tmp_path, "home", "--member-folder") as m:
        assert sorted(os.listdir(m.path)) == ["mine"], m.read_log()
        with open(os.path.join(m.path, "mine", "note.txt")) as f:
            assert f.read() == "member file\n"


def test_app_folder_app_mounts_without_the_path_root(dbxfs_binary, team, tmp_path):
    """An App-folder app may not send Dropbox-API-Path-Root (400 "Path root is not supported for
    sandbox app", rclone #5089): the mount says so and serves the member's namespace."""
    team.account(app_folder=True)
    with mount_of(dbxfs_binary, team, tmp_path, "app") as m:
        assert sorted(os.listdir(m.path)) == ["mine"], m.read_log()
        assert "App folder" in m.read_log()


def test_df_shows_the_team_allocation_less_the_team_usage(dbxfs_binary, team, tmp_path):
    team.account(team_used_by_others=3 * GIB)
    with mount_of(dbxfs_binary, team, tmp_path, "df") as m:
        st = os.statvfs(m.path)
        total, free = st.f_blocks * st.f_frsize, st.f_bfree * st.f_frsize
        assert total == 10 * GIB
        # The team uses 3 GiB (other members) plus the few bytes of this tree.
        assert 7 * GIB - (1 << 20) <= free <= 7 * GIB, (total, free)
    team.account(member_space_limit=GIB, member_limit_type="stop_sync")
    with mount_of(dbxfs_binary, team, tmp_path, "df2") as m:
        st = os.statvfs(m.path)
        total, free = st.f_blocks * st.f_frsize, st.f_bfree * st.f_frsize
        assert total == GIB and GIB - (1 << 20) <= free <= GIB, (total, free)
