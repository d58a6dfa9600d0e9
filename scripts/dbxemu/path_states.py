"""Files Dropbox treats specially, set per path through `/_control/path_state` so the client's
handling of each can be tested:
  - `restricted_content`: "The file cannot be transferred because the content is restricted. For
    example, we might restrict a file due to legal requirements" (files.stone LookupError):
    downloads answer `path/restricted_content`;
  - `locked`: "The given path is locked" (files.stone LookupError; Dropbox's file locking):
    delete answers `path_lookup/locked`, move `from_lookup/locked`.
A state sticks to the path (lowercased), not to the file, and is forgotten on restart.
"""

import threading

from .errors import lookup_error

STATES = ("restricted_content", "locked")


class PathStates:
    def __init__(self):
        self._lock = threading.Lock()
        self._states = {}

    def set(self, path_lower, state):
        if state is not None and state not in STATES:
            raise ValueError(f"state must be one of {', '.join(STATES)} or null")
        with self._lock:
            if state is None:
                self._states.pop(path_lower, None)
            else:
                self._states[path_lower] = state

    def check(self, path_lower, state, wrapper):
        """Raises `<wrapper>/<state>` if `path_lower` is in `state`."""
        with self._lock:
            current = self._states.get(path_lower)
        if current == state:
            raise lookup_error(state, wrapper)
