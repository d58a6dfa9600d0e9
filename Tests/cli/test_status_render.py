"""The human form of `dbxfs status` for a mount that is uploading: a stand-in mount daemon (a
Python Unix-socket server speaking the control protocol of docs/STATUS.md) answers with a
report holding transfers, pending files, conflicts and errors, and the test checks what
`dbxfs status` draws from it: progress bars with bytes, rate and ETA, and every section.

This checks the client side (decoding every documented field, rendering); the daemon side of
the same report is checked by test_status.py against real mounts."""

import json
import os
import socket
import subprocess
import threading

import pytest

GiB = 1 << 30
MiB = 1 << 20

REPORT = {
    "mountpoint": "/home/ada/Dropbox", "pid": 4242, "mounted_at": "2026-11-29T20:45:48Z",
    "account": {"email": "ada@example.com", "display_name": "Ada Lovelace", "account_id": "dbid:x", "profile": "default"},
    "server": "Dropbox", "root": "", "read_only": False,
    "cache": {"disk_bytes": 3 * GiB // 2, "disk_budget": 10 * GiB, "memory_bytes": 120 * MiB,
              "memory_budget": 256 * MiB, "entries": 3210, "open_files": 2},
    "uploads": {
        "pending_files": 3, "pending_bytes": GiB + 12 * MiB + 120, "offline": False,
        "transfers": [
            {"path": "/iso/debian-13.0.0-amd64-netinst.iso", "bytes_done": GiB // 2, "bytes_total": GiB,
             "bytes_per_second": 50 * MiB, "eta_seconds": 10.24, "started_at": "2026-11-29T21:03:54Z"},
            {"path": "/photos/new.jpg", "bytes_done": 0, "bytes_total": 12 * MiB,
             "bytes_per_second": 0, "started_at": "2026-11-29T21:04:04Z"},
        ],
        "pending": [
            {"path": "/iso/debian-13.0.0-amd64-netinst.iso", "size": GiB, "state": "uploading", "attempts": 1, "open_for_writing": False},
            {"path": "/photos/new.jpg", "size": 12 * MiB, "state": "uploading", "attempts": 1, "open_for_writing": False},
            {"path": "/notes.txt", "size": 120, "state": "failed", "attempts": 4, "open_for_writing": False,
             "last_error": "insufficient space on Dropbox"},
        ],
        "conflicts": [{"path": "/a.txt", "copy_path": "/a (conflicted copy 2026-11-29).txt", "at": "2026-11-29T21:01:02Z"}],
        "errors": [{"path": "/notes.txt", "message": "insufficient space on Dropbox", "at": "2026-11-29T21:02:00Z"}],
        "some_future_field": {"ignored": True},
    },
}


class FakeDaemon:
    """Serves `answer` to every connection on a socket in the CLI's runtime directory."""

    def __init__(self, directory, answer):
        directory.mkdir(mode=0o700, exist_ok=True)
        self.path = str(directory / "0123456789abcdef.sock")
        self.answer = answer
        self.requests = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(4)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                self.requests.append(json.loads(data))
                # A real daemon names itself: the client checks that pid is the socket's peer.
                conn.sendall(json.dumps(dict(self.answer, pid=os.getpid())).encode() + b"\n")

    def close(self):
        self.server.close()
        os.unlink(self.path)


@pytest.fixture
def daemon(cli):
    fake = FakeDaemon(cli.runtime / "dbxfs", REPORT)
    yield fake
    fake.close()


def test_text_shows_progress_bars_pending_conflicts_and_errors(cli, daemon):
    result = cli.run("status")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    print(out)
    assert daemon.requests == [{"command": "status"}]
    assert "/home/ada/Dropbox  Ada Lovelace <ada@example.com>, profile default on Dropbox" in out
    assert "1.5 GiB of 10.0 GiB on disk" in out and "3210 entries" in out
    assert "3 files pending, 1.0 GiB" in out
    iso = next(line for line in out.splitlines() if "debian-13" in line)
    assert "iso/debian-13.0.0-amd64-netinst.iso  [##########----------]  50%" in iso
    assert "512.0 MiB / 1.0 GiB" in iso and "50.0 MiB/s  ETA" in iso and "ETA 0:11" in iso
    # Nothing sent yet and no rate: waiting, not a bar at 0%.
    jpg = next(line for line in out.splitlines() if "new.jpg" in line)
    assert "photos/new.jpg  12.0 MiB  sending" in jpg and "%" not in jpg
    assert "notes.txt  120 B  failed after attempt 4: insufficient space on Dropbox" in out
    assert "a.txt -> a (conflicted copy 2026-11-29).txt" in out
    assert "notes.txt: insufficient space on Dropbox" in out


