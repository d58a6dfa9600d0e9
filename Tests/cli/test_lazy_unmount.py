"""A lazily unmounted daemon (`fusermount3 -uz` on a busy mount) and its successor at the same
mountpoint (issue 12, sections 2 and 3): the old daemon, when it exits, does not unmount the
successor's mount; `status`/`sync` of the mountpoint reach the successor; and the old daemon
keeps its cache directory until it exits."""

import json
import signal

from conftest import Mount, mounted_at, needs_fuse, one_clear_line
from daemon_support import ENV, lazily_detached, mount_args, status_of, stop_daemon_at

pytestmark = needs_fuse


def test_a_lazily_detached_daemon_does_not_unmount_its_successor(cli, emulator, tmp_path):
    mnt = tmp_path / "m"
    mnt.mkdir()
    with lazily_detached(cli, emulator, mnt, cli.home / "old-cache") as old:
        with Mount(cli, mnt, mount_args(emulator, cli.home / "new-cache"), env=ENV) as new:
            old.proc.send_signal(signal.SIGTERM)
            old.proc.wait(timeout=60)
            assert mounted_at(mnt), "the old daemon unmounted its successor"
            assert new.proc.poll() is None
            assert (mnt / "hello.txt").read_text().startswith("hello")
            assert "no longer this daemon's mount" in old.read_log()


def test_status_and_sync_reach_the_daemon_that_serves_the_mountpoint(cli, emulator, tmp_path):
    mnt = tmp_path / "m"
    mnt.mkdir()
    with lazily_detached(cli, emulator, mnt, cli.home / "old-cache") as old:
        with Mount(cli, mnt, mount_args(emulator, cli.home / "new-cache"), env=ENV) as new:
            assert "will not see this mount" not in new.read_log()
            assert status_of(cli, mnt)[0]["pid"] == new.proc.pid
            (mnt / "successor.txt").write_text("from the successor\n")
            synced = cli.run("sync", "--timeout", "60", str(mnt))
            assert synced.returncode == 0 and str(mnt.resolve()) in synced.stdout, synced.stderr
            assert emulator.download("/successor.txt") == b"from the successor\n"
            # Both daemons answer `status`; the old one says its mount was lazily unmounted.
            states = {m["pid"]: m.get("state") for m in status_of(cli)}
            assert states == {new.proc.pid: "mounted", old.proc.pid: "detached"}, states


def test_a_lazily_detached_daemon_keeps_its_cache_dir_until_it_exits(cli, emulator, tmp_path):
    mnt = tmp_path / "m"
    mnt.mkdir()
    cache = cli.home / "detached-cache"
    with lazily_detached(cli, emulator, mnt, cache) as old:
        refused = cli.run(*mount_args(emulator, cache), str(mnt), env=ENV)
        try:
            line = one_clear_line(refused)
            assert refused.returncode == 1
            assert f"dbxfs pid {old.proc.pid}, whose mount at {mnt.resolve()} was lazily unmounted" in line, line
            assert not mounted_at(mnt)
        finally:
            stop_daemon_at(cli, mnt)
        old.proc.send_signal(signal.SIGTERM)
        old.proc.wait(timeout=60)
        # Its lock went with it: the same cache directory mounts again.
        with Mount(cli, mnt, mount_args(emulator, cache), env=ENV) as again:
            assert (mnt / "hello.txt").read_text().startswith("hello")
            assert json.loads((cache / "daemon.lock").read_text())["pid"] == again.proc.pid
