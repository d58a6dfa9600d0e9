"""Plain clients of the same emulator, over the same TLS and network profile: the limits.

Each row of the table is set against what a client with no file system in the way gets from the
same emulator at the same moment: curl for bulk transfers (one connection, and at the WAN profile
the best of several parallel ones), Python's http.client on kept-alive connections for the small
requests (a 256 KiB range, 4 KiB ranges, listings), and local copies for the warm and write
cases. docs/BENCHMARKS.md ("dbxfs against rclone") says what each limit means.
"""

import http.client
import json
import mmap
import os
import ssl
import subprocess
import threading
import time

CONTENT = "content.dropboxapi.com"
API = "api.dropboxapi.com"
MIB = 1 << 20


class Direct:
    def __init__(self, token, ca_file):
        self.token = token
        self.ca_file = ca_file
        self.context = ssl.create_default_context(cafile=ca_file)

    # ----- curl: bulk transfers -----
    def _curl_base(self, route, host=CONTENT):
        return ["curl"] + self._curl_request(route, host)

    def _curl_request(self, route, host=CONTENT):
        """One request's options (several can share a curl process, and its connection, with
        --next). No `Expect: 100-continue`: rclone and dbxfs send bodies at once too."""
        return ["-sS", "--cacert", self.ca_file, "-X", "POST", f"https://{host}/2/{route}",
                "-H", f"Authorization: Bearer {self.token}", "-H", "Expect:"]

    def curl_download(self, path, byte_range=None):
        """Seconds to download `path` (or a range of it) over one new connection; checks the size."""
        cmd = self._curl_base("files/download") + ["-H", "Dropbox-API-Arg: " + json.dumps({"path": path}),
                                                   "-o", "/dev/null", "-w", "%{http_code} %{size_download}"]
        if byte_range:
            cmd += ["-H", f"Range: bytes={byte_range[0]}-{byte_range[1] - 1}"]
        started = time.monotonic()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
        seconds = time.monotonic() - started
        if out[0] not in ("200", "206"):
            raise RuntimeError(f"curl download of {path}: HTTP {out[0]}")
        return seconds, int(out[1])

    def parallel_download_mbps(self, path, size, streams):
        """MB/s of `streams` curls downloading equal ranges of `path` at once."""
        bounds = [size * i // streams for i in range(streams + 1)]
        results = [None] * streams

        def one(i):
            results[i] = self.curl_download(path, (bounds[i], bounds[i + 1]))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.monotonic() - started
        if any(r is None for r in results) or sum(r[1] for r in results) != size:
            raise RuntimeError("a parallel curl download failed")
        return size / seconds / 1e6

    def upload_session_seconds(self, pieces, dst):
        """One upload session over one connection, as a single-stream client does it:
        upload_session/start with the first piece, append_v2 with each next one, finish.
        (Two curl processes: the first answers the session id the others need.)"""
        started = time.monotonic()
        out = subprocess.run(self._curl_base("files/upload_session/start") + [
            "-H", "Content-Type: application/octet-stream", "-H", 'Dropbox-API-Arg: {"close": false}',
            "-T", pieces[0]], check=True, capture_output=True, text=True).stdout
        session = json.loads(out)["session_id"]
        offset = os.path.getsize(pieces[0])
        cmd = ["curl"]
        for piece in pieces[1:]:
            arg = {"cursor": {"session_id": session, "offset": offset}, "close": False}
            cmd += self._curl_request("files/upload_session/append_v2") + [
                "-H", "Content-Type: application/octet-stream", "-H", "Dropbox-API-Arg: " + json.dumps(arg),
                "-T", piece, "-o", "/dev/null", "-w", "%{http_code}\\n", "--next"]
            offset += os.path.getsize(piece)
        arg = {"cursor": {"session_id": session, "offset": offset}, "commit": {"path": dst, "mode": "add"}}
        cmd += self._curl_request("files/upload_session/finish") + [
            "-H", "Content-Type: application/octet-stream", "-H", "Dropbox-API-Arg: " + json.dumps(arg),
            "--data-binary", "", "-o", "/dev/null", "-w", "%{http_code}\\n"]
        codes = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
        seconds = time.monotonic() - started
        if any(code != "200" for code in codes):
            raise RuntimeError(f"curl upload session: HTTP {codes}")
        return seconds

    def parallel_upload_seconds(self, pieces, dst_folder):
        """Every piece uploaded at once, one files/upload per connection (concurrent uploads)."""
        procs = []
        started = time.monotonic()
        for i, piece in enumerate(pieces):
            arg = {"path": f"{dst_folder}/piece-{i}", "mode": "add"}
            procs.append(subprocess.Popen(self._curl_base("files/upload") + [
                "-H", "Content-Type: application/octet-stream", "-H", "Dropbox-API-Arg: " + json.dumps(arg),
                "-T", piece, "-o", "/dev/null", "-w", "%{http_code}"], stdout=subprocess.PIPE, text=True))
        codes = [p.communicate()[0] for p in procs]
        seconds = time.monotonic() - started
        if any(code != "200" for code in codes):
            raise RuntimeError(f"parallel curl upload: HTTP {codes}")
        return seconds

    # ----- kept-alive connections: small requests -----
    def connection(self, host):
        conn = http.client.HTTPSConnection(host, 443, context=self.context, timeout=300)
        conn.connect()
        return conn

    def _call(self, conn, route, headers, body=None):
        conn.request("POST", f"/2/{route}", body=body, headers={"Authorization": "Bearer " + self.token, **headers})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status not in (200, 206):
            raise RuntimeError(f"{route}: HTTP {resp.status} {data[:200]!r}")
        return data

    def _range(self, conn, path, start, length):
        return self._call(conn, "files/download", {"Dropbox-API-Arg": json.dumps({"path": path}),
                                                   "Range": f"bytes={start}-{start + length - 1}"})

    def first_bytes_ms(self, path, length=256 * 1024):
        """One round trip plus the first `length` bytes: a range request on a kept-alive connection."""
        conn = self.connection(CONTENT)
        try:
            self._range(conn, path, 0, 1)   # the connection's handshakes are behind us
            started = time.monotonic()
            data = self._range(conn, path, 0, length)
            assert len(data) == length
            return (time.monotonic() - started) * 1000
        finally:
            conn.close()

    def random_reads_per_second(self, path, threads, offsets, seconds, block=4096):
        """4 KiB range requests at the given offsets (a list per thread), one kept-alive
        connection per thread, for at most `seconds`."""
        counts = [0] * threads
        errors = []
        start_gate = threading.Barrier(threads + 1)

        def worker(i):
            try:
                conn = self.connection(CONTENT)
                self._range(conn, path, 0, 1)
            except Exception as err:  # noqa: BLE001 (reported below)
                errors.append(err)
                start_gate.wait()
                return
            start_gate.wait()
            deadline = time.monotonic() + seconds
            try:
                for offset in offsets[i]:
                    if time.monotonic() > deadline:
                        break
                    if len(self._range(conn, path, offset, block)) != block:
                        raise RuntimeError("short range read")
                    counts[i] += 1
            except Exception as err:  # noqa: BLE001
                errors.append(err)
            finally:
                conn.close()

        # The clock starts once every thread has its connection (the barrier).
        workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        start_gate.wait()
        started = time.monotonic()
        for w in workers:
            w.join()
        elapsed = time.monotonic() - started
        if errors:
            raise RuntimeError(f"random range reads failed: {errors[0]}")
        return sum(counts) / elapsed

    def list_seconds(self, path):
        """A recursive listing of `path` (list_folder + continue, 2000 a page) on one kept-alive
        connection: (seconds, pages)."""
        conn = self.connection(API)
        try:
            self._call(conn, "users/get_space_usage", {})
            json_header = {"Content-Type": "application/json"}
            started = time.monotonic()
            page = json.loads(self._call(conn, "files/list_folder", json_header,
                                         json.dumps({"path": path, "recursive": True, "limit": 2000})))
            pages = 1
            while page["has_more"]:
                page = json.loads(self._call(conn, "files/list_folder/continue", json_header,
                                             json.dumps({"cursor": page["cursor"]})))
                pages += 1
            return time.monotonic() - started, pages
        finally:
            conn.close()

    def one_listing_ms(self, folder):
        """One list_folder of `folder` (its first page) on a kept-alive connection."""
        conn = self.connection(API)
        try:
            self._call(conn, "users/get_space_usage", {})
            started = time.monotonic()
            self._call(conn, "files/list_folder", {"Content-Type": "application/json"},
                       json.dumps({"path": folder, "limit": 2000}))
            return (time.monotonic() - started) * 1000
        finally:
            conn.close()


# ----- local files -----
def read_mbps(path, buf=None):
    """Sequential read of a whole file with 1 MiB reads into one buffer (`buf`, or a new page-
    aligned one): (MB/s, bytes).

    The buffer is page aligned, as `cp` and `dd` have theirs. A malloc'd one (`bytearray`) starts
    16 bytes into a page when glibc maps it, and the kernel's copy of page-cache pages into a
    buffer 8 to 24 bytes past a page boundary runs at a third of its speed on this machine's CPUs
    (4 KiB aliasing): 2.3 against 8 GB/s from /dev/shm (scripts/bench-read-buffer; docs/
    BENCHMARKS.md "Warm re-reads: the reader's buffer and the pages' second access"). Whichever
    read happened to get such a buffer was slow, dbxfs's or the limit's."""
    if buf is None:
        buf = aligned_buffer(MIB)
    total = 0
    fd = os.open(path, os.O_RDONLY)
    started = time.monotonic()
    try:
        while True:
            n = os.readv(fd, [buf])
            if n == 0:
                break
            total += n
    finally:
        os.close(fd)
    return total / (time.monotonic() - started) / 1e6, total


def first_reread_limit_mbps(path):
    """The warm re-read's limit: the first read of a fresh /dev/shm copy of `path`, MB/s.

    A mount's warm re-read is the second access to each of the file's pages (the cold read was
    the first), and the kernel's page cache moves a page to its active list on its second access:
    for a file kept in 4 KiB pages, as FUSE files are on this kernel, that is 262,144 moves under
    the LRU lock per GiB, a third of the re-read's time. A file just written by `cp` to /dev/shm
    has its pages in the same state as the mount's after the cold read (referenced, inactive:
    /proc/kpageflags), so its first read pays the same and the two compare the file systems'
    paths alone. A /dev/shm file read over and over (already active) would read faster than any
    file re-read once, whatever the file system (docs/BENCHMARKS.md "Warm re-reads")."""
    copy = path + ".first-reread"
    subprocess.run(["cp", path, copy], check=True)
    try:
        return read_mbps(copy)[0]
    finally:
        os.unlink(copy)


def cp_seconds(src, dst):
    started = time.monotonic()
    subprocess.run(["cp", src, dst], check=True)
    return time.monotonic() - started


def aligned_buffer(size):
    """`size` bytes of page-aligned, already touched memory to read into."""
    buf = mmap.mmap(-1, size)
    buf.write(bytes(size))
    return buf
