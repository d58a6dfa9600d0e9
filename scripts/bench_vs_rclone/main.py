"""The command line of scripts/bench-vs-rclone, and the run: profiles × cases × alternating pairs.

It runs twice: first as the command the user typed (checks, installs rclone if missing, builds
dbxfs, makes the work folders), then again inside private namespaces (network.py), where it
starts the emulator, runs every case and prints the table. The outer run only waits and, at the
end, removes the work folders; the inner run stops every mount and process it started, and the
kernel ends anything left when it exits (it is the namespace's init).
"""

import argparse
import datetime
import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from emulator import Emulator

from . import network
from .clients import Dbxfs, Rclone
from .direct import Direct
from .fixtures import Fixtures
from .report import ROWS, Results, table
from .server import PROFILE_LABELS, PROFILES, Server
from .workloads import CASES, Bench

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "bench-vs-rclone")
TOKEN = "bench-vs-rclone-token"
MIB = 1 << 20


def log(message):
    print(message, file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="bench-vs-rclone", description=(
        "dbxfs and rclone mount side by side on one emulator over TLS, at three network profiles; "
        "prints one table (docs/BENCHMARKS.md, 'dbxfs against rclone'). Needs root (namespaces, "
        "port 443, FUSE)."))
    p.add_argument("--bin", help="the dbxfs binary (default: build the release binary)")
    p.add_argument("--quick", action="store_true",
                   help="a short run: 256 MiB files and 1 pair (unless given)")
    p.add_argument("--profiles", default=",".join(PROFILES),
                   help=f"comma-separated, of {', '.join(PROFILES)} (default: all)")
    p.add_argument("--workloads", default=",".join(CASES),
                   help=f"comma-separated, of {', '.join(CASES)} (default: all)")
    p.add_argument("--size-mib", type=int, help="size of the big file (default 1024, quick 256)")
    p.add_argument("--pairs", type=int, help="alternating dbxfs/rclone pairs per case (default 3, quick 1)")
    p.add_argument("--small-files", type=int, default=1000, help="4 KiB files copied with cp -r")
    p.add_argument("--ls-files", type=int, default=10000, help="files listed by ls -lR (in 100 folders)")
    p.add_argument("--deep-entries", type=int, default=20000, help="entries of the first-access tree")
    p.add_argument("--ns-files", type=int, default=1000, help="files of the rm -rf, tar x and git clone cases")
    p.add_argument("--random-reads", type=int, default=1000, help="4 KiB random reads per run, over all threads")
    p.add_argument("--random-threads", type=int, default=4)
    p.add_argument("--random-seconds", type=float, default=120,
                   help="a random-read run stops after this long even if its reads are not all done")
    p.add_argument("--upload-timeout", type=float, default=600,
                   help="seconds to wait for a client's writes to reach the server before giving up "
                        "(the row then shows '> this')")
    p.add_argument("--work", default="/tmp",
                   help="where the work folder (caches, mounts, logs) is made: the cache directories' disk")
    p.add_argument("--shm", default="/dev/shm", help="where the in-memory folder (sources, emulator data) is made")
    p.add_argument("--keep", action="store_true", help="keep the work and in-memory folders")
    p.add_argument("--json", help="also write every sample to this file")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--work-dir", help=argparse.SUPPRESS)
    p.add_argument("--shm-dir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.size_mib = args.size_mib or (256 if args.quick else 1024)
    args.pairs = args.pairs or (1 if args.quick else 3)
    args.profiles = [x.strip() for x in args.profiles.split(",") if x.strip()]
    args.workloads = [x.strip() for x in args.workloads.split(",") if x.strip()]
    for name in args.profiles:
        if name not in PROFILES:
            p.error(f"unknown profile {name!r}: choose among {', '.join(PROFILES)}")
    for name in args.workloads:
        if name not in CASES:
            p.error(f"unknown workload {name!r}: choose among {', '.join(CASES)}")
    if args.size_mib < 8 or args.pairs < 1 or args.ls_files < 100 or args.ns_files < 10 or args.small_files < 1:
        p.error("--size-mib must be at least 8, --pairs 1, --ls-files 100, --ns-files 10, --small-files 1")
    return args


# ----- outside the namespaces -----
def ensure_rclone():
    """Debian's rclone (1.60 on bookworm), installed through apt when it is missing."""
    if shutil.which("rclone"):
        return
    log("bench-vs-rclone: installing Debian's rclone (apt-get install rclone) ...")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "rclone"], check=True, env=env)


