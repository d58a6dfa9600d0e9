"""The one emulator both clients use: the network profiles, and the harness's own calls to it.

Every case resets the emulator's counters before its mount, so the calls a row reports are the
client's. The harness also calls the emulator (to set a case up, to check that the work is on
the server, to clean up); those calls are counted here and taken out of the client's figures.
"""

import time
from collections import Counter

from emulator import EmulatorError

# latency_ms is a round trip per request; a new connection pays two more (TCP, TLS 1.3); the
# bandwidth cap is per connection and direction (docs/EMULATOR.md, "Network profiles").
PROFILES = {
    "0ms": {"latency_ms": 0, "handshake_round_trips": 0, "bandwidth": 0},
    "20ms": {"latency_ms": 20, "handshake_round_trips": 2, "bandwidth": 0},
    "wan": {"latency_ms": 50, "handshake_round_trips": 2, "bandwidth": 25_000_000},
}
PROFILE_LABELS = {"0ms": "loopback (0 ms)", "20ms": "20 ms", "wan": "WAN (50 ms, 25 MB/s per connection)"}

LIST_ROUTES = ("files/list_folder", "files/list_folder/continue")
UPLOAD_PREFIXES = ("files/upload",)   # files/upload and every files/upload_session/* route


class Server:
    def __init__(self, emu):
        self.emu = emu
        self.own = Counter()

    def set_profile(self, name):
        self.emu.config(**PROFILES[name])

    def begin(self):
        """Zeroes the counters: the calls from here on are the client's, less the harness's own."""
        self.emu.reset_stats()
        self.own = Counter()

    def calls(self):
        """The client's calls since begin(), by route."""
        counted = self.emu.stats()["requests"]
        return {route: n - self.own[route] for route, n in counted.items() if n - self.own[route] > 0}

    def api(self, route, arg):
        self.own[route] += 1
        return self.emu.api(route, arg)

    def metadata(self, path):
        """The entry at `path`, or None when there is none."""
        try:
            return self.api("files/get_metadata", {"path": path})
        except EmulatorError as err:
            if err.status == 409:
                return None
            raise

    def tree(self, path):
        """Every entry under `path` (recursive), by path relative to it: {rel: metadata}."""
        page = self.api("files/list_folder", {"path": path, "recursive": True, "limit": 2000})
        entries = list(page["entries"])
        while page["has_more"]:
            page = self.api("files/list_folder/continue", {"cursor": page["cursor"]})
            entries += page["entries"]
        base = len(path)
        return {e["path_display"][base + 1:]: e for e in entries}

    def make_folder(self, path):
        self.api("files/create_folder_v2", {"path": path})

    def copy(self, src, dst):
        self.api("files/copy_v2", {"from_path": src, "to_path": dst})

    def remove(self, path):
        """Deletes `path` if it is there and frees the bytes of everything deleted so far."""
        try:
            self.api("files/delete_v2", {"path": path})
        except EmulatorError as err:
            if err.status != 409:
                raise
        self.emu.purge_deleted()


def wait_until(check, timeout, interval=0.05):
    """Polls `check()` until it is true; raises TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not done after {timeout:.0f} s")
        time.sleep(interval)
