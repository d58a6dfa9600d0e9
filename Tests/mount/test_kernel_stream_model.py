"""Model-checked kernel streams (docs/WRITEBACK.md, "Uploading while the kernel writes"): slow
writers the kernel serves by itself (passthrough) grow large files at 16 MiB/s and, at random
moments, go back and patch bytes written long before (already sent to Dropbox), or cut the file
and write on, as databases, zip and tar writers and linkers do. Whatever was sent before the
close, what lands must be each file's bytes at close. Two processes write at once; each round is
checked on the mount, on the emulator after `dbxfs sync`, and again after a remount; a fresh
mount at the end. Root only (passthrough). Seeds: $DBXFS_STREAM_SEEDS (default "1"), about 45 s
each. Mounts are always unmounted (mount_support.Mount)."""

import hashlib
import multiprocessing
import os
import random
import subprocess
import time
from pathlib import Path

import pytest

from mount_support import TOKEN, Emulator, Mount, dropbox_args, dropbox_env
from mounting import wait_until
from emulator import content_hash

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="FUSE passthrough needs root")

SEEDS = [int(s) for s in os.environ.get("DBXFS_STREAM_SEEDS", "1").split(",")]
RATE = 16 << 20          # bytes a second: slower than the 1 s bytes take to settle
PIECE = 2 << 20
ROUNDS = 3


def slow_writer(args):
    """Writes `name` under `root` (O_TRUNC) slowly, patching and cutting at random; returns the
    name, the SHA-256 of its bytes at close and their Dropbox content hash."""
    root, name, seed = args
    rng = random.Random(seed)
    size = rng.randrange(40 << 20, 64 << 20)
    planned = rng.randbytes(size)
    data = bytearray(planned)
    fd = os.open(os.path.join(root, name), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        written = 0
        while written < size:
            n = min(PIECE, size - written)
            os.pwrite(fd, data[written:written + n], written)
            written += n
            time.sleep(n / RATE)
            roll = rng.random()
            if written > (36 << 20) and roll < 0.10:
                # Patch the first chunk (16 MiB), written long ago: by now on Dropbox, in the session.
                offset = rng.randrange(0, 8 << 20)
                patch = rng.randbytes(rng.randint(1, 64))
                os.pwrite(fd, patch, offset)
                data[offset:offset + len(patch)] = patch
            elif written > (36 << 20) and roll < 0.12:
                # Cut the file and write on from there (the planned bytes again).
                cut = rng.randrange(written // 2, written)
                os.ftruncate(fd, cut)
                data[cut:] = planned[cut:]
                written = cut
    finally:
        os.close(fd)
    return name, hashlib.sha256(bytes(data)).hexdigest(), content_hash(bytes(data))


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


def mounted(dbxfs_binary, emu, base, name, cache):
    mnt = base / name
    mnt.mkdir()
    m = Mount(dbxfs_binary, mnt, dropbox_args(emu, base / cache, "--cache-size", "2G"), env=dropbox_env(),
              log_path=base / f"{name}.log")
    m.start()
    return m, mnt


def check(model, read_hash, where, log):
    for name, digest in sorted(model.items()):
        actual = read_hash(name)
        assert actual == digest, f"{where}: /{name} has {actual}, expected {digest}\n{log()[-3000:]}"


@pytest.fixture
def emu(tmp_path):
    """An emulator of its own: the session's is compared with its seed tree by other tests."""
    emulator = Emulator(tmp_path / "emulator", token=TOKEN).start()
    yield emulator
    emulator.stop()


@pytest.mark.parametrize("seed", SEEDS)
def test_slow_writers_that_go_back_land_with_their_bytes_at_close(dbxfs_binary, emu, tmp_path, seed):
    rng = random.Random(seed)
    model = {}   # name -> sha256 of its bytes at its last close
    versions = {}   # name -> the content hashes of every version closed
    streamed = dropped = 0
    names = [f"s{seed}-{i}.bin" for i in range(6)]
    m, mnt = mounted(dbxfs_binary, emu, tmp_path, "mnt0", "cache")
    try:
        for round_ in range(ROUNDS):
            # Two processes, two files each (new names or ones written before: O_TRUNC).
            jobs = [(str(mnt), rng.choice(names), rng.randrange(1 << 30)) for _ in range(4)]
            jobs = list({job[1]: job for job in jobs}.values())   # one writer per file at a time
            with multiprocessing.get_context("fork").Pool(2) as pool:
                for name, digest, dropbox_hash in pool.map(slow_writer, jobs):
                    model[name] = digest
                    versions.setdefault(name, set()).add(dropbox_hash)
            check(model, lambda n: sha256_of(mnt / n), f"round {round_}, the mount", m.read_log)
            result = subprocess.run([m.binary, "sync", str(mnt)], capture_output=True, text=True, timeout=300)
            assert result.returncode == 0, result.stdout + result.stderr + m.read_log()[-3000:]
            check(model, lambda n: hashlib.sha256(emu.download("/" + n)).hexdigest(),
                  f"round {round_}, the emulator after sync", m.read_log)
            listed = [e["name"] for e in emu.listing("")]
            assert not [n for n in listed if "conflicted" in n], listed
            # No revision ever held other bytes than a version closed (Dropbox would commit a
            # session of stale chunks as it is: a later upload replacing it is too late).
            for name in model:
                revisions = emu.api("files/list_revisions", {"path": "/" + name, "limit": 100})["entries"]
                stray = [r["rev"] for r in revisions if r["content_hash"] not in versions[name]]
                assert not stray, f"/{name}: revisions {stray} hold bytes never closed\n{m.read_log()[-3000:]}"
            log = Path(m.log_path).read_text(errors="replace")
            streamed += log.count("while the kernel writes it")
            dropped += log.count("changed before its close; sending it again") + log.count("was cut below what was sent")
            # Remount on the same cache: the mount shows exactly Dropbox.
            m.stop()
            m, mnt = mounted(dbxfs_binary, emu, tmp_path, f"mnt{round_ + 1}", "cache")
            wait_until(lambda: all(os.path.exists(mnt / n) for n in model), interval=0.1)
            check(model, lambda n: sha256_of(mnt / n), f"round {round_}, the mount after a remount", m.read_log)
    finally:
        m.stop()
    fresh, fresh_mnt = mounted(dbxfs_binary, emu, tmp_path, "fresh", "fresh-cache")
    try:
        check(model, lambda n: sha256_of(fresh_mnt / n), "a fresh mount", fresh.read_log)
    finally:
        fresh.stop()
    # The writers were slow enough to be streamed, and went back often enough to be caught.
    assert streamed > 0 and dropped > 0, (streamed, dropped)
