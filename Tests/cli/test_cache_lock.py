"""One daemon owns a cache directory (issue 12, section 2): a second `dbxfs` for a cache
directory in use is refused in one line naming the other daemon (pid, mountpoint, what it is
doing) and leaves nothing behind, or waits with --wait-for-cache until the other daemon has
finished draining its uploads and exited.

The second daemon runs as a user runs it (no -f): the command returns once the mount is live,
or prints the daemon's reason and exits 1."""

import hashlib
import json
import os
import subprocess

from conftest import Mount, force_unmount, mounted_at, needs_fuse, one_clear_line
from daemon_support import ENV, daemon_pid_at, files_of, mount_args, settled_files_of, no_conflicted_copies, status_of, stop_daemon_at

pytestmark = needs_fuse


def test_a_second_daemon_on_the_same_cache_dir_is_refused_and_touches_nothing(cli, emulator, tmp_path):
    cache = cli.home / "shared-cache"
    first_mnt, second_mnt = tmp_path / "m1", tmp_path / "m2"
    first_mnt.mkdir()
    second_mnt.mkdir()
    with Mount(cli, first_mnt, mount_args(emulator, cache), env=ENV) as first:
        (first_mnt / "before.txt").write_text("written before\n")
        assert cli.run("sync", "--timeout", "60", str(first_mnt)).returncode == 0
        cache_before = settled_files_of(cache)
        sockets_before = sorted(os.listdir(cli.runtime / "dbxfs"))

        result = cli.run(*mount_args(emulator, cache), str(second_mnt), env=ENV)
        try:
            line = one_clear_line(result)
            assert result.returncode == 1
            assert f"the cache directory {cache} is in use by dbxfs pid {first.proc.pid}" in line, line
            assert f"mounted at {first_mnt.resolve()}" in line and "--cache-dir" in line, line
            assert not mounted_at(second_mnt)
        finally:
            stop_daemon_at(cli, second_mnt)
        # Nothing left behind: not a file of the cache directory changed, no socket was added.
        assert files_of(cache) == cache_before
        assert sorted(os.listdir(cli.runtime / "dbxfs")) == sockets_before

        # The first mount keeps working, and still owns the cache directory.
        (first_mnt / "after.txt").write_text("written after\n")
        assert cli.run("sync", "--timeout", "60", str(first_mnt)).returncode == 0
        assert (first_mnt / "before.txt").read_text() == "written before\n"
        assert json.loads((cache / "daemon.lock").read_text())["pid"] == first.proc.pid
    assert emulator.download("/after.txt") == b"written after\n"
    no_conflicted_copies(emulator)


def test_two_mountpoints_of_one_account_share_the_default_cache_dir_and_the_second_is_refused(cli, emulator, tmp_path):
    first_mnt, second_mnt = tmp_path / "m1", tmp_path / "m2"
    first_mnt.mkdir()
    second_mnt.mkdir()
    # No --cache-dir: both use $XDG_CACHE_HOME/dbxfs/<hash of server, account, root>.
    with Mount(cli, first_mnt, mount_args(emulator), env=ENV) as first:
        (first_mnt / "shared-default.txt").write_text("one writer\n")
        caches = [p for p in (cli.home / "cache" / "dbxfs").iterdir() if p.is_dir()]
        assert len(caches) == 1
        result = cli.run(*mount_args(emulator), str(second_mnt), env=ENV)
        try:
            line = one_clear_line(result)
            assert result.returncode == 1
            assert f"the cache directory {caches[0]} is in use by dbxfs pid {first.proc.pid}" in line, line
            assert f"mounted at {first_mnt.resolve()}" in line, line
            assert not mounted_at(second_mnt)
        finally:
            stop_daemon_at(cli, second_mnt)
        assert [p for p in (cli.home / "cache" / "dbxfs").iterdir() if p.is_dir()] == caches
        assert cli.run("sync", "--timeout", "60", str(first_mnt)).returncode == 0
        assert (first_mnt / "shared-default.txt").read_text() == "one writer\n"
    assert emulator.download("/shared-default.txt") == b"one writer\n"


def test_a_mount_on_a_draining_cache_dir_is_refused_or_waits_until_the_drain_ends(cli, emulator, tmp_path):
    """The first daemon is unmounted while its upload still runs (bandwidth limited), so it stays
    alive draining it. A new mount with that cache directory is refused, naming the upload; with
    --wait-for-cache it waits (printing progress) and mounts once the first daemon has exited.
    The file ends on Dropbox once, with its bytes, and no conflicted copy."""
    cache = cli.home / "drain-cache"
    mnt = tmp_path / "m"
    mnt.mkdir()
    data = os.urandom(12 << 20)
    # About 12 s of upload after close at 1 MB/s: long enough to try two mounts meanwhile.
    emulator.config(bandwidth=1_000_000)
    second_pid = None
    first = Mount(cli, mnt, mount_args(emulator, cache), env=dict(ENV, DBXFS_UNMOUNT_DRAIN_SECONDS="600"))
    try:
        first.start()
        (mnt / "drained.bin").write_bytes(data)
        force_unmount(mnt)
        assert not mounted_at(mnt)
        assert first.proc.poll() is None, "the first daemon exited before it finished uploading"

        refused = cli.run(*mount_args(emulator, cache), str(mnt), env=ENV)
        try:
            line = one_clear_line(refused)
            assert refused.returncode == 1
            assert f"dbxfs pid {first.proc.pid}, unmounted from {mnt.resolve()}" in line, line
            assert "still uploading 1 file" in line and "MiB left" in line, line
            assert not mounted_at(mnt)
        finally:
            stop_daemon_at(cli, mnt)
        assert first.proc.poll() is None, "the drain ended before the refusal could be checked"

        waiting = subprocess.run([cli.binary, *mount_args(emulator, cache, "--wait-for-cache"), str(mnt)],
                                 capture_output=True, text=True, timeout=600, env=dict(cli.env, **ENV))
        second_pid = daemon_pid_at(cli, mnt)
        assert waiting.returncode == 0, waiting.stderr
        assert f"waiting for the cache directory {cache}: dbxfs pid {first.proc.pid}" in waiting.stderr, waiting.stderr
        # The first daemon had exited (its upload done) before the second one mounted.
        first.proc.wait(timeout=10)
        assert first.proc.returncode == 0
        assert "every pending upload is on Dropbox" in first.read_log()

        assert hashlib.sha256((mnt / "drained.bin").read_bytes()).digest() == hashlib.sha256(data).digest()
        assert cli.run("sync", "--timeout", "60", str(mnt)).returncode == 0
        report = status_of(cli, mnt)[0]
        assert report["pid"] == second_pid and report["uploads"]["pending_files"] == 0
        assert report["uploads"]["errors"] == [] and report["uploads"]["conflicts"] == []
    finally:
        emulator.config(bandwidth=0)
        if second_pid:
            stop_daemon_at(cli, mnt, second_pid)
        first.stop()
    assert hashlib.sha256(emulator.download("/drained.bin")).digest() == hashlib.sha256(data).digest()
    no_conflicted_copies(emulator)
