"""The measured cases: each runs one workload on a fresh mount with an empty cache.

A case is a pair of functions: `run(bench, client, tag)` mounts the client on its own folder of
the account, does the work, waits until the server has it, checks it, and returns a Sample per
table row; `limit(bench, limits)` measures the same work done by a plain client (direct.py) and
fills `limits` row by row (what it measured before a failure still counts). Time runs
from the first command of the workload to the moment the client is done (for writes: the server
has everything, see clients.py); CPU and peak RSS are the client daemon's.
"""

import hashlib
import os
import random
import shutil
import subprocess
import threading
import time
from contextlib import contextmanager

from .direct import cp_seconds, first_reread_limit_mbps, read_mbps
from .report import Limit, Sample
from .server import LIST_ROUTES, UPLOAD_PREFIXES

GIB = 1 << 30


def count(calls, routes=None, prefixes=()):
    """Calls to `routes` or to routes starting with one of `prefixes` (every call if neither)."""
    if routes is None and not prefixes:
        return sum(calls.values())
    return sum(n for route, n in calls.items()
               if (routes and route in routes) or any(route.startswith(p) for p in prefixes))


class Bench:
    """What every case needs: the server, the plain clients, the local data, the options."""

    def __init__(self, server, direct, fixtures, disk_dir, options, log):
        self.server, self.direct, self.data, self.disk_dir = server, direct, fixtures, disk_dir
        self.options, self.log = options, log
        self.running = []   # mounted clients, stopped on any exit
        self.wan = False    # set per profile: the parallel curl limits are measured only there

    @contextmanager
    def fresh_mount(self, client, root, tag):
        """`client` mounted on `root` with an empty cache directory (on the disk), counters zeroed
        just before the mount; unmounted and its cache removed afterwards."""
        cache = os.path.join(self.disk_dir, "cache")
        mountpoint = os.path.join(self.disk_dir, "mnt")
        shutil.rmtree(cache, ignore_errors=True)
        os.makedirs(mountpoint, exist_ok=True)
        self.server.begin()
        mounted = client.mount(root, mountpoint, cache, os.path.join(self.disk_dir, "logs", f"{tag}.log"))
        self.running.append(mounted)
        try:
            yield mounted
        finally:
            self.running.remove(mounted)
            mounted.stop()
            shutil.rmtree(cache, ignore_errors=True)

    @contextmanager
    def run_folder(self, tag, template=None):
        """A folder of the account for one run (empty, or holding a copy of `template` as
        `tree`), deleted afterwards with the bytes it held."""
        root = "/runs/" + tag
        self.server.make_folder(root)
        if template:
            self.server.copy(template, root + "/tree")
        try:
            yield root
        finally:
            self.server.remove(root)


def measured(mounted):
    """(CPU seconds so far, a function giving those spent since)."""
    start = mounted.cpu()
    return lambda: mounted.cpu() - start


# ----- reads -----
def run_read(bench, client, tag):
    size = bench.data.size
    with bench.fresh_mount(client, "/read", tag) as m:
        path = os.path.join(m.path, "big.bin")
        os.stat(path)
        cpu = measured(m)
        cold, n = read_mbps(path)
        cold_cpu = cpu()
        warm, n2 = read_mbps(path)
        warm_cpu = cpu() - cold_cpu
        calls = bench.server.calls()
        if n != size or n2 != size or sha256_of(path) != bench.data.big_sha256:
            raise RuntimeError(f"{client.name} read back different bytes")
        rss = m.peak_rss_mib()
    downloads = count(calls, ("files/download",))
    return {"cold_read": Sample(cold, cold_cpu * GIB / size, rss, downloads, count(calls)),
            "warm_read": Sample(warm, warm_cpu * GIB / size, rss)}


