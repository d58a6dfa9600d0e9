"""Private cache files (issue 14, "Cache files readable by others"): the cache directory holds the
account's email, the whole tree (paths, sizes, hashes) and file contents, so everything dbxfs
creates in it is 0600 (files) or 0700 (folders), whatever the umask and whatever the mode of a
`--cache-dir` that already existed; files left readable by an older dbxfs are made private at the
next mount; a cache directory other users could write to is refused in one line, before anything
is created in it. The same holds for the index files beside the default cache directories
(`last-mount-*`), the daemon's log and the stored credentials."""

import os
import stat
import subprocess

import pytest

from conftest import needs_fuse, one_clear_line
from daemon_support import ENV, mount_args, stop_daemon_at

pytestmark = needs_fuse


def run_with_umask(cli, *args, umask=0, input=None, timeout=120):
    """dbxfs as a user with `umask` would run it."""
    return subprocess.run([cli.binary, *args], capture_output=True, text=True, timeout=timeout, input=input,
                          env=dict(cli.env, **ENV), preexec_fn=lambda: os.umask(umask))


def loose_modes(directory, include_root=False):
    """Every file or folder under `directory` that someone other than its owner may read, write or enter."""
    loose = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = os.path.join(root, name)
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            if mode & 0o077:
                loose[os.path.relpath(path, directory)] = oct(mode)
    if include_root and stat.S_IMODE(os.stat(directory).st_mode) & 0o077:
        loose["."] = oct(stat.S_IMODE(os.stat(directory).st_mode))
    return loose


def test_every_cache_file_is_private_whatever_the_umask_and_the_directory_mode(cli, emulator, tmp_path):
    cache = cli.home / "loose-cache"
    cache.mkdir(parents=True)
    os.chmod(cache, 0o755)   # an existing directory others may enter (and list)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    # Daemonized (no -f), so the log goes to its default file in the cache directory.
    result = run_with_umask(cli, *mount_args(emulator, cache), str(mnt))
    assert result.returncode == 0, result.stderr
    try:
        (mnt / "private-cache.txt").write_text("written with umask 000\n")
        assert cli.run("sync", "--timeout", "60", str(mnt)).returncode == 0
        with open(mnt / "private-cache.txt") as f:
            assert f.read() == "written with umask 000\n"
        # While mounted: the SQLite -wal and -shm files exist, a staging file may too.
        names = {os.path.relpath(os.path.join(r, n), cache) for r, ds, fs in os.walk(cache) for n in ds + fs}
        print(sorted(names))
        assert {"metadata.sqlite3", "journal.sqlite", "account.json", "daemon.lock", "dbxfs.log"} <= names, names
        assert loose_modes(cache) == {}
    finally:
        stop_daemon_at(cli, mnt)
    assert loose_modes(cache) == {}
    # An explicit --cache-dir needs no index for an offline start (it is named again); the
    # default cache's index is checked in the next test.
    base = cli.home / "cache" / "dbxfs"
    if base.exists():
        assert loose_modes(base, include_root=True) == {}


def test_the_default_cache_directory_and_its_base_are_private(cli, emulator, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    result = run_with_umask(cli, "--api-base", emulator.url, str(mnt))
    assert result.returncode == 0, result.stderr
    try:
        assert (mnt / "hello.txt").read_text() == "hello from the emulator\n"
    finally:
        stop_daemon_at(cli, mnt)
    # The default cache, and the index that lets an offline start find it, are private too.
    base = cli.home / "cache" / "dbxfs"
    assert [p for p in base.iterdir() if p.name.startswith("last-mount-")], list(base.iterdir())
    assert loose_modes(cli.home / "cache", include_root=True) == {}


def test_files_an_older_dbxfs_left_readable_become_private_at_the_next_mount(cli, emulator, tmp_path):
    cache = cli.home / "old-cache"
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    assert run_with_umask(cli, *mount_args(emulator, cache), str(mnt), umask=0o077).returncode == 0
    try:
        assert (mnt / "hello.txt").read_text() == "hello from the emulator\n"
    finally:
        stop_daemon_at(cli, mnt)
    # What an older dbxfs (or a umask of 022) left.
    for root, dirs, files in os.walk(cache):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    assert loose_modes(cache)
    assert run_with_umask(cli, *mount_args(emulator, cache), str(mnt), umask=0o022).returncode == 0
    try:
        assert (mnt / "hello.txt").read_text() == "hello from the emulator\n"
        assert loose_modes(cache) == {}
    finally:
        stop_daemon_at(cli, mnt)


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775, 0o757])
def test_a_cache_directory_others_can_write_to_is_refused(cli, emulator, tmp_path, mode):
    cache = tmp_path / "open-cache"
    cache.mkdir()
    os.chmod(cache, mode)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    result = run_with_umask(cli, *mount_args(emulator, cache), str(mnt), umask=0o022)
    try:
        line = one_clear_line(result)
    finally:
        stop_daemon_at(cli, mnt)
    assert result.returncode == 1
    assert str(cache) in line and "other users can write" in line and "chmod go-w" in line, line
    assert os.listdir(cache) == []


def test_stored_credentials_are_private_whatever_the_umask(cli, emulator):
    result = cli.link(emulator, umask=0)
    assert result.returncode == 0, result.stderr
    assert cli.credentials_path().exists()
    assert loose_modes(cli.config_dir, include_root=True) == {}
