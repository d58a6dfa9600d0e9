"""The command line of scripts/dbx-emulator (the contract is in docs/EMULATOR.md)."""

import argparse
import os
import random
import shutil
import signal
import sys
import threading
import time

from . import account_seed, namespaces
from .app import App
from .faults import CHOICE_KEYS
from .errors import RouteError
from .hashing import content_hash_of_file
from .http_server import Server
from .storage import TIMESTAMP_FORMAT


def parse_args(argv):
    p = argparse.ArgumentParser(prog="dbx-emulator", description="Emulator of the Dropbox HTTP API v2.")
    p.add_argument("--data", required=True, help="directory holding the account (created if missing)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--token", action="append", default=[], help="a long-lived access token (repeatable)")
    p.add_argument("--control-token", help="token for /_control (default: random, written to DATA/control-token)")
    p.add_argument("--tls-cert")
    p.add_argument("--tls-key")
    p.add_argument("--seed", help="import this local tree at start")
    p.add_argument("--seed-manifest", help="JSON: account settings, shared folders and export-only files to "
                                           "create at start (docs/EMULATOR.md)")
    p.add_argument("--team-space", action="store_true",
                   help="a Business team member in a team space: the tree is the team root, the member's "
                        "home namespace is its folder '/Emulated User' (fixed when --data is created)")
    p.add_argument("--latency-ms", type=float, default=0,
                   help="round-trip time every API request pays (docs/EMULATOR.md, network profiles)")
    p.add_argument("--handshake-round-trips", type=int, default=0,
                   help="extra round trips the first API request on a connection pays (2: TCP + TLS 1.3)")
    p.add_argument("--bandwidth", type=int, default=0, help="bytes per second per connection and direction")
    p.add_argument("--fail-rate", type=float, default=0.0)
    p.add_argument("--reset-rate", type=float, default=0.0)
    p.add_argument("--rate-limit", type=float, default=0, help="requests per second")
    p.add_argument("--write-rate-limit", type=int, default=0, help="write commits in flight")
    p.add_argument("--token-ttl", type=float, default=0, help="seconds an OAuth access token lives")
    p.add_argument("--quota", type=int, default=0, help="account size in bytes")
    p.add_argument("--retry-after", type=int, default=1, help="seconds every 429 asks the client to wait")
    p.add_argument("--write-contention-rate", type=float, default=0.0,
                   help="probability that a write commit meets too_many_write_operations")
    p.add_argument("--write-contention-form", default="mixed", choices=CHOICE_KEYS["write_contention_form"])
    p.add_argument("--allow-concurrent-batch-commits", action="store_true",
                   help="do not refuse a finish_batch that overlaps another (Dropbox does)")
    p.add_argument("--allow-identical-listings", action="store_true",
                   help="do not refuse a listing identical to one being served (Dropbox may)")
    p.add_argument("--listing-order", default="shuffled", choices=CHOICE_KEYS["listing_order"],
                   help="shuffled (children may come before parents, as on Dropbox) or path (parents first)")
    p.add_argument("--listing-seed", type=int, help="seed of the shuffled order (default: random, printed)")
    p.add_argument("--listing-pages", default="uneven", choices=CHOICE_KEYS["listing_pages"],
                   help="uneven (pages over the limit and empty ones with has_more, as on Dropbox) or exact")
    p.add_argument("--change-feed", default="varied", choices=CHOICE_KEYS["change_feed"],
                   help="varied (a removed folder sometimes reported alone, a path made again sometimes "
                        "reported twice, as on Dropbox) or each")
    p.add_argument("--move-limit", type=int, default=10000,
                   help="entries a move, copy or delete may involve before too_many_files")
    p.add_argument("--app-key", help="the only accepted OAuth client_id (default: any)")
    p.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = p.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        p.error("--tls-cert and --tls-key go together")
    return args


