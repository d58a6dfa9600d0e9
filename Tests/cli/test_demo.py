"""`scripts/demo MOUNTPOINT` non-interactively: start it (with the already-built binary and a
small "large" file, to stay fast), wait for the mount, use it, press Ctrl-C (SIGINT), and check
that nothing is left: no mount, no emulator, no daemon, no temporary directory, no mountpoint.
Also as a background job of a script (`scripts/demo M &`), which starts with SIGINT ignored."""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

from conftest import REPO, mounted_at, needs_fuse

pytestmark = needs_fuse


def demo_env(dbxfs_binary, tmp_path):
    env = dict(os.environ, DBXFS_BIN=dbxfs_binary, DEMO_LARGE_MIB="8", TMPDIR=str(tmp_path))
    for key in ("DBXFS_ACCESS_TOKEN", "DBXFS_API_BASE", "DISPLAY", "WAYLAND_DISPLAY"):
        env.pop(key, None)
    return env


def wait_for_demo(proc, mountpoint, log):
    """Until the demo has mounted and printed its tour; returns its output and work directory."""
    deadline = time.monotonic() + 180
    while not (mountpoint.exists() and mounted_at(mountpoint)):
        assert proc.poll() is None, Path(log.name).read_text()
        assert time.monotonic() < deadline, Path(log.name).read_text()
        time.sleep(0.2)
    while "Press Ctrl-C" not in Path(log.name).read_text():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    output = Path(log.name).read_text()
    return output, re.search(r"(\S+/dbxfs-demo\.\w+)/", output).group(1)


def daemon_pid(dbxfs_binary, mountpoint, env):
    status = subprocess.run([dbxfs_binary, "status", "--json", str(mountpoint)], capture_output=True, text=True, env=env)
    return int(re.search(r'"pid" : (\d+)', status.stdout).group(1))


def assert_nothing_left(log, mountpoint, work, tmp_path, pid):
    output = Path(log.name).read_text()
    assert "nothing is left running" in output, output
    assert not mountpoint.exists()
    assert not Path(work).exists()
    assert not mounted_at(tmp_path)
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive, "the mount daemon outlived the demo"
    # No emulator of this demo is left (its data dir was under `work`).
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert work not in ps


def test_demo_mounts_sample_content_and_cleans_up_on_ctrl_c(dbxfs_binary, tmp_path):
    mountpoint = tmp_path / "dbx-demo"          # does not exist yet: the demo creates and removes it
    env = demo_env(dbxfs_binary, tmp_path)
    log = open(tmp_path / "demo.log", "w+")
    proc = subprocess.Popen([str(REPO / "scripts" / "demo"), str(mountpoint)], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        output, work = wait_for_demo(proc, mountpoint, log)
        # The tour suggests what works here: no "not wired in yet", no desktop viewer on a server.
        assert "wired in" not in output and "xdg-open" not in output, output

        assert sorted(os.listdir(mountpoint)) == ["Documents", "Large", "Photos", "Projects", "README.txt"]
        assert (mountpoint / "Photos" / "sunset.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (mountpoint / "Large" / "disk-image.bin").stat().st_size == 8 << 20
        assert len(os.listdir(mountpoint / "Projects" / "notes")) == 20
        status = subprocess.run([dbxfs_binary, "status", str(mountpoint)], capture_output=True, text=True, env=env)
        assert status.returncode == 0 and "emulated.user@example.com" in status.stdout
        pid = daemon_pid(dbxfs_binary, mountpoint, env)

        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            subprocess.run(["fusermount3", "-uz", str(mountpoint)], capture_output=True)
    assert_nothing_left(log, mountpoint, work, tmp_path, pid)


def test_demo_started_in_the_background_of_a_script_stops_on_sigint(dbxfs_binary, tmp_path):
    """`scripts/demo M &` in a script: the job starts with SIGINT ignored (POSIX shells do that for
    background jobs), which bash cannot trap, so the demo must restore it itself."""
    mountpoint = tmp_path / "dbx-demo"
    env = demo_env(dbxfs_binary, tmp_path)
    log = open(tmp_path / "demo.log", "w+")
    pid_file = tmp_path / "demo.pid"
    script = f'"{REPO}/scripts/demo" "{mountpoint}" & echo $! > "{pid_file}"; wait'
    shell = subprocess.Popen(["bash", "-c", script], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_demo(shell, mountpoint, log)
        output, work = wait_for_demo(shell, mountpoint, log)
        pid = daemon_pid(dbxfs_binary, mountpoint, env)
        os.kill(int(pid_file.read_text()), signal.SIGINT)
        try:
            shell.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError("the demo ignored SIGINT:\n" + Path(log.name).read_text()[-2000:])
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGTERM)
            try:
                shell.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(shell.pid, signal.SIGKILL)
                shell.wait()
            subprocess.run(["fusermount3", "-uz", str(mountpoint)], capture_output=True)
    assert_nothing_left(log, mountpoint, work, tmp_path, pid)
