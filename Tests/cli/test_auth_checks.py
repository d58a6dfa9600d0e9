"""`dbxfs auth` before it asks anything of the user (issue 14, "auth against an unreachable
server still prints the URL and waits for a code"): it checks that the server answers, and fails
at once, in one line, when it does not, instead of sending the user to a browser for a code it
could never exchange. And the authorize URL it prints is well-formed: the `redirect_uri` query
value is percent-encoded (RFC 3986: `:` and `/` are reserved)."""

import re
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from conftest import APP_KEY, one_clear_line


@pytest.mark.parametrize("extra", [[], ["--redirect", "--port", "0", "--timeout", "60"]])
def test_auth_against_an_unreachable_server_fails_at_once(cli, extra):
    # stdin stays open, as at a terminal: the old code printed the URL and waited for a code.
    proc = subprocess.Popen([cli.binary, "auth", "--app-key", "k", "--api-base", "http://127.0.0.1:1", *extra],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli.env)
    started = time.monotonic()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"auth still waits after 30 s; it printed: {out!r} {err!r}")
    elapsed = time.monotonic() - started
    out, err = proc.communicate()
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    line = one_clear_line(result)
    assert proc.returncode == 1 and "cannot reach http://127.0.0.1:1" in line, line
    assert "oauth2/authorize" not in out, out
    assert elapsed < 20, elapsed


def test_the_redirect_uri_is_percent_encoded_and_the_flow_still_links(cli, emulator):
    proc = subprocess.Popen([cli.binary, "auth", "--app-key", APP_KEY, "--api-base", emulator.url, "--redirect",
                             "--port", "0", "--timeout", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli.env)
    try:
        url = None
        while url is None:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            match = re.search(r"(https?://\S+/oauth2/authorize\?\S+)", line)
            url = match.group(1) if match else None
        raw = urllib.parse.urlsplit(url).query
        print(raw)
        value = dict(item.split("=", 1) for item in raw.split("&"))["redirect_uri"]
        assert re.fullmatch(r"http%3A%2F%2F127\.0\.0\.1%3A\d+%2F", value), value
        with urllib.request.urlopen(url + "&approve=1", timeout=30) as response:
            assert "linked" in response.read().decode()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert cli.credentials_path().exists()
