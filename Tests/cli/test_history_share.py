"""The file commands through a real mount against the emulator (issue 16, parts 2 and 3):
`dbxfs history`, `cat --rev`, `restore --rev`, `undelete`, `trash` and `share`, each with its
error cases (a path not on a mount, a folder given to history, a revision that does not exist,
no network), and the `user.dropbox.shared_link` attribute. Paths are given on the mount, as a
user types them; the commands reach the daemon over its control socket."""

import errno
import json
import os
import subprocess
import time
import uuid

import pytest

from conftest import STATIC_TOKEN, Emulator, Mount, needs_fuse, one_clear_line

pytestmark = needs_fuse

ENV = {"DBXFS_ACCESS_TOKEN": STATIC_TOKEN}


def mount_args(cli, emulator, *extra):
    return ["--api-base", emulator.url, "--cache-dir", str(cli.home / "cache"), *extra]


def wait_for(check, what, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def run(cli, *args, cwd=None, input=None):
    return subprocess.run([cli.binary, *args], capture_output=True, text=True, timeout=120, env=cli.env, cwd=cwd,
                          input=input)


def revisions(emulator, path):
    return emulator.api("files/list_revisions", {"path": path, "limit": 100})


@pytest.fixture
def folder(emulator):
    """A fresh Dropbox folder for one test: its name, which is also its path on the mount."""
    name = "hs-" + uuid.uuid4().hex[:8]
    emulator.api("files/create_folder_v2", {"path": "/" + name})
    return name


@pytest.fixture
def mounted(cli, emulator, mountpoint, folder):
    """The mount, made after the test's folder exists (so its first listing has it)."""
    with Mount(cli, mountpoint, mount_args(cli, emulator), env=ENV) as mount:
        yield mount


def three_versions(emulator, mountpoint, folder, name="notes.txt"):
    """Uploads three versions through the API; returns their metadata once the mount shows the last."""
    made = [emulator.upload(f"/{folder}/{name}", data, mode="overwrite") for data in (b"one\n", b"two two\n", b"three\n")]
    wait_for(lambda: (mountpoint / folder / name).read_bytes() == b"three\n", f"{name} on the mount")
    return made


# ----- history -----
def test_history_lists_the_revisions_newest_first(cli, emulator, mountpoint, mounted, folder):
    made = three_versions(emulator, mountpoint, folder)
    path = mountpoint / folder / "notes.txt"
    result = run(cli, "history", str(path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == str(path) and lines[1].startswith("REV")
    assert [line.split()[0] for line in lines[2:]] == [m["rev"] for m in reversed(made)]
    assert lines[2].endswith("(current)") and "(current)" not in lines[3]
    assert made[0]["content_hash"] in lines[4] and " 4  " in lines[4]

    # --json, and a path relative to the current directory inside the mount.
    document = json.loads(run(cli, "history", "--json", "notes.txt", cwd=mountpoint / folder).stdout)
    assert document["path"] == str(path) and document["deleted"] is False and document["has_more"] is False
    assert "pid" not in document
    assert [(r["rev"], r["size"], r["content_hash"], r["current"]) for r in document["revisions"]] == \
        [(m["rev"], m["size"], m["content_hash"], i == 2) for i, m in reversed(list(enumerate(made)))]
    assert document["revisions"][0]["server_modified"].endswith("Z")
    limited = json.loads(run(cli, "history", "--json", "--limit", "1", str(path)).stdout)
    assert len(limited["revisions"]) == 1 and limited["has_more"] is True


def test_history_error_cases(cli, emulator, mountpoint, mounted, folder, tmp_path):
    (mountpoint / folder / "sub").mkdir()
    result = run(cli, "history", str(mountpoint / folder / "sub"))
    assert result.returncode == 1 and "is a folder" in one_clear_line(result)
    result = run(cli, "history", str(mountpoint / folder / "never-was.txt"))
    assert result.returncode == 1 and "has no file at" in one_clear_line(result)
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    for path in (outside, tmp_path / "missing" / "deeper.txt"):
        result = run(cli, "history", str(path))
        assert result.returncode == 3 and "is not on a dbxfs mount" in one_clear_line(result)
    result = run(cli, "history")
    assert result.returncode == 2 and "missing PATH" in one_clear_line(result)
    result = run(cli, "history", "--limit", "0", str(mountpoint))
    assert result.returncode == 2 and "--limit" in one_clear_line(result)


# ----- cat --rev -----
def test_cat_writes_an_old_revision_and_changes_nothing(cli, emulator, mountpoint, mounted, folder):
    made = three_versions(emulator, mountpoint, folder)
    path = mountpoint / folder / "notes.txt"
    result = subprocess.run([cli.binary, "cat", "--rev", made[0]["rev"], str(path)], capture_output=True, timeout=120,
                            env=cli.env)
    assert result.returncode == 0 and result.stdout == b"one\n", result.stderr
    assert path.read_bytes() == b"three\n"
    assert revisions(emulator, f"/{folder}/notes.txt")["entries"][0]["rev"] == made[2]["rev"]

    result = run(cli, "cat", "--rev", "0123456789ab", str(path))
    assert result.returncode == 1 and "keeps no revision 0123456789ab" in one_clear_line(result)
    result = run(cli, "cat", "--rev", "not-a-rev", str(path))
    assert result.returncode == 2 and "is not a revision" in one_clear_line(result)
    result = run(cli, "cat", str(path))
    assert result.returncode == 2 and "--rev" in one_clear_line(result)


def test_cat_of_a_bigger_revision_streams_every_byte(cli, emulator, mountpoint, mounted, folder):
    big = os.urandom(5 << 20)   # more than one 4 MiB content-hash block
    old = emulator.upload(f"/{folder}/big.bin", big, mode="overwrite")
    emulator.upload(f"/{folder}/big.bin", b"small now", mode="overwrite")
    wait_for(lambda: (mountpoint / folder / "big.bin").stat().st_size == 9, "big.bin replaced")
    result = subprocess.run([cli.binary, "cat", "--rev", old["rev"], str(mountpoint / folder / "big.bin")],
                            capture_output=True, timeout=120, env=cli.env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == big


# ----- restore --rev -----
def test_restore_shows_at_once_and_the_next_write_updates_the_restored_revision(cli, emulator, mountpoint, mounted, folder):
    made = three_versions(emulator, mountpoint, folder)
    path = mountpoint / folder / "notes.txt"
    assert path.read_bytes() == b"three\n"   # the kernel holds this version's pages and size
    result = run(cli, "restore", "--rev", made[0]["rev"], str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Restored {path} to revision {made[0]['rev']}")
    # At once: the kernel forgot the size it cached (for 1 s) and the pages it kept, no waiting
    # for the change feed.
    assert path.stat().st_size == 4
    assert path.read_bytes() == b"one\n"
    current = revisions(emulator, f"/{folder}/notes.txt")["entries"][0]
    assert current["rev"] not in [m["rev"] for m in made] and current["content_hash"] == made[0]["content_hash"]
    assert os.getxattr(path, "user.dropbox.rev").decode() == current["rev"]

    # The next write is an update of the restored revision: no conflict, nothing lost.
    with open(path, "ab") as f:
        f.write(b"and more\n")
    sync = run(cli, "sync", str(mountpoint))
    assert sync.returncode == 0, sync.stderr
    assert emulator.download(f"/{folder}/notes.txt") == b"one\nand more\n"
    names = sorted(e["name"] for e in emulator.listing("/" + folder))
    assert names == ["notes.txt"], names
    status = json.loads(run(cli, "status", "--json", str(mountpoint)).stdout)["mounts"][0]
    assert status["uploads"]["conflicts"] == []

    # The revision that is current already: nothing to do.
    latest = revisions(emulator, f"/{folder}/notes.txt")["entries"][0]["rev"]
    result = run(cli, "restore", "--json", "--rev", latest, str(path))
    assert result.returncode == 0 and json.loads(result.stdout)["unchanged"] is True


def test_restore_is_refused_over_changes_not_on_dropbox_yet(cli, emulator, mountpoint, mounted, folder):
    made = three_versions(emulator, mountpoint, folder)
    path = mountpoint / folder / "notes.txt"
    with open(path, "ab") as f:
        f.write(b"unsaved\n")
        f.flush()
        result = run(cli, "restore", "--rev", made[0]["rev"], str(path))
        line = one_clear_line(result)
        assert result.returncode == 1 and "not on Dropbox yet" in line and "dbxfs sync" in line, line
    assert run(cli, "sync", str(mountpoint)).returncode == 0
    assert emulator.download(f"/{folder}/notes.txt") == b"three\nunsaved\n"
    result = run(cli, "restore", "--rev", made[0]["rev"], str(path))
    assert result.returncode == 0, result.stderr
    assert path.read_bytes() == b"one\n"


def test_restore_error_cases(cli, emulator, mountpoint, mounted, folder):
    three_versions(emulator, mountpoint, folder)
    path = mountpoint / folder / "notes.txt"
    result = run(cli, "restore", "--rev", "0123456789ab", str(path))
    assert result.returncode == 1 and "keeps no revision 0123456789ab" in one_clear_line(result)
    other = emulator.upload(f"/{folder}/other.txt", b"other", mode="overwrite")
    result = run(cli, "restore", "--rev", other["rev"], str(path))
    assert result.returncode == 1 and "keeps no revision" in one_clear_line(result)
    assert path.read_bytes() == b"three\n"
    (mountpoint / folder / "dir").mkdir()
    result = run(cli, "restore", "--rev", other["rev"], str(mountpoint / folder / "dir"))
    assert result.returncode == 1 and "is a folder" in one_clear_line(result)
    result = run(cli, "restore", str(path))
    assert result.returncode == 2 and "--rev" in one_clear_line(result)


def test_restore_on_a_read_only_mount_is_refused(cli, emulator, tmp_path, folder):
    made = [emulator.upload(f"/{folder}/ro.txt", data, mode="overwrite") for data in (b"a", b"b")]
    mountpoint = tmp_path / "ro"
    mountpoint.mkdir()
    with Mount(cli, mountpoint, mount_args(cli, emulator, "-o", "ro"), env=ENV):
        result = run(cli, "restore", "--rev", made[0]["rev"], str(mountpoint / folder / "ro.txt"))
        assert result.returncode == 1 and "read-only" in one_clear_line(result)
        # Reading history and old revisions is fine there.
        assert run(cli, "history", str(mountpoint / folder / "ro.txt")).returncode == 0


# ----- trash and undelete -----
def test_trash_lists_deleted_files_and_undelete_brings_one_back(cli, emulator, mountpoint, mounted, folder):
    base = mountpoint / folder
    (base / "keep.txt").write_bytes(b"keep")
    (base / "old").mkdir()
    (base / "old" / "gone.txt").write_bytes(b"gone for now")
    (base / "bye.txt").write_bytes(b"bye")
    assert run(cli, "sync", str(mountpoint)).returncode == 0
    os.unlink(base / "bye.txt")
    os.unlink(base / "old" / "gone.txt")
    os.rmdir(base / "old")
    assert not (base / "old" / "gone.txt").exists()   # the kernel may now hold negative entries

    result = run(cli, "trash", str(base))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("DELETED (UTC)") and len(lines) == 3, lines
    assert lines[1].endswith(f"  3  {base}/bye.txt") and lines[2].endswith(f"  12  {base}/old/gone.txt"), lines
    document = json.loads(run(cli, "trash", "--json", folder, cwd=mountpoint).stdout)
    assert document["folder"] == str(base)
    assert [(d["path"], d["size"]) for d in document["deleted"]] == [(f"{base}/bye.txt", 3), (f"{base}/old/gone.txt", 12)]
    assert all(d["deleted_at"].endswith("Z") for d in document["deleted"])

    # A deleted file's history, and its last revision's bytes, without bringing it back.
    history = json.loads(run(cli, "history", "--json", str(base / "bye.txt")).stdout)
    assert history["deleted"] is True and history["deleted_at"].endswith("Z")
    assert [r["current"] for r in history["revisions"]] == [False]
    old = subprocess.run([cli.binary, "cat", "--rev", history["revisions"][0]["rev"], str(base / "bye.txt")],
                         capture_output=True, timeout=120, env=cli.env)
    assert old.returncode == 0 and old.stdout == b"bye" and not (base / "bye.txt").exists()

    result = run(cli, "undelete", str(base / "old" / "gone.txt"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Brought back {base}/old/gone.txt")
    assert (base / "old" / "gone.txt").read_bytes() == b"gone for now"   # at once, its folder too
    assert emulator.download(f"/{folder}/old/gone.txt") == b"gone for now"
    remaining = json.loads(run(cli, "trash", "--json", str(base)).stdout)["deleted"]
    assert [d["path"] for d in remaining] == [f"{base}/bye.txt"]

    result = run(cli, "undelete", str(base / "old" / "gone.txt"))
    assert result.returncode == 1 and "exists" in one_clear_line(result)
    result = run(cli, "undelete", str(base / "never-was.txt"))
    assert result.returncode == 1 and "no deleted file" in one_clear_line(result)
    result = run(cli, "trash", str(base / "keep.txt"))
    assert result.returncode == 1 and "is a file" in one_clear_line(result)
    empty = base / "empty"
    empty.mkdir()
    result = run(cli, "trash", str(empty))
    assert result.returncode == 0 and "no deleted files" in result.stdout


# ----- share -----
def test_share_prints_a_link_reuses_it_and_shows_it_as_an_attribute(cli, emulator, mountpoint, mounted, folder):
    base = mountpoint / folder
    for name in ("a.txt", "b.txt"):
        emulator.upload(f"/{folder}/{name}", name.encode(), mode="overwrite")
    wait_for(lambda: (base / "b.txt").exists(), "b.txt on the mount")
    # No link yet: no attribute, and it is never listed (listxattr costs no remote call).
    with pytest.raises(OSError) as err:
        os.getxattr(base / "a.txt", "user.dropbox.shared_link")
    assert err.value.errno == errno.ENODATA
    assert "user.dropbox.shared_link" not in os.listxattr(base / "a.txt")

    result = run(cli, "share", str(base / "a.txt"))
    assert result.returncode == 0, result.stderr
    url = result.stdout.strip()
    assert url.startswith("https://") and len(result.stdout.splitlines()) == 1
    assert os.getxattr(base / "a.txt", "user.dropbox.shared_link").decode() == url
    again = json.loads(run(cli, "share", "--json", str(base / "a.txt")).stdout)
    assert again["url"] == url and again["reused"] is True and again["password_protected"] is False
    listed = emulator.api("sharing/list_shared_links", {"path": f"/{folder}/a.txt", "direct_only": True})["links"]
    assert [link["url"] for link in listed] == [url]

    # A link made elsewhere shows in the attribute too (asked of Dropbox).
    made = emulator.api("sharing/create_shared_link_with_settings", {"path": f"/{folder}/b.txt"})
    assert os.getxattr(base / "b.txt", "user.dropbox.shared_link").decode() == made["url"]

    # Expiry and password, the password read from stdin.
    (base / "c.txt").write_bytes(b"c")
    assert run(cli, "sync", str(mountpoint)).returncode == 0
    result = run(cli, "share", "--json", "--expires", "7d", "--password", "-", str(base / "c.txt"), input="s3cret\n")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["password_protected"] is True and document["expires"].endswith("Z") and document["reused"] is False
    # The same file with other settings: the link it has, named, not a silent new one.
    result = run(cli, "share", "--expires", "30d", str(base / "c.txt"))
    assert result.returncode == 1 and "already has a shared link with other settings" in one_clear_line(result)

    # A folder can be shared.
    result = run(cli, "share", str(base))
    assert result.returncode == 0 and "/scl/fo/" in result.stdout


def test_share_error_cases(cli, emulator, mountpoint, mounted, folder, tmp_path):
    base = mountpoint / folder
    emulator.upload(f"/{folder}/basic.txt", b"x", mode="overwrite")
    wait_for(lambda: (base / "basic.txt").exists(), "basic.txt on the mount")
    emulator.account(account_type="basic")
    try:
        result = run(cli, "share", "--expires", "7d", str(base / "basic.txt"))
        line = one_clear_line(result)
        assert result.returncode == 1 and "may not set an expiry or a password" in line, line
        assert run(cli, "share", str(base / "basic.txt")).returncode == 0   # a plain link is fine
    finally:
        emulator.account(account_type="")
    result = run(cli, "share", str(base / "nothing-here.txt"))
    assert result.returncode == 1 and "has no file or folder at" in one_clear_line(result)
    result = run(cli, "share", str(tmp_path))
    assert result.returncode == 3 and "is not on a dbxfs mount" in one_clear_line(result)
    for bad in (["--expires", "yesterday"], ["--expires", "2001-01-01"], ["--password", ""]):
        result = run(cli, "share", *bad, str(base / "basic.txt"))
        assert result.returncode == 2, (bad, result.stderr)
        one_clear_line(result)


# ----- no network -----
def test_every_command_says_dropbox_cannot_be_reached(cli, emulator, mountpoint, mounted, folder):
    made = three_versions(emulator, mountpoint, folder)
    path = str(mountpoint / folder / "notes.txt")
    (mountpoint / folder / "x.txt").write_bytes(b"x")
    assert run(cli, "sync", str(mountpoint)).returncode == 0
    os.unlink(mountpoint / folder / "x.txt")
    emulator.config(fail_rate=1)
    try:
        for args in (["history", path], ["cat", "--rev", made[0]["rev"], path], ["restore", "--rev", made[0]["rev"], path],
                     ["undelete", str(mountpoint / folder / "x.txt")], ["trash", str(mountpoint / folder)],
                     ["share", path]):
            result = run(cli, *args)
            line = one_clear_line(result)
            assert result.returncode == 1 and "Dropbox cannot be reached" in line, (args, line)
        assert (mountpoint / folder / "notes.txt").read_bytes() == b"three\n"   # nothing changed
    finally:
        emulator.config(fail_rate=0)
    # Once Dropbox answers again, so do the commands.
    wait_for(lambda: run(cli, "history", path).returncode == 0, "history once Dropbox answers", timeout=60)


def test_an_offline_mount_answers_at_once_that_dropbox_cannot_be_reached(cli, tmp_path):
    """The emulator stopped: once the mount knows it is offline, every command says so without
    trying (the fail_rate case above meets the failures on its own calls)."""
    emulator = Emulator(tmp_path / "data", token=STATIC_TOKEN).start()
    try:
        emulator.upload("/f.txt", b"v1", mode="overwrite")
        mountpoint = tmp_path / "mnt"
        mountpoint.mkdir()
        with Mount(cli, mountpoint, mount_args(cli, emulator), env=ENV):
            assert (mountpoint / "f.txt").read_bytes() == b"v1"
            emulator.stop()
            wait_for(lambda: "offline" in json.loads(run(cli, "status", "--json", str(mountpoint)).stdout)["mounts"][0],
                     "the mount to notice it is offline", timeout=60)
            for args in (["history", "f.txt"], ["share", "f.txt"], ["trash", "."], ["undelete", "g.txt"]):
                result = run(cli, *args, cwd=mountpoint)
                line = one_clear_line(result)
                assert result.returncode == 1 and "Dropbox cannot be reached" in line, (args, line)
    finally:
        emulator.stop()
