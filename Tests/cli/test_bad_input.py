"""Bad input gets one clear line on stderr and a non-zero exit, never a stack trace: unknown
options, bad sizes (on the command line and in the config file), expired or revoked refresh
tokens, an unreachable server, and mountpoints that are a file, missing or already mounted."""

import json
import subprocess

import pytest

from conftest import STATIC_TOKEN, Mount, needs_fuse, one_clear_line


@pytest.mark.parametrize("args", [
    ["--bogus", "/tmp"],
    ["auth", "--bogus"],
    ["unlink", "--bogus"],
    ["status", "--bogus"],
    ["sync", "--bogus", "/tmp"],
    ["status", "--json=yes"],
])
def test_unknown_option(cli, args):
    result = cli.run(*args)
    line = one_clear_line(result)
    assert result.returncode == 2
    assert "--bogus" in line or "takes no value" in line


def test_bad_cache_size(cli, mountpoint):
    result = cli.run("--cache-size", "12XB", str(mountpoint))
    line = one_clear_line(result)
    assert result.returncode == 2 and "12XB" in line


def test_bad_cache_size_in_config_names_file_and_line(cli, mountpoint):
    cli.config_dir.mkdir(parents=True)
    (cli.config_dir / "config").write_text("# mine\n\ncache_size = 12XB\n")
    result = cli.run(str(mountpoint))
    line = one_clear_line(result)
    assert result.returncode == 2 and "config:3" in line and "12XB" in line


def test_unknown_key_in_config(cli):
    cli.config_dir.mkdir(parents=True)
    (cli.config_dir / "config").write_text("cache_sise = 1G\n")
    line = one_clear_line(cli.run("auth", "--app-key", "k"))
    assert "unknown key 'cache_sise'" in line


def test_missing_mountpoint_argument(cli):
    assert one_clear_line(cli.run()).startswith("dbxfs: missing MOUNTPOINT")


def test_sync_without_mountpoint(cli):
    result = cli.run("sync")
    one_clear_line(result)
    assert result.returncode == 2


def test_no_credentials_says_run_auth(cli, mountpoint, emulator):
    line = one_clear_line(cli.run("--api-base", emulator.url, str(mountpoint)))
    assert "dbxfs auth" in line


def test_mountpoint_missing(cli, tmp_path):
    line = one_clear_line(cli.run(str(tmp_path / "nope"), env={"DBXFS_ACCESS_TOKEN": STATIC_TOKEN}))
    assert "does not exist" in line


def test_mountpoint_is_a_file(cli, tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    line = one_clear_line(cli.run(str(target), env={"DBXFS_ACCESS_TOKEN": STATIC_TOKEN}))
    assert "not a directory" in line


@needs_fuse
def test_mountpoint_already_mounted(cli, emulator, mountpoint):
    env = {"DBXFS_ACCESS_TOKEN": STATIC_TOKEN}
    with Mount(cli, mountpoint, ["--api-base", emulator.url, "--cache-dir", str(cli.home / "c")], env=env):
        line = one_clear_line(cli.run("--api-base", emulator.url, str(mountpoint), env=env))
        assert "already mounted" in line


def test_unreachable_server_at_mount(cli, mountpoint):
    line = one_clear_line(cli.run("--api-base", "http://127.0.0.1:1", str(mountpoint),
                                  env={"DBXFS_ACCESS_TOKEN": STATIC_TOKEN}))
    assert "cannot reach" in line


def test_unreachable_server_at_auth(cli):
    result = cli.run("auth", "--app-key", "k", "--api-base", "http://127.0.0.1:1", input="some-code\n")
    assert "cannot reach" in one_clear_line(result)


def test_revoked_refresh_token(cli, emulator, mountpoint):
    assert cli.link(emulator).returncode == 0
    stored = json.loads(cli.credentials_path().read_text())
    # Revoke through the API, as "Connected apps > Disconnect" on dropbox.com would.
    emulator.token, saved = stored["access_token"], emulator.token
    try:
        emulator.api("auth/token/revoke", None)
    finally:
        emulator.token = saved
    line = one_clear_line(cli.run(str(mountpoint)))
    assert "rejected" in line and "dbxfs auth" in line


def test_expired_or_unknown_refresh_token(cli, emulator, mountpoint):
    assert cli.link(emulator).returncode == 0
    path = cli.credentials_path()
    stored = json.loads(path.read_text())
    stored["refresh_token"] = "expired-long-ago"
    stored["access_token_expires_at"] = "2020-01-01T00:00:00Z"
    stored["access_token"] = "sl.expired"
    path.write_text(json.dumps(stored))
    line = one_clear_line(cli.run(str(mountpoint)))
    assert "dbxfs auth" in line


def test_status_of_a_directory_that_is_not_a_mount(cli, tmp_path):
    result = cli.run("status", str(tmp_path))
    assert "no dbxfs mount" in one_clear_line(result)
    assert result.returncode == 3


def test_sync_of_a_missing_path(cli, tmp_path):
    result = cli.run("sync", str(tmp_path / "missing"))
    assert "does not exist" in one_clear_line(result)
    assert result.returncode == 3


def test_invalid_profile_name(cli, mountpoint):
    assert "invalid profile name" in one_clear_line(cli.run("--profile", "../etc", str(mountpoint)))


@pytest.mark.parametrize("args", [["status"], ["status", "--json"]])
def test_output_that_cannot_be_written_is_one_clear_line(cli, args):
    """A full disk under a redirect (stdout on /dev/full): one line naming the cause and exit 1,
    not a crash (FileHandle.write traps: exit 132 and a backtrace)."""
    with open("/dev/full", "w") as full:
        result = subprocess.run([cli.binary, *args], stdout=full, stderr=subprocess.PIPE, text=True,
                                timeout=60, env=cli.env)
    line = one_clear_line(subprocess.CompletedProcess(result.args, result.returncode, "", result.stderr))
    assert result.returncode == 1, result.stderr
    assert "cannot write to standard output" in line and "No space left on device" in line