def build_release():
    log("building the release binary (swift build -c release --product dbxfs) ...")
    subprocess.run(["swift", "build", "-c", "release", "--product", "dbxfs"], cwd=REPO, check=True)
    bin_dir = subprocess.run(["swift", "build", "-c", "release", "--show-bin-path"], cwd=REPO, check=True,
                             capture_output=True, text=True).stdout.strip()
    return os.path.join(bin_dir, "dbxfs")


def outer(args, argv):
    if os.geteuid() != 0:
        sys.exit("bench-vs-rclone: run it as root: it makes network and mount namespaces, listens on "
                 "port 443 inside them and mounts FUSE file systems")
    missing = [c for c in ("unshare", "ip", "curl", "openssl", "git", "tar", "fusermount3") if not shutil.which(c)]
    if missing or not os.path.exists("/dev/fuse"):
        sys.exit(f"bench-vs-rclone: missing {', '.join(missing) or '/dev/fuse'} (scripts/install-deps installs "
                 "the tools; FUSE needs /dev/fuse)")
    for folder, option in ((args.work, "--work"), (args.shm, "--shm")):
        if not os.path.isdir(folder):
            sys.exit(f"bench-vs-rclone: {folder} ({option}) is not a folder: create it, or pass another")
    ensure_rclone()
    binary = os.path.abspath(args.bin) if args.bin else build_release()
    if not os.access(binary, os.X_OK):
        sys.exit(f"bench-vs-rclone: {binary} is not an executable dbxfs binary")
    shm_free = shutil.disk_usage(args.shm).free
    need = 5 * args.size_mib * MIB + (1 << 30)
    if shm_free < need:
        sys.exit(f"bench-vs-rclone: {args.shm} has {shm_free >> 20} MiB free; this run needs about "
                 f"{need >> 20} MiB there (try a smaller --size-mib, or --shm on another tmpfs)")
    work = tempfile.mkdtemp(prefix="dbxfs-vs-rclone-", dir=args.work)
    shm = tempfile.mkdtemp(prefix="dbxfs-vs-rclone-", dir=args.shm)
    command = network.unshare_command([sys.executable, SCRIPT, *argv, "--inside", "--bin", binary,
                                       "--work-dir", work, "--shm-dir", shm])
    proc = subprocess.Popen(command)
    # Ctrl-C reaches the inner run too (same process group), which stops what it started and
    # prints what it measured; this run just waits for it. `unshare` itself ignores SIGINT and
    # SIGTERM, so SIGTERM is passed to the inner run directly, and if that has not ended a
    # minute later, `unshare` gets SIGKILL: its child then gets SIGKILL too (--kill-child) and
    # the kernel ends everything left in the namespaces.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_sigterm(signum, frame):
        for child in children(proc.pid):
            os.kill(child, signal.SIGTERM)
        timer = threading.Timer(60, lambda: proc.poll() is None and proc.kill())
        timer.daemon = True
        timer.start()

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        code = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if args.keep:
            log(f"bench-vs-rclone: kept {work} and {shm}")
        else:
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(shm, ignore_errors=True)
    return code


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


# ----- inside the namespaces -----
class Stop(Exception):
    """SIGTERM inside: unwinds like Ctrl-C, so every `finally` runs."""


