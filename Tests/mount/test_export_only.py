"""Files Dropbox cannot download, only export (issue 13, item 2): Paper docs, Google Docs, `.web`
shortcuts. The emulator lists them with is_downloadable false and answers their download with
409 unsupported_file; the mount must show them as their export (read-only, with the export's
size from the first stat), and hide the ones that cannot be exported either, so cp -r, rsync,
tar and grep -r work on a folder that holds them. Mounts are unmounted in teardown."""

import errno
import os
import stat
import subprocess

import pytest

from mount_support import TOKEN, Emulator, mount_of

PAPER = "# Plan\n\n- write the tests\n- fix the client\n"
URL = '{"url": "https://example.com/"}'


@pytest.fixture
def emu(tmp_path):
    seed = tmp_path / "seed"
    (seed / "docs").mkdir(parents=True)
    (seed / "docs" / "a.txt").write_text("plain file\n")
    e = Emulator(tmp_path / "data", token=TOKEN, seed=str(seed)).start()
    e.config(longpoll_max_wait=5)
    e.export_only("/docs/Plan.paper", {"md": PAPER, "html": "<h1>Plan</h1>"}, export_as="md",
                  export_options=["md", "html"])
    e.export_only("/docs/Site.web", {"url": URL}, export_as="url")
    e.export_only("/docs/Odd.gdoc", {}, export_as=None, export_options=[])
    yield e
    e.stop()


@pytest.fixture
def mnt(dbxfs_binary, emu, tmp_path):
    with mount_of(dbxfs_binary, emu, tmp_path) as m:
        yield m


def test_sizes_are_the_exports_from_the_first_stat(mnt):
    docs = os.path.join(mnt.path, "docs")
    assert os.stat(os.path.join(docs, "Plan.paper")).st_size == len(PAPER), mnt.read_log()
    assert os.stat(os.path.join(docs, "Site.web")).st_size == len(URL)
    with open(os.path.join(docs, "Plan.paper")) as f:
        assert f.read() == PAPER


def test_non_exportable_files_are_hidden_with_a_log_line(mnt):
    assert sorted(os.listdir(os.path.join(mnt.path, "docs"))) == ["Plan.paper", "Site.web", "a.txt"]
    assert "Odd.gdoc" in mnt.read_log()


def test_cp_r_rsync_tar_and_grep_r_work_on_the_folder(mnt, tmp_path):
    docs = os.path.join(mnt.path, "docs")
    out = tmp_path / "out"
    cp = subprocess.run(["cp", "-r", docs, str(out)], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    assert (out / "Plan.paper").read_text() == PAPER and (out / "Site.web").read_text() == URL
    rsync = subprocess.run(["rsync", "-a", docs + "/", str(tmp_path / "rsynced") + "/"], capture_output=True, text=True)
    assert rsync.returncode == 0, rsync.stderr
    assert (tmp_path / "rsynced" / "Plan.paper").read_text() == PAPER
    tar = subprocess.run(["tar", "cf", str(tmp_path / "docs.tar"), "-C", mnt.path, "docs"], capture_output=True, text=True)
    assert tar.returncode == 0, tar.stderr
    grep = subprocess.run(["grep", "-r", "write the tests", docs], capture_output=True, text=True)
    assert grep.returncode == 0 and "Plan.paper" in grep.stdout, grep.stderr


def test_export_only_files_are_read_only(mnt, emu):
    path = os.path.join(mnt.path, "docs", "Plan.paper")
    assert stat.S_IMODE(os.stat(path).st_mode) & 0o222 == 0
    with pytest.raises(PermissionError):
        open(path, "w")
    with pytest.raises(PermissionError):
        os.truncate(path, 0)
    # Nothing was staged or uploaded over it: Dropbox still has the Paper doc.
    md = emu.api("files/get_metadata", {"path": "/docs/Plan.paper"})
    assert md["is_downloadable"] is False
    # Renaming and deleting it are Dropbox operations that work on such files (queued: sync waits).
    os.rename(path, os.path.join(mnt.path, "docs", "Renamed.paper"))
    synced = subprocess.run([mnt.binary, "sync", mnt.path], capture_output=True, text=True, timeout=120)
    assert synced.returncode == 0, synced.stderr
    assert emu.api("files/get_metadata", {"path": "/docs/Renamed.paper"})["is_downloadable"] is False
