"""Warm connections (issue 15, time to first byte): the mount opens a connection to the content
host when it starts, with a token-less OPTIONS, so the first download of a cold file goes on a
kept-alive connection instead of paying a new one's handshakes.

The mount's four hosts get four names (`http://{host}.localhost:PORT`), as Dropbox's do: a
connection to the api host is then no use to a download, as on Dropbox.
"""

import os
import time

from mount_support import Mount, TOKEN, dropbox_env


def wait_for(predicate, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_the_first_download_after_the_mount_opens_no_connection(dbxfs_binary, emulator, tmp_path):
    port = emulator.url.rsplit(":", 1)[1]
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    emulator.reset_stats()
    args = ["--api-base", f"http://{{host}}.localhost:{port}", "--cache-dir", str(tmp_path / "cache"), "--log-level", "debug"]
    with Mount(dbxfs_binary, mnt, args, env=dropbox_env(), log_path=tmp_path / "mnt.log").start():
        # Quiet: the tree is listed and the change feed waits on its longpoll.
        assert wait_for(lambda: emulator.stats()["requests"].get("files/list_folder/longpoll", 0) >= 1), emulator.stats()
        preflights = emulator.stats()["preflights"]
        before = emulator.stats()["connections"]
        with open(mnt / "file.txt", "rb") as f:
            assert f.read() == b"hello from dropbox\n"
        stats = emulator.stats()
        assert stats["requests"].get("files/download", 0) == 1, stats
        opened = stats["connections"] - before
        assert opened == 0, f"the first download opened {opened} connection(s); the mount sent {preflights} OPTIONS"
