"""Fixtures for the mount tests: the built `dbxfs` binary, the emulator (Tests/support/emulator.py,
seeded from a generated tree) and a fresh mountpoint; the helpers live in mount_support.py.
Everything here skips cleanly when /dev/fuse or fusermount3 is missing.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mount_support import (EMULATOR, REPO, TOKEN, Emulator, Mount, dropbox_args, dropbox_env,  # noqa: E402
                           force_unmount, write_seed)


def pytest_collection_modifyitems(config, items):
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        skip = pytest.mark.skip(reason="needs /dev/fuse and fusermount3")
        for item in items:
            if "Tests/mount" in str(item.fspath):
                item.add_marker(skip)


@pytest.fixture(scope="session")
def dbxfs_binary():
    """The dbxfs executable: $DBXFS_BIN, or the package's debug build. The build runs every time
    (a no-op when up to date, as after scripts/test's own build), so a stale binary is never tested."""
    if os.environ.get("DBXFS_BIN"):
        return os.environ["DBXFS_BIN"]
    subprocess.run(["swift", "build", "--product", "dbxfs"], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)
    bin_path = subprocess.run(["swift", "build", "--show-bin-path"], cwd=REPO, check=True,
                              capture_output=True, text=True).stdout.strip()
    return str(Path(bin_path) / "dbxfs")


@pytest.fixture(scope="session")
def seed_tree(tmp_path_factory):
    return write_seed(tmp_path_factory.mktemp("seed") / "tree")


@pytest.fixture(scope="session")
def emulator(tmp_path_factory, seed_tree):
    if not os.path.exists(EMULATOR):
        pytest.skip("scripts/dbx-emulator is not in the tree yet")
    emu = Emulator(tmp_path_factory.mktemp("emulator") / "data", token=TOKEN, seed=str(seed_tree)).start()
    yield emu
    emu.stop()


@pytest.fixture
def mountpoint(tmp_path):
    path = tmp_path / "mnt"
    path.mkdir()
    yield path
    force_unmount(str(path))


@pytest.fixture
def pt(dbxfs_binary, tmp_path):
    """For the FUSE passthrough tests: an emulator of its own, and a function mounting it with
    extra options (each mount its own cache directory unless `cache` names one to share), which
    returns (Mount, mountpoint). Everything is unmounted and stopped at the end."""
    emu = Emulator(tmp_path / "emulator", token=TOKEN).start()
    mounts = []

    def mount(*extra, cache=None):
        mnt = tmp_path / f"mnt{len(mounts)}"
        mnt.mkdir()
        cache_dir = tmp_path / (cache or f"cache{len(mounts)}")
        # A disk cache budget the disk surely has room for: a budget larger than the cache disk's
        # free space sends writers through the daemon, not passthrough (docs/SEMANTICS.md).
        m = Mount(dbxfs_binary, mnt, dropbox_args(emu, cache_dir, "--cache-size", "1G", *extra), env=dropbox_env(),
                  log_path=tmp_path / f"mnt{len(mounts)}.log")
        mounts.append(m)
        m.start()
        return m, mnt

    yield emu, mount
    for m in mounts:
        m.stop()
    emu.stop()