def limit_read(bench, limits):
    size = bench.data.size
    limits["warm_read"] = Limit(first_reread_limit_mbps(bench.data.big))
    seconds, n = bench.direct.curl_download("/read/big.bin")
    if n != size:
        raise RuntimeError(f"curl downloaded {n} bytes of {size}")
    text = ""
    if bench.wan:
        best = max((bench.direct.parallel_download_mbps("/read/big.bin", size, streams), streams)
                   for streams in (4, 8, 16))
        text = f"parallel curl, best of 4/8/16 connections: {best[0]:.0f} MB/s with {best[1]}"
    limits["cold_read"] = Limit(size / seconds / 1e6, text)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def run_ttfb(bench, client, tag):
    with bench.fresh_mount(client, "/read", tag) as m:
        path = os.path.join(m.path, "big.bin")
        os.stat(path)
        cpu = measured(m)
        started = time.monotonic()
        with open(path, "rb", buffering=0) as f:
            first = f.read(1)
        ms = (time.monotonic() - started) * 1000
        with open(bench.data.big, "rb") as f:
            if f.read(1) != first:
                raise RuntimeError(f"{client.name}: wrong first byte")
        return {"ttfb": Sample(ms, cpu(), m.peak_rss_mib(), total_calls=count(bench.server.calls()))}


def limit_ttfb(bench, limits):
    limits["ttfb"] = Limit(bench.direct.first_bytes_ms("/read/big.bin"))


def run_random(bench, client, tag):
    opts = bench.options
    size = bench.data.size
    with bench.fresh_mount(client, "/read", tag) as m:
        path = os.path.join(m.path, "big.bin")
        os.stat(path)
        counts = [0] * opts.random_threads
        errors = []
        gate = threading.Barrier(opts.random_threads + 1)
        with open(bench.data.big, "rb") as f:
            reference = {}   # a few offsets checked afterwards
            for i in range(8):
                offset = random.Random(i).randrange(size // 4096) * 4096
                f.seek(offset)
                reference[offset] = f.read(4096)

        def reader(i):
            fd = os.open(path, os.O_RDONLY)
            try:
                gate.wait()
                deadline = time.monotonic() + opts.random_seconds
                for offset in random_offsets(i, size, opts):
                    if time.monotonic() > deadline:
                        break
                    if len(os.pread(fd, 4096, offset)) != 4096:
                        raise RuntimeError("short read")
                    counts[i] += 1
            except Exception as err:  # noqa: BLE001 (reported below)
                errors.append(err)
            finally:
                os.close(fd)

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(opts.random_threads)]
        for t in threads:
            t.start()
        cpu = measured(m)
        gate.wait()
        started = time.monotonic()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        used = cpu()
        calls = bench.server.calls()
        if errors:
            raise RuntimeError(f"{client.name}: random read failed: {errors[0]}")
        fd = os.open(path, os.O_RDONLY)
        try:
            if any(os.pread(fd, 4096, offset) != data for offset, data in reference.items()):
                raise RuntimeError(f"{client.name}: random reads gave different bytes")
        finally:
            os.close(fd)
        return {"random": Sample(sum(counts) / elapsed, used, m.peak_rss_mib(),
                                 count(calls, ("files/download",)), count(calls))}


