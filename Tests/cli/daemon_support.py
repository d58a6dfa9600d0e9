"""Helpers for the tests that run several mount daemons (test_cache_lock.py,
test_lazy_unmount.py): the mount arguments, daemons started without -f (their parent exits, so
they are found and stopped by mountpoint and pid), and a lazily unmounted busy mount. A unique
module name, as mount_support.py explains."""

import json
import os
import signal
import subprocess
import time
from contextlib import contextmanager

from conftest import STATIC_TOKEN, Mount, force_unmount, mounted_at

ENV = {"DBXFS_ACCESS_TOKEN": STATIC_TOKEN}


def mount_args(emulator, cache_dir=None, *extra):
    args = ["--api-base", emulator.url, *extra]
    return args + ["--cache-dir", str(cache_dir)] if cache_dir is not None else args


def files_of(directory):
    """Every file under `directory` with its size and modification time."""
    found = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            st = os.stat(path)
            found[os.path.relpath(path, directory)] = (st.st_size, st.st_mtime_ns)
    return found


def settled_files_of(directory, quiet=1.0, timeout=20):
    """`files_of` once nothing under `directory` has changed for `quiet` seconds: the daemon that
    owns it saves the change feed's echo of its own uploads a moment after `sync` returns."""
    import time
    deadline = time.monotonic() + timeout
    last = files_of(directory)
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = files_of(directory)
        if now == last:
            return now
        last = now
    return last


def status_of(cli, path=None):
    result = cli.run("status", "--json", *([str(path)] if path else []))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["mounts"]


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_daemon_at(cli, mountpoint, pid=None, timeout=120):
    """Unmounts a daemonized mount (not our child: its parent exited) and waits for its daemon
    (`pid`, else the one `status` names) to end."""
    if mounted_at(mountpoint):
        pid = pid or daemon_pid_at(cli, mountpoint)
    force_unmount(mountpoint)
    deadline = time.monotonic() + timeout
    while pid and pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid and pid_alive(pid):
        os.kill(pid, signal.SIGKILL)


def daemon_pid_at(cli, mountpoint):
    """The pid of the daemon serving `mountpoint` (None when nothing answers there)."""
    result = cli.run("status", "--json", str(mountpoint))
    if result.returncode != 0:
        return None
    return json.loads(result.stdout)["mounts"][0]["pid"]


def no_conflicted_copies(emulator):
    names = [entry["path_display"] for entry in emulator.listing("", recursive=True)]
    assert not [n for n in names if "conflicted copy" in n], names


def _thread_states(pid):
    """name: state (and kernel wait channel) of each thread of `pid`, from /proc."""
    states = []
    try:
        for tid in sorted(os.listdir(f"/proc/{pid}/task")):
            base = f"/proc/{pid}/task/{tid}"
            try:
                with open(base + "/comm") as f:
                    name = f.read().strip()
                with open(base + "/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                with open(base + "/wchan") as f:
                    wchan = f.read().strip()
                states.append(f"{name} {state} {wchan}")
            except OSError:
                pass
    except OSError:
        pass
    return states


@contextmanager
def lazily_detached(cli, emulator, mnt, cache):
    """A mount at `mnt` that is busy (a file open on it) and then lazily unmounted: its daemon
    lives on, serving the open file, while `mnt` is free for a successor."""
    old = Mount(cli, mnt, mount_args(emulator, cache), env=ENV).start()
    held = None
    try:
        held = open(mnt / "hello.txt")
        subprocess.run(["fusermount3", "-uz", str(mnt)], check=True)
        assert not mounted_at(mnt)
        yield old
    finally:
        if held:
            try:
                held.close()
            except OSError:
                pass
        if old.proc.poll() is None:
            old.proc.send_signal(signal.SIGTERM)
        try:
            try:
                old.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                # Say what it was doing (its log; /proc's view of its threads), then end it.
                threads = _thread_states(old.proc.pid)
                old.proc.kill()
                old.proc.wait(timeout=10)
                raise AssertionError(f"the lazily detached daemon did not exit within 60 s of SIGTERM; "
                                     f"threads: {threads}; its log: {old.read_log()[-4000:]}")
        finally:
            # Whatever is mounted at `mnt` now is not the old daemon's to unmount.
            if not mounted_at(mnt):
                old.stop()
