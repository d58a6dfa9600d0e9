"""A reusable handle on scripts/dbx-emulator for Python test suites (pytest or plain scripts).

Stable interface (other suites import this; change it only by adding):

    from emulator import Emulator          # with Tests/support on sys.path

    with Emulator(data_dir, token="test-token", tls=False, seed=None, extra_args=(), port=0,
                  control_token="control-token", log_dir=None, tls_cert=None, tls_key=None,
                  start_timeout=None) as emu:   # 30 s, or 3600 s with a seed
        emu.url              # "http://127.0.0.1:PORT" (https:// with tls=True)
        emu.token            # the long-lived access token the emulator accepts
        emu.control_token    # the token of the /_control endpoint
        emu.ca_file          # with tls=True: the PEM of the certificate (also its own CA); made
                             # with the openssl CLI unless tls_cert/tls_key are given
        emu.config(fail_rate=0.1, latency_ms=20)   # POST /_control/config; returns the settings
        emu.stats()          # {"requests": {"files/list_folder": N, ...}, "total": N, "faults": {...}}
        emu.reset_stats()
        emu.path_state("/f", "locked")   # or "restricted_content"; None clears it (path_states.py)
        emu.reset_cursors()  # every cursor issued so far answers 409 reset
        emu.purge_deleted()  # forget deleted files' revisions, free their blobs: {"revisions": N, "blobs": N}
        emu.api("files/create_folder_v2", {"path": "/a"})   # RPC call; returns the JSON result
        emu.upload("/a/b.txt", b"data", mode="overwrite")    # files/upload; returns FileMetadata
        emu.download("/a/b.txt")                             # bytes
        emu.restart()        # stop and start again on the same data (and the same port)
        emu.share("/Shared", read_only=True)         # POST /_control/share: a shared folder
        emu.export_only("/Doc.paper", {"md": "# Doc"}, export_as="md")   # an export-only file
        emu.account(team_used_by_others=10**9)       # POST /_control/account
        emu.api(route, arg, path_root='{".tag": "root", "root": "123"}')  # any call with a Path-Root

`api` raises `EmulatorError(status, body)` for any non-2xx answer (body is the parsed JSON when
the answer is JSON, else text). `start()` waits for the "listening on" line; `stop()` sends
SIGTERM, then SIGKILL after 5 s, and is also registered with atexit; and the emulator gets
SIGKILL if the thread that started it dies (PR_SET_PDEATHSIG), so it never outlives the test
run, even one that is killed. Start it from a thread that lives as long as you need it. The emulator's stderr goes to `<data_dir>/../emulator-<port>.log`
when `log_dir` is not given.
"""

import atexit
import hashlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EMULATOR = os.path.join(ROOT, "scripts", "dbx-emulator")


def content_hash(data):
    """Dropbox's content hash: SHA-256 over the SHA-256 of each 4 MiB block."""
    blocks = b"".join(hashlib.sha256(data[i:i + (4 << 20)]).digest() for i in range(0, len(data), 4 << 20))
    return hashlib.sha256(blocks).hexdigest()


