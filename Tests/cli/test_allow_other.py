"""Who else may use a mount (issue 14, "allow_other gives every local user full read, write and
delete"): `allow_other` lets other local users into the mount, and dbxfs then has the kernel check
the modes it shows (`default_permissions`), so `uid=`, `gid=` and `umask=` decide what they may do,
as the docs say. The mount is made by root (who may always use allow_other); a throwaway second
user tries to read, list, create and delete through it.

Each combination of docs/CLI.md's table is mounted once against an emulator of this module's own,
so a delete that wrongly succeeds cannot take files from other tests."""

import os
import sys
from pathlib import Path

import pytest

from conftest import STATIC_TOKEN, Mount, needs_fuse

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from emulator import Emulator  # noqa: E402
from local_user import folder_others_can_reach, throwaway_user  # noqa: E402
from mounting import force_unmount  # noqa: E402

ENV = {"DBXFS_ACCESS_TOKEN": STATIC_TOKEN}
pytestmark = needs_fuse


@pytest.fixture
def emu(tmp_path):
    seed = tmp_path / "seed"
    (seed / "Docs").mkdir(parents=True)
    (seed / "secret.txt").write_text("private\n")
    (seed / "Docs" / "a.txt").write_text("a\n")
    e = Emulator(tmp_path / "data", token=STATIC_TOKEN, seed=str(seed)).start()
    yield e
    e.stop()


@pytest.fixture
def other():
    with throwaway_user() as user:
        yield user


@pytest.fixture
def shared_mountpoint():
    """A mountpoint the other user can reach."""
    with folder_others_can_reach("dbxfs-allow-other-") as parent:
        path = parent / "mnt"
        path.mkdir(mode=0o755)
        try:
            yield path
        finally:
            force_unmount(path)


def mounted(cli, emu, mountpoint, options):
    return Mount(cli, mountpoint, ["--api-base", emu.url, "--cache-dir", str(cli.home / "cache"), "-o", options], env=ENV)


def attempts(other, mnt):
    """What the other user manages to do: read a file, list a folder, create a file, delete a folder."""
    return {
        "read": other.run("cat", str(mnt / "secret.txt")),
        "list": other.run("ls", str(mnt / "Docs")),
        "create": other.run("touch", str(mnt / "planted.txt")),
        "delete": other.run("rm", "-rf", str(mnt / "Docs")),
    }


def summary(results):
    return {what: (r.returncode, (r.stdout + r.stderr).strip()[:120]) for what, r in results.items()}


def names_on_dropbox(emu):
    return sorted(e["name"] for e in emu.listing(""))


def test_allow_other_with_umask_077_keeps_other_users_out(cli, emu, other, shared_mountpoint):
    with mounted(cli, emu, shared_mountpoint, "allow_other,umask=077") as mount:
        results = attempts(other, shared_mountpoint)
        print(summary(results))
        for what, result in results.items():
            assert result.returncode != 0, f"the other user could {what}: {summary(results)}\n{mount.read_log()}"
            assert "Permission denied" in result.stderr, (what, result.stderr)
        # The mounting user still does everything.
        assert (shared_mountpoint / "secret.txt").read_text() == "private\n"
    assert names_on_dropbox(emu) == ["Docs", "secret.txt"]


def test_allow_other_alone_lets_others_read_but_not_write(cli, emu, other, shared_mountpoint):
    with mounted(cli, emu, shared_mountpoint, "allow_other") as mount:
        results = attempts(other, shared_mountpoint)
        print(summary(results))
        assert results["read"].returncode == 0 and results["read"].stdout == "private\n", summary(results)
        assert results["list"].returncode == 0 and results["list"].stdout.split() == ["a.txt"], summary(results)
        for what in ("create", "delete"):
            assert results[what].returncode != 0, f"the other user could {what}: {summary(results)}\n{mount.read_log()}"
            assert "Permission denied" in results[what].stderr, (what, results[what].stderr)
    assert names_on_dropbox(emu) == ["Docs", "secret.txt"]


def test_allow_other_with_uid_gives_that_user_the_files(cli, emu, other, shared_mountpoint):
    with mounted(cli, emu, shared_mountpoint, f"allow_other,uid={other.uid},gid={other.gid}"):
        assert os.stat(shared_mountpoint / "secret.txt").st_uid == other.uid
        created = other.run("sh", "-c", f"echo theirs > {shared_mountpoint}/theirs.txt && cat {shared_mountpoint}/theirs.txt")
        assert created.returncode == 0 and created.stdout == "theirs\n", created.stderr
        assert other.run("rm", str(shared_mountpoint / "theirs.txt")).returncode == 0


def test_without_allow_other_nobody_else_gets_in(cli, emu, other, shared_mountpoint):
    with mounted(cli, emu, shared_mountpoint, "umask=000"):
        results = attempts(other, shared_mountpoint)
        for what, result in results.items():
            assert result.returncode != 0, f"the other user could {what}: {summary(results)}"
            assert "Permission denied" in result.stderr, (what, result.stderr)
    assert names_on_dropbox(emu) == ["Docs", "secret.txt"]
