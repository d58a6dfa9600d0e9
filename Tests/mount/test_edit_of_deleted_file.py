"""Editing a file that another device deletes meanwhile (issue 13, smaller divergences): the
mount commits with `update(rev)` and strict_conflict, and Dropbox conflicts even when the file
was deleted (files.stone CommitInfo.strict_conflict), which the emulator now does. Decision
(docs/SEMANTICS.md, "Conflicts"): the edit wins over the delete, the file comes back under its
own name with our bytes, and no conflicted copy is made. The mount is unmounted in teardown."""

import subprocess
import time

import pytest

from mount_support import TOKEN, Emulator, mount_of


@pytest.fixture
def emu(tmp_path):
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "edit.txt").write_text("version 1\n")
    e = Emulator(tmp_path / "data", token=TOKEN, seed=str(seed)).start()
    e.config(longpoll_max_wait=5)
    yield e
    e.stop()


def test_an_edit_of_a_file_deleted_elsewhere_recreates_it(dbxfs_binary, emu, tmp_path):
    with mount_of(dbxfs_binary, emu, tmp_path) as m:
        mnt = tmp_path / "mnt"
        with open(mnt / "edit.txt", "r+") as f:
            assert f.read() == "version 1\n"
            f.seek(0)
            f.write("version 2, edited here\n")
            f.flush()
            emu.api("files/delete_v2", {"path": "/edit.txt"})
            time.sleep(1)   # the mount hears of the delete while the file is still open
        sync = subprocess.run([dbxfs_binary, "sync", "--timeout", "60", str(mnt)], capture_output=True, text=True,
                              timeout=120)
        assert sync.returncode == 0, sync.stderr + m.read_log()
        names = sorted(e["name"] for e in emu.listing(""))
        assert names == ["edit.txt"], names
        assert emu.download("/edit.txt") == b"version 2, edited here\n"
        assert (mnt / "edit.txt").read_text() == "version 2, edited here\n"
