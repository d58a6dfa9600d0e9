"""Files kept available offline (issue 16, part 1): `dbxfs pin`, `dbxfs unpin`, `dbxfs pin --list`
and the `pins` section of `dbxfs status`, through real mounts of the binary against an emulator of
each test's own (the tests make it fail every request).

- A pinned folder is downloaded and checked; a change made through the API (a new revision, a
  new file) is fetched in the background once the feed delivers it; the pin survives a remount,
  and with every API request failing (`fail_rate` 1) the remount (offline) reads every pinned file
  with the right bytes, while a file that is not pinned fails.
- A pin that does not fit in the disk cache is refused up front with the sizes, and nothing is
  pinned; unpinning lets its blocks be evicted (the other pin then fits, and the unpinned file no
  longer reads offline). Paths that are not on a mount, not on Dropbox or not pinned get a sentence
  and the documented exit status."""

import errno
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from mount_support import TOKEN, Emulator, mount_of

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "Tests" / "support"))
from mounting import wait_until  # noqa: E402

MiB = 1 << 20


@pytest.fixture
def own_emulator(tmp_path):
    """An emulator of this test's own: the test makes every API request fail."""
    emu = Emulator(tmp_path / "emulator" / "data", token=TOKEN).start()
    yield emu
    emu.stop()


def dbxfs(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=300)


def pin_list(binary, path):
    result = dbxfs(binary, "pin", "--list", "--json", str(path))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_pinned_folder_follows_changes_survives_a_remount_and_reads_offline(dbxfs_binary, own_emulator, tmp_path):
    emu = own_emulator
    rng = random.Random(16)
    files = {
        "Papers/big.bin": rng.randbytes(5 * MiB + 123),   # two 4 MiB blocks
        "Papers/notes.txt": b"first version\n",
        "Papers/sub/deep.txt": b"deep\n",
    }
    for path, data in files.items():
        emu.upload("/" + path, data)
    emu.upload("/outside.txt", b"not pinned\n")

    m = mount_of(dbxfs_binary, emu, tmp_path)
    root = Path(m.path)
    with m:
        result = dbxfs(dbxfs_binary, "pin", "--wait", "--json", str(root / "papers"))
        assert result.returncode == 0, result.stderr + m.read_log()
        pinned = json.loads(result.stdout)["pinned"]
        assert pinned == [{"path": str(root / "Papers"), "files": 3, "bytes": sum(map(len, files.values())),
                           "already_pinned": False}]
        [pin] = pin_list(dbxfs_binary, root)["pins"]
        assert pin["counts"]["current"] == 3 and pin["counts"]["fetching"] == 0 and pin["exists"], pin

        # Changes made elsewhere: a new revision of a pinned file, a new file in the pinned folder.
        files["Papers/notes.txt"] = b"second version, longer\n"
        files["Papers/added.txt"] = b"added later\n"
        emu.upload("/Papers/notes.txt", files["Papers/notes.txt"], mode="overwrite")
        emu.upload("/Papers/added.txt", files["Papers/added.txt"])
        wait_until(lambda: (root / "Papers" / "added.txt").exists()
                   and (root / "Papers" / "notes.txt").stat().st_size == len(files["Papers/notes.txt"]), timeout=60)
        wait_until(lambda: pin_list(dbxfs_binary, root)["pins"][0]["counts"]["current"] == 4, timeout=60)

        status = json.loads(dbxfs(dbxfs_binary, "status", "--json", m.path).stdout)["mounts"][0]
        assert status["pins"]["paths"] == 1 and status["pins"]["counts"]["files"] == 4, status
        assert status["pins"]["disk_bytes"] == sum(map(len, files.values())), status
        text = dbxfs(dbxfs_binary, "status", m.path).stdout
        print(text)
        assert "pinned      4 files" in text and "4 available offline" in text, text

        # Every request fails from here on: the pinned files read from the disk cache (none was
        # read through the mount before, so neither the kernel nor the daemon's memory has them).
        emu.config(fail_rate=1)
        try:
            for path, data in files.items():
                assert (root / path).read_bytes() == data, path
        finally:
            emu.config(fail_rate=0)

    # Dropbox fails every request: the remount starts offline from the saved tree.
    emu.config(fail_rate=1)
    try:
        with m:
            log = m.read_log()
            assert "mounted offline" in log or "offline" in log, log
            for path, data in files.items():
                assert (root / path).read_bytes() == data, path
            with pytest.raises(OSError) as failure:
                (root / "outside.txt").read_bytes()
            assert failure.value.errno == errno.EIO
            # The pin was kept, and checked again from the disk alone.
            wait_until(lambda: pin_list(dbxfs_binary, root)["pins"][0]["counts"]["fetching"] == 0, timeout=60)
            [pin] = pin_list(dbxfs_binary, root)["pins"]
            assert pin["path"] == str(root / "Papers") and pin["counts"]["current"] == 4, pin
    finally:
        emu.config(fail_rate=0)


