"""Running a real dbxfs mount from a test: `Mount` (one `dbxfs -f` process serving one
mountpoint, always unmounted and reaped on stop, even when the test failed), and the mount-table
checks behind it. Shared by the mount, CLI and benchmark scripts, so the unmount discipline
lives in one place.
"""

import os
import signal
import subprocess
import time
from pathlib import Path


def mounted_at(path):
    """Whether `path` is a mount point, per /proc/self/mountinfo."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split(" ")[4].replace("\\040", " ") == path for line in f)


def force_unmount(path):
    """fusermount3 -u, then -uz (lazy) if something still holds the mount."""
    if not mounted_at(path):
        return
    subprocess.run(["fusermount3", "-u", str(path)], capture_output=True)
    if mounted_at(path):
        subprocess.run(["fusermount3", "-uz", str(path)], capture_output=True)


class Mount:
    """One dbxfs process serving one mountpoint. Use as a context manager or call stop().

    `env` is added on top of `base_env` (the test process's environment by default). `command`,
    when given, is the whole command line instead of `binary -f ARGS MOUNTPOINT`, for another
    FUSE daemon that stays in the foreground (rclone mount in scripts/bench-vs-rclone)."""

    def __init__(self, binary, mountpoint, args, env=None, log_path=None, base_env=None, command=None):
        self.binary = binary
        self.path = str(mountpoint)
        self.args = list(args)
        self.env = dict(os.environ if base_env is None else base_env, **(env or {}))
        self.log_path = log_path or (Path(self.path).parent / (Path(self.path).name + ".log"))
        self.command = list(command) if command is not None else None
        self.proc = None
        self.log = None

    def start(self, timeout=30):
        """Mounts in the foreground (-f) in a subprocess and waits until the mount is live."""
        self.log = open(self.log_path, "ab")
        argv = self.command or [self.binary, "-f", *self.args, self.path]
        self.proc = subprocess.Popen(argv, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if mounted_at(self.path):
                return self
            if self.proc.poll() is not None:
                raise AssertionError(f"{Path(argv[0]).name} exited with {self.proc.returncode}: {self.read_log()}")
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"mount did not come up in {timeout}s: {self.read_log()}")

    def read_log(self):
        try:
            return Path(self.log_path).read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self):
        """fusermount3 -u, then -uz, then SIGTERM/SIGKILL; waits for the process to exit and
        returns its exit code (None if it was never started)."""
        force_unmount(self.path)
        code = None
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
            code = self.proc.returncode
        if self.log:
            self.log.close()
            self.log = None
        return code

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def wait_until(predicate, timeout=30, interval=0.2):
    """Polls `predicate` until it returns something true (returned), or fails after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout} s: {getattr(predicate, '__name__', predicate)}")
        time.sleep(interval)