def test_json_passes_the_documented_fields_through(cli, daemon):
    result = cli.run("status", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["version"] == 1
    mount = document["mounts"][0]
    assert mount["uploads"]["transfers"][0]["eta_seconds"] == 10.24
    assert "eta_seconds" not in mount["uploads"]["transfers"][1]
    assert mount["uploads"]["pending"][2]["last_error"] == "insufficient space on Dropbox"
    assert mount["cache"] == REPORT["cache"] and mount["account"] == REPORT["account"]


def test_queued_namespace_changes_show_with_their_oldest_and_last_error(cli):
    operations = {"pending": 1012, "oldest_at": "2026-12-02T10:00:01Z", "last_error": "unavailable(\"offline\")",
                  "first": [{"path": "/build", "size": 0, "state": "pending", "attempts": 3, "open_for_writing": False,
                             "operation": "rmdir /build"},
                            {"path": "/a", "size": 0, "state": "failed", "attempts": 1, "open_for_writing": False,
                             "operation": "rename /a → /b", "last_error": "locked"}]}
    report = dict(REPORT, uploads=dict(REPORT["uploads"], operations=operations))
    fake = FakeDaemon(cli.runtime / "dbxfs", report)
    try:
        out = cli.run("status").stdout
        print(out)
        line = next(line for line in out.splitlines() if line.startswith("  changes"))
        assert "1012 not on Dropbox yet (mkdir, unlink, rmdir, rename), oldest" in line
        assert 'last error: unavailable("offline")' in line
        assert "    rmdir /build  pending" in out and "    rename /a → /b  failed" in out
        mount = json.loads(cli.run("status", "--json").stdout)["mounts"][0]
        assert mount["uploads"]["operations"]["pending"] == 1012
        assert mount["uploads"]["operations"]["first"][1]["operation"] == "rename /a → /b"
    finally:
        fake.close()


def test_a_mount_without_write_back_says_so(cli):
    report = dict(REPORT)
    del report["uploads"]
    fake = FakeDaemon(cli.runtime / "dbxfs", report)
    try:
        result = cli.run("status")
        assert "uploads     none (this mount has no write-back)" in result.stdout
        assert "uploads" not in json.loads(cli.run("status", "--json").stdout)["mounts"][0]
    finally:
        fake.close()


def test_a_daemon_that_is_unmounted_or_lazily_unmounted_says_so(cli):
    pid = os.getpid()
    for state, expected in (("unmounted", f"state       unmounted; pid {pid} finishes its uploads, then exits"),
                            ("detached", f"state       lazily unmounted; pid {pid} still serves the files open there")):
        fake = FakeDaemon(cli.runtime / "dbxfs", dict(REPORT, state=state))
        try:
            result = cli.run("status")
            assert result.returncode == 0, result.stderr
            assert expected in result.stdout, result.stdout
            assert json.loads(cli.run("status", "--json").stdout)["mounts"][0]["state"] == state
        finally:
            fake.close()
    # A report without the field (an older daemon) is an ordinary live mount.
    fake = FakeDaemon(cli.runtime / "dbxfs", REPORT)
    try:
        assert "state " not in cli.run("status").stdout
    finally:
        fake.close()


def many_pending(count=400):
    """A burst of small files in a batch: most are sent and wait for the batch commit (done ==
    total), a few are being sent, one failed and waits for its retry."""
    transfers, pending = [], []
    for i in range(count):
        path = f"/photos/2026/trip/img-{i:03d}.jpg"
        size = 100_000 + i
        done = size if i >= 4 else i * 20_000
        transfers.append({"path": path, "bytes_done": done, "bytes_total": size,
                          "bytes_per_second": 0 if done in (0, size) else 80_000.0,
                          "eta_seconds": 0.0 if done == size else None, "started_at": "2026-11-29T21:03:54Z"})
        pending.append({"path": path, "size": size, "state": "uploading", "attempts": 0, "open_for_writing": False})
    for t in transfers:
        if t["eta_seconds"] is None:
            del t["eta_seconds"]
    pending.append({"path": "/notes/todo.txt", "size": 120, "state": "failed", "attempts": 3, "open_for_writing": False,
                    "last_error": "the Dropbox account is full (insufficient space)",
                    "next_attempt_at": "2999-01-01T00:00:00Z"})
    pending.append({"path": "/drafts/open.txt", "size": 5000, "state": "pending", "attempts": 0, "open_for_writing": True})
    report = json.loads(json.dumps(REPORT))
    report["uploads"].update(pending_files=len(pending), pending_bytes=sum(p["size"] for p in pending),
                             transfers=transfers, pending=pending, conflicts=[], errors=[],
                             bytes_per_second=2.0 * MiB, eta_seconds=20.5)
    report["cache"]["entries"] = 1
    report["connection"] = {"state": "online", "last_error": "Dropbox is failing (HTTP 503: injected fault); try again later",
                            "last_error_at": "2026-11-29T21:04:00Z", "next_retry_at": "2999-01-01T00:00:00Z"}
    return report


def test_many_pending_files_are_summarised_with_paths_relative_to_the_mount(cli):
    fake = FakeDaemon(cli.runtime / "dbxfs", many_pending())
    try:
        result = cli.run("status")
        assert result.returncode == 0, result.stderr
        out = result.stdout
        print(out)
        lines = out.splitlines()
        assert len(lines) <= 25, f"{len(lines)} lines for 402 pending files"
        assert "402 files pending" in out and "2.0 MiB/s" in out and "ETA 0:21" in out
        # Paths as seen from the mountpoint, not bare names, and not as if absolute.
        assert "photos/2026/trip/img-001.jpg" in out and "/photos/2026" not in out
        assert "notes/todo.txt" in out and "drafts/open.txt" in out
        # A file whose bytes are all sent still waits (for the batch commit): never "100% ... ETA 0:00".
        assert not [l for l in lines if "100%" in l or "ETA 0:00" in l], out
        assert "waiting for the commit" in out or "sent, waiting" in out
        # The failed one: its attempts, next retry and error; the open one said once.
        todo = next(l for l in lines if "notes/todo.txt" in l)
        assert "failed" in todo and "attempt 3" in todo and "next try" in todo and "insufficient space" in todo
        opened = next(l for l in lines if "drafts/open.txt" in l)
        assert opened.count("open for writing") == 1, opened
        assert "1 entry cached" in out and "1 entries" not in out
        assert "--all" in out
        everything = cli.run("status", "--all").stdout
        assert len(everything.splitlines()) >= 402 and "photos/2026/trip/img-399.jpg" in everything
    finally:
        fake.close()


def test_the_connection_shows_its_state_last_error_and_next_retry(cli):
    report = json.loads(json.dumps(REPORT))
    report["connection"] = {"state": "offline", "since": "2026-11-29T21:00:00Z",
                            "message": "cannot reach Dropbox: Couldn't connect to server. Cached files can be read",
                            "last_error": "cannot reach Dropbox: Couldn't connect to server",
                            "last_error_at": "2026-11-29T21:04:00Z", "next_retry_at": "2999-01-01T00:00:00Z"}
    report["uploads"]["pending"][2].update(attempts=4, next_attempt_at="2999-01-01T00:00:00Z")
    fake = FakeDaemon(cli.runtime / "dbxfs", report)
    try:
        out = cli.run("status").stdout
        print(out)
        line = next(l for l in out.splitlines() if l.strip().startswith("connection"))
        assert "offline since" in line and "Couldn't connect to server" in out
        assert "next try" in out and "Cached files can be read" in out
        notes = next(l for l in out.splitlines() if "notes.txt" in l and "failed" in l)
        assert "attempt 4" in notes
    finally:
        fake.close()


def test_json_prints_empty_lists_as_brackets(cli):
    report = json.loads(json.dumps(REPORT))
    report["uploads"].update(conflicts=[], errors=[])
    fake = FakeDaemon(cli.runtime / "dbxfs", report)
    try:
        out = cli.run("status", "--json").stdout
        assert '"conflicts" : []' in out and '"errors" : []' in out, out
        assert json.loads(out)["mounts"][0]["uploads"]["conflicts"] == []
        assert "[\n" not in out.replace('"mounts" : [\n', "").replace('"transfers" : [\n', "").replace(
            '"pending" : [\n', "")
    finally:
        fake.close()


def test_pinned_files_are_counted_with_a_progress_bar_while_they_download(cli):
    pins = {"paths": 2, "disk_bytes": 25 * MiB,
            "counts": {"files": 12, "bytes": 100 * MiB, "current": 9, "fetching": 2, "failed": 1, "bytes_fetched": 25 * MiB}}
    fake = FakeDaemon(cli.runtime / "dbxfs", dict(REPORT, pins=pins))
    try:
        out = cli.run("status").stdout
        print(out)
        assert ("pinned      12 files, 100.0 MiB in 2 pins: 9 available offline, 2 downloading, "
                "1 failed (dbxfs pin --list says why)") in out
        assert "    [#####---------------]  25%  25.0 MiB / 100.0 MiB" in out
        assert json.loads(cli.run("status", "--json").stdout)["mounts"][0]["pins"] == pins
    finally:
        fake.close()
    # All downloaded: no bar; nothing pinned (no "pins" in the report): no line.
    done = {"paths": 1, "disk_bytes": 100 * MiB,
            "counts": {"files": 12, "bytes": 100 * MiB, "current": 12, "fetching": 0, "failed": 0, "bytes_fetched": 100 * MiB}}
    for report, expected in ((dict(REPORT, pins=done), "pinned      12 files, 100.0 MiB in 1 pin: 12 available offline"),
                             (REPORT, None)):
        fake = FakeDaemon(cli.runtime / "dbxfs", report)
        try:
            out = cli.run("status").stdout
            if expected:
                lines = out.splitlines()
                at = lines.index("  " + expected)
                assert not lines[at + 1].strip().startswith("["), out
            else:
                assert "pinned" not in out, out
        finally:
            fake.close()
