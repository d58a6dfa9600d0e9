"""The write side, end to end: the real dbxfs binary mounts a fresh (empty) emulator, ordinary
tools write through it, `dbxfs sync` waits for the uploads, and every result is checked through
the emulator's API, never through the mount. Mounts are always unmounted and reaped
(mount_support.Mount), even when a test fails; the kill -9 tests unmount the dead mount with
fusermount3 -uz.
"""

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import random
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from mount_support import TOKEN, Emulator, Mount, dropbox_args, dropbox_env, force_unmount
from emulator import content_hash

BLOCK = 4 << 20


@pytest.fixture(scope="module")
def wemu(tmp_path_factory):
    """An empty emulator of this module's own, so writes never disturb the read tests' seed."""
    emu = Emulator(tmp_path_factory.mktemp("write-emulator") / "data", token=TOKEN).start()
    yield emu
    emu.stop()


@pytest.fixture
def writer(dbxfs_binary, wemu, tmp_path):
    """A mount of the write emulator with a fresh cache directory; remount() keeps that cache."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    state = {}

    def start():
        m = Mount(dbxfs_binary, mnt, dropbox_args(wemu, tmp_path / "cache"), env=dropbox_env())
        state["mount"] = m
        return m.start()

    start()
    yield WriteMount(dbxfs_binary, wemu, mnt, state, start)
    state["mount"].stop()
    force_unmount(str(mnt))


class WriteMount:
    def __init__(self, binary, emu, path, state, start):
        self.binary, self.emu, self.path, self._state, self._start = binary, emu, Path(path), state, start

    @property
    def mount(self):
        return self._state["mount"]

    def sync(self, timeout=300):
        result = subprocess.run([self.binary, "sync", str(self.path)], capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, result.stdout + result.stderr + self.mount.read_log()
        return result

    def kill9(self):
        """kill -9 of the daemon, then the dead mount is detached."""
        proc = self.mount.proc
        proc.kill()
        proc.wait()
        force_unmount(str(self.path))

    def remount(self):
        self.mount.stop()
        return self._start()


# ----- checks through the emulator's API -----

def remote_files(emu, root):
    """path_lower relative to `root` → entry, for every file under `root` (recursive)."""
    entries = emu.listing(root, recursive=True)
    prefix = len(root.lower()) + 1
    return {e["path_lower"][prefix:]: e for e in entries if e[".tag"] == "file"}


def local_files(directory):
    directory = Path(directory)
    return {str(p.relative_to(directory)): p for p in sorted(directory.rglob("*")) if p.is_file() and not p.is_symlink()}


def assert_remote_matches(emu, local_dir, root):
    """The files under `root` on the emulator are exactly those of `local_dir`, byte for byte."""
    remote = remote_files(emu, root)
    local = local_files(local_dir)
    assert sorted(remote) == sorted(name.lower() for name in local)
    for name, path in local.items():
        data = path.read_bytes()
        entry = remote[name.lower()]
        assert entry["size"] == len(data), name
        assert entry["content_hash"] == content_hash(data), name


def wait_visible(path, timeout=10):
    """Waits until a file made through the API shows on the mount (the change watcher's delay)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not path.exists():
        time.sleep(0.1)
    assert path.exists(), path


def make_tree(root, files=40, seed=1):
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        sub = root / f"dir{i % 4}" / ("deep" if i % 3 == 0 else "")
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"file{i}.bin").write_bytes(rng.randbytes(rng.choice([0, 1, 100, 5000, 70_000, 300_000])))
    (root / "Ünïcödé ☃.txt").write_text("snow\n")
    return root


# ----- ordinary tools -----

def test_cp_r_then_diff(writer, tmp_path):
    src = make_tree(tmp_path / "src")
    subprocess.run(["cp", "-r", str(src), str(writer.path / "copied")], check=True)
    assert subprocess.run(["diff", "-r", str(src), str(writer.path / "copied")]).returncode == 0
    writer.sync()
    assert_remote_matches(writer.emu, src, "/copied")


def test_rsync_twice_with_changes(writer, tmp_path):
    src = make_tree(tmp_path / "src", seed=2)
    dst = str(writer.path / "rsynced") + "/"
    subprocess.run(["rsync", "-a", str(src) + "/", dst], check=True)
    # Changes: one file edited, one added, one removed; rsync writes temp files and renames them.
    (src / "dir1" / "file1.bin").write_bytes(b"changed" * 1000)
    (src / "dir2" / "new.txt").write_text("new\n")
    (src / "dir3" / "file7.bin").unlink()
    subprocess.run(["rsync", "-a", "--delete", str(src) + "/", dst], check=True)
    writer.sync()
    assert_remote_matches(writer.emu, src, "/rsynced")
    # A third run finds nothing to copy: sizes and modification times survived the round trip.
    third = subprocess.run(["rsync", "-ai", "--delete", str(src) + "/", dst], check=True, capture_output=True, text=True)
    assert not [line for line in third.stdout.splitlines() if line.startswith(">f")], third.stdout


def test_tar_x(writer, tmp_path):
    src = make_tree(tmp_path / "src", files=60, seed=3)
    archive = tmp_path / "a.tar"
    subprocess.run(["tar", "-C", str(src), "-cf", str(archive), "."], check=True)
    (writer.path / "untarred").mkdir()
    subprocess.run(["tar", "-C", str(writer.path / "untarred"), "-xf", str(archive)], check=True)
    writer.sync()
    assert_remote_matches(writer.emu, src, "/untarred")
    # tar restored the modification times (client_modified).
    entry = writer.emu.api("files/get_metadata", {"path": "/untarred/dir1/file1.bin"})
    assert entry["client_modified"].startswith(time.strftime("%Y-%m-%dT%H:%M", time.gmtime((src / "dir1" / "file1.bin").stat().st_mtime)))