def import_seed(app, src):
    """Copies a local tree into the account (identical files are left alone)."""
    store = app.store
    src = os.path.abspath(src)
    batch = store.write()  # one transaction per 5,000 files: seeding a million entries stays fast
    batch.__enter__()
    pending = 0
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        rel = os.path.relpath(dirpath, src)
        base = "" if rel == "." else "/" + rel.replace(os.sep, "/")
        for d in list(dirnames):
            try:
                with store.lock:
                    target = store.resolve(base + "/" + d, write=True)
                    if target.row is None:
                        store.create_folder(target, False)
            except RouteError as err:
                print(f"dbx-emulator: --seed skips {os.path.join(dirpath, d)} and what it holds: {err}", file=sys.stderr)
                dirnames.remove(d)
        for name in sorted(filenames):
            local = os.path.join(dirpath, name)
            st = os.stat(local)
            mtime = time.strftime(TIMESTAMP_FORMAT, time.gmtime(st.st_mtime))
            try:
                with store.lock:
                    known = store.resolve(base + "/" + name, write=True).row
            except RouteError as err:
                print(f"dbx-emulator: --seed skips {local}: {err}", file=sys.stderr)
                continue
            if known is not None and not known["is_folder"] and known["size"] == st.st_size \
                    and known["client_modified"] == mtime:
                continue  # imported by an earlier start and unchanged since: skip the copy and hash
            temp = store.new_temp_path()
            if os.path.getsize(local):
                shutil.copyfile(local, temp)
            else:
                open(temp, "wb").close()
            with store.lock:
                target = store.resolve(base + "/" + name, write=True)
                store.commit_file(target, ("overwrite", None), False, mtime, False, temp,
                                  os.path.getsize(temp), content_hash_of_file(temp))
            pending += 1
            if pending >= 5000:
                batch.__exit__(None, None, None)
                batch = store.write()
                batch.__enter__()
                pending = 0
    batch.__exit__(None, None, None)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.makedirs(args.data, exist_ok=True)
    settings = {"latency_ms": args.latency_ms, "handshake_round_trips": args.handshake_round_trips,
                "bandwidth": args.bandwidth, "fail_rate": args.fail_rate,
                "reset_rate": args.reset_rate, "rate_limit": args.rate_limit,
                "write_rate_limit": args.write_rate_limit, "token_ttl": args.token_ttl, "quota": args.quota,
                "retry_after": args.retry_after, "write_contention_rate": args.write_contention_rate,
                "write_contention_form": args.write_contention_form,
                "serialize_batch_commits": 0 if args.allow_concurrent_batch_commits else 1,
                "refuse_identical_listings": 0 if args.allow_identical_listings else 1,
                "listing_order": args.listing_order, "listing_pages": args.listing_pages,
                "change_feed": args.change_feed, "move_limit": args.move_limit,
                "listing_seed": args.listing_seed if args.listing_seed is not None else random.randrange(1 << 31)}
    if args.listing_order == "shuffled" and args.listing_seed is None:
        print(f"dbx-emulator: listing order shuffled with --listing-seed {settings['listing_seed']}", file=sys.stderr)
    app = App(args.data, settings, args.token, args.app_key, args.control_token, team_space=args.team_space)
    token_file = os.path.join(args.data, "control-token")
    with open(token_file + ".tmp", "w") as f:
        f.write(app.control_token + "\n")
    os.chmod(token_file + ".tmp", 0o600)
    os.replace(token_file + ".tmp", token_file)
    if args.seed:
        # Into the member's home namespace: the seed is the user's own files.
        with namespaces.request_context(app, app.account.home_view()):
            import_seed(app, args.seed)
    if args.seed_manifest:
        try:
            account_seed.apply_manifest(app, args.seed_manifest)
        except (OSError, ValueError, RouteError) as err:
            print(f"dbx-emulator: --seed-manifest {args.seed_manifest}: {err}", file=sys.stderr)
            return 2
    server = Server((args.host, args.port), app, args.tls_cert, args.tls_key, args.verbose)

    def stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"listening on {server.url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        app.close()
    return 0
