"""Writes through a shared mapping mixed with write(2), truncate and msync on one open file, on a
mount where every write goes through dbxfs (--no-passthrough): the kernel then sends the
mapping's writeback, the msync's fsync (a commit) and the program's truncates at once, and the
file's size and bytes must be what the program made after each step. xfstests' fsx with
mappings found three races here (docs/VFSCACHE.md, "Change feed and persistence"); this is the
same mix, checked against an in-memory model after every step, then on Dropbox and on a fresh
mount. It did not catch those races on the code before their fixes (Python is too slow between
an msync and the next truncate for the windows it had, and fsx needed thousands of steps); the
unit tests in Tests/VFSCacheTests/VFSConcurrentWriteTests.swift do. This one keeps the mix
itself honest on the real kernel. Mounts are always unmounted (mount_support.Mount)."""

import hashlib
import mmap
import os
import random
import subprocess

import pytest

from mount_support import TOKEN, Emulator, Mount, dropbox_args, dropbox_env

PAGE = mmap.PAGESIZE
STEPS = int(os.environ.get("DBXFS_MAPPED_STEPS", "1000"))


def mapped_write(fd, offset, data):
    start = offset - offset % PAGE
    with mmap.mmap(fd, offset - start + len(data), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                   offset=start) as m:
        m[offset - start:offset - start + len(data)] = data
        m.flush()   # msync(MS_SYNC): an fsync of the range, so a commit on this mount


@pytest.mark.parametrize("seed", [1, 2])
def test_mapped_writes_truncates_and_msync_keep_size_and_bytes(dbxfs_binary, tmp_path, seed):
    rng = random.Random(seed)
    emu = Emulator(tmp_path / "emulator", token=TOKEN).start()
    try:
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        with Mount(dbxfs_binary, mnt, dropbox_args(emu, tmp_path / "cache", "--no-passthrough"), env=dropbox_env(),
                   log_path=tmp_path / "mnt.log") as m:
            model = bytearray()
            fd = os.open(mnt / "f.bin", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                for step in range(STEPS):
                    kind = rng.choice(["mapwrite", "mapwrite", "write", "truncate", "truncate"])
                    if kind == "mapwrite" and len(model) > 0:
                        offset = rng.randrange(len(model))
                        data = rng.randbytes(rng.randint(1, min(20_000, len(model) - offset)))
                        mapped_write(fd, offset, data)
                        model[offset:offset + len(data)] = data
                    elif kind == "truncate":
                        size = rng.randrange(200_000)
                        os.ftruncate(fd, size)
                        model = model[:size] + bytes(max(0, size - len(model)))
                    else:
                        offset = rng.randrange(len(model) + 20_000)
                        data = rng.randbytes(rng.randint(1, 20_000))
                        os.pwrite(fd, data, offset)
                        if offset > len(model):
                            model += bytes(offset - len(model))
                        model[offset:offset + len(data)] = data
                    size = os.fstat(fd).st_size
                    assert size == len(model), f"step {step} ({kind}): size {size}, the program made {len(model)}"
                got = os.pread(fd, len(model) + 1, 0)
                assert hashlib.sha256(got).hexdigest() == hashlib.sha256(model).hexdigest(), "bytes differ before close"
            finally:
                os.close(fd)
            result = subprocess.run([m.binary, "sync", str(mnt)], capture_output=True, text=True, timeout=300)
            assert result.returncode == 0, result.stdout + result.stderr
        assert emu.download("/f.bin") == bytes(model)
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        with Mount(dbxfs_binary, fresh, dropbox_args(emu, tmp_path / "fresh-cache"), env=dropbox_env()):
            assert (fresh / "f.bin").read_bytes() == bytes(model)
    finally:
        emu.stop()
