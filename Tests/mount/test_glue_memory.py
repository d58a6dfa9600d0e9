"""The FUSE glue on its own: mounts dbxfs with the hidden in-memory backend (no Dropbox, no
cache layer) and drives every operation kind through real syscalls, so a glue bug shows here
rather than as a mystery in the Dropbox tests. Also the command line's own refusals."""

import errno
import ctypes
import os
import subprocess

import pytest

from mount_support import Mount, mounted_at

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


def renameat2(src, dst, flags):
    if libc.renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


@pytest.fixture
def memory_mount(dbxfs_binary, mountpoint):
    with Mount(dbxfs_binary, mountpoint, ["--backend", "memory"]) as m:
        yield m


def test_files_directories_and_attributes(memory_mount):
    root = memory_mount.path
    with open(f"{root}/a.txt", "w") as f:
        f.write("hello")
    assert open(f"{root}/A.TXT").read() == "hello"  # case-insensitive lookup
    st = os.stat(f"{root}/a.txt")
    assert st.st_size == 5 and oct(st.st_mode & 0o777) == "0o644" and st.st_uid == os.getuid()
    os.mkdir(f"{root}/d")
    assert oct(os.stat(f"{root}/d").st_mode & 0o777) == "0o755"
    assert sorted(os.listdir(root)) == ["a.txt", "d"]
    os.truncate(f"{root}/a.txt", 2)
    assert open(f"{root}/a.txt").read() == "he"
    os.utime(f"{root}/a.txt", (1_000_000_000, 1_000_000_000))
    assert int(os.stat(f"{root}/a.txt").st_mtime) == 1_000_000_000
    with pytest.raises(FileExistsError):
        os.mkdir(f"{root}/D")
    with pytest.raises(FileNotFoundError):
        os.stat(f"{root}/missing")


def test_large_write_then_read_in_one_mebibyte_requests(memory_mount):
    data = os.urandom(9 << 20)
    path = f"{memory_mount.path}/big"
    with open(path, "wb") as f:
        f.write(data)
    with open(path, "rb") as f:
        assert f.read() == data
        f.seek(5_000_001)
        assert f.read(10) == data[5_000_001:5_000_011]


def test_rename_flags_unlink_rmdir(memory_mount):
    root = memory_mount.path
    for name in ("x", "y"):
        with open(f"{root}/{name}", "w") as f:
            f.write(name)
    with pytest.raises(OSError) as e:
        renameat2(f"{root}/x", f"{root}/y", RENAME_NOREPLACE)
    assert e.value.errno == errno.EEXIST
    with pytest.raises(OSError) as e:
        renameat2(f"{root}/x", f"{root}/y", RENAME_EXCHANGE)
    assert e.value.errno == errno.EINVAL
    os.rename(f"{root}/x", f"{root}/y")
    assert open(f"{root}/y").read() == "x"
    os.mkdir(f"{root}/dir")
    os.rename(f"{root}/y", f"{root}/dir/z")
    with pytest.raises(OSError) as e:
        os.rmdir(f"{root}/dir")
    assert e.value.errno == errno.ENOTEMPTY
    os.unlink(f"{root}/dir/z")
    os.rmdir(f"{root}/dir")
    assert os.listdir(root) == []


def test_xattrs_and_statfs(memory_mount):
    path = f"{memory_mount.path}/f"
    open(path, "w").close()
    assert os.listxattr(path) == ["user.memory.inode"]
    assert os.getxattr(path, "user.memory.inode").isdigit()
    with pytest.raises(OSError) as e:
        os.getxattr(path, "user.nope")
    assert e.value.errno == errno.ENODATA
    with pytest.raises(OSError) as e:
        os.setxattr(path, "user.x", b"1")
    assert e.value.errno == errno.ENOTSUP
    st = os.statvfs(memory_mount.path)
    assert st.f_bsize == 4096 and st.f_blocks == (1 << 30) // 4096 and st.f_namemax == 255


def test_large_directory_listing_pages(memory_mount):
    root = f"{memory_mount.path}/many"
    os.mkdir(root)
    names = {f"entry-{i:05d}-{'x' * (i % 40)}" for i in range(3000)}
    for name in names:
        open(f"{root}/{name}", "w").close()
    assert set(os.listdir(root)) == names
    # ls -l goes through readdirplus: every entry comes with its attributes.
    out = subprocess.run(["ls", "-l", root], check=True, capture_output=True, text=True).stdout
    assert len(out.splitlines()) == 3001


def test_uid_gid_umask_options(dbxfs_binary, mountpoint):
    with Mount(dbxfs_binary, mountpoint, ["--backend", "memory", "-o", "uid=1234,gid=4321,umask=027"]):
        open(f"{mountpoint}/f", "w").close()
        st = os.stat(f"{mountpoint}/f")
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (1234, 4321, 0o640)


def test_read_only_mount_refuses_writes(dbxfs_binary, mountpoint):
    with Mount(dbxfs_binary, mountpoint, ["--backend", "memory", "-o", "ro"]):
        with pytest.raises(OSError) as e:
            open(f"{mountpoint}/f", "w")
        assert e.value.errno == errno.EROFS


def test_daemon_mode_returns_once_mounted_and_unmounts_on_sigterm(dbxfs_binary, mountpoint):
    result = subprocess.run([dbxfs_binary, "--backend", "memory", str(mountpoint)],
                            capture_output=True, text=True, timeout=30)
    try:
        assert result.returncode == 0, result.stderr
        assert mounted_at(mountpoint)  # live as soon as the command returned
        pid = int(subprocess.run(["pgrep", "-f", f"dbxfs --backend memory {mountpoint}$"],
                                 capture_output=True, text=True).stdout.split()[0])
        os.kill(pid, 15)
        for _ in range(100):
            if not mounted_at(mountpoint):
                break
            subprocess.run(["sleep", "0.05"])
        assert not mounted_at(mountpoint)
    finally:
        subprocess.run(["fusermount3", "-uz", str(mountpoint)], capture_output=True)


def run_cli(binary, *args, env=None):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, **(env or {})))


def test_refusals_are_one_line_and_non_zero(dbxfs_binary, tmp_path):
    missing = run_cli(dbxfs_binary, "--backend", "memory", str(tmp_path / "nope"))
    assert missing.returncode == 1
    assert missing.stderr.strip().count("\n") == 0 and "does not exist" in missing.stderr

    a_file = tmp_path / "file"
    a_file.write_text("x")
    not_dir = run_cli(dbxfs_binary, "--backend", "memory", str(a_file))
    assert not_dir.returncode == 1 and "not a directory" in not_dir.stderr

    bad_size = run_cli(dbxfs_binary, "--cache-size", "12XB", str(tmp_path))
    assert bad_size.returncode == 2 and bad_size.stderr.count("\n") == 1 and "12XB" in bad_size.stderr

    unknown = run_cli(dbxfs_binary, "--frobnicate", str(tmp_path))
    assert unknown.returncode == 2 and "--frobnicate" in unknown.stderr

    assert run_cli(dbxfs_binary, "--help").returncode == 0


def test_already_mounted_is_refused(dbxfs_binary, mountpoint, memory_mount):
    again = run_cli(dbxfs_binary, "--backend", "memory", str(mountpoint))
    assert again.returncode == 1 and "already mounted" in again.stderr
