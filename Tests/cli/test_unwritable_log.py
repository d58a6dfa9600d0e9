"""A daemon whose log cannot be written keeps serving. A detached mount logs to a file in its
cache directory, so a full cache disk is also a full log disk: the line that would say so must
not stop the daemon. Foundation's FileHandle.write traps on a failed write (SIGILL, exit 132:
fsstress on a disk that filled up ended that way), so the daemon writes its log with write(2)
and lets a line it cannot write go.

The daemon runs in the foreground with its stdout and stderr on /dev/full, where every write
fails with ENOSPC, and the debug level, so every operation below tries to log."""

import os

from conftest import STATIC_TOKEN, Mount, needs_fuse

pytestmark = needs_fuse


def test_a_daemon_whose_log_disk_is_full_keeps_serving_and_unmounts_cleanly(cli, mountpoint, emulator):
    args = ["--api-base", emulator.url, "--cache-dir", str(cli.home / "cache"), "--log-level", "debug"]
    mount = Mount(cli, mountpoint, args, env={"DBXFS_ACCESS_TOKEN": STATIC_TOKEN})
    mount.log_path = "/dev/full"
    with mount:
        written = os.urandom(300_000)
        (mountpoint / "log-disk-full.bin").write_bytes(written)
        assert (mountpoint / "log-disk-full.bin").read_bytes() == written
        assert "log-disk-full.bin" in os.listdir(mountpoint)
        sync = cli.run("sync", str(mountpoint), env={"DBXFS_ACCESS_TOKEN": STATIC_TOKEN})
        assert sync.returncode == 0, sync.stderr
        assert mount.proc.poll() is None, f"the daemon exited with {mount.proc.returncode} while mounted"
        assert emulator.download("/log-disk-full.bin") == written
    assert mount.proc.returncode == 0, f"the daemon exited with {mount.proc.returncode}"
