"""FUSE passthrough, end to end (root only, Linux >= 6.9): on a read-only mount, once a file has
been read whole and its content hash matched, dbxfs keeps it whole in the cache directory and
later opens are served by the kernel from that copy. Checked here: the bytes (read, head/tail,
mmap) are right, a change made elsewhere reaches the next open once the earlier readers are
closed, and on a writable mount a writer beside a cached reader still works (passthrough writes
have their own tests: test_passthrough_writes.py).
Mounts are always unmounted (mount_support.Mount)."""

import hashlib
import mmap
import os
import re
import subprocess
import time

import pytest

from mount_support import TOKEN, Emulator, Mount, dropbox_args, dropbox_env

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="FUSE passthrough needs root")

PASSTHROUGH_OPEN = re.compile(r"open of inode \d+: passthrough \(backing id \d+\)")


@pytest.fixture
def pt(dbxfs_binary, tmp_path):
    """An emulator, and a function mounting it with extra options (unmounted at the end)."""
    emu = Emulator(tmp_path / "emulator", token=TOKEN).start()
    mounts = []

    def mount(*extra):
        mnt = tmp_path / f"mnt{len(mounts)}"
        mnt.mkdir()
        m = Mount(dbxfs_binary, mnt, dropbox_args(emu, tmp_path / f"cache{len(mounts)}", *extra), env=dropbox_env())
        mounts.append(m)
        return m.start(), mnt

    yield emu, mount
    for m in mounts:
        m.stop()
    emu.stop()


def wait_for(condition, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def read_whole_and_wait_for_the_copy(m, path, data):
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(data).digest()   # cold, verified
    assert wait_for(lambda: "kept whole" in m.read_log()), m.read_log()[-2000:]


def test_a_read_only_mount_serves_a_verified_file_through_passthrough(pt):
    emu, mount = pt
    data = os.urandom((9 << 20) + 321)
    emu.upload("/big.bin", data)
    m, mnt = mount("-o", "ro")
    path = mnt / "big.bin"
    read_whole_and_wait_for_the_copy(m, path, data)
    if "passthrough unavailable" in m.read_log():
        pytest.skip("this kernel refused passthrough")

    with open(path, "rb") as reader:
        assert PASSTHROUGH_OPEN.search(m.read_log()), m.read_log()[-2000:]
        assert reader.read() == data
        with mmap.mmap(reader.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            assert mapped[:1000] == data[:1000] and mapped[-1000:] == data[-1000:]
        head = subprocess.run(["head", "-c", "4096", str(path)], check=True, capture_output=True).stdout
        tail = subprocess.run(["tail", "-c", "4096", str(path)], check=True, capture_output=True).stdout
        assert head == data[:4096] and tail == data[-4096:]
        assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(data).digest()

        # Changed elsewhere while a passthrough reader is open: opens made meanwhile read what it
        # reads (the kernel allows no other kind of open beside it), never an error.
        emu.upload("/big.bin", b"new content", mode="overwrite")
        assert wait_for(lambda: os.stat(path).st_size == len(b"new content")), m.read_log()[-2000:]
        with open(path, "rb") as meanwhile:
            assert meanwhile.read(4096) == data[:4096]
    # Once it is closed, the next open reads the new revision.
    assert wait_for(lambda: path.read_bytes() == b"new content"), m.read_log()[-2000:]


def test_a_writable_mount_keeps_no_whole_copies_and_writers_work_beside_cached_readers(pt):
    emu, mount = pt
    data = os.urandom(5 << 20)
    emu.upload("/log.bin", data)
    m, mnt = mount()
    path = mnt / "log.bin"
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(data).digest()
    time.sleep(0.5)
    with open(path, "rb") as reader:
        with open(path, "ab") as writer:
            writer.write(b"appended")
        assert reader.read(100) == data[:100]
    subprocess.run([m.binary, "sync", str(mnt)], check=True, capture_output=True, timeout=120)
    assert emu.download("/log.bin") == data + b"appended"
    # Whole copies are for read-only mounts; the append to a file only Dropbox has (its bytes
    # would need a download first) is served by dbxfs.
    assert "passthrough (backing id" not in m.read_log() and "kept whole" not in m.read_log()
