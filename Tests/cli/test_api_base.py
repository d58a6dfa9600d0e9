"""The API base URL (issue 14, "Plain HTTP off loopback", and "Exit status 2 for every bad
usage"): every request carries the bearer token, so plain `http://` is refused unless it goes to
this machine (127.0.0.0/8, ::1, localhost), wherever the URL comes from (--api-base,
$DBXFS_API_BASE, the config file, a stored profile, `dbxfs auth`); a value that is not an http(s)
URL at all is bad usage too. Each refusal is one line, exit status 2 (1 for a stored profile,
which is not the command line), and comes before any connection is tried."""

import json
import time

import pytest

from conftest import STATIC_TOKEN, one_clear_line

ENV = {"DBXFS_ACCESS_TOKEN": STATIC_TOKEN}
OFF_LOOPBACK = "http://192.0.2.2:8080"   # TEST-NET-1: nothing answers there


def refused_fast(cli, *args, env=None, status=2):
    started = time.monotonic()
    result = cli.run(*args, env=dict(ENV, **(env or {})), input="", timeout=60)
    elapsed = time.monotonic() - started
    line = one_clear_line(result)
    assert result.returncode == status, (result.returncode, line)
    assert elapsed < 5, f"took {elapsed:.1f} s: it tried the network first"
    assert result.stdout == "", result.stdout
    return line


def plain_http_refused(line, url=OFF_LOOPBACK):
    assert url in line and "plain http://" in line and "https://" in line, line


def test_plain_http_off_loopback_is_refused_on_the_command_line(cli, mountpoint):
    plain_http_refused(refused_fast(cli, "--api-base", OFF_LOOPBACK, str(mountpoint)))


def test_plain_http_off_loopback_is_refused_from_the_environment(cli, mountpoint):
    line = refused_fast(cli, str(mountpoint), env={"DBXFS_API_BASE": OFF_LOOPBACK})
    plain_http_refused(line)
    assert "DBXFS_API_BASE" in line, line


def test_plain_http_off_loopback_is_refused_from_the_config_file(cli, mountpoint):
    cli.config_dir.mkdir(parents=True)
    (cli.config_dir / "config").write_text(f"# a gateway\napi_base = {OFF_LOOPBACK}\n")
    line = refused_fast(cli, str(mountpoint))
    plain_http_refused(line)
    assert "config:2" in line, line
    # auth reads the same key.
    plain_http_refused(refused_fast(cli, "auth", "--app-key", "k"))


def test_plain_http_off_loopback_is_refused_by_auth(cli):
    plain_http_refused(refused_fast(cli, "auth", "--app-key", "k", "--api-base", OFF_LOOPBACK))


def test_the_host_placeholder_is_checked_for_every_host(cli, mountpoint):
    plain_http_refused(refused_fast(cli, "--api-base", "http://{host}.example.com", str(mountpoint)),
                       url="http://{host}.example.com")


def test_a_stored_profile_with_plain_http_off_loopback_is_not_used(cli, emulator, mountpoint):
    assert cli.link(emulator).returncode == 0
    path = cli.credentials_path()
    stored = json.loads(path.read_text())
    stored["api_base"] = OFF_LOOPBACK
    path.write_text(json.dumps(stored))
    line = refused_fast(cli, str(mountpoint), env={"DBXFS_ACCESS_TOKEN": ""}, status=1)
    plain_http_refused(line)
    assert str(path) in line, line


@pytest.mark.parametrize("base", ["not-a-url", "ftp://example.com", "https://", "http//127.0.0.1:1", "127.0.0.1:8080"])
def test_a_base_that_is_not_an_http_url_is_bad_usage(cli, mountpoint, base):
    line = refused_fast(cli, "--api-base", base, str(mountpoint))
    assert f"'{base}'" in line and "URL" in line, line
    line = refused_fast(cli, "auth", "--app-key", "k", "--api-base", base)
    assert f"'{base}'" in line, line


@pytest.mark.parametrize("base", ["http://127.0.0.1:1", "http://127.3.4.5:1", "http://localhost:1", "http://[::1]:1",
                                  "http://127.0.0.1:1/{host}", "HTTP://LOCALHOST:1"])
def test_plain_http_to_this_machine_is_allowed(cli, mountpoint, base):
    result = cli.run("--api-base", base, str(mountpoint), env=ENV, timeout=60)
    line = one_clear_line(result)
    assert result.returncode == 1 and "cannot reach" in line, line
