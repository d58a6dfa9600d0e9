"""The order of list_folder entries: Dropbox promises none, and real listings put children
before their parent (mostly with shared folders: Maestral PR #472, which fixed samschott/maestral#452;
the list_folder documentation in files.stone tells clients to create missing parent folders).

With `listing_order` "shuffled" (the default) the emulator does that on purpose, reproducibly:
- a listing's pages walk the tree in reverse path order, so every child comes before its parent,
  across pages as well as within one;
- the entries of every page (listing or changes) are shuffled with a generator seeded from
  `listing_seed` and the page's position, so the same seed gives the same pages.
A cursor keeps the order it was started with. "path" gives the old order: parents first, by path.
"""

import random


def order_for_new_cursor(settings):
    """The order recorded in a new cursor: "path", or "shuffled:<seed>"."""
    if settings["listing_order"] == "path":
        return "path"
    return f"shuffled:{settings['listing_seed']}"


def descending(cursor):
    return cursor.order != "path"


def arrange(entries, cursor):
    """Shuffles one page's entries in place, reproducibly (nothing in "path" order)."""
    if cursor.order == "path" or len(entries) < 2:
        return entries
    rng = random.Random(f"{cursor.order}:{cursor.phase}:{cursor.after}:{cursor.position}")
    rng.shuffle(entries)
    return entries
