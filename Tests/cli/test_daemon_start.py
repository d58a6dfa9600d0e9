"""How `dbxfs MOUNTPOINT` detaches (Sources/dbxfs/Mount/Daemon.swift): the daemon is dbxfs
started again as the leader of a new session, never a fork of the command. A forked Swift child's
main thread keeps its parent's thread id in the runtime's lock words, and a lock it then shares
with another thread spins both threads forever (a detached mount hung at start in the
clean-clone CI run of faf7801: two threads at 100 % CPU in swift_once inside FileHandle.write)."""

import os

from conftest import mounted_at, needs_fuse
from daemon_support import ENV, daemon_pid_at, mount_args, stop_daemon_at

pytestmark = needs_fuse


def test_the_detached_daemon_is_a_new_process_leading_its_own_session(cli, emulator, tmp_path):
    mnt = tmp_path / "m"
    mnt.mkdir()
    pid = None
    try:
        result = cli.run(*mount_args(emulator, cli.home / "cache", "--log-level", "debug"), str(mnt), env=ENV, timeout=60)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        assert mounted_at(mnt)
        pid = daemon_pid_at(cli, mnt)
        assert pid and pid != os.getpid()
        # A process image of its own: its start-up environment names the pipe to the command
        # (a fork would carry the command's environment, without it).
        environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        assert any(entry.startswith(b"DBXFS_DAEMON_REPORT_FD=") for entry in environ), environ
        # The leader of its own session, detached from the test's terminal and process group.
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        assert int(fields[3]) == pid, f"session {fields[3]}, pid {pid}"
        # It serves, and the log file got the lines logged before it was live.
        assert sorted(os.listdir(mnt))
        log = (cli.home / "cache").rglob("dbxfs.log")
        assert any("mounted" in path.read_text() for path in log)
    finally:
        stop_daemon_at(cli, mnt, pid)
    assert not mounted_at(mnt)
