"""Write contention as real Dropbox produces it: `too_many_write_operations` in every form.

Dropbox serialises writes per namespace; when too many compete it refuses one with
`too_many_write_operations`, and that refusal comes in several shapes (docs/EMULATOR.md,
"Write contention", with the sources):
  - 429 with `{"reason": {".tag": "too_many_write_operations"}, "retry_after": N}` and `Retry-After`;
  - 429 where only the `Retry-After` header carries the wait (no `retry_after` in the body);
  - 409, as the route's own error union: inside WriteError (create_folder_v2 `path`, move/copy
    `to`/`from_write`, upload's UploadWriteFailed `reason`), or as a member of DeleteError and
    UploadSessionFinishError;
  - per entry of `finish_batch_v2` / `finish_batch` / `delete_batch` / `create_folder_batch` /
    `move_batch_v2` results.
Commits of upload batches are also serialised per namespace (files.stone on finish_batch: "should
be executed serially"; rclone's batcher commits one batch at a time): a batch commit that overlaps
another gets `too_many_write_operations` too.

The settings (faults.py) say when contention happens (`write_contention_rate`, or the next
`write_contention_next` commits) and in which form (`write_contention_form`); `retry_after` is the
wait every 429 asks for.
"""

import random
import threading

from .errors import RateLimited, RouteError

FORMS = ("429", "429_header_only", "409", "batch_entry")
BATCH_ROUTES = {"files/upload_session/finish_batch", "files/upload_session/finish_batch_v2", "files/delete_batch",
                "files/create_folder_batch", "files/move_batch_v2"}
BATCH_COMMIT_ROUTES = {"files/upload_session/finish_batch", "files/upload_session/finish_batch_v2"}
TWMO = "too_many_write_operations"


def route_error(route):
    """The 409 form of too_many_write_operations in the error union of `route`."""
    twmo = {".tag": TWMO}
    if route == "files/upload":
        # UploadError.path is the struct UploadWriteFailed, inlined next to the tag.
        return RouteError({".tag": "path", "reason": twmo, "upload_session_id": "pid_upload_session:"})
    if route in ("files/delete_v2", "files/upload_session/finish"):
        # A member of DeleteError and of UploadSessionFinishError themselves.
        return RouteError(twmo)
    if route in ("files/move_v2", "files/copy_v2"):
        wrapper = random.choice(("to", "from_write"))
        return RouteError({".tag": wrapper, wrapper: twmo})
    return RouteError({".tag": "path", "path": twmo})


class Contention:
    """Decides which write commits meet contention, and answers them."""

    def __init__(self, settings, stats):
        self.settings = settings
        self.stats = stats
        self._lock = threading.Lock()
        self._batch_commits = 0

    def _contended(self):
        return self.settings.take("write_contention_next") or self.settings.roll("write_contention_rate")

    def rate_limited(self, header_only):
        return RateLimited(TWMO, self.settings["retry_after"], header_only=header_only)

    def check_call(self, route):
        """Before a write commit runs: raises the contention error for the whole call, if any."""
        form = self.settings["write_contention_form"]
        if route in BATCH_ROUTES and form in ("409", "batch_entry"):
            return  # contention shows per entry (entry_failure)
        if route in BATCH_ROUTES and form == "mixed" and random.random() < 0.5:
            return
        if not self._contended():
            return
        self.stats.count_fault("write_contention")
        if form == "mixed":
            form = random.choice(("429", "429_header_only") if route in BATCH_ROUTES else ("429", "429_header_only", "409"))
        if form in ("409", "batch_entry"):
            raise route_error(route)
        raise self.rate_limited(header_only=form == "429_header_only")

    def entry_failure(self):
        """For one entry of a batch: the failure to report instead of committing it, or None."""
        if self.settings["write_contention_form"] in ("429", "429_header_only") or not self._contended():
            return None
        self.stats.count_fault("write_contention")
        return {".tag": TWMO}

    # ----- batch commits, one at a time per namespace -----
    def enter_batch_commit(self, route):
        """Called when a batch commit arrives (before its latency); refuses an overlapping one."""
        if route not in BATCH_COMMIT_ROUTES:
            return False
        with self._lock:
            overlapping = self._batch_commits > 0
            self._batch_commits += 1
        if overlapping and self.settings["serialize_batch_commits"]:
            self.leave_batch_commit()
            self.stats.count_fault("batch_overlap")
            raise self.rate_limited(header_only=True)
        return True

    def leave_batch_commit(self):
        with self._lock:
            self._batch_commits -= 1
