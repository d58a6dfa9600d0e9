"""`dbxfs status` and `dbxfs sync` believe only a real daemon of their own user (issue 14, "status
and sync trust any socket"): the client checks that the socket file is its user's, that the process
answering on it runs as the same user (SO_PEERCRED), and that the answer comes from the daemon it
claims to be (its pid is the peer's). Otherwise a socket planted by another local user (in a
runtime directory it controls) could make `dbxfs sync` report "Everything written ... is on
Dropbox" for files that are not.

The stand-in daemons here answer like a real one would, for the mount at `/` (the test's root
filesystem), whose socket name the client derives from `/` and its device number."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import one_clear_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from local_user import folder_others_can_reach, throwaway_user  # noqa: E402

FAKE_DAEMON = r'''
import json, os, socket, sys
path, claimed_pid = sys.argv[1], int(sys.argv[2])
pid = claimed_pid or os.getpid()
status = {"mountpoint": "/", "pid": pid, "mounted_at": "2026-12-01T00:00:00Z",
          "account": {"email": "victim@example.com", "display_name": "Victim"}, "server": "Dropbox",
          "root": "", "read_only": False,
          "cache": {"disk_bytes": 0, "disk_budget": 0, "memory_bytes": 0, "memory_budget": 0, "entries": 0, "open_files": 0},
          "uploads": {"pending_files": 0, "pending_bytes": 0, "offline": False, "transfers": [], "pending": [],
                      "conflicts": [], "errors": []}}
synced = {"mountpoint": "/", "pid": pid, "ok": True, "write_back": True, "waited_seconds": 0.0, "left": []}
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
os.chmod(path, 0o777)
server.listen(8)
print("ready", flush=True)
while True:
    conn, _ = server.accept()
    with conn:
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        try:
            command = json.loads(data)["command"]
        except ValueError:
            continue
        conn.sendall(json.dumps(synced if command == "sync" else status).encode() + b"\n")
'''


def socket_name_for(mountpoint):
    """ControlPaths.socketPath: 16 hex digits of sha256(mountpoint, newline, device) + .sock."""
    device = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split(" ")
            if fields[4] == mountpoint:
                device = fields[2]
    return hashlib.sha256(f"{mountpoint}\n{device}".encode()).hexdigest()[:16] + ".sock"


class FakeDaemon:
    """A stand-in daemon serving `path`, run as `user` (None: as the test itself)."""

    def __init__(self, path, script_dir, user=None, claimed_pid=0):
        script = Path(script_dir) / "fake_daemon.py"
        script.write_text(FAKE_DAEMON)
        os.chmod(script, 0o644)
        argv = [sys.executable if user is None else "/usr/bin/python3", str(script), str(path), str(claimed_pid)]
        self.proc = subprocess.Popen(user.command(*argv) if user else argv, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        ready = self.proc.stdout.readline()
        assert ready.strip() == "ready", self.proc.stderr.read()

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def other():
    with throwaway_user() as user:
        yield user


@pytest.fixture
def scratch():
    with folder_others_can_reach("dbxfs-trust-") as path:
        yield path


def untrusted(result, *words):
    print(result.returncode, result.stdout, result.stderr)
    assert "is on Dropbox" not in result.stdout
    line = one_clear_line(result)
    assert result.returncode == 1
    for word in words:
        assert word in line, line
    return line


def test_a_socket_planted_by_another_user_is_not_believed(cli, other, scratch):
    # A runtime directory the other user controls (a shared XDG_RUNTIME_DIR, say).
    runtime = scratch / "runtime"
    runtime.mkdir()
    os.chown(runtime, other.uid, other.gid)
    assert other.run("mkdir", "-m", "755", str(runtime / "dbxfs")).returncode == 0
    planted = runtime / "dbxfs" / socket_name_for("/")
    fake = FakeDaemon(planted, scratch, user=other)
    try:
        env = {"XDG_RUNTIME_DIR": str(runtime)}
        untrusted(cli.run("sync", "/", env=env), str(planted), f"uid {other.uid}")
        untrusted(cli.run("status", "/", env=env), str(planted))
        everything = cli.run("status", "--json", env=env)
        assert json.loads(everything.stdout)["mounts"] == [], everything.stdout
        assert str(planted) in everything.stderr, everything.stderr
    finally:
        fake.stop()


def test_a_socket_file_of_ours_served_by_another_user_is_not_believed(cli, other, scratch):
    # The other user listens; the socket file then shows up, as ours, in our private runtime
    # directory (renamed and chowned here by root): only the peer's credentials tell.
    listening = scratch / "listening"
    listening.mkdir()
    os.chown(listening, other.uid, other.gid)
    fake = FakeDaemon(listening / "s.sock", scratch, user=other)
    try:
        ours = cli.runtime / "dbxfs"
        ours.mkdir(mode=0o700)
        planted = ours / socket_name_for("/")
        os.rename(listening / "s.sock", planted)
        os.chown(planted, os.geteuid(), os.getegid())
        line = untrusted(cli.run("sync", "/"), str(planted), f"uid {other.uid}")
        assert "runs as" in line, line
    finally:
        fake.stop()


def test_an_answer_from_a_process_that_is_not_the_daemon_it_claims_is_not_believed(cli, scratch):
    ours = cli.runtime / "dbxfs"
    ours.mkdir(mode=0o700)
    planted = ours / socket_name_for("/")
    fake = FakeDaemon(planted, scratch, claimed_pid=4242)
    try:
        untrusted(cli.run("sync", "/"), str(planted), "pid 4242")
        untrusted(cli.run("status", "/"), str(planted), "pid 4242")
    finally:
        fake.stop()
