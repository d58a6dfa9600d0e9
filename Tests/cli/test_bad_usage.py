"""Bad usage exits with status 2 and one line that says what to fix, before anything is created
(issue 14, "Exit status 2 for every bad usage"): an unknown `-o` option, an unbalanced quote or a
bad `log_level` in the config file (naming file:line). And every path option works as typed
("A relative --ca-file or --log-file breaks once the daemon detaches"): a relative path on the
command line means the directory dbxfs was started in, one in the config file the config file's
own directory, both resolved before the daemon forks and moves to `/`."""

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import STATIC_TOKEN, needs_fuse, one_clear_line
from daemon_support import ENV, stop_daemon_at

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from emulator import Emulator  # noqa: E402


def nothing_created(cli, *paths):
    for path in (cli.home / "cache", *paths):
        assert not os.path.exists(path), f"{path} was created: {list(Path(path).rglob('*'))}"


def test_an_unknown_mount_option_is_bad_usage_and_creates_nothing(cli, emulator, mountpoint):
    cache = cli.home / "never"
    for args in (["-o", "nosuchopt"], ["-o", "ro,nosuchopt=1"]):
        result = cli.run("--api-base", emulator.url, *args, str(mountpoint), env=ENV)
        line = one_clear_line(result)
        assert result.returncode == 2, line
        assert "nosuchopt" in line and "-o" in line, line
        nothing_created(cli)
    result = cli.run("--api-base", emulator.url, "--cache-dir", str(cache), "-o", "nosuchopt", str(mountpoint), env=ENV)
    assert result.returncode == 2 and "nosuchopt" in one_clear_line(result)
    nothing_created(cli, cache)


def test_an_unknown_mount_option_in_the_config_file_is_bad_usage(cli, emulator, mountpoint):
    cli.config_dir.mkdir(parents=True)
    (cli.config_dir / "config").write_text("mount_options = allow_other,nosuchopt\n")
    result = cli.run("--api-base", emulator.url, str(mountpoint), env=ENV)
    line = one_clear_line(result)
    assert result.returncode == 2 and "nosuchopt" in line, line
    nothing_created(cli)


@pytest.mark.parametrize("text, where", [
    ('api_base = "http://127.0.0.1:1\n', "config:1"),
    ('# mine\nroot = "/Docs\n', "config:2"),
    ('cache_dir = /tmp/x"\n', "config:1"),
])
def test_an_unbalanced_quote_in_the_config_file_is_bad_usage(cli, mountpoint, text, where):
    cli.config_dir.mkdir(parents=True)
    (cli.config_dir / "config").write_text(text)
    for args in ([str(mountpoint)], ["auth", "--app-key", "k"], ["sync", str(mountpoint)]):
        result = cli.run(*args, env=ENV, input="")
        line = one_clear_line(result)
        assert result.returncode == 2, (args, line)
        assert where in line and "quote" in line, line
    nothing_created(cli)


def test_a_bad_log_level_in_the_config_file_names_file_and_line(cli, mountpoint):
    cli.config_dir.mkdir(parents=True)
    (cli.config_dir / "config").write_text("# logs\n\nlog_level = loud\n")
    result = cli.run(str(mountpoint), env=ENV)
    line = one_clear_line(result)
    assert result.returncode == 2
    assert "config:3" in line and "loud" in line and "debug" in line, line


# Relative paths. The daemon (no -f) forks and moves to `/` once the mount is live.

@pytest.fixture(scope="module")
def tls_emulator(tmp_path_factory):
    seed = tmp_path_factory.mktemp("tls-seed")
    (seed / "hello.txt").write_text("hello over TLS\n")
    (seed / "Docs").mkdir()
    (seed / "Docs" / "a.txt").write_text("a\n")
    emu = Emulator(tmp_path_factory.mktemp("tls-emulator") / "data", token=STATIC_TOKEN, tls=True, seed=str(seed)).start()
    yield emu
    emu.stop()


