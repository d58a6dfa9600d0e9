"""Identical listings at once: Dropbox may refuse all but one.

files.stone, route list_folder: "auth.RateLimitError may be returned if multiple list_folder or
list_folder/continue calls with same parameters are made simultaneously by same API app for same
user. If your app implements retry logic, please hold off the retry until the previous request
finishes." A client that lists one folder twice at once (two readers of a cold directory, say)
is slowed down by 429s on Dropbox.

With `refuse_identical_listings` 1 (the default) the emulator always refuses: a list_folder or
list_folder/continue whose Authorization, Dropbox-API-Path-Root header and arguments equal those
of one being served gets 429 too_many_requests with `retry_after`. 0 lets them run together.

A listing is served from its arrival (its latency included, as a batch commit in contention.py)
until its answer is ready, not until the answer is sent: a client that reads the answer and asks
again at once has waited for "the previous request" to finish, and is never refused for it.
Its arguments are read on arrival for that (a listing's body is a few hundred bytes).
"""

import json
import threading

from .errors import BadRequest, RateLimited

ROUTES = ("files/list_folder", "files/list_folder/continue")


class ListingOverlap:
    def __init__(self, settings, stats):
        self.settings = settings
        self.stats = stats
        self._lock = threading.Lock()
        self._serving = set()

    def arrive(self, route, raw_body, authorization, path_root):
        """When a request arrives: None for a route other than a listing; else the key to give
        `leave` once its answer is ready. Raises RateLimited if an identical one is being served."""
        if route not in ROUTES:
            return None
        try:
            arg = json.dumps(json.loads(raw_body or b"null"), sort_keys=True)
        except (UnicodeDecodeError, json.JSONDecodeError):
            arg = raw_body   # refused as bad JSON later, like any other
        key = (route, authorization, path_root, arg)
        with self._lock:
            busy = key in self._serving
            if not busy:
                self._serving.add(key)
        if not busy:
            return key
        if self.settings["refuse_identical_listings"]:
            self.stats.count_fault("identical_listing")
            raise RateLimited("too_many_requests", self.settings["retry_after"])
        return None

    def leave(self, key):
        if key is not None:
            with self._lock:
                self._serving.discard(key)


class ReadBody:
    """A request body read on arrival, standing in for the stream (http_server.RequestBody)."""

    chunked = False

    def __init__(self, raw):
        self.raw = raw
        self.length = len(raw)
        self.done = not raw

    def read_all(self, limit):
        if self.length > limit:
            raise BadRequest("request body: too large")
        raw, self.raw, self.done = self.raw, b"", True
        return raw

    def drain(self):
        self.raw, self.done = b"", True
