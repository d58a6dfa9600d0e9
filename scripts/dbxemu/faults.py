"""Run-time settings (faults and limits) and the per-route request counters.

Settings start from the command line and can be changed at any time through
POST /_control/config, so one test can switch a fault on and off without a restart.
A value of 0 or null switches a setting off.
"""

import random
import threading
import time
from collections import Counter

DEFAULTS = {
    "latency_ms": 0,         # round-trip time every API request pays before it is handled
    "handshake_round_trips": 0,  # extra round trips the first API request on a connection pays
    "bandwidth": 0,          # bytes/s per connection, each direction on its own
    "fail_rate": 0.0,        # probability of a 500 answer
    "reset_rate": 0.0,       # probability that the connection is dropped mid-body
    "rate_limit": 0,         # API requests per second before 429 too_many_requests
    "write_rate_limit": 0,   # write commits in flight before 429 too_many_write_operations
    "token_ttl": 0,          # lifetime of OAuth access tokens in seconds (0: Dropbox's 14400)
    "quota": 0,              # account size in bytes (0: 2 TiB)
    "longpoll_max_wait": 0,  # cap on how long longpoll really waits, for fast tests (0: no cap)
    "longpoll_backoff": 0,   # if set, every longpoll answer carries this `backoff`
    "longpoll_jitter": 90,   # a longpoll without changes waits its timeout plus 0..this many s
    # Real-Dropbox strictness (contention.py, listing_order.py, listing_pages.py; docs/EMULATOR.md "Stricter than kind")
    "retry_after": 1,                # seconds every 429 asks for (RateLimitError.retry_after)
    "write_contention_rate": 0.0,    # probability that a write commit meets too_many_write_operations
    "write_contention_next": 0,      # the next N write commits (or batch entries) meet it, for tests
    "write_contention_form": "mixed",  # how it is answered: see contention.FORMS
    "serialize_batch_commits": 1,    # a finish_batch overlapping another gets too_many_write_operations
    "refuse_identical_listings": 1,  # a listing identical to one being served gets 429 (listing_overlap.py)
    "listing_order": "shuffled",     # "shuffled" (children may come before parents) or "path"
    "listing_seed": 0,               # seed of the shuffle (main.py picks a random one when unset)
    "listing_pages": "uneven",       # "uneven" (pages over limit, empty ones with has_more) or "exact"
    "change_feed": "varied",         # "varied" (removed folders, paths made again: change_feed.py) or "each"
    "move_limit": 10000,             # move/copy of more entries than this: too_many_files
    "batch_async_over": 10,          # create_folder_batch/move_batch_v2 of more entries: an async job
    "upload_session_ttl": 7 * 24 * 3600,  # seconds an upload session lives, then not_found (Dropbox: 7 days)
    "fail_next": 0,                  # the next N API requests fail like fail_rate (deterministic)
    "fail_status": 500,              # the status of those failures (500, 502, 503, 504...)
    "fail_body": "text",             # their body: plain text, an HTML page, or empty
    "deny_next": 0,                  # the next N write commits are refused (deny_form)...
    "deny_form": "missing_scope",    # ...with 401 missing_scope or 403 no_permission
}
FLOAT_KEYS = {"fail_rate", "reset_rate", "latency_ms", "rate_limit", "longpoll_max_wait", "token_ttl",
              "write_contention_rate", "upload_session_ttl", "longpoll_jitter"}
PROBABILITY_KEYS = {"fail_rate", "reset_rate", "write_contention_rate"}
# Settings whose value is one of a few words.
CHOICE_KEYS = {
    "write_contention_form": ("mixed", "429", "429_header_only", "409", "batch_entry"),
    "listing_order": ("shuffled", "path"),
    "listing_pages": ("uneven", "exact"),
    "change_feed": ("varied", "each"),
    "fail_body": ("text", "html", "empty"),
    "deny_form": ("missing_scope", "forbidden"),
}


