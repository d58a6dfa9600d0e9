"""list_folder cursors: self-contained, signed, and invalidated by an epoch.

longpoll carries no Authorization header, so a cursor must say everything by itself: which
folder, which flags, and where in the listing it stands. It is base64url(JSON) plus an HMAC
made with a per-account secret, so a tampered or garbage cursor is a 400, and a cursor whose
epoch is older than the store's (after /_control/reset_cursors) is a 409 `reset`.

Phases: LIST pages through live entries by path_lower; LIST_DELETED pages through tombstones
(only with include_deleted); CHANGES reports everything whose seq is above `position`.
"""

import base64
import hashlib
import hmac
import json

from .errors import BadRequest, RouteError

LIST, LIST_DELETED, CHANGES = 0, 1, 2
VERSION = 1


class Cursor:
    __slots__ = ("epoch", "path_lower", "recursive", "include_deleted", "limit", "phase", "after",
                 "start_seq", "position", "view", "order", "pages", "rested")

    def __init__(self, epoch, path_lower, recursive, include_deleted, limit, phase, after, start_seq, position,
                 view=None, order="path", pages="exact", rested=False):
        self.epoch = epoch
        self.path_lower = path_lower
        self.recursive = recursive
        self.include_deleted = include_deleted
        self.limit = limit
        self.phase = phase
        self.after = after          # last path_lower returned in a LIST phase
        self.start_seq = start_seq  # store seq when the listing began
        self.position = position    # last seq reported in the CHANGES phase
        # The namespace view paths are shown in (namespaces.View.encode()); None: the account root.
        # `path_lower` is always the physical folder, so the cursor means the same in any request.
        self.view = view
        self.order = order          # listing_order when the listing began (listing_order.py)
        self.pages = pages          # listing_pages when the listing began (listing_pages.py)
        self.rested = rested        # the page just served was an empty one (listing_pages.py)

    def copy(self, **changes):
        values = {k: getattr(self, k) for k in self.__slots__}
        values.update(changes)
        return Cursor(**values)


def encode(cursor, secret):
    payload = json.dumps([VERSION] + [getattr(cursor, k) for k in Cursor.__slots__],
                         separators=(",", ":"), ensure_ascii=False).encode()
    mac = hmac.new(secret, payload, hashlib.sha256).digest()[:12]
    return "AA" + base64.urlsafe_b64encode(mac + payload).decode().rstrip("=")


def decode(text, secret, current_epoch):
    """Parses a cursor string: 400 if it is not one of ours, 409 `reset` if it is too old."""
    try:
        if not isinstance(text, str) or not text.startswith("AA"):
            raise ValueError
        raw = base64.urlsafe_b64decode(text[2:] + "=" * (-len(text[2:]) % 4))
        mac, payload = raw[:12], raw[12:]
        if not hmac.compare_digest(mac, hmac.new(secret, payload, hashlib.sha256).digest()[:12]):
            raise ValueError
        values = json.loads(payload)
        if values[0] != VERSION:
            raise ValueError
        cursor = Cursor(*values[1:])
    except (ValueError, TypeError, IndexError, json.JSONDecodeError):
        raise BadRequest("request body: cursor: Invalid cursor")
    if cursor.epoch != current_epoch:
        raise RouteError({".tag": "reset"})
    return cursor