def daemon(cli, args, cwd, mnt):
    """`dbxfs ARGS MNT` started in `cwd`, as a user would (no -f): returns once the mount is live."""
    return subprocess.run([cli.binary, *args, str(mnt)], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env=dict(cli.env, **ENV))


@pytest.fixture
def workdir(tmp_path):
    path = tmp_path / "work"
    path.mkdir()
    return path


@needs_fuse
def test_a_relative_ca_file_keeps_working_after_the_daemon_detaches(cli, tls_emulator, workdir, mountpoint):
    shutil.copy(tls_emulator.ca_file, workdir / "tls.crt")
    result = daemon(cli, ["--api-base", tls_emulator.url, "--ca-file", "tls.crt", "--cache-dir", "cache"], workdir, mountpoint)
    assert result.returncode == 0, result.stderr
    try:
        # Nothing was listed before the daemon moved to /: these are its first calls after.
        assert sorted(os.listdir(mountpoint / "Docs")) == ["a.txt"]
        assert (mountpoint / "hello.txt").read_text() == "hello over TLS\n"
    finally:
        stop_daemon_at(cli, mountpoint)


@needs_fuse
def test_a_relative_log_file_is_written_where_it_was_named(cli, emulator, workdir, mountpoint):
    name = f"dbxfs-relative-{secrets.token_hex(4)}.log"
    try:
        result = daemon(cli, ["--api-base", emulator.url, "--cache-dir", "cache", "--log-level", "debug", "--log-file", name],
                        workdir, mountpoint)
        assert result.returncode == 0, result.stderr
        try:
            assert (mountpoint / "hello.txt").read_text() == "hello from the emulator\n"
        finally:
            stop_daemon_at(cli, mountpoint)
        assert not os.path.exists("/" + name), "the log went to /"
        assert "unmounted" in (workdir / name).read_text()
    finally:
        if os.path.exists("/" + name):
            os.unlink("/" + name)


@needs_fuse
def test_a_relative_token_file_and_cache_dir_work(cli, emulator, workdir, mountpoint):
    (workdir / "token").write_text(STATIC_TOKEN + "\n")
    result = subprocess.run([cli.binary, "--api-base", emulator.url, "--token-file", "token", "--cache-dir", "cache",
                             str(mountpoint)], cwd=workdir, capture_output=True, text=True, timeout=120, env=cli.env)
    assert result.returncode == 0, result.stderr
    try:
        (mountpoint / "relative-paths.txt").write_text("written\n")
        assert cli.run("sync", "--timeout", "60", str(mountpoint)).returncode == 0
    finally:
        stop_daemon_at(cli, mountpoint)
    assert emulator.download("/relative-paths.txt") == b"written\n"
    assert (workdir / "cache" / "metadata.sqlite3").exists() and (workdir / "cache" / "dbxfs.log").exists()


@needs_fuse
def test_relative_paths_in_the_config_file_mean_its_own_directory(cli, tls_emulator, workdir, mountpoint):
    cli.config_dir.mkdir(parents=True)
    shutil.copy(tls_emulator.ca_file, cli.config_dir / "tls.crt")
    (cli.config_dir / "config").write_text(
        f"api_base = {tls_emulator.url}\nca_file = tls.crt\ncache_dir = cache\nlog_file = logs/dbxfs.log\n")
    (cli.config_dir / "logs").mkdir()
    result = daemon(cli, [], workdir, mountpoint)
    assert result.returncode == 0, result.stderr
    try:
        assert sorted(os.listdir(mountpoint / "Docs")) == ["a.txt"]
    finally:
        stop_daemon_at(cli, mountpoint)
    assert (cli.config_dir / "cache" / "metadata.sqlite3").exists()
    assert "unmounted" in (cli.config_dir / "logs" / "dbxfs.log").read_text()
    assert not (workdir / "cache").exists()
