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
order"), so its shuffle keeps one order: a deletion comes before whatever was made later at its
path or below it (a path deleted and made again, change_feed.py). Any other two entries of a
page touch different paths with their latest state, and any order of those gives the same tree.
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
    """Shuffles a page of changes, (seq, kind, row) in seq order, like `arrange`, then restores
    "a deletion before what was made later at its path or below" with the fewest moves (a
    topological sort that takes the shuffled order wherever it can)."""
    order = arrange(list(range(len(changes))), cursor)
    deletions = {}
    for i, (seq, kind, row) in enumerate(changes):
        if kind == "deleted":
            deletions.setdefault(row["path_lower"], []).append(i)
    if not deletions:
        return [changes[i] for i in order]
    followers = {i: [] for i in range(len(changes))}
    waiting = [0] * len(changes)
    for j, (seq, kind, row) in enumerate(changes):
        path = row["path_lower"] if kind == "live" else ""
        while path:
            for i in deletions.get(path, ()):
                if changes[i][0] < seq:
                    followers[i].append(j)
                    waiting[j] += 1
            path = path.rsplit("/", 1)[0]
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