def random_offsets(thread, size, opts):
    """The 4 KiB-aligned offsets thread `thread` reads: its share of --random-reads, the same for
    both clients and the limit. A fixed count, not a fixed time: once a client has cached the
    whole file every read is a page-cache hit, so a long enough run would measure nothing."""
    rng = random.Random(1000 + thread)
    share = -(-opts.random_reads // opts.random_threads)
    return [rng.randrange(size // 4096) * 4096 for _ in range(share)]


def limit_random(bench, limits):
    opts = bench.options
    limits["random"] = Limit(bench.direct.random_reads_per_second(
        "/read/big.bin", opts.random_threads, [random_offsets(i, bench.data.size, opts)
                                               for i in range(opts.random_threads)], opts.random_seconds))


# ----- writes -----
def run_write(bench, client, tag):
    size = bench.data.size
    with bench.run_folder(tag) as root, bench.fresh_mount(client, root, tag) as m:
        def on_server():
            meta = bench.server.metadata(root + "/big.bin")
            return meta is not None and meta["size"] == size and meta["content_hash"] == bench.data.big_content_hash

        cpu = measured(m)
        started = time.monotonic()
        subprocess.run(["cp", bench.data.big, os.path.join(m.path, "big.bin")], check=True)
        cp_done = time.monotonic()
        done = m.wait_uploaded(on_server, bench.options.upload_timeout)
        used = cpu()
        calls = bench.server.calls()
        rss = m.peak_rss_mib()
    uploads = count(calls, prefixes=UPLOAD_PREFIXES)
    return {"write": Sample(size / (done - started) / 1e6, used * GIB / size, rss, uploads, count(calls)),
            "write_cp": Sample(cp_done - started, rss=rss)}


def limit_write(bench, limits):
    size = bench.data.size
    disk_copy = os.path.join(bench.disk_dir, "cp-target.bin")
    try:
        cp = cp_seconds(bench.data.big, disk_copy)
    finally:
        os.unlink(disk_copy)
    limits["write_cp"] = Limit(cp, f"1.2× = {1.2 * cp:.2f} s")
    with bench.run_folder("limit-write") as root:
        seconds = bench.direct.upload_session_seconds(bench.data.pieces, root + "/big.bin")
        meta = bench.server.metadata(root + "/big.bin")
        if not meta or meta["content_hash"] != bench.data.big_content_hash:
            raise RuntimeError("curl's upload is not on the server")
    text = ""
    if bench.wan:
        with bench.run_folder("limit-write-parallel") as root:
            parallel = bench.direct.parallel_upload_seconds(bench.data.pieces, root)
        text = f"{len(bench.data.pieces)} concurrent curl uploads: {size / parallel / 1e6:.0f} MB/s"
    limits["write"] = Limit(size / seconds / 1e6, text)


SLOW_WRITE_RATE = 32 * 1024 * 1024   # bytes per second


def run_slow_write(bench, client, tag):
    """A writer slower than the network (a recording, a download, a backup written as it is made):
    a quarter of SIZE written at 32 MiB/s, and the seconds from its close until it is on the server.
    A client that uploads only after close makes the user wait the whole upload then."""
    size, piece = bench.data.slow_size, 1 << 20
    with bench.run_folder(tag) as root, bench.fresh_mount(client, root, tag) as m:
        def on_server():
            meta = bench.server.metadata(root + "/slow.bin")
            return meta is not None and meta["size"] == size and meta["content_hash"] == bench.data.slow_content_hash

        cpu = measured(m)
        fd = os.open(os.path.join(m.path, "slow.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            with open(bench.data.big, "rb") as src:
                started = time.monotonic()
                for i in range(size // piece):
                    os.write(fd, src.read(piece))
                    time.sleep(max(0.0, started + (i + 1) * piece / SLOW_WRITE_RATE - time.monotonic()))
        finally:
            os.close(fd)
        closed = time.monotonic()
        done = m.wait_uploaded(on_server, bench.options.upload_timeout)
        used = cpu()
        calls = bench.server.calls()
        rss = m.peak_rss_mib()
    return {"slow_write": Sample(done - closed, used * GIB / size, rss, count(calls, prefixes=UPLOAD_PREFIXES),
                                 count(calls))}


def run_small_files(bench, client, tag):
    count_files = bench.options.small_files

    def on_server(root):
        tree = bench.server.tree(root)
        return sum(1 for rel, e in tree.items() if rel.startswith("small/") and e.get("size") == 4096) == count_files

    return until_on_server(bench, client, tag, "small_files", None, lambda mnt: ["cp", "-r", bench.data.small_dir, mnt],
                           on_server, lambda calls: count(calls, prefixes=UPLOAD_PREFIXES))


def until_on_server(bench, client, tag, row, template, command, on_server_check, counted=count):
    """Runs `command(mountpoint)` in a fresh run folder (holding `template` as `tree`) and waits
    until the server has the result: seconds, and the calls `counted` picks. A client that is not
    done within --upload-timeout (the command included: rclone's `git clone` can hang in a page
    fault) gives that bound, marked as such; the command is then killed, and the unmount that
    follows ends whatever it still waits for."""
    timeout = bench.options.upload_timeout
    proc = None
    try:
        with bench.run_folder(tag, template) as root, bench.fresh_mount(client, root, tag) as m:
            cpu = measured(m)
            started = time.monotonic()
            proc = subprocess.Popen(command(m.path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            timed_out = False
            try:
                _, err = proc.communicate(timeout=timeout)
                if proc.returncode != 0:
                    raise RuntimeError(f"{client.name}: {command('MNT')[0]} failed: {err.strip()[-300:]}")
                done = m.wait_uploaded(lambda: on_server_check(root), max(1.0, timeout - (time.monotonic() - started)))
            except (TimeoutError, subprocess.TimeoutExpired):
                proc.kill()
                done, timed_out = time.monotonic(), True
            used = cpu()
            calls = bench.server.calls()
            return {row: Sample(done - started, used, m.peak_rss_mib(), counted(calls), count(calls), timed_out)}
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                bench.log(f"    {command('MNT')[0]} (pid {proc.pid}) did not end after SIGKILL")


# ----- listings -----
def run_ls(bench, client, tag):
    with bench.fresh_mount(client, "/lsr", tag) as m:
        cpu = measured(m)
        started = time.monotonic()
        out = subprocess.run(["ls", "-lR", m.path], check=True, capture_output=True, text=True).stdout
        seconds = time.monotonic() - started
        used = cpu()
        calls = bench.server.calls()
        files = sum(1 for line in out.splitlines() if line.startswith("-"))
        if files != bench.data.ls_files // 100 * 100:
            raise RuntimeError(f"{client.name}: ls -lR listed {files} files")
        return {"ls": Sample(seconds, used, m.peak_rss_mib(), count(calls, LIST_ROUTES), count(calls))}


def limit_ls(bench, limits):
    seconds, pages = bench.direct.list_seconds("/lsr")
    limits["ls"] = Limit(seconds, f"{pages} pages")


def run_first_access(bench, client, tag):
    with bench.fresh_mount(client, "/deep", tag) as m:
        cpu = measured(m)
        started = time.monotonic()
        st = os.stat(os.path.join(m.path, bench.data.deep_target))
        ms = (time.monotonic() - started) * 1000
        if st.st_size != len("found\n"):
            raise RuntimeError(f"{client.name}: the target has the wrong size")
        used = cpu()
        calls = count(bench.server.calls())
        return {"first_access": Sample(ms, used, m.peak_rss_mib(), calls, calls)}


def limit_first_access(bench, limits):
    folder = "/deep/" + os.path.dirname(bench.data.deep_target)
    limits["first_access"] = Limit(bench.direct.one_listing_ms(folder))


# ----- namespace operations -----
def run_rm(bench, client, tag):
    return until_on_server(bench, client, tag, "rm", "/tpl/rm", lambda mnt: ["rm", "-rf", os.path.join(mnt, "tree")],
                          lambda root: bench.server.metadata(root + "/tree") is None)


def run_tar(bench, client, tag):
    members = bench.data.tar_members

    def on_server(root):
        tree = bench.server.tree(root)
        return all(tree.get(name, {}).get("size") == size for name, size in members.items())

    return until_on_server(bench, client, tag, "tar", None,
                          lambda mnt: ["tar", "-x", "--no-same-owner", "-f", bench.data.tarball, "-C", mnt], on_server)


def run_git(bench, client, tag):
    files = bench.data.repo_files

    def on_server(root):
        tree = bench.server.tree(root)
        return tree.get("repo/.git/HEAD") is not None and \
            all(tree.get("repo/" + name, {}).get("size") == size for name, size in files.items())

    return until_on_server(bench, client, tag, "git", None,
                          lambda mnt: ["git", "clone", "-q", bench.data.repo, os.path.join(mnt, "repo")], on_server)


# name -> (run, limit or None); the order is the order they run in
CASES = {
    "read": (run_read, limit_read),
    "ttfb": (run_ttfb, limit_ttfb),
    "write": (run_write, limit_write),
    "slow": (run_slow_write, None),
    "small": (run_small_files, None),
    "ls": (run_ls, limit_ls),
    "random": (run_random, limit_random),
    "rm": (run_rm, None),
    "tar": (run_tar, None),
    "git": (run_git, None),
    "first": (run_first_access, limit_first_access),
}