def _die_with_parent():
    """In the child: get SIGKILL when the process (thread) that started us dies, so an emulator
    never outlives a test run that was itself killed (atexit does not run on SIGKILL/SIGTERM).
    Linux only; elsewhere a no-op."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


# How many 429s in a row `Emulator.api` waits out before it raises (each waits retry_after).
RATE_LIMIT_RETRIES = 20


class EmulatorError(Exception):
    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


def make_certificate(directory, hostname="127.0.0.1"):
    """A throwaway self-signed certificate for 127.0.0.1/localhost, made with the openssl CLI."""
    cert = os.path.join(directory, "cert.pem")
    key = os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", key, "-out", cert, "-subj", "/CN=" + hostname,
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-addext", "basicConstraints=critical,CA:TRUE"],
                   check=True, capture_output=True)
    return cert, key


class Emulator:
    def __init__(self, data_dir, token="test-token", tls=False, seed=None, extra_args=(), port=0,
                 control_token="control-token", log_dir=None, tls_cert=None, tls_key=None, start_timeout=None):
        self.data_dir = os.path.abspath(data_dir)
        self.token = token
        self.tls = tls
        self.seed = seed
        self.extra_args = list(extra_args)
        self.port = port
        self.control_token = control_token
        self.log_dir = log_dir
        # --seed imports before listening (about 100,000 files per 20 s), so allow for it.
        self.start_timeout = start_timeout or (3600 if seed else 30)
        self.proc = None
        self.url = None
        self.ca_file = tls_cert
        self._key_file = tls_key
        self._ssl_context = ssl.create_default_context(cafile=tls_cert) if tls_cert else None
        self._log = None

    # ----- lifecycle -----
    def start(self):
        os.makedirs(self.data_dir, exist_ok=True)
        # "--name=value": a value starting with "-" (secrets.token_urlsafe makes one in 64)
        # would otherwise be taken for an option.
        cmd = [sys.executable, EMULATOR, "--data", self.data_dir, "--port", str(self.port),
               "--control-token=" + self.control_token]
        if self.token:
            cmd += ["--token=" + self.token]
        if self.tls:
            if self.ca_file is None:
                cert_dir = tempfile.mkdtemp(prefix="emu-cert-")
                # Kept across restart(); gone when the test run ends.
                atexit.register(shutil.rmtree, cert_dir, True)
                self.ca_file, self._key_file = make_certificate(cert_dir)
                self._ssl_context = ssl.create_default_context(cafile=self.ca_file)
            cmd += ["--tls-cert", self.ca_file, "--tls-key", self._key_file]
        if self.seed:
            cmd += ["--seed", self.seed]
        cmd += self.extra_args
        log_dir = self.log_dir or os.path.dirname(self.data_dir)
        self._log = open(os.path.join(log_dir, f"emulator-{os.getpid()}-{id(self)}.log"), "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, preexec_fn=_die_with_parent)
        atexit.register(self.stop)
        line = self._read_first_line(timeout=self.start_timeout)
        if not line.startswith("listening on "):
            log_name = self._log.name
            self.stop()
            raise RuntimeError(f"emulator did not start: {line!r} (see {log_name})")
        self.url = line.split()[-1]
        self.port = int(self.url.rsplit(":", 1)[1])
        # Keep draining stdout so the emulator can never block on a full pipe.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        return self

    def _read_first_line(self, timeout):
        result = []
        reader = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        return result[0].decode().strip() if result else ""

    def stop(self):
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout:
            try:
                proc.stdout.close()
            except OSError:
                pass
        if self._log:
            self._log.close()
            self._log = None

    def restart(self):
        self.stop()
        return self.start()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ----- HTTP helpers -----
    def _request(self, path, body=None, headers=None, method="POST"):
        req = urllib.request.Request(self.url + path, data=body, headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(req, timeout=120, context=self._ssl_context) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = raw.decode("utf-8", "replace")
            raise EmulatorError(err.code, parsed) from None

    def _control(self, path, payload=None, method="POST"):
        body = None if payload is None else json.dumps(payload).encode()
        headers = {"Authorization": "Bearer " + self.control_token, "Content-Type": "application/json"}
        return json.loads(self._request("/_control/" + path, body, headers, method)[2])

    def config(self, **settings):
        return self._control("config", settings)

    def stats(self):
        return self._control("stats", method="GET")

    def reset_stats(self):
        return self._control("stats/reset", {})

    def reset_cursors(self):
        return self._control("reset_cursors", {})

    def purge_deleted(self):
        return self._control("purge_deleted", {})

    def share(self, path, read_only=False, team_folder=False):
        return self._control("share", {"path": path, "read_only": read_only, "team_folder": team_folder})

    def export_only(self, path, exports, export_as=None, export_options=None):
        payload = {"path": path, "exports": exports, "export_as": export_as}
        if export_options is not None:
            payload["export_options"] = export_options
        return self._control("export_only", payload)

    def account(self, **settings):
        return self._control("account", settings)

    def path_state(self, path, state):
        """Marks `path` "restricted_content" or "locked" (None clears it): path_states.py."""
        return self._control("path_state", {"path": path, "state": state})

    def api(self, route, arg=None, path_root=None):
        """One API call. A 429 is waited out as the official SDK does (it retries rate limits
        after `retry_after` by default): the suites look at Dropbox while a mount talks to it,
        and a listing identical to the mount's own is refused while the mount's is served."""
        headers = {"Authorization": "Bearer " + self.token, "Content-Type": "application/json"}
        if path_root is not None:
            headers["Dropbox-API-Path-Root"] = path_root
        body = json.dumps(arg).encode()
        for attempt in range(RATE_LIMIT_RETRIES + 1):
            try:
                return json.loads(self._request("/2/" + route, body, headers)[2])
            except EmulatorError as err:
                if err.status != 429 or attempt == RATE_LIMIT_RETRIES:
                    raise
                error = err.body.get("error", {}) if isinstance(err.body, dict) else {}
                time.sleep(float(error.get("retry_after", 1)) if isinstance(error, dict) else 1)

    def listing(self, path, recursive=False):
        """Every entry of a folder's listing, following has_more: Dropbox's pages (and the
        emulator's, by default) may hold more than `limit` entries, or none while more follow."""
        page = self.api("files/list_folder", {"path": path, "recursive": recursive})
        entries = list(page["entries"])
        while page["has_more"]:
            page = self.api("files/list_folder/continue", {"cursor": page["cursor"]})
            entries += page["entries"]
        return entries

    def changes(self, cursor):
        """Every change since `cursor`, following has_more (see `listing`)."""
        page = self.api("files/list_folder/continue", {"cursor": cursor})
        entries = list(page["entries"])
        while page["has_more"]:
            page = self.api("files/list_folder/continue", {"cursor": page["cursor"]})
            entries += page["entries"]
        return entries

    def upload(self, path, data, mode="add", autorename=False, path_root=None, **commit):
        arg = {"path": path, "mode": mode, "autorename": autorename, **commit}
        headers = {"Authorization": "Bearer " + self.token, "Content-Type": "application/octet-stream",
                   "Dropbox-API-Arg": json.dumps(arg)}
        if path_root is not None:
            headers["Dropbox-API-Path-Root"] = path_root
        return json.loads(self._request("/2/files/upload", bytes(data), headers)[2])

    def download(self, path, byte_range=None):
        headers = {"Authorization": "Bearer " + self.token, "Dropbox-API-Arg": json.dumps({"path": path})}
        if byte_range:
            headers["Range"] = byte_range
        return self._request("/2/files/download", b"", headers)[2]
