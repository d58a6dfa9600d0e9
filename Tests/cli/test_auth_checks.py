"""`dbxfs auth` before it asks anything of the user (issue 14, "auth against an unreachable
server still prints the URL and waits for a code"): it checks that the server answers, and fails
at once, in one line, when it does not, instead of sending the user to a browser for a code it
could never exchange. (That the `redirect_uri` in the URL it prints is percent-encoded is checked
by test_auth.py's test_redirect_flow_on_loopback.)"""

import subprocess
import time

import pytest

from conftest import one_clear_line


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
