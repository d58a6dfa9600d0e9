"""The two clients, mounted the same way: dbxfs and `rclone mount`, each on a fresh cache.

Both reach the emulator under Dropbox's real host names over TLS (network.py), both mount one
folder of the account (dbxfs `--root`, rclone `dropbox:/folder`), both keep their cache on the
same disk. rclone runs as people run it for ordinary tools: `--vfs-cache-mode full
--vfs-write-back 0s`, everything else at its defaults (4 transfers, 128 MiB read chunks, batch
mode `sync`), with its remote-control API on loopback so the harness can see its upload queue.

"Until on the server" means: dbxfs, until `dbxfs sync` returns; rclone, until its upload queue
(`vfs/stats`) is empty. Either way the harness then checks the server itself, and keeps waiting
(polling the queue and the server) until the check passes: the time reported is when the client
was done, not when the harness finished checking.
"""

import json
import os
import socket
import subprocess
import time
import urllib.request

from mounting import Mount


def cpu_seconds(pid):
    """User + system CPU seconds a process has used so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Mounted:
    """One client serving one mountpoint: its process, CPU and memory, and its upload queue."""

    name = "?"

    def __init__(self, mount):
        self.mount = mount
        self.path = mount.path
        self.pid = mount.proc.pid

    def cpu(self):
        return cpu_seconds(self.pid)

    def peak_rss_mib(self):
        return peak_rss_mib(self.pid)

    def wait_uploaded(self, check, timeout):
        """Waits until the client has sent everything and `check()` (the server has it) holds;
        returns the time.monotonic() at which the client said it was done."""
        raise NotImplementedError

    def stop(self):
        self.mount.stop()


class DbxfsMount(Mounted):
    name = "dbxfs"

    def __init__(self, mount, binary, env):
        super().__init__(mount)
        self.binary, self.env = binary, env

    def wait_uploaded(self, check, timeout):
        started = time.monotonic()
        try:
            result = subprocess.run([self.binary, "sync", "--timeout", str(int(timeout)), self.path], env=self.env,
                                    capture_output=True, text=True, timeout=timeout + 60)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"dbxfs sync did not return in {timeout:.0f} s") from None
        done = time.monotonic()
        if result.returncode != 0 and done - started >= timeout:
            raise TimeoutError(f"dbxfs sync: not done after {timeout:.0f} s")
        if result.returncode != 0:
            raise RuntimeError(f"dbxfs sync failed: {result.stderr.strip() or result.stdout.strip()}")
        deadline = done + 30
        while not check():
            if time.monotonic() > deadline:
                raise RuntimeError("dbxfs sync returned but the server does not have everything")
            time.sleep(0.1)
        return done


class RcloneMount(Mounted):
    name = "rclone"

    def __init__(self, mount, rc_port):
        super().__init__(mount)
        self.rc_url = f"http://127.0.0.1:{rc_port}/"

    def rc(self, command):
        req = urllib.request.Request(self.rc_url + command, data=b"{}", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def queue_empty(self):
        cache = self.rc("vfs/stats").get("diskCache", {})
        return cache.get("uploadsInProgress", 0) == 0 and cache.get("uploadsQueued", 0) == 0

    def wait_uploaded(self, check, timeout):
        # A file's upload is queued when the kernel releases it, which can come just after `cp`
        # returns, so an empty queue counts only once the server has the bytes.
        deadline = time.monotonic() + timeout
        while True:
            if self.queue_empty():
                idle = time.monotonic()
                if check():
                    return idle
            if time.monotonic() > deadline:
                raise TimeoutError(f"rclone's uploads not done after {timeout:.0f} s")
            time.sleep(0.05)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Dbxfs:
    name = "dbxfs"

    def __init__(self, binary, token, ca_file, state_dir):
        self.binary = binary
        config_home = os.path.join(state_dir, "dbxfs-config")     # empty: no config file applies
        runtime = os.path.join(state_dir, "dbxfs-runtime")        # its status and sync sockets
        for d in (config_home, runtime):
            os.makedirs(d, mode=0o700, exist_ok=True)
        self.env = dict(os.environ, DBXFS_ACCESS_TOKEN=token, XDG_CONFIG_HOME=config_home,
                        XDG_RUNTIME_DIR=runtime)
        self.env.pop("DBXFS_API_BASE", None)   # the real host names, as rclone
        self.ca_file = ca_file

    def mount(self, root, mountpoint, cache_dir, log_path):
        args = ["--ca-file", self.ca_file, "--cache-dir", cache_dir, "--root", root]
        m = Mount(self.binary, mountpoint, args, log_path=log_path, base_env=self.env).start(timeout=60)
        return DbxfsMount(m, self.binary, self.env)


class Rclone:
    name = "rclone"

    def __init__(self, token, ca_file, state_dir):
        self.config = os.path.join(state_dir, "rclone.conf")
        # A token the emulator accepts (its --token), with the zero expiry that Go's oauth2
        # reads as "never expires", so rclone never tries to refresh it.
        token_json = json.dumps({"access_token": token, "token_type": "bearer", "expiry": "0001-01-01T00:00:00Z"})
        with open(self.config, "w") as f:
            f.write(f"[dropbox]\ntype = dropbox\ntoken = {token_json}\n")
        self.env = dict(os.environ, SSL_CERT_FILE=ca_file, HOME=state_dir)

    def mount(self, root, mountpoint, cache_dir, log_path):
        port = free_port()
        command = ["rclone", "mount", "dropbox:" + root, mountpoint, "--config", self.config,
                   "--cache-dir", cache_dir, "--vfs-cache-mode", "full", "--vfs-write-back", "0s",
                   "--rc", "--rc-addr", f"127.0.0.1:{port}", "--rc-no-auth"]
        m = Mount("rclone", mountpoint, [], log_path=log_path, base_env=self.env, command=command).start(timeout=60)
        client = RcloneMount(m, port)
        deadline = time.monotonic() + 30
        while True:   # the remote control comes up just after the mount
            try:
                client.rc("core/pid")
                return client
            except OSError:
                if time.monotonic() > deadline:
                    client.stop()
                    raise
                time.sleep(0.05)
