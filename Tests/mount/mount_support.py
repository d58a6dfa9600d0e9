"""Helpers for the mount tests, shared by conftest.py and the test modules: `Mount` (one dbxfs
process serving one mountpoint, always unmounted and reaped), mount-table checks, the seed tree,
and the arguments that point a mount at the emulator. It has a unique name because several
suites run in one pytest, where a bare `from conftest import` can find another suite's conftest.
"""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "Tests" / "support"))
from emulator import EMULATOR, Emulator  # noqa: E402,F401  (the shared emulator handle)

TOKEN = "mount-test-token"


def mounted_at(path):
    """Whether `path` is a mount point, per /proc/self/mountinfo."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            field = line.split(" ")[4].replace("\\040", " ")
            if field == path:
                return True
    return False


def force_unmount(path):
    if not mounted_at(path):
        return
    subprocess.run(["fusermount3", "-u", path], capture_output=True)
    if mounted_at(path):
        subprocess.run(["fusermount3", "-uz", path], capture_output=True)


class Mount:
    """One dbxfs process serving one mountpoint. Use as a context manager or call stop()."""

    def __init__(self, binary, mountpoint, args, env=None, log_path=None):
        self.binary = binary
        self.path = str(mountpoint)
        self.args = list(args)
        self.env = dict(os.environ, **(env or {}))
        self.log_path = log_path or (Path(self.path).parent / (Path(self.path).name + ".log"))
        self.proc = None

    def start(self, timeout=30):
        """Mounts in the foreground (-f) in a subprocess and waits until the mount is live."""
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.binary, "-f", *self.args, self.path], env=self.env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if mounted_at(self.path):
                return self
            if self.proc.poll() is not None:
                raise AssertionError(f"dbxfs exited with {self.proc.returncode}: {self.read_log()}")
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"mount did not come up in {timeout}s: {self.read_log()}")

    def read_log(self):
        try:
            return Path(self.log_path).read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self):
        """fusermount3 -u, then -uz, then SIGTERM/SIGKILL; waits for the process to exit."""
        force_unmount(self.path)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.log.close()
        return self.proc.returncode if self.proc else None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def write_seed(root):
    """The seed tree the read tests compare against. Deterministic, ~70 MiB."""
    rng = random.Random(4)
    root.mkdir(parents=True, exist_ok=True)
    (root / "file.txt").write_text("hello from dropbox\n")
    (root / "empty").write_bytes(b"")
    docs = root / "Docs"
    docs.mkdir()
    (docs / "Report.md").write_text("# Report\n" + "line\n" * 1000)
    (docs / "notes.txt").write_bytes(rng.randbytes(100_000))
    nested = docs / "Deep" / "Deeper"
    nested.mkdir(parents=True)
    (nested / "leaf.bin").write_bytes(rng.randbytes(5_000_000))
    uni = root / "Ünïcödé ☃"
    uni.mkdir()
    (uni / "日本語.txt").write_text("こんにちは\n")
    (uni / "emoji 😀.txt").write_text("smile\n")
    (uni / "café.txt").write_text("noël\n")
    many = root / "many"
    many.mkdir()
    for i in range(10_000):
        (many / f"f{i:05d}.txt").write_text(f"{i}\n")
    (root / "large.bin").write_bytes(rng.randbytes(64 << 20))
    return root


def dropbox_args(emulator, cache_dir, *extra):
    return ["--api-base", emulator.url, "--cache-dir", str(cache_dir), "--log-level", "debug", *extra]


def dropbox_env():
    return {"DBXFS_ACCESS_TOKEN": TOKEN}
