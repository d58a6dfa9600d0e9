"""The read side, end to end: the real dbxfs binary mounts the emulator (seeded from a local
tree) and ordinary tools and syscalls read through it. Every mount is unmounted in teardown,
even when a test fails (conftest.Mount)."""

import errno
import hashlib
import mmap
import os
import subprocess
import threading
import time

import pytest

from mount_support import TOKEN, Emulator, Mount, dropbox_args, dropbox_env, force_unmount, mounted_at
from emulator import content_hash

BLOCK = 4 << 20


@pytest.fixture(scope="module")
def mounted(dbxfs_binary, emulator, tmp_path_factory):
    """One mount of the seeded emulator shared by the read-only tests of this module."""
    base = tmp_path_factory.mktemp("read-mount")
    mnt = base / "mnt"
    mnt.mkdir()
    m = Mount(dbxfs_binary, mnt, dropbox_args(emulator, base / "cache"), env=dropbox_env())
    m.start()
    yield m
    m.stop()


def test_tree_matches_seed(mounted, seed_tree):
    result = subprocess.run(["diff", "-r", str(seed_tree), mounted.path], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def test_ls_sizes_mtimes_and_modes(mounted, seed_tree):
    for rel in ["file.txt", "empty", "Docs/Report.md", "Docs/Deep/Deeper/leaf.bin", "large.bin"]:
        seed = os.stat(seed_tree / rel)
        st = os.stat(os.path.join(mounted.path, rel))
        assert st.st_size == seed.st_size, rel
        assert int(st.st_mtime) == int(seed.st_mtime), rel  # client_modified, whole seconds
        assert st.st_mode == 0o100644 and st.st_uid == os.getuid() and st.st_gid == os.getgid(), rel
    assert os.stat(os.path.join(mounted.path, "Docs")).st_mode == 0o40755
    listing = subprocess.run(["ls", "-la", os.path.join(mounted.path, "Docs")], check=True,
                             capture_output=True, text=True).stdout
    assert " 5009 " in listing and "Report.md" in listing and "Deep" in listing


def test_stat_command(mounted):
    out = subprocess.run(["stat", "-c", "%s %a %F %h", os.path.join(mounted.path, "Docs/notes.txt")],
                         check=True, capture_output=True, text=True).stdout.split()
    assert out[:2] == ["100000", "644"] and out[2] == "regular"


def test_case_insensitive_lookup_keeps_display_case(mounted):
    out = subprocess.run(["cat", os.path.join(mounted.path, "FILE.TXT")], check=True,
                         capture_output=True, text=True).stdout
    assert out == "hello from dropbox\n"
    assert "Docs" in os.listdir(mounted.path) and os.path.isdir(os.path.join(mounted.path, "docs"))


def test_head_and_tail_of_large_file(mounted, seed_tree):
    data = (seed_tree / "large.bin").read_bytes()
    path = os.path.join(mounted.path, "large.bin")
    head = subprocess.run(["head", "-c", "3000001", path], check=True, capture_output=True).stdout
    tail = subprocess.run(["tail", "-c", "5000003", path], check=True, capture_output=True).stdout
    assert head == data[:3000001]
    assert tail == data[-5000003:]
    whole = subprocess.run(["sha256sum", path], check=True, capture_output=True, text=True).stdout.split()[0]
    assert whole == hashlib.sha256(data).hexdigest()


def test_mmap_reads(mounted, seed_tree):
    data = (seed_tree / "Docs/Deep/Deeper/leaf.bin").read_bytes()
    with open(os.path.join(mounted.path, "Docs/Deep/Deeper/leaf.bin"), "rb") as f:
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
            assert len(m) == len(data)
            assert m[4_000_000:4_000_100] == data[4_000_000:4_000_100]
            assert m[:] == data


def test_eight_parallel_readers(mounted, seed_tree):
    data = (seed_tree / "large.bin").read_bytes()
    path = os.path.join(mounted.path, "large.bin")
    results = [None] * 8
    span = len(data) // 8

    def reader(i):
        # Each reader reads the whole file starting at its own offset, so they overlap.
        with open(path, "rb") as f:
            f.seek(i * span)
            tail = f.read()
            f.seek(0)
            head = f.read(i * span)
        results[i] = hashlib.sha256(head + tail).hexdigest()

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == [hashlib.sha256(data).hexdigest()] * 8


def test_unicode_names(mounted, seed_tree):
    folder = "Ünïcödé ☃"
    assert folder in os.listdir(mounted.path)
    assert sorted(os.listdir(os.path.join(mounted.path, folder))) == sorted(os.listdir(seed_tree / folder))
    with open(os.path.join(mounted.path, folder, "日本語.txt"), encoding="utf-8") as f:
        assert f.read() == "こんにちは\n"
    assert open(os.path.join(mounted.path, folder, "emoji ☺.txt")).read() == "smile\n"


def test_ten_thousand_entry_folder(mounted, emulator):
    names = os.listdir(os.path.join(mounted.path, "many"))
    assert len(names) == 10_000
    assert set(names) == {f"f{i:05d}.txt" for i in range(10_000)}
    assert open(os.path.join(mounted.path, "many", "f09999.txt")).read() == "9999\n"
    out = subprocess.run(["ls", "-l", os.path.join(mounted.path, "many")], check=True,
                         capture_output=True, text=True).stdout
    assert len(out.splitlines()) == 10_001


def test_xattrs(mounted, seed_tree):
    path = os.path.join(mounted.path, "Docs/notes.txt")
    names = set(os.listxattr(path))
    assert {"user.dropbox.content_hash", "user.dropbox.rev", "user.dropbox.id"} <= names
    expected = content_hash((seed_tree / "Docs/notes.txt").read_bytes())
    assert os.getxattr(path, "user.dropbox.content_hash").decode() == expected
    assert os.getxattr(path, "user.dropbox.id").decode().startswith("id:")
    assert len(os.getxattr(path, "user.dropbox.rev")) >= 9
    out = subprocess.run(["getfattr", "-n", "user.dropbox.content_hash", "--only-values", path],
                         capture_output=True, text=True)
    if out.returncode == 0:  # getfattr is optional on the test machine
        assert out.stdout == expected


def test_df_reports_account_space(mounted):
    st = os.statvfs(mounted.path)
    assert st.f_blocks > 0 and st.f_bavail <= st.f_blocks
    out = subprocess.run(["df", "-P", mounted.path], check=True, capture_output=True, text=True).stdout
    assert "dbxfs" in out.splitlines()[1]


def test_df_i_shows_plenty_of_free_inodes(mounted):
    """Dropbox has no inode limit: tools that check free inodes (df -i, installers, backup
    tools) must see nearly all free, the used ones being the entries the mount knows."""
    os.listdir(os.path.join(mounted.path, "many"))
    st = os.statvfs(mounted.path)
    used = st.f_files - st.f_ffree
    print(f"files {st.f_files}, free {st.f_ffree}, available {st.f_favail}")
    assert st.f_files >= 1 << 32 and st.f_favail == st.f_ffree
    assert 0 < used < 1_000_000, used
    out = subprocess.run(["df", "-i", mounted.path], check=True, capture_output=True, text=True).stdout
    use = out.splitlines()[1].split()[4]
    print(out)
    assert use in ("0%", "1%"), out


def test_read_survives_injected_5xx_and_resets(dbxfs_binary, emulator, seed_tree, tmp_path):
    """A cold mount (its own cache) reads while 20% of requests fail with 5xx and 10% of
    connections are reset: the retries must hide all of it and the bytes must be right."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with Mount(dbxfs_binary, mnt, dropbox_args(emulator, tmp_path / "cache"), env=dropbox_env()):
        try:
            before = emulator.stats()["faults"]
            # fail_next makes sure some requests fail whatever the dice say: with read-ahead and
            # whole-block fetches the reads below take only ~10 requests (no fault: ~4% of runs).
            emulator.config(fail_rate=0.2, reset_rate=0.1, fail_next=2)
            for rel in ["Docs/Deep/Deeper/leaf.bin", "Docs/notes.txt", "file.txt"]:
                with open(mnt / rel, "rb") as f:
                    assert f.read() == (seed_tree / rel).read_bytes(), rel
            with open(mnt / "large.bin", "rb") as f:
                assert hashlib.sha256(f.read()).digest() == hashlib.sha256((seed_tree / "large.bin").read_bytes()).digest()
            after = emulator.stats()["faults"]
            assert after["fail"] + after["reset"] > before["fail"] + before["reset"]  # faults did happen
        finally:
            emulator.config(fail_rate=0, reset_rate=0)


def test_idle_unmount_then_warm_remount(dbxfs_binary, emulator, seed_tree, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cache = tmp_path / "cache"
    first = Mount(dbxfs_binary, mnt, dropbox_args(emulator, cache), env=dropbox_env())
    with first:
        assert (mnt / "Docs/Deep/Deeper/leaf.bin").read_bytes() == (seed_tree / "Docs/Deep/Deeper/leaf.bin").read_bytes()
    # `with` ran fusermount3 -u on an idle mount: the daemon must have exited by itself, cleanly.
    assert first.proc.returncode == 0, first.read_log()
    assert not mounted_at(mnt)

    with Mount(dbxfs_binary, mnt, dropbox_args(emulator, cache), env=dropbox_env()):
        emulator.reset_stats()
        assert (mnt / "Docs/Deep/Deeper/leaf.bin").read_bytes() == (seed_tree / "Docs/Deep/Deeper/leaf.bin").read_bytes()
        requests = emulator.stats()["requests"]
        assert requests.get("files/download", 0) == 0, requests  # served from the disk cache


def run_dbxfs(binary, *args, env=None):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **(env or {})))


def test_bad_token_exits_non_zero_with_one_line(dbxfs_binary, emulator, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        for foreground in ([], ["-f"]):
            result = run_dbxfs(dbxfs_binary, *foreground, *dropbox_args(emulator, tmp_path / "cache"), str(mnt),
                               env={"DBXFS_ACCESS_TOKEN": "not-a-valid-token"})
            assert result.returncode == 1, result
            lines = [l for l in result.stderr.splitlines() if l.strip() and "debug" not in l]
            assert len(lines) == 1 and "token was rejected" in lines[0], result.stderr
            assert not mounted_at(mnt)
    finally:
        force_unmount(str(mnt))


def test_missing_mountpoint_and_unreachable_server(dbxfs_binary, emulator, tmp_path):
    missing = run_dbxfs(dbxfs_binary, *dropbox_args(emulator, tmp_path / "cache"), str(tmp_path / "nope"),
                        env=dropbox_env())
    assert missing.returncode == 1 and missing.stderr.strip().endswith("does not exist")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        down = run_dbxfs(dbxfs_binary, "--api-base", "http://127.0.0.1:9", str(mnt), env=dropbox_env())
        assert down.returncode == 1 and "cannot reach" in down.stderr and down.stderr.count("\n") == 1
    finally:
        force_unmount(str(mnt))


def test_network_down_gives_prompt_eio_then_recovers(dbxfs_binary, tmp_path):
    """With the server gone past the retry budget, a read fails with EIO in bounded time (no
    hung worker), and the same mount reads correctly once the server is back."""
    seed = tmp_path / "seed"
    seed.mkdir()
    data = os.urandom(3 << 20)
    (seed / "blob.bin").write_bytes(data)
    emu = Emulator(tmp_path / "emulator" / "data", token=TOKEN, seed=str(seed)).start()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        with Mount(dbxfs_binary, mnt, dropbox_args(emu, tmp_path / "cache"), env=dropbox_env()) as m:
            assert os.stat(mnt / "blob.bin").st_size == len(data)  # metadata is cached now
            emu.stop()
            start = time.monotonic()
            with pytest.raises(OSError) as failure:
                with open(mnt / "blob.bin", "rb") as f:
                    f.read()
            elapsed = time.monotonic() - start
            assert failure.value.errno == errno.EIO, failure.value
            assert elapsed < 60, f"EIO took {elapsed:.1f} s"
            assert "blob.bin" in m.read_log()  # the log line names the file
            emu.start()  # same data, same port
            # Offline, the mount fails fast and probes Dropbox at most once a second (the change
            # watcher too, with backoff), so a reader retrying like a user gets through within seconds.
            back = time.monotonic()
            while True:
                try:
                    with open(mnt / "blob.bin", "rb") as f:
                        assert f.read() == data
                    break
                except OSError as error:
                    assert error.errno == errno.EIO, error
                    assert time.monotonic() - back < 15, "the mount did not recover within 15 s"
                    time.sleep(0.25)
    finally:
        emu.stop()


def test_root_option_mounts_a_subfolder(dbxfs_binary, emulator, seed_tree, tmp_path):
    """--root (given in another case than Dropbox stores it) becomes the mount's root: paths go
    out prefixed and come back stripped, in listings, lookups and downloads."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with Mount(dbxfs_binary, mnt, dropbox_args(emulator, tmp_path / "cache", "--root", "/docs/"), env=dropbox_env()):
        assert sorted(os.listdir(mnt)) == sorted(os.listdir(seed_tree / "Docs"))
        assert (mnt / "Deep/Deeper/leaf.bin").read_bytes() == (seed_tree / "Docs/Deep/Deeper/leaf.bin").read_bytes()
        assert (mnt / "REPORT.md").read_text() == (seed_tree / "Docs/Report.md").read_text()
        assert not (mnt / "file.txt").exists()  # outside the root
    not_a_folder = run_dbxfs(dbxfs_binary, *dropbox_args(emulator, tmp_path / "cache2", "--root", "/file.txt"),
                             str(mnt), env=dropbox_env())
    assert not_a_folder.returncode == 1 and "is a file, not a folder" in not_a_folder.stderr
    missing = run_dbxfs(dbxfs_binary, *dropbox_args(emulator, tmp_path / "cache3", "--root", "/Nope"),
                        str(mnt), env=dropbox_env())
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    assert not mounted_at(mnt)