def test_git_init_add_commit_and_clone(writer, tmp_path):
    repo = writer.path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=T", "-c", "init.defaultBranch=main"]
    subprocess.run(git + ["init", "-q", str(repo)], check=True)
    (repo / "README.md").write_text("# hello\n")
    (repo / "src").mkdir()
    (repo / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    subprocess.run(git + ["-C", str(repo), "add", "."], check=True)
    subprocess.run(git + ["-C", str(repo), "commit", "-qm", "first"], check=True)
    (repo / "README.md").write_text("# hello again\n")
    subprocess.run(git + ["-C", str(repo), "commit", "-qam", "second"], check=True)
    assert subprocess.run(git + ["-C", str(repo), "fsck", "--no-progress"], capture_output=True).returncode == 0
    clone = tmp_path / "clone"
    subprocess.run(git + ["clone", "-q", str(repo), str(clone)], check=True)
    assert (clone / "README.md").read_text() == "# hello again\n"
    writer.sync()
    # The repository is on Dropbox too: clone it from a copy made through the API.
    copy = tmp_path / "from-api"
    for name, entry in remote_files(writer.emu, "/repo").items():
        target = copy / entry["path_display"][len("/repo/"):]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(writer.emu.download(entry["path_display"]))
    log = subprocess.run(git + ["-C", str(copy), "log", "--format=%s"], check=True, capture_output=True, text=True).stdout
    assert log.split() == ["second", "first"]


def test_vim_edit_and_save(writer):
    target = writer.path / "notes.txt"
    target.write_text("alpha\nbeta\n")
    result = subprocess.run(["vim", "-es", "-u", "NONE", "-c", "set backup writebackup", "-c", "%s/beta/gamma/",
                             "-c", "wq", str(target)], capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    assert result.returncode == 0, result
    writer.sync()
    assert writer.emu.download("/notes.txt") == b"alpha\ngamma\n"
    names = remote_files(writer.emu, "")
    assert not [n for n in names if n.endswith(".swp")], names


def test_sqlite_database_created_and_updated(writer):
    db = str(writer.path / "data.sqlite")
    subprocess.run(["sqlite3", db, "create table t(x integer); insert into t values (1), (2);"], check=True)
    subprocess.run(["sqlite3", db, "insert into t values (3); update t set x = x * 10;"], check=True)
    out = subprocess.run(["sqlite3", db, "select sum(x) from t;"], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "60"
    writer.sync()
    local = Path(db).read_bytes()
    assert writer.emu.download("/data.sqlite") == local


def test_append_and_truncate(writer):
    path = writer.path / "log.txt"
    subprocess.run(["sh", "-c", f"echo one >> '{path}'; echo two >> '{path}'; echo three >> '{path}'"], check=True)
    assert path.read_text() == "one\ntwo\nthree\n"
    writer.sync()
    assert writer.emu.download("/log.txt") == b"one\ntwo\nthree\n"
    subprocess.run(["truncate", "-s", "4", str(path)], check=True)
    assert path.stat().st_size == 4
    subprocess.run(["sh", "-c", f"echo four >> '{path}'"], check=True)
    subprocess.run(["truncate", "-s", "20", str(path)], check=True)  # sparse extension
    writer.sync()
    assert writer.emu.download("/log.txt") == b"one\nfour\n" + b"\0" * 11


def test_random_and_sparse_writes_and_rdwr_without_truncate(writer):
    original = random.Random(5).randbytes(3 * BLOCK + 123)
    writer.emu.upload("/rw.bin", original)
    wait_visible(writer.path / "rw.bin")
    expected = bytearray(original)
    with open(writer.path / "rw.bin", "r+b") as f:     # O_RDWR, no O_TRUNC: the old bytes stay
        for offset in (5, BLOCK - 2, 2 * BLOCK + 7):
            f.seek(offset)
            f.write(b"XYZ")
            expected[offset:offset + 3] = b"XYZ"
        f.seek(len(expected) + 1000)                  # past the end: a hole of zeros
        f.write(b"tail")
        expected += b"\0" * 1000 + b"tail"
        f.seek(0)
        assert f.read() == bytes(expected)
    assert (writer.path / "rw.bin").read_bytes() == bytes(expected)
    writer.sync()
    assert writer.emu.download("/rw.bin") == bytes(expected)


def test_fallocate_is_refused_posix_fallocate_and_copy_file_range_work_and_blocks_are_sizes(writer):
    """docs/SEMANTICS.md: fallocate fails with EOPNOTSUPP (glibc's posix_fallocate then writes
    zeros), copy_file_range copies through the mount, st_blksize is 1 MiB and st_blocks the size
    in 512-byte units (Dropbox keeps no holes)."""
    path = writer.path / "prealloc.bin"
    path.write_bytes(b"head")
    fd = os.open(path, os.O_RDWR)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
        assert libc.fallocate(fd, 0, 0, 100_000) == -1
        assert ctypes.get_errno() == errno.EOPNOTSUPP
        punch = 0x02 | 0x01   # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
        assert libc.fallocate(fd, punch, 0, 2) == -1
        assert ctypes.get_errno() == errno.EOPNOTSUPP
        os.posix_fallocate(fd, 0, 100_000)            # glibc falls back to writing zeros
        assert os.fstat(fd).st_size == 100_000
    finally:
        os.close(fd)
    assert path.read_bytes() == b"head" + b"\0" * (100_000 - 4)
    st = path.stat()
    assert st.st_blksize == 1 << 20
    assert st.st_blocks == (100_000 + 511) // 512

    source = writer.path / "source.bin"
    data = random.Random(7).randbytes(300_000)
    source.write_bytes(data)
    with open(source, "rb") as src, open(writer.path / "copy.bin", "wb") as dst:
        copied = 0
        while copied < len(data):
            n = os.copy_file_range(src.fileno(), dst.fileno(), len(data) - copied)
            assert n > 0
            copied += n
    assert (writer.path / "copy.bin").read_bytes() == data
    writer.sync()
    assert writer.emu.download("/prealloc.bin") == b"head" + b"\0" * (100_000 - 4)
    assert writer.emu.download("/copy.bin") == data


def test_mv_across_folders_and_rm_r(writer, tmp_path):
    src = make_tree(tmp_path / "src", files=12, seed=6)
    subprocess.run(["cp", "-r", str(src), str(writer.path / "a")], check=True)
    (writer.path / "b").mkdir()
    subprocess.run(["mv", str(writer.path / "a" / "dir1"), str(writer.path / "b" / "moved")], check=True)
    subprocess.run(["mv", str(writer.path / "a" / "dir2" / "file2.bin"), str(writer.path / "b" / "f2.bin")], check=True)
    # Onto an existing file: replaced, as the user sees it.
    subprocess.run(["mv", str(writer.path / "b" / "f2.bin"), str(writer.path / "a" / "dir0" / "file4.bin")], check=True)
    writer.sync()
    remote = remote_files(writer.emu, "")
    assert "b/moved/file1.bin" in remote and "a/dir1/file1.bin" not in remote
    assert writer.emu.download("/a/dir0/file4.bin") == (src / "dir2" / "file2.bin").read_bytes()
    subprocess.run(["rm", "-r", str(writer.path / "a")], check=True)
    writer.sync()
    remote = remote_files(writer.emu, "")
    assert not [n for n in remote if n.startswith("a/")]
    with pytest.raises(Exception):
        writer.emu.api("files/get_metadata", {"path": "/a"})


def test_rename_flags_and_case_only_rename(writer):
    (writer.path / "x.txt").write_text("x")
    (writer.path / "y.txt").write_text("y")
    (writer.path / "readme.md").write_text("read me")
    writer.sync()
    # A file named in another case is an alias with its own inode number (VFSCache/Facade/CaseAliases.swift),
    # so the kernel passes a case-only rename on instead of treating it as a no-op.
    assert (writer.path / "X.TXT").read_text() == "x"
    assert os.stat(writer.path / "X.TXT").st_ino != os.stat(writer.path / "x.txt").st_ino
    os.rename(writer.path / "x.txt", writer.path / "X.txt")
    subprocess.run(["mv", str(writer.path / "readme.md"), str(writer.path / "README.md")], check=True)
    names = os.listdir(writer.path)
    assert "X.txt" in names and "x.txt" not in names
    assert "README.md" in names and "readme.md" not in names
    assert (writer.path / "README.md").read_text() == "read me"
    renameat2 = _renameat2()
    if renameat2:
        assert renameat2(str(writer.path / "X.txt"), str(writer.path / "y.txt"), 1) == -errno.EEXIST   # NOREPLACE
        assert renameat2(str(writer.path / "X.txt"), str(writer.path / "y.txt"), 2) == -errno.EINVAL   # EXCHANGE
    writer.sync()
    assert writer.emu.api("files/get_metadata", {"path": "/x.txt"})["name"] == "X.txt"
    assert writer.emu.api("files/get_metadata", {"path": "/readme.md"})["name"] == "README.md"
    assert writer.emu.download("/README.md") == b"read me"
    assert writer.emu.download("/y.txt") == b"y"
    # Written through an alias: the same file, one upload.
    with open(writer.path / "Y.TXT", "a") as f:
        f.write("+")
    writer.sync()
    assert writer.emu.download("/y.txt") == b"y+"
    assert sorted(n for n in os.listdir(writer.path) if n.lower() == "y.txt") == ["y.txt"]
    # A folder: `mv -T` renames it in place; its files follow and stay readable through any case.
    (writer.path / "photos" / "2024").mkdir(parents=True)
    (writer.path / "photos" / "2024" / "a.jpg").write_bytes(b"jpeg")
    assert (writer.path / "PHOTOS" / "2024" / "A.JPG").read_bytes() == b"jpeg"
    subprocess.run(["mv", "-T", str(writer.path / "photos"), str(writer.path / "Photos")], check=True)
    assert "Photos" in os.listdir(writer.path) and "photos" not in os.listdir(writer.path)
    assert (writer.path / "Photos" / "2024" / "a.jpg").read_bytes() == b"jpeg"
    writer.sync()
    assert writer.emu.api("files/get_metadata", {"path": "/photos"})["path_display"] == "/Photos"
    assert writer.emu.download("/Photos/2024/a.jpg") == b"jpeg"


def test_two_names_that_differ_only_in_case_are_refused_not_merged(writer, tmp_path):
    """`README` and `readme` cannot both be on Dropbox. cp -r says so (EEXIST on the second
    create); rsync -a creates a temporary name and renames it onto the target, and that rename
    must be refused the same way instead of silently replacing the first file by the second
    (exit 0, one file left). A rename of the same file to another case stays a case-only rename."""
    source = tmp_path / "clash"
    source.mkdir()
    (source / "README").write_text("upper\n")
    (source / "readme").write_text("lower\n")
    copy = subprocess.run(["cp", "-r", str(source), str(writer.path / "by-cp")], capture_output=True, text=True)
    assert copy.returncode != 0 and "File exists" in copy.stderr, copy.stderr
    sync = subprocess.run(["rsync", "-a", f"{source}/", str(writer.path / "by-rsync")], capture_output=True, text=True)
    print(sync.returncode, sync.stderr)
    assert sync.returncode != 0 and "File exists" in sync.stderr, (sync.returncode, sync.stderr)
    for folder in ("by-cp", "by-rsync"):
        names = [n for n in os.listdir(writer.path / folder) if not n.startswith(".")]
        assert len(names) == 1, names
        # Whichever came first kept its own bytes.
        assert (writer.path / folder / names[0]).read_text() == (source / names[0]).read_text()
    # A different file renamed onto a case variant of an existing name: refused.
    (writer.path / "by-rsync" / "other").write_text("other\n")
    with pytest.raises(OSError) as err:
        os.rename(writer.path / "by-rsync" / "other", writer.path / "by-rsync" / "Readme")
    assert err.value.errno == errno.EEXIST
    # The same file to another case: allowed.
    kept = [n for n in os.listdir(writer.path / "by-rsync") if n.lower() == "readme"][0]
    os.rename(writer.path / "by-rsync" / kept, writer.path / "by-rsync" / "ReadMe")
    assert (writer.path / "by-rsync" / "ReadMe").read_text() == (source / kept).read_text()
    writer.sync()
    names = sorted(e["name"] for e in writer.emu.listing("/by-rsync"))
    assert names == ["ReadMe", "other"], names


def _renameat2():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "renameat2"):
        return None

    def call(a, b, flags):
        r = libc.renameat2(-100, a.encode(), -100, b.encode(), flags)
        return -ctypes.get_errno() if r != 0 else 0
    return call


def test_rmdir_is_never_recursive(writer):
    (writer.path / "full").mkdir()
    (writer.path / "full" / "local.txt").write_text("pending or not")
    with pytest.raises(OSError) as err:
        os.rmdir(writer.path / "full")
    assert err.value.errno == errno.ENOTEMPTY
    # A folder that only has a child on the server (the mount may not have seen it yet): the
    # rmdir is refused at once if the tree shows the child, else it returns, Dropbox is asked
    # before the delete is sent, and the rmdir is undone (sync names it) rather than the child
    # deleted; the folder shows again with the child.
    (writer.path / "remote-full").mkdir()
    writer.emu.upload("/remote-full/other.txt", b"someone else's")
    try:
        os.rmdir(writer.path / "remote-full")
        result = subprocess.run([writer.binary, "sync", str(writer.path)], capture_output=True, text=True, timeout=120)
        print(f"rmdir returned; sync: {result.returncode} {result.stderr.strip()}")
        assert result.returncode == 1 and "rmdir /remote-full: undone" in result.stderr
    except OSError as err:
        assert err.errno == errno.ENOTEMPTY
    assert writer.emu.download("/remote-full/other.txt") == b"someone else's"
    deadline = time.monotonic() + 15
    while not (writer.path / "remote-full" / "other.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (writer.path / "remote-full" / "other.txt").read_bytes() == b"someone else's"
    (writer.path / "empty").mkdir()
    os.rmdir(writer.path / "empty")
    writer.sync()
    with pytest.raises(Exception):
        writer.emu.api("files/get_metadata", {"path": "/empty"})


def test_names_refused_and_too_long(writer):
    for name in ("desktop.ini", "Thumbs.db", ".DS_Store", ".dropbox", ".dropbox.attr", "Icon\r"):
        with pytest.raises(OSError) as err:
            open(writer.path / name, "w").close()
        assert err.value.errno == errno.EINVAL, name
    with pytest.raises(OSError) as err:
        open(writer.path / ("n" * 256), "w").close()
    assert err.value.errno == errno.ENAMETOOLONG
    with pytest.raises(OSError) as err:
        os.open(os.fsencode(str(writer.path)) + b"/bad\xff.txt", os.O_CREAT | os.O_WRONLY)
    assert err.value.errno == errno.EILSEQ
    open(writer.path / ("n" * 255), "w").close()
    writer.sync()
    assert writer.emu.api("files/get_metadata", {"path": "/" + "n" * 255})["size"] == 0


def test_fsync_returns_once_committed(writer):
    with open(writer.path / "synced.bin", "wb") as f:
        f.write(b"durable" * 1000)
        f.flush()
        os.fsync(f.fileno())
        # No dbxfs sync: fsync alone promised it is on Dropbox.
        assert writer.emu.download("/synced.bin") == b"durable" * 1000


def test_unlinked_open_file_has_no_links(writer):
    """pjdfstest unlink/14.t: fstat of a descriptor whose file was unlinked reports st_nlink 0,
    as on ext4; so does a file replaced by a rename while open. The descriptor keeps working."""
    path = writer.path / "nlink.txt"
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.write(fd, b"still here")
        assert os.fstat(fd).st_nlink == 1
        os.unlink(path)
        assert os.fstat(fd).st_nlink == 0
        assert os.pread(fd, 100, 0) == b"still here"
    finally:
        os.close(fd)
    (writer.path / "target.txt").write_text("old")
    (writer.path / "source.txt").write_text("new")
    fd = os.open(writer.path / "target.txt", os.O_RDONLY)
    try:
        os.rename(writer.path / "source.txt", writer.path / "target.txt")
        assert os.fstat(fd).st_nlink == 0
        assert (writer.path / "target.txt").stat().st_nlink == 1
    finally:
        os.close(fd)


def test_a_rewritten_file_keeps_only_its_current_blocks_cached(writer):
    """fsx rewrote a 156 KiB file 20,000 times and left 1342 block files (294 MiB) of old revs in
    the disk cache. Each rewrite commits a new rev; the old rev's blocks go, and status counts
    exactly the block files on disk."""
    path = writer.path / "rewritten.bin"
    for i in range(8):
        data = random.Random(i).randbytes(160_000)
        with open(path, "r+b" if i else "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"], capture_output=True)
        assert path.read_bytes() == data   # read back from Dropbox: caches this rev's blocks
    blocks = writer.path.parent / "cache" / "blocks"
    deadline = time.monotonic() + 10
    while True:
        # A block still being written is a .tmp- file, renamed into place once whole.
        files = [p for p in blocks.rglob("*") if p.is_file() and not p.name.startswith(".tmp-")]
        status = json.loads(subprocess.run([writer.binary, "status", "--json", str(writer.path)], capture_output=True,
                                           text=True, timeout=30).stdout)
        cache = status["mounts"][0]["cache"]
        if len(files) == 1 and cache["disk_bytes"] == 160_000 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [f.stat().st_size for f in files] == [160_000], files
    assert cache["disk_bytes"] == sum(f.stat().st_size for f in files)
    assert cache["memory_bytes"] <= 160_000


def test_what_the_mount_wrote_is_read_back_without_a_download(writer):
    """docs/WRITEBACK.md step 4: once a commit lands with our content hash, the staging file's
    bytes become that revision's copy in the disk cache. Before, the bytes left the machine with
    the staging file, and every read-back (git reading the objects it just wrote, make reading
    its outputs, tar then diff) downloaded the file again: 1058 downloads for a git clone of
    1000 files at 50 ms (docs/BENCHMARKS.md)."""
    rng = random.Random(41)
    files = {f"readback/f{size}.bin": rng.randbytes(size)
             for size in (1, 5000, 300_000, 4 * 1024 * 1024, 9 * 1024 * 1024 + 17)}
    (writer.path / "readback").mkdir()
    for name, data in files.items():
        (writer.path / name).write_bytes(data)
    writer.sync()
    for name, data in files.items():
        assert writer.emu.download("/" + name) == data, name
    writer.emu.reset_stats()
    for name, data in files.items():
        # The open after the commit sees a new rev: the kernel drops its pages, the daemon reads.
        with open(writer.path / name, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            assert f.read() == data, name
            f.seek(len(data) // 2)   # and a random read in the middle
            assert f.read(100) == data[len(data) // 2:len(data) // 2 + 100], name
    requests = writer.emu.stats()["requests"]
    assert requests.get("files/download", 0) == 0, requests
    # The copies are the disk cache's: a remount reads them from there too.
    writer.remount()
    writer.emu.reset_stats()
    for name, data in files.items():
        assert (writer.path / name).read_bytes() == data, name
    requests = writer.emu.stats()["requests"]
    assert requests.get("files/download", 0) == 0, requests
    # A later revision written elsewhere is downloaded, not served from our copy.
    newer = rng.randbytes(300_000)
    writer.emu.upload("/readback/f300000.bin", newer, mode="overwrite")
    deadline = time.monotonic() + 30
    while (writer.path / "readback/f300000.bin").read_bytes() != newer and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (writer.path / "readback/f300000.bin").read_bytes() == newer
    assert writer.emu.stats()["requests"].get("files/download", 0) >= 1


def test_read_your_writes_before_the_upload(writer):
    writer.emu.config(latency_ms=300)
    try:
        data = random.Random(7).randbytes(200_000)
        (writer.path / "pending.bin").write_bytes(data)
        assert (writer.path / "pending.bin").stat().st_size == len(data)
        # Drop the kernel's caches: the bytes must come from the staging file.
        subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"], capture_output=True)
        assert (writer.path / "pending.bin").read_bytes() == data
        assert "pending.bin" in os.listdir(writer.path)
    finally:
        writer.emu.config(latency_ms=0)
    writer.sync()
    assert writer.emu.download("/pending.bin") == data


def test_eight_concurrent_writers(writer):
    payloads = {f"w{i}.bin": random.Random(100 + i).randbytes(random.Random(i).choice([10_000, 3_000_000, 9_000_000]))
                for i in range(8)}
    errors = []

    def write(name, data):
        try:
            with open(writer.path / "conc" / name, "wb") as f:
                for i in range(0, len(data), 65536):
                    f.write(data[i:i + 65536])
        except Exception as e:   # noqa: BLE001
            errors.append(e)

    (writer.path / "conc").mkdir()
    threads = [threading.Thread(target=write, args=item) for item in payloads.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    writer.sync()
    for name, data in payloads.items():
        assert writer.emu.download("/conc/" + name) == data


def test_large_file(writer, tmp_path):
    size = 256 << 20
    src = tmp_path / "large.bin"
    with open(src, "wb") as f:
        f.write(os.urandom(size))
    subprocess.run(["cp", str(src), str(writer.path / "large.bin")], check=True)
    writer.sync()
    entry = writer.emu.api("files/get_metadata", {"path": "/large.bin"})
    assert entry["size"] == size
    h = hashlib.sha256()
    with open(src, "rb") as f:
        blocks = [hashlib.sha256(f.read(BLOCK)).digest() for _ in range(size // BLOCK)]
    assert entry["content_hash"] == hashlib.sha256(b"".join(blocks)).hexdigest()


def test_conflict_while_open_keeps_both(writer):
    writer.emu.upload("/shared.txt", b"original\n")
    wait_visible(writer.path / "shared.txt")
    assert (writer.path / "shared.txt").read_text() == "original\n"
    with open(writer.path / "shared.txt", "r+") as f:
        f.seek(0, 2)
        f.write("ours\n")
        f.flush()
        # Someone else changes the file on Dropbox meanwhile.
        writer.emu.upload("/shared.txt", b"theirs\n", mode="overwrite")
    writer.sync()
    assert writer.emu.download("/shared.txt") == b"theirs\n"
    copies = [e for n, e in remote_files(writer.emu, "").items() if n.startswith("shared (conflicted copy ")]
    assert len(copies) == 1, copies
    assert writer.emu.download(copies[0]["path_display"]) == b"original\nours\n"
    # The mount shows both.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not [n for n in os.listdir(writer.path) if "conflicted copy" in n]:
        time.sleep(0.2)
    assert [n for n in os.listdir(writer.path) if n.startswith("shared (conflicted copy ")]


def test_faults_during_a_copy_of_500_files_all_arrive_once(writer, tmp_path):
    src = tmp_path / "many"
    src.mkdir()
    for i in range(500):
        (src / f"f{i:03d}.txt").write_bytes(f"file {i}\n".encode() * (i % 7 + 1))
    writer.emu.reset_stats()
    writer.emu.config(fail_rate=0.05, reset_rate=0.03, rate_limit=400)
    try:
        subprocess.run(["cp", "-r", str(src), str(writer.path / "many")], check=True)
        writer.sync(timeout=600)
    finally:
        writer.emu.config(fail_rate=0, reset_rate=0, rate_limit=0)
    faults = writer.emu.stats()["faults"]
    assert faults["fail"] + faults["reset"] + faults["rate_limited"] > 0, faults
    remote = remote_files(writer.emu, "/many")
    assert len(remote) == 500
    assert_remote_matches(writer.emu, src, "/many")
    assert not [n for n in remote if "conflicted copy" in n]


# ----- crash safety -----

def test_kill9_during_write_back_then_remount_loses_nothing(writer):
    """Ten kill points: files are written and closed, the daemon is killed at a random moment of
    their write-back, remounted on the same cache directory, and `dbxfs sync` must bring every
    byte to Dropbox."""
    rng = random.Random(9)
    expected = {}
    writer.emu.config(latency_ms=40)
    try:
        for round_ in range(10):
            d = writer.path / f"k{round_}"
            d.mkdir()
            for i in range(12):
                data = rng.randbytes(rng.choice([1, 3000, 40_000, 600_000]))
                (d / f"f{i}.bin").write_bytes(data)
                expected[f"/k{round_}/f{i}.bin"] = data
            big = rng.randbytes(9 << 20)         # one session upload (over the 8 MiB threshold)
            (d / "big.bin").write_bytes(big)
            expected[f"/k{round_}/big.bin"] = big
            # Close has returned for every file: now kill at some point of the upload.
            time.sleep(rng.uniform(0, 0.8))
            writer.kill9()
            writer.remount()
    finally:
        writer.emu.config(latency_ms=0)
    writer.sync(timeout=600)
    for path, data in expected.items():
        assert writer.emu.download(path) == data, path
    names = remote_files(writer.emu, "")
    assert not [n for n in names if "conflicted copy" in n and n.startswith("k")]
    assert len([n for n in names if n.startswith("k")]) == len(expected)


# ----- unmount, full cache disk -----

def test_unmount_drains_pending_uploads(dbxfs_binary, wemu, tmp_path):
    """fusermount3 -u with uploads pending: the daemon uploads them before it exits."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    wemu.config(latency_ms=150)
    try:
        m = Mount(dbxfs_binary, mnt, dropbox_args(wemu, tmp_path / "cache"), env=dropbox_env())
        m.start()
        try:
            (mnt / "drain").mkdir()
            for i in range(5):
                (mnt / "drain" / f"d{i}.txt").write_text(f"drain {i}\n")
        finally:
            m.stop()
        assert m.proc.returncode == 0
    finally:
        wemu.config(latency_ms=0)
    for i in range(5):
        assert wemu.download(f"/drain/d{i}.txt") == f"drain {i}\n".encode()
    assert "every pending upload is on Dropbox" in m.read_log()


def test_unmount_bound_keeps_leftovers_journaled_and_names_them(dbxfs_binary, wemu, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    args = dropbox_args(wemu, tmp_path / "cache")
    m = Mount(dbxfs_binary, mnt, args, env=dict(dropbox_env(), DBXFS_UNMOUNT_DRAIN_SECONDS="1"))
    m.start()
    try:
        # The next mount starts offline from the tree this one saves (listed in the background).
        os.listdir(mnt)
        wait_saved_tree(tmp_path / "cache")
        wemu.config(fail_rate=1.0)      # Dropbox answers 500 to everything: nothing can land
        (mnt / "leftover.txt").write_text("kept for later\n")
        m.stop()
    finally:
        wemu.config(fail_rate=0)
    log = m.read_log()
    assert "not uploaded yet" in log and "/leftover.txt" in log, log
    wemu.config(fail_rate=1.0)
    try:
        with Mount(dbxfs_binary, mnt, args, env=dropbox_env()):
            # Resumed from the journal, not on Dropbox yet, and shown on the mount all the same.
            wait_visible(mnt / "leftover.txt")
            assert (mnt / "leftover.txt").read_text() == "kept for later\n"
            wemu.config(fail_rate=0)
            result = subprocess.run([dbxfs_binary, "sync", str(mnt)], capture_output=True, text=True, timeout=120)
            assert result.returncode == 0, result.stderr
    finally:
        wemu.config(fail_rate=0)
    assert wemu.download("/leftover.txt") == b"kept for later\n"


def wait_saved_tree(cache, timeout=30):
    """Waits until the mount using `cache` has saved its metadata tree (a cursor in
    metadata.sqlite3), which an offline start needs."""
    import sqlite3
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            db = sqlite3.connect(f"file:{cache / 'metadata.sqlite3'}?mode=ro", uri=True)
            try:
                if db.execute("SELECT value FROM state WHERE key = 'cursor'").fetchone():
                    return
            finally:
                db.close()
        except sqlite3.Error:
            pass
        time.sleep(0.1)
    raise AssertionError(f"no saved tree in {cache} after {timeout} s")


@contextlib.contextmanager
def small_disk(path, size):
    """A tmpfs of `size` mounted at `path` (mode 0700: a cache directory others can write to is
    refused), for a cache directory on a small disk; unmounted at the end (callers unmount their
    dbxfs mount first). Skips the test when it cannot (not root)."""
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=700", "tmpfs", str(path)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs for the cache (needs root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_full_cache_disk_gives_enospc(dbxfs_binary, wemu, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with small_disk(tmp_path / "small-cache", "6m") as cache:
        try:
            with Mount(dbxfs_binary, mnt, dropbox_args(wemu, cache, "--cache-size", "1M"), env=dropbox_env()):
                with pytest.raises(OSError) as err:
                    with open(mnt / "too-big.bin", "wb") as f:
                        for _ in range(16):
                            f.write(b"\1" * (1 << 20))
                assert err.value.errno == errno.ENOSPC
                # Small files still work once space is back.
                (mnt / "too-big.bin").unlink()
                (mnt / "small.txt").write_text("fits\n")
                subprocess.run([dbxfs_binary, "sync", str(mnt)], check=True, capture_output=True, timeout=60)
            assert wemu.download("/small.txt") == b"fits\n"
        finally:
            force_unmount(str(mnt))



def test_copies_of_written_files_never_take_the_cache_disks_last_space(dbxfs_binary, wemu, tmp_path):
    """The bytes of each commit are kept in the disk cache (docs/VFSCACHE.md, "Bytes the mount
    wrote"), but never at the cost of later writes: a cache directory on a disk smaller than
    --cache-size took the copies until the disk was full, and the next write failed with ENOSPC
    where, before the copies, each commit freed its staging file."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with small_disk(tmp_path / "cache-disk", "40m") as cache:
        try:
            with Mount(dbxfs_binary, mnt, dropbox_args(wemu, cache), env=dropbox_env()) as m:
                files = {f"fill/f{i}.bin": random.Random(300 + i).randbytes(4 << 20) for i in range(12)}
                (mnt / "fill").mkdir()
                for name, data in files.items():
                    (mnt / name).write_bytes(data)
                    sync = subprocess.run([dbxfs_binary, "sync", str(mnt)], capture_output=True, text=True, timeout=120)
                    assert sync.returncode == 0, sync.stdout + sync.stderr + m.read_log()
                for name, data in files.items():
                    assert wemu.download("/" + name) == data, name
                # Some copies were kept all the same.
                kept = [p for p in (cache / "blocks").rglob("*") if p.is_file() and not p.name.startswith(".tmp-")]
                assert kept, m.read_log()
        finally:
            force_unmount(str(mnt))

def test_downloaded_blocks_never_take_the_cache_disks_last_space(dbxfs_binary, wemu, tmp_path):
    """Blocks kept from reads share the cache disk with the files being written: a cache
    directory on a disk smaller than --cache-size filled it with downloaded blocks, and the next
    write failed with ENOSPC although every one of those blocks could have been let go."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    files = {f"read/r{i}.bin": random.Random(400 + i).randbytes(4 << 20) for i in range(12)}
    for name, data in files.items():
        wemu.upload("/" + name, data, mode="overwrite")
    with small_disk(tmp_path / "cache-disk", "40m") as cache:
        try:
            with Mount(dbxfs_binary, mnt, dropbox_args(wemu, cache), env=dropbox_env()) as m:
                for name, data in files.items():
                    assert (mnt / name).read_bytes() == data, name
                kept = [p for p in (cache / "blocks").rglob("*") if p.is_file() and not p.name.startswith(".tmp-")]
                assert kept, m.read_log()  # reads are still cached, within the disk's room
                written = random.Random(499).randbytes(20 << 20)  # more than the room blocks leave
                (mnt / "after-reads.bin").write_bytes(written)
                sync = subprocess.run([dbxfs_binary, "sync", str(mnt)], capture_output=True, text=True, timeout=120)
                assert sync.returncode == 0, sync.stdout + sync.stderr + m.read_log()
                assert wemu.download("/after-reads.bin") == written
        finally:
            force_unmount(str(mnt))


def test_insufficient_space_stays_journaled_and_shows_at_fsync(writer):
    used = sum(e["size"] for e in remote_files(writer.emu, "").values())
    writer.emu.config(quota=used + 1000)
    try:
        fd = os.open(writer.path / "huge.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.write(fd, b"\2" * 5000)
        with pytest.raises(OSError) as err:
            os.fsync(fd)
        assert err.value.errno == errno.ENOSPC
        # close reports it too (flush), and the bytes stay journaled.
        with pytest.raises(OSError) as err:
            os.close(fd)
        assert err.value.errno == errno.ENOSPC
        sync = subprocess.run([writer.binary, "sync", str(writer.path)], capture_output=True, text=True, timeout=120)
        assert sync.returncode != 0 and "huge.bin" in sync.stdout + sync.stderr
        status = subprocess.run([writer.binary, "status", str(writer.path)], capture_output=True, text=True, timeout=30)
        assert "huge.bin" in status.stdout
    finally:
        writer.emu.config(quota=0)
    # Space is back: the journaled file goes up (the engine retries held files every 60 s, or at
    # the next write; here a rewrite of the same bytes nudges it).
    (writer.path / "huge.bin").write_bytes(b"\2" * 5000)
    writer.sync()
    assert writer.emu.download("/huge.bin") == b"\2" * 5000


def test_a_burst_of_small_files_costs_one_call_each_plus_the_batch_commit(writer, tmp_path):
    """Each small file of a burst is one upload_session/start carrying its bytes and closing the
    session; the burst is then committed by finish_batch_v2 (issue 15: 2 calls per file before)."""
    src = tmp_path / "small"
    src.mkdir()
    for i in range(30):
        (src / f"s{i:02d}.txt").write_bytes(f"small file {i}\n".encode() * 50)
    writer.sync()
    writer.emu.reset_stats()
    subprocess.run(["cp", "-r", str(src), str(writer.path / "small")], check=True)
    writer.sync()
    calls = writer.emu.stats()["requests"]
    assert_remote_matches(writer.emu, src, "/small")
    sessions = calls.get("files/upload_session/start", 0)
    uploads = calls.get("files/upload", 0)
    assert sessions + uploads == 30, calls
    assert calls.get("files/upload_session/append_v2", 0) == 0, calls
    assert calls.get("files/upload_session/finish_batch_v2", 0) <= 3, calls


def test_a_file_over_quota_reads_back_and_sync_retries_it_once_space_is_freed(writer, tmp_path):
    """Issue 12: `cp` of a file bigger than the free quota succeeds (close never waits for
    Dropbox) and sync names it; reading it back (cat, cp from the mount) must never fail with
    its upload's error; and once space is freed, `dbxfs sync` retries at once, not after the
    60 s retry delay of a hard failure."""
    used = sum(e["size"] for e in remote_files(writer.emu, "").values())
    data = random.Random(11).randbytes(10 << 20)
    source = tmp_path / "q10.bin"
    source.write_bytes(data)
    writer.emu.config(quota=used + (5 << 20))
    try:
        subprocess.run(["cp", str(source), str(writer.path) + "/"], check=True, timeout=60)
        sync = subprocess.run([writer.binary, "sync", str(writer.path)], capture_output=True, text=True, timeout=120)
        assert sync.returncode == 1 and "q10.bin" in sync.stderr, sync.stdout + sync.stderr
        cat = subprocess.run(["cat", str(writer.path / "q10.bin")], capture_output=True, timeout=60)
        assert cat.returncode == 0, cat.stderr
        assert cat.stdout == data
        copied = tmp_path / "copied.bin"
        cp = subprocess.run(["cp", str(writer.path / "q10.bin"), str(copied)], capture_output=True, text=True, timeout=60)
        assert cp.returncode == 0, cp.stderr
        assert copied.read_bytes() == data
    finally:
        writer.emu.config(quota=0)
    sync = subprocess.run([writer.binary, "sync", "--timeout", "40", str(writer.path)], capture_output=True, text=True,
                          timeout=120)
    assert sync.returncode == 0, sync.stdout + sync.stderr + writer.mount.read_log()
    assert writer.emu.download("/q10.bin") == data


def test_a_full_cache_disk_never_leaves_a_file_that_sync_calls_uploaded(dbxfs_binary, wemu, tmp_path):
    """Issue 12: the cache directory on a 30 MiB tmpfs, `cp 40M.bin M/`: cp gets ENOSPC and the
    partial file stays, as on a local disk. Its close could not be journaled (SQLite finds the
    disk full too), so the file is held: status and sync report it as failed, sync never says
    everything is on Dropbox. Once the disk has room, sync journals and uploads it as the
    writer left it (docs/SEMANTICS.md, "Writing")."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    source = tmp_path / "40M.bin"
    source.write_bytes(random.Random(12).randbytes(40 << 20))
    with small_disk(tmp_path / "tiny-cache", "30m") as cache:
        try:
            with Mount(dbxfs_binary, mnt, dropbox_args(wemu, cache), env=dropbox_env()) as m:
                cp = subprocess.run(["cp", str(source), str(mnt) + "/"], capture_output=True, text=True, timeout=120)
                assert cp.returncode != 0 and "No space left on device" in cp.stderr, cp.stderr
                left = (mnt / "40M.bin").read_bytes()
                assert 0 < len(left) < 40 << 20 and source.read_bytes().startswith(left)
                status = subprocess.run([dbxfs_binary, "status", str(mnt)], capture_output=True, text=True, timeout=30).stdout
                line = next(line for line in status.splitlines() if "40M.bin" in line)
                assert "failed" in line and "open for writing" not in line and "writing" not in line, status
                sync = subprocess.run([dbxfs_binary, "sync", "--timeout", "60", str(mnt)], capture_output=True, text=True,
                                      timeout=120)
                assert sync.returncode == 1, sync.stdout + sync.stderr + m.read_log()
                assert "/40M.bin" in sync.stderr and "journal" in sync.stderr, sync.stderr
                # Room again: sync journals it and uploads what the writer left.
                subprocess.run(["mount", "-o", "remount,size=200m", str(cache)], check=True)
                sync = subprocess.run([dbxfs_binary, "sync", "--timeout", "60", str(mnt)], capture_output=True, text=True,
                                      timeout=120)
                assert sync.returncode == 0, sync.stdout + sync.stderr + m.read_log()
                uploaded = wemu.download("/40M.bin")
                assert uploaded == left, f"uploaded {len(uploaded)} bytes, the mount showed {len(left)}"
                (mnt / "40M.bin").unlink()
        finally:
            force_unmount(str(mnt))

