"""Warm connections (issue 15, time to first byte): the mount opens a connection to the content
host when it starts, with a token-less OPTIONS, so the first download of a cold file goes on a
kept-alive connection instead of paying a new one's handshakes.

The mount's four hosts get four names (`http://{host}.localhost:PORT`), as Dropbox's do: a
connection to the api host is then no use to a download, as on Dropbox.
"""

from mount_support import Mount, dropbox_env
from mounting import wait_until


def test_the_first_download_after_the_mount_opens_no_connection(dbxfs_binary, emulator, tmp_path):
    port = emulator.url.rsplit(":", 1)[1]
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    emulator.reset_stats()
    args = ["--api-base", f"http://{{host}}.localhost:{port}", "--cache-dir", str(tmp_path / "cache"), "--log-level", "debug"]
    with Mount(dbxfs_binary, mnt, args, env=dropbox_env(), log_path=tmp_path / "mnt.log").start():
        # Quiet: the tree is listed and the change feed waits on its longpoll.
        wait_until(lambda: emulator.stats()["requests"].get("files/list_folder/longpoll", 0) >= 1)
        preflights = emulator.stats()["preflights"]
        before = emulator.stats()["connections"]
        with open(mnt / "file.txt", "rb") as f:
            assert f.read() == b"hello from dropbox\n"
        stats = emulator.stats()
        assert stats["requests"].get("files/download", 0) == 1, stats
        opened = stats["connections"] - before
        assert opened == 0, f"the first download opened {opened} connection(s); the mount sent {preflights} OPTIONS"