class Settings:
    def __init__(self, initial):
        self._lock = threading.Lock()
        self._values = dict(DEFAULTS)
        self.update(initial)

    def update(self, changes):
        """Validates and applies a dict of changes; raises ValueError on an unknown key or bad value."""
        clean = {}
        for key, value in changes.items():
            if key not in DEFAULTS:
                raise ValueError(f"unknown setting {key!r}")
            if value is None:
                value = DEFAULTS[key]
            if key in CHOICE_KEYS:
                if value not in CHOICE_KEYS[key]:
                    raise ValueError(f"{key} must be one of {', '.join(CHOICE_KEYS[key])}")
                clean[key] = value
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{key} must be a non-negative number")
            if key in PROBABILITY_KEYS and value > 1:
                raise ValueError(f"{key} is a probability between 0 and 1")
            clean[key] = float(value) if key in FLOAT_KEYS else int(value)
        with self._lock:
            self._values.update(clean)

    def snapshot(self):
        with self._lock:
            return dict(self._values)

    def __getitem__(self, key):
        with self._lock:
            return self._values[key]

    def roll(self, key):
        """True with the probability stored under `key`."""
        p = self[key]
        return p > 0 and random.random() < p

    def take(self, key):
        """Counts down the counter under `key`: True (and one less) while it is above zero."""
        with self._lock:
            if self._values[key] > 0:
                self._values[key] -= 1
                return True
            return False


class Stats:
    def __init__(self):
        self._lock = threading.Lock()
        self.reset()

    def reset(self):
        with self._lock:
            self._requests = Counter()
            self._preflights = 0   # OPTIONS requests: not API calls, so not in "requests"
            self._connections = 0  # connections that carried an API or OPTIONS request
            self._faults = Counter({"fail": 0, "reset": 0, "rate_limited": 0, "write_limited": 0, "expired": 0,
                                    "write_contention": 0, "batch_overlap": 0, "denied": 0,
                                    "identical_listing": 0})

    def count_request(self, route):
        with self._lock:
            self._requests[route] += 1

    def count_connection(self):
        with self._lock:
            self._connections += 1

    def count_preflight(self):
        with self._lock:
            self._preflights += 1

    def count_fault(self, kind):
        with self._lock:
            self._faults[kind] += 1

    def snapshot(self):
        with self._lock:
            return {"requests": dict(self._requests), "total": sum(self._requests.values()),
                    "preflights": self._preflights,
                    "connections": self._connections, "faults": dict(self._faults)}


class RateLimiter:
    """A token bucket holding one second's worth of requests (at least one request)."""

    def __init__(self, settings):
        self.settings = settings
        self._lock = threading.Lock()
        self._tokens = 0.0
        self._last = time.monotonic()

    def allow(self):
        rate = self.settings["rate_limit"]
        if not rate:
            return True
        with self._lock:
            now = time.monotonic()
            self._tokens = min(max(rate, 1.0), self._tokens + (now - self._last) * rate)
            self._last = now
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False


class WriteGate:
    """Counts write commits in flight; refuses one more than `write_rate_limit`."""

    def __init__(self, settings):
        self.settings = settings
        self._lock = threading.Lock()
        self._in_flight = 0

    def enter(self):
        limit = self.settings["write_rate_limit"]
        with self._lock:
            if limit and self._in_flight >= limit:
                return False
            self._in_flight += 1
            return True

    def leave(self):
        with self._lock:
            self._in_flight -= 1


# Seconds' worth of bytes moved between two pauses of a paced connection: small enough that a
# reader sees a steady stream (at 25 MB/s, 250 kB every 10 ms), large enough to cost little CPU.
PACING_QUANTUM = 0.01
# How far a paced connection may fall behind its schedule and still catch up: a sleep that
# overran (a loaded machine wakes threads late) is made good, an idle pause is not.
PACING_SLACK = 0.02


class Throttle:
    """Paces one direction of one connection to the `bandwidth` setting (checked on every call),
    as a link of that speed would: each chunk leaves when the link is free and keeps it busy for
    len/rate seconds. A link that sat idle is merely free: it has saved at most PACING_SLACK of
    credit to burst with, so a kept-alive connection is paced the same after a pause as before."""

    def __init__(self, settings):
        self.settings = settings
        self._free_at = 0.0   # time.monotonic() when the bytes sent so far have left

    def chunk_size(self, default):
        rate = self.settings["bandwidth"]
        # Never more than asked: a 5-byte body must not wait for 4096 bytes, a range must not overrun.
        return default if not rate else min(default, max(4096, int(rate * PACING_QUANTUM)))

    def pace(self, nbytes):
        rate = self.settings["bandwidth"]
        if not rate:
            return
        now = time.monotonic()
        self._free_at = max(self._free_at, now - PACING_SLACK) + nbytes / rate
        if self._free_at > now:
            time.sleep(self._free_at - now)
