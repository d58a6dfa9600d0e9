"""The order of list_folder entries: Dropbox promises none, and real listings put children
before their parent (mostly with shared folders: Maestral PR #472, which fixed samschott/maestral#452;
the list_folder documentation in files.stone tells clients to create missing parent folders).

With `listing_order` "shuffled" (the default) the emulator does that on purpose, reproducibly:
- a listing's pages walk the tree in reverse path order, so every child comes before its parent,
  across pages as well as within one;
- the entries of every page (listing or changes) are shuffled with a generator seeded from
  `listing_seed` and the page's position, so the same seed gives the same pages.
A cursor keeps the order it was started with. "path" gives the old order: parents first, by path.

A page of changes is applied in order (files.stone, list_folder: "iterate through each entry in
order"), so its shuffle keeps the order of the change log between a deletion and any entry at,
above or below its path: a path deleted and made again (change_feed.py) comes back after its
deletion, and a deletion within a folder stays before the folder's own entry when it was made
again. Any other two entries touch unrelated paths, or are the latest states of a folder and
of something in it, and any order of those gives the same tree.
"""

import heapq
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


def arrange_changes(changes, cursor):
    """Shuffles a page of changes, (seq, kind, row) in seq order, like `arrange`, then puts back in
    seq order every pair of a deletion and an entry at, above or below its path, with the fewest
    moves (a topological sort that takes the shuffled order wherever it can)."""
    order = arrange(list(range(len(changes))), cursor)
    if not any(kind == "deleted" for _, kind, _ in changes):
        return [changes[i] for i in order]
    at_path = {}
    for i, (_, _, row) in enumerate(changes):
        at_path.setdefault(row["path_lower"], []).append(i)
    pairs = set()
    for i, (_, kind, row) in enumerate(changes):
        path = row["path_lower"]
        while path:
            for j in at_path.get(path, ()):
                # i at or below j's path: ordered if either one is a deletion.
                if j != i and (kind == "deleted" or changes[j][1] == "deleted"):
                    pairs.add((min(i, j), max(i, j)))   # indexes are in seq order
            path = path.rsplit("/", 1)[0]
    followers = {i: [] for i in range(len(changes))}
    waiting = [0] * len(changes)
    for earlier, later in pairs:
        followers[earlier].append(later)
        waiting[later] += 1
    rank = {i: position for position, i in enumerate(order)}
    ready = [(rank[i], i) for i in range(len(changes)) if not waiting[i]]
    heapq.heapify(ready)
    arranged = []
    while ready:
        _, i = heapq.heappop(ready)
        arranged.append(changes[i])
        for j in followers[i]:
            waiting[j] -= 1
            if not waiting[j]:
                heapq.heappush(ready, (rank[j], j))
    return arranged
