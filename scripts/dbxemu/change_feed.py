"""What list_folder/continue shows of a removed folder, and of a path deleted and made again: as
on Dropbox, not always every path, and not always only the latest state of a path.

A folder deleted (or moved away) is sometimes reported alone, and sometimes with a `deleted`
entry for each thing that was in it. Dropbox's v1 delta documentation said so ("you will
sometimes also get 'delete' delta entries for the children, but this is not guaranteed":
dropbox/dropbox-sdk-python, dropbox/client.py `delta`, removed in 3f109f5), and files.stone's
list_folder tells clients to remove a DeletedMetadata's path "and all its children". A client
that waits for each child's own entry keeps the children of a folder deleted on Dropbox.

A path deleted and then made again (a file uploaded where one was deleted, a folder created or
moved where one was) is sometimes reported twice: its deletion, then the new entry. Maestral
(samschott/maestral `sync.py`, `_clean_remote_changes`): "Dropbox will sometimes report multiple
changes per path", e.g. a shared folder and its children "as deleted and then created", and
"applying events in the provided order will reproduce the state in the cloud". A client that
treats a page as a set of final states (all deletions first, say) loses such a path.

With `change_feed` "varied" (the default) each removal of a folder draws, one time in
DESCENDANTS_RATE, whether its descendants are reported too, and each path made again draws, one
time in KEPT_DELETION_RATE, whether its deletion stays in the feed; reproducibly from
`listing_seed`, the path and the store's position in its change log. "each" reports every
removed path and only the latest state of a path (the emulator's old behaviour), for tests that
count the entries of a change.

The choice is stored with the removal (the tombstones' `implied` column, storage.py): a
descendant's tombstone is `implied` when its removal is not reported on its own, and a recursive
cursor leaves it out unless it is the cursor's own folder (whose parent's entry is outside the
cursor's scope). A non-recursive cursor lists direct children only, never their parent's
entry, so it reports them. A kept deletion stays a tombstone beside the live entry at its path,
with the older seq, so it comes first; listing_order.arrange_changes keeps it first when a page
is shuffled.
"""

import random

DESCENDANTS_RATE = 0.5
KEPT_DELETION_RATE = 0.5


class ChangeFeed:
    def __init__(self, settings):
        self.settings = settings

    def reports_descendants(self, path_lower, seq):
        """Whether the removal of the folder at `path_lower` (the store's seq before it) gives
        each of its descendants an entry of its own."""
        if self.settings["change_feed"] != "varied":
            return True
        rng = random.Random(f"descendants:{self.settings['listing_seed']}:{path_lower}:{seq}")
        return rng.random() < DESCENDANTS_RATE

    def keeps_deletion(self, path_lower, seq):
        """Whether the deletion of `path_lower` (its tombstone's seq) stays in the feed, before the
        entry of the path made again."""
        if self.settings["change_feed"] != "varied":
            return False
        rng = random.Random(f"kept:{self.settings['listing_seed']}:{path_lower}:{seq}")
        return rng.random() < KEPT_DELETION_RATE
