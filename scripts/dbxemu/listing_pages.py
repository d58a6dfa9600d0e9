"""How many entries a list_folder page carries: as on Dropbox, not exactly `limit`.

files.stone on `ListFolderArg.limit`: "This is an approximate number and there can be slightly
more entries returned in some cases". And a page may be empty while `has_more` is true: Dropbox
staff in dropbox/dropbox-sdk-java#281 ("use listFolderContinue when getHasMore is true,
regardless of how many entries were returned"). A client that stops at an empty page, or counts
on at most `limit` entries, loses entries on Dropbox.

With `listing_pages` "uneven" (the default) the emulator does both, reproducibly from the
cursor's order (its `listing_seed`) and position:
- a page that has more entries to come is, one time in EMPTY_PAGE_RATE, empty with `has_more`
  (never twice in a row: the cursor it answers with says one was just served);
- a full page carries, one time in EXTRA_RATE, 1 to limit/50 entries more than `limit`.
"exact" gives pages of exactly `limit` entries (the last one fewer) and never an empty one.
A cursor keeps the pages it was started with.
"""

import random

EMPTY_PAGE_RATE = 0.15
EXTRA_RATE = 0.3


def pages_for_new_cursor(settings):
    return settings["listing_pages"]


def plan(cursor):
    """(empty, size): whether this page is an empty one with has_more (asked only when entries
    remain), and how many entries it may carry."""
    limit = cursor.limit
    if cursor.pages != "uneven":
        return False, limit
    rng = random.Random(f"pages:{cursor.order}:{cursor.phase}:{cursor.after}:{cursor.position}")
    empty = rng.random() < EMPTY_PAGE_RATE and not cursor.rested
    if rng.random() >= EXTRA_RATE:
        return empty, limit
    return empty, limit + rng.randint(1, max(1, limit // 50))
