"""FUSE passthrough, end to end (root only, Linux >= 6.9): on a read-only mount, once a file has
been read whole and its content hash matched, dbxfs keeps it whole in the cache directory and
later opens are served by the kernel from that copy. Checked here: the bytes (read, head/tail,
mmap) are right, a change made elsewhere reaches the next open once the earlier readers are
closed. Writable mounts (no whole copies; passthrough for writers) are test_passthrough_writes.py.
Mounts are always unmounted (mount_support.Mount)."""

import hashlib
import mmap
import os
import re
import subprocess

import pytest

from mounting import wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="FUSE passthrough needs root")

PASSTHROUGH_OPEN = re.compile(r"open of inode \d+: passthrough \(backing id \d+\)")


def read_whole_and_wait_for_the_copy(m, path, data):
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(data).digest()   # cold, verified
    wait_until(lambda: "kept whole" in m.read_log(), interval=0.05)


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
        wait_until(lambda: os.stat(path).st_size == len(b"new content"), interval=0.05)
        with open(path, "rb") as meanwhile:
            assert meanwhile.read(4096) == data[:4096]
    # Once it is closed, the next open reads the new revision.
    wait_until(lambda: path.read_bytes() == b"new content", interval=0.05)

