"""`dbxfs auth` / `link` / `unlink` end to end against the emulator: the paste-the-code flow and
the loopback redirect flow, what is stored (and with which modes), a mount using the stored
profile whose refreshed token is written back, and unlink revoking the tokens on the server."""

import json
import os
import re
import stat
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import APP_KEY, Mount, needs_fuse, one_clear_line


def api_status(emulator, token, route="users/get_current_account"):
    """HTTP status of one RPC call made with `token`."""
    request = urllib.request.Request(emulator.url + "/2/" + route, data=b"null", method="POST",
                                     headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def refresh_status(emulator, refresh_token):
    body = urllib.parse.urlencode({"grant_type": "refresh_token", "refresh_token": refresh_token,
                                   "client_id": APP_KEY}).encode()
    try:
        with urllib.request.urlopen(emulator.url + "/oauth2/token", data=body, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_auth_stores_private_credentials_and_prints_who(cli, emulator):
    result = cli.link(emulator)
    assert result.returncode == 0, result.stderr
    assert "Emulated User" in result.stdout and "emulated.user@example.com" in result.stdout
    assert "code_challenge_method=S256" in result.stdout and "token_access_type=offline" in result.stdout

    path = cli.credentials_path()
    stored = json.loads(path.read_text())
    assert stored["app_key"] == APP_KEY and stored["api_base"] == emulator.url
    assert stored["email"] == "emulated.user@example.com" and stored["account_id"].startswith("dbid:")
    assert stored["refresh_token"] and stored["access_token"]
    # The secrets are never shown.
    for secret in (stored["refresh_token"], stored["access_token"]):
        assert secret not in result.stdout + result.stderr
    # 0600 file in 0700 directories, and no temporary file left behind by the atomic write.
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(cli.config_dir.stat().st_mode) == 0o700
    assert sorted(os.listdir(path.parent)) == ["default.json"]
    # The stored refresh token really works.
    status, _ = refresh_status(emulator, stored["refresh_token"])
    assert status == 200


def test_profiles_are_separate(cli, emulator):
    assert cli.link(emulator, profile="work").returncode == 0
    assert cli.credentials_path("work").exists() and not cli.credentials_path().exists()
    result = cli.run("unlink", "--profile", "work")
    assert result.returncode == 0, result.stderr
    assert not cli.credentials_path("work").exists()


def test_link_is_an_alias_and_a_wrong_code_is_one_line(cli, emulator):
    result = cli.run("link", "--app-key", APP_KEY, "--api-base", emulator.url, input="not-a-real-code\n")
    line = one_clear_line(result)
    assert "refused the authorization code" in line
    assert not cli.credentials_path().exists()


def test_auth_with_no_code_on_stdin_fails_cleanly(cli, emulator):
    line = one_clear_line(cli.run("auth", "--app-key", APP_KEY, "--api-base", emulator.url, input=""))
    assert "no authorization code" in line


def test_redirect_flow_on_loopback(cli, emulator):
    proc = subprocess.Popen([cli.binary, "auth", "--app-key", APP_KEY, "--api-base", emulator.url, "--redirect",
                             "--port", "0", "--timeout", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli.env)
    try:
        url = None
        while url is None:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            match = re.search(r"(https?://\S+/oauth2/authorize\?\S+)", line)
            url = match.group(1) if match else None
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        assert query["redirect_uri"][0].startswith("http://127.0.0.1:")
        # Percent-encoded in the URL itself (RFC 3986: ':' and '/' are reserved), issue 14.
        raw = dict(item.split("=", 1) for item in urllib.parse.urlsplit(url).query.split("&"))
        assert re.fullmatch(r"http%3A%2F%2F127\.0\.0\.1%3A\d+%2F", raw["redirect_uri"]), raw["redirect_uri"]
        assert query["state"][0]
        # The "browser": approve, follow the 302 to dbxfs's loopback listener.
        with urllib.request.urlopen(url + "&approve=1", timeout=30) as response:
            assert "linked" in response.read().decode()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "emulated.user@example.com" in out
    assert json.loads(cli.credentials_path().read_text())["refresh_token"]


@needs_fuse
def test_full_flow_mount_refresh_persisted_then_unlink_revokes(cli, emulator, mountpoint):
    assert cli.link(emulator).returncode == 0
    first = json.loads(cli.credentials_path().read_text())

    # No DBXFS_ACCESS_TOKEN: the mount takes the stored default profile (and its API base).
    with Mount(cli, mountpoint, ["--cache-dir", str(cli.home / "cache1")]):
        assert (mountpoint / "hello.txt").read_text() == "hello from the emulator\n"
        # Tokens from this emulator live 3 s: wait past that, then make the mount talk to it.
        time.sleep(3.5)
        assert sorted(os.listdir(mountpoint / "Docs")) == ["a.txt", "b.txt"]
        assert (mountpoint / "Docs" / "b.txt").read_text() == "b\n" * 1000
        refreshed = json.loads(cli.credentials_path().read_text())
        assert refreshed["access_token"] != first["access_token"], "the refreshed token was not persisted"
        assert refreshed["access_token_expires_at"] > first["access_token_expires_at"]
        assert refreshed["refresh_token"] == first["refresh_token"]
        assert stat.S_IMODE(cli.credentials_path().stat().st_mode) == 0o600
        assert api_status(emulator, refreshed["access_token"]) == 200

    result = cli.run("unlink")
    assert result.returncode == 0, result.stderr
    assert "emulated.user@example.com" in result.stdout
    assert not cli.credentials_path().exists()
    # The server refuses both the last access token and the refresh token.
    assert api_status(emulator, refreshed["access_token"]) == 401
    status, body = refresh_status(emulator, first["refresh_token"])
    assert status == 400 and body["error"] == "invalid_grant"

    # And mounting now says what to do, in one line.
    line = one_clear_line(cli.run("-f", str(mountpoint)))
    assert "dbxfs auth" in line


def test_unlink_without_server_still_deletes_locally_with_a_warning(cli, emulator):
    assert cli.link(emulator).returncode == 0
    path = cli.credentials_path()
    stored = json.loads(path.read_text())
    stored["api_base"] = "http://127.0.0.1:1"   # nothing listens there
    path.write_text(json.dumps(stored))
    result = cli.run("unlink")
    assert result.returncode == 0
    assert "warning" in result.stderr and "cannot reach" in result.stderr
    assert not path.exists()


def test_unlink_of_an_unknown_profile_is_one_line(cli):
    line = one_clear_line(cli.run("unlink", "--profile", "nobody"))
    assert "no account is linked" in line


def test_app_key_from_the_config_file(cli, emulator):
    cli.config_dir.mkdir(parents=True)
    (cli.config_dir / "config").write_text(f"# defaults\napp_key = {APP_KEY}\napi_base = {emulator.url}\n")
    proc = subprocess.Popen([cli.binary, "auth"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cli.env)
    line = ""
    while "oauth2/authorize" not in line:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
    url = re.search(r"(https?://\S+)", line).group(1)
    assert f"client_id={APP_KEY}" in url
    from conftest import approve
    out, err = proc.communicate(approve(url) + "\n", timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(cli.credentials_path().read_text())["api_base"] == emulator.url


def test_relinking_a_profile_revokes_the_previous_tokens(cli, emulator):
    assert cli.link(emulator).returncode == 0
    old = json.loads(cli.credentials_path().read_text())
    result = cli.link(emulator)
    assert result.returncode == 0 and "replacing the previous link" in result.stdout
    new = json.loads(cli.credentials_path().read_text())
    assert new["refresh_token"] != old["refresh_token"]
    assert refresh_status(emulator, old["refresh_token"])[0] == 400
    assert refresh_status(emulator, new["refresh_token"])[0] == 200


def test_unlink_of_a_damaged_file_deletes_it_with_a_warning(cli):
    path = cli.credentials_path()
    path.parent.mkdir(parents=True)
    path.write_text("{ not json")
    result = cli.run("unlink")
    assert result.returncode == 0 and "warning" in result.stderr and "unreadable" in result.stderr
    assert not path.exists()