def describe_build(binary):
    """The commit the measured binary was built from, as far as this checkout can tell: a binary
    from another place is named by its path (the checkout's commit says nothing about it)."""
    def git(*a):
        return subprocess.run(["git", "-C", REPO, *a], capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD")
    if not os.path.realpath(binary).startswith(os.path.realpath(os.path.join(REPO, ".build")) + os.sep):
        return f"{binary} (built elsewhere; this checkout is at {commit})"
    dirty = git("status", "--porcelain", "--", "Sources", "Package.swift")
    return commit + (" with uncommitted changes to Sources" if dirty else "")


def inner(args):
    def on_sigterm(signum, frame):
        raise Stop()

    signal.signal(signal.SIGTERM, on_sigterm)
    load_before = os.getloadavg()
    started = time.monotonic()
    work, shm = args.work_dir, args.shm_dir
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    network.enter(os.path.join(work, "hosts"))
    ca, chain, key = network.make_certificates(os.path.join(work, "certs"))
    data = Fixtures(os.path.join(shm, "local"), args.size_mib * MIB, args.ls_files, args.deep_entries,
                    args.ns_files, args.small_files)
    data.make(log)
    log(f"starting the emulator on port 443 (imports {data.deep_count + args.ls_files + args.ns_files} entries) ...")
    emu = Emulator(os.path.join(shm, "emulator"), token=TOKEN, tls=True, port=443, tls_cert=chain, tls_key=key,
                   seed=data.seed, control_token=secrets.token_urlsafe(16), log_dir=os.path.join(work, "logs"))
    results = Results()
    bench = None
    interrupted = False
    try:
        emu.start()
        server = Server(emu)
        clients = {"dbxfs": Dbxfs(args.bin, TOKEN, ca, work), "rclone": Rclone(TOKEN, ca, work)}
        bench = Bench(server, Direct(TOKEN, ca), data, work, args, log)
        try:
            run_all(bench, clients, results, args)
        except (KeyboardInterrupt, Stop):
            interrupted = True
            log("bench-vs-rclone: interrupted; the table holds what was measured so far")
    finally:
        for mounted in list(bench.running if bench else []):
            mounted.stop()
        emu.stop()
    load_after = os.getloadavg()
    print_report(args, results, data, load_before, load_after, time.monotonic() - started)
    if interrupted:
        print("\n(Interrupted. Ctrl-C also reaches the emulator and the daemons, so the last failure above "
              "may be the interrupt itself.)")
    return 0 if not results.failures else 1


def run_all(bench, clients, results, args):
    for profile in args.profiles:
        bench.server.set_profile(profile)
        bench.wan = profile == "wan"
        for case in args.workloads:
            run, limit = CASES[case]
            for pair in range(args.pairs):
                log(f"[{profile}] {case}, pair {pair + 1}/{args.pairs} (load {os.getloadavg()[0]:.1f})")
                if limit is not None:
                    limits = {}
                    try:
                        limit(bench, limits)
                    except Exception as err:  # noqa: BLE001 (the run goes on; the failure is reported)
                        results.failures.append((profile, case, "limit", pair, str(err)))
                        log(f"    limit FAILED: {err}")
                    results.add_limits(profile, limits)
                    log("    limit: " + ", ".join(f"{k} {v.value:.3g}" for k, v in limits.items()))
                order = ["dbxfs", "rclone"] if pair % 2 == 0 else ["rclone", "dbxfs"]
                for name in order:
                    tag = f"{profile}-{case}-{name}-{pair}"
                    try:
                        samples = run(bench, clients[name], tag)
                        results.add(profile, name, samples)
                        log(f"    {name}: " + ", ".join(
                            f"{k} {s.value:.3g}" + (f" ({s.calls:.0f} calls)" if not math.isnan(s.calls) else "")
                            + f", cpu {s.cpu:.2f}, rss {s.rss:.0f} MiB" for k, s in samples.items()))
                    except (KeyboardInterrupt, Stop):
                        raise
                    except Exception as err:  # noqa: BLE001
                        results.failures.append((profile, case, name, pair, str(err)))
                        log(f"    {name} FAILED: {err}")


def print_report(args, results, data, load_before, load_after, seconds):
    rclone_version = subprocess.run(["rclone", "version"], capture_output=True, text=True).stdout.split("\n")[0]
    names = {"SIZE": f"{args.size_mib} MiB" if args.size_mib % 1024 else f"{args.size_mib // 1024} GiB",
             "SLOW": f"{args.size_mib // 4} MiB",
             "SMALL": str(args.small_files), "LS": f"{args.ls_files // 100 * 100:,}",
             "NS": f"{args.ns_files:,}", "DEEP": f"{data.deep_count:,}", "THREADS": str(args.random_threads),
             "READS": f"{args.random_reads:,}"}
    print(f"dbxfs {describe_build(args.bin)} against {rclone_version} (--vfs-cache-mode full --vfs-write-back 0s), "
          f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, "
          f"{args.pairs} pair(s) per case, medians; load average {load_before[0]:.1f}/{load_before[1]:.1f} before, "
          f"{load_after[0]:.1f}/{load_after[1]:.1f} after (1/5 min); {seconds / 60:.0f} min")
    print()
    print(table(results, args.profiles, PROFILE_LABELS, names))
    for failure in results.failures:
        print(f"\nFAILED [{failure[0]}] {failure[1]} {failure[2]} pair {failure[3] + 1}: {failure[4]}")
    if args.json:
        dump = {"samples": {"|".join(k): [s.__dict__ for s in v] for k, v in results.samples.items()},
                "limits": {"|".join(k): [x.__dict__ for x in v] for k, v in results.limits.items()},
                "failures": results.failures, "rows": [r.key for r in ROWS]}
        with open(args.json, "w") as f:
            json.dump(dump, f, indent=1)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.inside:
        return inner(args)
    return outer(args, argv)
