"""How `dbxfs MOUNTPOINT` detaches (Sources/dbxfs/Mount/Daemon.swift): the daemon is dbxfs
started again as the leader of a new session, never a fork of the command. A forked Swift child's
main thread keeps its parent's thread id in the runtime's lock words, and a lock it then shares
with another thread spins both threads forever (a detached mount hung at start in the
clean-clone CI run of faf7801: two threads at 100 % CPU in swift_once inside FileHandle.write)."""

import os
import subprocess

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


def test_a_mount_started_with_stdin_and_stdout_closed_detaches_once(cli, emulator, tmp_path):
    """The pipe to the daemon may then take fd 0 or 1; its end must still reach the daemon as
    such, never as "not started as the daemon" (which would start yet another daemon)."""
    mnt = tmp_path / "m"
    mnt.mkdir()
    pid = None
    try:
        args = mount_args(emulator, cli.home / "cache") + [str(mnt)]
        result = subprocess.run(["sh", "-c", 'exec "$0" "$@" <&- >&-', cli.binary, *args], capture_output=True,
                                text=True, timeout=60, env=dict(cli.env, **ENV))
        assert result.returncode == 0 and result.stderr == "", result.stderr
        assert mounted_at(mnt)
        pid = daemon_pid_at(cli, mnt)
        daemons = [p for p in os.listdir("/proc") if p.isdigit() and _is_dbxfs_for(p, mnt)]
        assert daemons == [str(pid)], daemons
    finally:
        stop_daemon_at(cli, mnt, pid)
    assert not mounted_at(mnt)


def test_a_daemon_variable_that_is_not_our_pipe_is_refused_not_followed(cli, emulator, tmp_path):
    mnt = tmp_path / "m"
    mnt.mkdir()
    result = cli.run(*mount_args(emulator, cli.home / "cache"), str(mnt), env=dict(ENV, DBXFS_DAEMON_REPORT_FD="1"))
    assert result.returncode == 1 and "DBXFS_DAEMON_REPORT_FD=1 is not a pipe from dbxfs" in result.stderr, result.stderr
    assert not mounted_at(mnt)


def _is_dbxfs_for(pid, mnt):
    try:
        args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        return False
    return bool(args) and args[0].endswith(b"dbxfs") and str(mnt).encode() in args
