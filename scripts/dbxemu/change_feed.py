"""What list_folder/continue shows of a removed folder: as on Dropbox, not always every path.

A folder deleted (or moved away) is sometimes reported alone, and sometimes with a `deleted`
entry for each thing that was in it. Dropbox's v1 delta documentation said so ("you will
sometimes also get 'delete' delta entries for the children, but this is not guaranteed":
dropbox/dropbox-sdk-python, dropbox/client.py `delta`, removed in 3f109f5), and files.stone's
list_folder tells clients to remove a DeletedMetadata's path "and all its children". A client
that waits for each child's own entry keeps the children of a folder deleted on Dropbox.

With `change_feed` "varied" (the default) each removal of a folder draws, one time in
DESCENDANTS_RATE, whether its descendants are reported too, reproducibly from `listing_seed`,
the folder's path and the store's position in its change log. "each" reports every removed
path (the emulator's old behaviour), for tests that count the entries of a removal.

The choice is stored with the removal (the tombstones' `implied` column, storage.py): a
descendant's tombstone is `implied` when its removal is not reported on its own, and a recursive
cursor leaves it out unless it is the cursor's own folder (whose parent's entry is outside the
cursor's scope). A non-recursive cursor lists direct children only, never their parent's
entry, so it reports them.
"""

import random

DESCENDANTS_RATE = 0.5


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
