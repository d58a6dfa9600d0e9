"""Writes while Dropbox cannot be reached (the emulator stopped): a file written is kept in the
journal and uploaded once Dropbox answers, and so are changes of the namespace (mkdir, and so
`cp -r` of a folder; rename; unlink), journaled since issue 15. The one change that still needs
Dropbox at once, a case-only rename, fails in a way that says what happened: ENETUNREACH
("Network is unreachable", which mv prints) and a log line that says it needs Dropbox; and
`dbxfs status` shows the mount offline, what that means, and the changes waiting."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mount_support import TOKEN, Emulator, mount_of

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "Tests" / "support"))
from messages import swift_spellings  # noqa: E402
from mounting import wait_until  # noqa: E402


def status_of(binary, mountpoint, *args):
    result = subprocess.run([binary, "status", *args, str(mountpoint)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def offline_emulator(tmp_path):
    """An emulator of this test's own: it is stopped while mounted."""
    emu = Emulator(tmp_path / "emulator" / "data", token=TOKEN).start()
    yield emu
    emu.stop()


def test_folder_changes_offline_are_kept_and_status_says_why(dbxfs_binary, offline_emulator, tmp_path):
    emu = offline_emulator
    source = tmp_path / "src" / "tree"
    (source / "sub").mkdir(parents=True)
    (source / "a.txt").write_text("a\n")
    (source / "sub" / "b.txt").write_text("b\n")
    m = mount_of(dbxfs_binary, emu, tmp_path)
    root = Path(m.path)
    with m:
        (root / "kept").mkdir()
        (root / "kept" / "old.txt").write_text("old\n")
        (root / "kept" / "gone.txt").write_text("gone\n")
        (root / "kept" / "case.txt").write_text("case\n")
        subprocess.run([dbxfs_binary, "sync", m.path], check=True, capture_output=True, timeout=60)
        emu.stop()
        try:
            wait_until(lambda: json.loads(status_of(dbxfs_binary, m.path, "--json"))["mounts"][0].get("offline"), timeout=60)

            # A file is queued: written and closed without error; so are folders and renames.
            (root / "queued.txt").write_text("queued while offline\n")
            copy = subprocess.run(["cp", "-r", str(source), m.path], capture_output=True, text=True, timeout=120)
            assert copy.returncode == 0, copy.stderr + m.read_log()[-3000:]
            os.mkdir(root / "new-folder")
            os.rename(root / "kept" / "old.txt", root / "kept" / "renamed.txt")
            os.unlink(root / "kept" / "gone.txt")
            assert sorted(os.listdir(root / "kept")) == ["case.txt", "renamed.txt"]
            assert (root / "tree" / "sub" / "b.txt").read_text() == "b\n"
            # A case-only rename goes to Dropbox at once: it cannot, and says so.
            with pytest.raises(OSError) as failure:
                os.rename(root / "kept" / "case.txt", root / "kept" / "CASE.txt")
            assert failure.value.errno == errno.ENETUNREACH

            text = status_of(dbxfs_binary, m.path)
            print(text)
            assert "offline since" in text
            assert "folders made, renames and deletions are kept" in text
            assert "not on Dropbox yet (mkdir, unlink, rmdir, rename)" in text
            log = m.read_log()
            assert "rename /kept/case.txt → /kept/CASE.txt" in log and "needs Dropbox" in log, log[-3000:]
        finally:
            emu.start()   # same data, same port
        result = subprocess.run([dbxfs_binary, "sync", "--timeout", "120", m.path], capture_output=True, text=True, timeout=150)
        assert result.returncode == 0, result.stderr + m.read_log()[-3000:]
        assert swift_spellings(m.read_log()) == [], swift_spellings(m.read_log())
    assert emu.download("/queued.txt") == b"queued while offline\n"
    assert emu.download("/tree/sub/b.txt") == b"b\n" and emu.download("/tree/a.txt") == b"a\n"
    assert emu.download("/kept/renamed.txt") == b"old\n"
    names = {e["name"] for e in emu.listing("/kept")}
    assert names == {"renamed.txt", "case.txt"}
    assert "new-folder" in {e["name"] for e in emu.listing("")}
