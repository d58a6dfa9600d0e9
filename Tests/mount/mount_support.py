"""Helpers for the mount tests, shared by conftest.py and the test modules: `Mount` (one dbxfs
process serving one mountpoint, always unmounted and reaped), mount-table checks, the seed tree,
and the arguments that point a mount at the emulator. It has a unique name because several
suites run in one pytest, where a bare `from conftest import` can find another suite's conftest.
"""

import os
import random
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "Tests" / "support"))
from emulator import EMULATOR, Emulator  # noqa: E402,F401  (the shared emulator handle)
from mounting import Mount, force_unmount, mounted_at  # noqa: E402,F401  (shared with the other suites)

TOKEN = "mount-test-token"


def write_seed(root):
    """The seed tree the read tests compare against. Deterministic, ~70 MiB."""
    rng = random.Random(4)
    root.mkdir(parents=True, exist_ok=True)
    (root / "file.txt").write_text("hello from dropbox\n")
    (root / "empty").write_bytes(b"")
    docs = root / "Docs"
    docs.mkdir()
    (docs / "Report.md").write_text("# Report\n" + "line\n" * 1000)
    (docs / "notes.txt").write_bytes(rng.randbytes(100_000))
    nested = docs / "Deep" / "Deeper"
    nested.mkdir(parents=True)
    (nested / "leaf.bin").write_bytes(rng.randbytes(5_000_000))
    uni = root / "Ünïcödé ☃"
    uni.mkdir()
    (uni / "日本語.txt").write_text("こんにちは\n")
    (uni / "emoji ☺.txt").write_text("smile\n")   # a BMP emoji: Dropbox refuses 😀 (U+1F600)
    (uni / "café.txt").write_text("noël\n")
    many = root / "many"
    many.mkdir()
    for i in range(10_000):
        (many / f"f{i:05d}.txt").write_text(f"{i}\n")
    (root / "large.bin").write_bytes(rng.randbytes(64 << 20))
    return root


def dropbox_args(emulator, cache_dir, *extra):
    """The options of a mount of `emulator`. $DBXFS_TEST_MOUNT_OPTIONS adds options to every mount
    (e.g. `--staging-budget 64K`, to run the model tests with writers held back by the budget)."""
    # One path prefix per Dropbox host: the emulator refuses a route sent to the wrong one.
    return ["--api-base", emulator.url + "/{host}", "--cache-dir", str(cache_dir), "--log-level", "debug",
            *shlex.split(os.environ.get("DBXFS_TEST_MOUNT_OPTIONS", "")), *extra]


def dropbox_env():
    return {"DBXFS_ACCESS_TOKEN": TOKEN}


def mount_of(binary, emulator, base, name="mnt", *extra):
    """A Mount (not started) of `emulator` at base/name, with its own cache directory and log."""
    path = base / name
    path.mkdir(exist_ok=True)
    return Mount(binary, path, dropbox_args(emulator, base / f"cache-{name}", *extra), env=dropbox_env(),
                 log_path=base / f"{name}.log")
