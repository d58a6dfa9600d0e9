"""Names a server sends that no directory may hold (issue 14, "Names a server sends"): `.`, `..`,
an empty name, a name with `/` or NUL in it, or a path with such a component, never reach
readdir. They are dropped from listings and from the change feed, with a log line each.

Dropbox itself never sends them, and the emulator cannot store them, so a small proxy in front
of the emulator adds them to every `list_folder` answer for the root and to every
`list_folder/continue` answer, and the real binary is mounted through it."""

import http.client
import json
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from mount_support import TOKEN, Emulator, Mount

FILE_FIELDS = {"client_modified": "2026-01-01T00:00:00Z", "server_modified": "2026-01-01T00:00:00Z",
               "rev": "0123456789abcdef", "size": 5, "is_downloadable": True,
               "content_hash": "0" * 64}


def bad_file(name, path, ident):
    return dict(FILE_FIELDS, **{".tag": "file", "name": name, "id": f"id:{ident}", "path_lower": path.lower(),
                                "path_display": path})


BAD_ENTRIES = [
    bad_file(".", "/.", "dot"),
    bad_file("..", "/..", "dotdot"),
    bad_file("evil\u0000name", "/evil\u0000name", "nul"),
    bad_file("", "/", "empty"),
    bad_file("a/b", "/a/b", "slash"),
    bad_file("sneaky.txt", "/../sneaky.txt", "updir"),
    {".tag": "folder", "name": "..", "id": "id:dotdot-folder", "path_lower": "/docs/..", "path_display": "/Docs/.."},
]


class InjectingProxy:
    """Forwards every request to the emulator; adds BAD_ENTRIES to root listings and to every
    listing continuation."""

    def __init__(self, upstream):
        target = urlsplit(upstream)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self.forward("GET")

            def do_POST(self):
                self.forward("POST")

            def forward(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "connection", "content-length", "accept-encoding")}
                upstream_conn = http.client.HTTPConnection(target.hostname, target.port, timeout=600)
                try:
                    upstream_conn.request(method, self.path, body=body, headers=headers)
                    response = upstream_conn.getresponse()
                    data = response.read()
                except (OSError, http.client.HTTPException):
                    # The emulator stopped under a long-poll at the end of the test.
                    self.close_connection = True
                    return
                finally:
                    upstream_conn.close()
                if response.status == 200 and proxy.injects(self.path, body):
                    page = json.loads(data)
                    page["entries"] += BAD_ENTRIES
                    data = json.dumps(page).encode()
                    proxy.injected += 1
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.injected = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def injects(path, body):
        if path.endswith("/2/files/list_folder/continue"):
            return True
        if path.endswith("/2/files/list_folder"):
            return json.loads(body or b"{}").get("path", "") == ""
        return False

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def emu(tmp_path):
    seed = tmp_path / "seed"
    (seed / "Docs").mkdir(parents=True)
    (seed / "hello.txt").write_text("hello\n")
    (seed / "Docs" / "a.txt").write_text("a\n")
    e = Emulator(tmp_path / "data", token=TOKEN, seed=str(seed)).start()
    e.config(longpoll_max_wait=2)
    yield e
    e.stop()


@pytest.fixture
def proxy(emu):
    p = InjectingProxy(emu.url)
    yield p
    p.stop()


def ls_all(path):
    """Every name readdir returns, `.` and `..` included (os.listdir hides those two)."""
    result = subprocess.run(["ls", "-a1", "--quoting-style=escape", str(path)], capture_output=True, text=True, timeout=60)
    return result.returncode, result.stdout.splitlines(), result.stderr


def test_names_no_directory_may_hold_never_reach_readdir(dbxfs_binary, emu, proxy, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "mnt.log"
    args = ["--api-base", proxy.url, "--cache-dir", str(tmp_path / "cache"), "--log-level", "debug"]
    with Mount(dbxfs_binary, mnt, args, env={"DBXFS_ACCESS_TOKEN": TOKEN}, log_path=log) as mount:
        code, names, err = ls_all(mnt)
        print(names, err)
        assert code == 0 and names == [".", "..", "Docs", "hello.txt"], (names, err, mount.read_log())
        code, names, err = ls_all(mnt / "Docs")
        assert code == 0 and names == [".", "..", "a.txt"], (names, err)
        assert not os.path.exists(mnt / "a"), "a name with '/' made a folder"
        # The change feed brings them again (every continuation carries them): still nothing.
        emu.upload("/later.txt", b"later\n")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not os.path.exists(mnt / "later.txt"):
            time.sleep(0.2)
        assert (mnt / "later.txt").read_text() == "later\n"
        code, names, err = ls_all(mnt)
        assert code == 0 and names == [".", "..", "Docs", "hello.txt", "later.txt"], (names, err)
        assert proxy.injected >= 2
        text = mount.read_log()
    dropped = [line for line in text.splitlines() if "not shown" in line and "name" in line]
    print("\n".join(dropped))
    for shown in ("'.'", "'..'", "'evil\\0name'", "''", "'a/b'", "'/../sneaky.txt'"):
        assert any(shown in line for line in dropped), (shown, dropped)
