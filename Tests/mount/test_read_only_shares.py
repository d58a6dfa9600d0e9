"""Read-only shared folders (issue 13, item 3): Dropbox marks everything inside one with
`sharing_info.read_only` and answers writes with 409 no_write_permission. The mount must show
them without write bits and refuse create, write, truncate, mkdir, rename and unlink at once
with EACCES, before anything is staged; an upload Dropbox refuses this way (the folder became
read-only after the file was written) is reported by `dbxfs sync` and `dbxfs status` with its
path, kept, not retried by itself, and uploaded once moved to a writable folder."""

import json
import os
import stat
import subprocess
import time

import pytest

from mount_support import TOKEN, Emulator, mount_of


@pytest.fixture
def emu(tmp_path):
    seed = tmp_path / "seed"
    (seed / "shared" / "sub").mkdir(parents=True)
    (seed / "shared" / "f.txt").write_text("read me\n")
    (seed / "mine").mkdir()
    (seed / "mine" / "m.txt").write_text("mine\n")
    e = Emulator(tmp_path / "data", token=TOKEN, seed=str(seed)).start()
    e.config(longpoll_max_wait=5)
    e.share("/shared", read_only=True)
    e.share("/later", read_only=False)
    yield e
    e.stop()


@pytest.fixture
def mnt(dbxfs_binary, emu, tmp_path):
    with mount_of(dbxfs_binary, emu, tmp_path) as m:
        yield m


def status(binary, mountpoint):
    out = subprocess.run([binary, "status", "--json", mountpoint], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["mounts"][0]


def test_read_only_folder_and_files_show_without_write_bits(mnt):
    for name in ("shared", "shared/f.txt", "shared/sub"):
        mode = stat.S_IMODE(os.stat(os.path.join(mnt.path, name)).st_mode)
        assert mode & 0o222 == 0, (name, oct(mode), mnt.read_log())
    assert stat.S_IMODE(os.stat(os.path.join(mnt.path, "mine")).st_mode) & 0o200
    with open(os.path.join(mnt.path, "shared", "f.txt")) as f:
        assert f.read() == "read me\n"


def test_every_write_is_refused_at_once_with_eacces(dbxfs_binary, mnt, emu):
    shared, mine = os.path.join(mnt.path, "shared"), os.path.join(mnt.path, "mine")
    refused = [
        lambda: open(os.path.join(shared, "new.txt"), "w"),
        lambda: open(os.path.join(shared, "f.txt"), "a"),
        lambda: os.truncate(os.path.join(shared, "f.txt"), 0),
        lambda: os.mkdir(os.path.join(shared, "dir")),
        lambda: os.unlink(os.path.join(shared, "f.txt")),
        lambda: os.rmdir(os.path.join(shared, "sub")),
        lambda: os.rename(os.path.join(shared, "f.txt"), os.path.join(mine, "f.txt")),
        lambda: os.rename(os.path.join(mine, "m.txt"), os.path.join(shared, "m.txt")),
    ]
    for attempt in refused:
        with pytest.raises(PermissionError):
            attempt()
    # Nothing was staged: no upload pending, and Dropbox is unchanged.
    assert status(dbxfs_binary, mnt.path)["uploads"]["pending_files"] == 0
    listed = sorted(e["name"] for e in emu.listing("/shared"))
    assert listed == ["f.txt", "sub"]
    assert os.path.exists(os.path.join(mine, "m.txt"))


def test_an_upload_refused_by_dropbox_is_reported_kept_and_not_retried(dbxfs_binary, mnt, emu):
    later = os.path.join(mnt.path, "later")
    assert os.path.isdir(later), mnt.read_log()
    # Every request waits 2 s, so the folder turns read-only before the upload reaches Dropbox.
    emu.config(latency_ms=2000)
    with open(os.path.join(later, "doc.txt"), "w") as f:
        f.write("my work\n")
    emu.share("/later", read_only=True)
    time.sleep(3)
    emu.config(latency_ms=0)
    sync = subprocess.run([dbxfs_binary, "sync", "--timeout", "60", mnt.path], capture_output=True, text=True, timeout=120)
    assert sync.returncode != 0
    assert "/later/doc.txt" in sync.stderr and "write permission" in sync.stderr, sync.stderr
    pending = status(dbxfs_binary, mnt.path)["uploads"]["pending"]
    assert [(p["path"], p["state"]) for p in pending] == [("/later/doc.txt", "refused")], pending
    # The bytes are kept: the file still reads as written.
    with open(os.path.join(later, "doc.txt")) as f:
        assert f.read() == "my work\n"
    uploads = emu.stats()["requests"].get("files/upload", 0)
    time.sleep(2)
    assert emu.stats()["requests"].get("files/upload", 0) == uploads
    # Moved to a writable folder, it uploads.
    os.rename(os.path.join(later, "doc.txt"), os.path.join(mnt.path, "mine", "doc.txt"))
    sync = subprocess.run([dbxfs_binary, "sync", "--timeout", "60", mnt.path], capture_output=True, text=True, timeout=120)
    assert sync.returncode == 0, sync.stderr + mnt.read_log()
    assert emu.download("/mine/doc.txt") == b"my work\n"