def test_a_pin_that_does_not_fit_is_refused_and_unpin_lets_it_be_evicted(dbxfs_binary, own_emulator, tmp_path):
    emu = own_emulator
    rng = random.Random(17)
    first, second = rng.randbytes(8 * MiB), rng.randbytes(8 * MiB)
    emu.upload("/One/first.bin", first)
    emu.upload("/Two/second.bin", second)
    m = mount_of(dbxfs_binary, emu, tmp_path, "mnt", "--cache-size", "12M")
    root = Path(m.path)
    with m:
        result = dbxfs(dbxfs_binary, "pin", "--wait", str(root / "One"))
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"Pinned {root / 'One'}: 1 file, 8.0 MiB."), result.stdout

        result = dbxfs(dbxfs_binary, "pin", str(root / "Two"))
        assert result.returncode == 1
        assert result.stderr.strip() == (
            f"dbxfs: {root / 'Two'} does not fit in the disk cache: it needs 8.0 MiB (8388608 bytes), and the cache's "
            "budget of 12.0 MiB has 4.0 MiB left beside the 8.0 MiB pinned already; nothing was pinned: unpin something "
            "(dbxfs pin --list) or mount with a larger --cache-size"), result.stderr
        assert [pin["path"] for pin in pin_list(dbxfs_binary, root)["pins"]] == [str(root / "One")]

        # Error cases: not on a mount (3), nothing there, not pinned, inside a pin (1).
        outside = dbxfs(dbxfs_binary, "pin", str(tmp_path))
        assert outside.returncode == 3 and "is not on a dbxfs mount" in outside.stderr, outside.stderr
        missing = dbxfs(dbxfs_binary, "pin", str(root / "nothing-here"))
        assert missing.returncode == 1
        assert missing.stderr.strip() == f"dbxfs: there is no file or folder at {root / 'nothing-here'} on Dropbox"
        not_pinned = dbxfs(dbxfs_binary, "unpin", str(root / "Two"))
        assert not_pinned.returncode == 1 and "is not pinned" in not_pinned.stderr, not_pinned.stderr
        inside = dbxfs(dbxfs_binary, "unpin", str(root / "One" / "first.bin"))
        assert inside.returncode == 1 and f"kept offline as part of {root / 'One'}" in inside.stderr, inside.stderr

        result = dbxfs(dbxfs_binary, "unpin", str(root / "One"))
        assert result.returncode == 0, result.stderr
        assert "Unpinned" in result.stdout, result.stdout
        # Now it fits: its blocks push out the unpinned file's.
        result = dbxfs(dbxfs_binary, "pin", "--wait", str(root / "Two"))
        assert result.returncode == 0, result.stderr + m.read_log()
        listed = pin_list(dbxfs_binary, root)
        assert [pin["path"] for pin in listed["pins"]] == [str(root / "Two")]
        assert listed["disk_bytes"] == 8 * MiB and listed["disk_budget"] == 12 * MiB, listed
        cache = json.loads(dbxfs(dbxfs_binary, "status", "--json", m.path).stdout)["mounts"][0]["cache"]
        assert cache["disk_bytes"] <= 12 * MiB, cache

    emu.config(fail_rate=1)
    try:
        with m:
            assert (root / "Two" / "second.bin").read_bytes() == second
            # Evicted (at least one of its blocks), and Dropbox cannot be asked.
            with pytest.raises(OSError) as failure:
                (root / "One" / "first.bin").read_bytes()
            assert failure.value.errno == errno.EIO
    finally:
        emu.config(fail_rate=0)
