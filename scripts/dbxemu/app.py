"""The emulator's shared state and its route table.

`App` bundles what every request handler needs: the store, the account (namespaces, team
space), its shared folders and export-only files, the settings, the counters, the token
registry, the rate limiter and write gate, and finished async jobs. `ROUTES` maps each
`/2/<route>` to its style (rpc, upload or download), whether it needs an access token, whether
it is a write commit (for --write-rate-limit), and the function that serves it.
"""

import json
import secrets
from collections import namedtuple

from . import routes_account, routes_batches, routes_export, routes_files, routes_sharing, routes_upload_sessions
from .change_feed import ChangeFeed
from .contention import Contention
from .listing_overlap import ListingOverlap
from .path_states import PathStates
from .errors import RouteError
from .faults import RateLimiter, Settings, Stats, WriteGate
from .namespaces import Account
from .oauth import TokenRegistry
from .routes_export import ExportOnlyFiles
from .shares import Shares
from .storage import Store

Route = namedtuple("Route", "style auth write func")

ROUTES = {}
for module in (routes_files, routes_batches, routes_upload_sessions, routes_export, routes_account, routes_sharing):
    for name, (style, auth, write, func) in module.ROUTES.items():
        ROUTES[name] = Route(style, auth, write, func)

JOBS_SCHEMA = "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, result TEXT NOT NULL)"


class App:
    def __init__(self, data_dir, settings, static_tokens, app_key=None, control_token=None, team_space=False):
        self.store = Store(data_dir)
        self.shares = self.store.shares = Shares(self.store)
        self.exports = self.store.exports = ExportOnlyFiles(self.store)
        self.account = self.store.account = Account(self.store, team_space)
        self.settings = Settings(settings)
        self.store.feed = ChangeFeed(self.settings)
        self.stats = Stats()
        self.tokens = TokenRegistry(self.store, self.settings, static_tokens, app_key)
        self.rate_limiter = RateLimiter(self.settings)
        self.write_gate = WriteGate(self.settings)
        self.contention = Contention(self.settings, self.stats)
        self.listing_overlap = ListingOverlap(self.settings, self.stats)
        self.path_states = PathStates()
        self.sessions = routes_upload_sessions.SessionStore(self.store, self.settings)
        with self.store.lock:
            self.store.db.execute(JOBS_SCHEMA)
            self.store.db.execute(routes_sharing.SCHEMA)
        self.control_token = control_token or secrets.token_urlsafe(24)

    def allocated(self):
        """The account's (or the team's) allocation: `quota`, 2 TiB when unset."""
        return self.settings["quota"] or (2 << 40)

    def quota(self):
        """What the tree may hold: the allocation, less what other team members use."""
        return self.account.team_quota(self.allocated())

    # Async jobs (delete_batch, create_folder_batch, move_batch_v2, finish_batch v1) finish at once; their results wait for /check.
    def save_job(self, result):
        job_id = "dbjid:" + secrets.token_urlsafe(30)
        with self.store.write() as db:
            db.execute("INSERT INTO jobs (id, result) VALUES (?, ?)", (job_id, json.dumps(result)))
        return job_id

    def load_job(self, job_id):
        with self.store.lock:
            row = self.store.db.execute("SELECT result FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise RouteError({".tag": "invalid_async_job_id"})
        return json.loads(row[0])

    def close(self):
        self.store.close()
