"""A mount whose access Dropbox revokes while it runs (`dbxfs unlink` of its profile, as a user
would do it from another terminal): the uploads that follow fail, and `dbxfs status` and the log
must say why and what to do; a new `dbxfs auth` of the same profile must then be picked up by the
running mount, without a remount, and the held uploads land."""

import json
import sys
from pathlib import Path

from conftest import Mount, needs_fuse

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "Tests" / "support"))
from messages import swift_spellings  # noqa: E402
from mounting import wait_until  # noqa: E402

pytestmark = needs_fuse


def connection_of(cli, mountpoint):
    result = cli.run("status", "--json", str(mountpoint))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["mounts"][0].get("connection", {})


def test_a_revoked_token_is_explained_and_a_relink_is_picked_up_without_a_remount(cli, emulator, mountpoint):
    assert cli.link(emulator, profile="work").returncode == 0
    with Mount(cli, mountpoint, ["--profile", "work", "--cache-dir", str(cli.home / "cache")]) as m:
        (mountpoint / "revoked-before.txt").write_text("before\n")
        assert cli.run("sync", "--timeout", "60", str(mountpoint)).returncode == 0

        # Another terminal unlinks the profile: Dropbox revokes the token the mount holds.
        assert cli.run("unlink", "--profile", "work").returncode == 0
        (mountpoint / "revoked-after.txt").write_text("after\n")

        def refused():
            return connection_of(cli, mountpoint).get("state") == "refused"
        try:
            wait_until(refused, timeout=30)
        except AssertionError:
            raise AssertionError("status never said the access was refused:\n" + cli.run("status", str(mountpoint)).stdout
                                 + "\nlog:\n" + m.read_log()[-1500:])
        connection = connection_of(cli, mountpoint)
        print(connection)
        assert "no longer accepts this mount's access" in connection["message"]
        assert "dbxfs auth --profile work" in connection["message"] and "without a remount" in connection["message"]
        text = cli.run("status", str(mountpoint)).stdout
        print(text)
        assert "no longer accepts this mount's access" in text and "dbxfs auth --profile work" in text
        log = m.read_log()
        assert "no longer accepts this mount's access" in log and "dbxfs auth --profile work" in log, log
        # `sync` names the file and the same fix.
        stuck = cli.run("sync", "--timeout", "5", str(mountpoint))
        assert stuck.returncode == 1 and "revoked-after.txt" in stuck.stderr and "dbxfs auth --profile work" in stuck.stderr

        # The user links the profile again: the mount takes the new token as it is.
        assert cli.link(emulator, profile="work").returncode == 0
        result = cli.run("sync", "--timeout", "60", str(mountpoint), timeout=90)
        assert result.returncode == 0, result.stderr + m.read_log()
        assert wait_until(lambda: connection_of(cli, mountpoint).get("state") == "online", timeout=30)
        assert (mountpoint / "revoked-before.txt").read_text() == "before\n"
        log = m.read_log()
        assert "accepts this mount's access again" in log, log
        assert swift_spellings(log) == [], swift_spellings(log)
    assert emulator.download("/revoked-after.txt") == b"after\n"
