"""Remounts show exactly Dropbox plus what is still uploading (issue 12, part 1).

The mount saves its tree and change cursor in the cache directory so a remount is instant. That
saved tree must never be older than the cursor saved with it: if the mount's own changes
(create, write, unlink, rename, mkdir, rmdir) moved the cursor past them without reaching the
saved tree, a remount would show a stale tree that the feed never repairs.

The model-checked test runs rounds of: mount (same cache directory every round) → random file
and folder operations from several processes at once, each in its own subtree → check the mount
against the model → `dbxfs sync` → check the emulator → unmount → changes by another client
through the API → remount → check the mount, and a fresh mount with an empty cache, against the
model.

mkdir, unlink, rmdir and rename return once journaled (issue 15), so two more rounds: one while
Dropbox answers every request with a 500 (the operations and the new files wait, and land once
it is back), and one where the daemon is killed (`kill -9`) with all of that pending and the
next mount on the same cache must show it at once and deliver it: nothing acknowledged is lost.
"""

import json
import os
import random
import subprocess
import time

import pytest

from mount_support import TOKEN, Emulator, Mount, dropbox_args, dropbox_env, force_unmount
from model_support import TreeModel, read_emulator_tree, read_tree, remote_changes, run_workers


@pytest.fixture
def emu(tmp_path):
    emulator = Emulator(tmp_path / "emulator-data", token=TOKEN).start()
    yield emulator
    emulator.stop()


class Mounter:
    """Mounts the test's emulator at fresh or kept cache directories; stops them all at the end."""

    def __init__(self, binary, emu, tmp_path):
        self.binary, self.emu, self.tmp_path = binary, emu, tmp_path
        self.mounts = []
        self.count = 0

    def mount(self, cache):
        self.count += 1
        mnt = self.tmp_path / f"mnt{self.count}"
        mnt.mkdir()
        m = Mount(self.binary, mnt, dropbox_args(self.emu, self.tmp_path / cache), env=dropbox_env(),
                  log_path=self.tmp_path / f"mnt{self.count}-{cache}.log")
        self.mounts.append(m)
        return m.start()

    def sync(self, m):
        result = subprocess.run([self.binary, "sync", m.path], capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr + m.read_log()

    def stop_all(self):
        for m in self.mounts:
            m.stop()
            force_unmount(m.path)


@pytest.fixture
def mounter(dbxfs_binary, emu, tmp_path):
    m = Mounter(dbxfs_binary, emu, tmp_path)
    yield m
    m.stop_all()


def test_own_changes_reach_the_saved_tree(mounter, emu):
    """The issue's reproduction: a file made, a file removed and a folder made by the mount are
    on Dropbox after sync, and must still show after the next remount with the same cache."""
    emu.upload("/old.txt", b"old bytes\n")
    first = mounter.mount("cache")              # saves the tree
    assert read_tree(first.path).files.get("old.txt") == b"old bytes\n"
    first.stop()
    second = mounter.mount("cache")             # loads it, then changes it
    with open(second.path + "/own.txt", "wb") as f:
        f.write(b"hello\n")
    os.unlink(second.path + "/old.txt")
    os.mkdir(second.path + "/d")
    mounter.sync(second)
    second.stop()
    expected = TreeModel({"own.txt": b"hello\n"}, {"d"})
    assert not expected.describe_difference(read_emulator_tree(emu), "expected", "emulator")
    third = mounter.mount("cache")
    diff = expected.describe_difference(read_tree(third.path), "expected", "mount")
    assert not diff, "after a remount:\n" + "\n".join(diff) + "\n" + third.read_log()


SUBTREES = ["w0", "w1", "w2"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_model_checked_rounds_with_remounts(mounter, emu, seed):
    rng = random.Random(seed)
    model = TreeModel(folders=set(SUBTREES))
    for subtree in SUBTREES:
        emu.api("files/create_folder_v2", {"path": "/" + subtree})
    rounds = 6
    for round_number in range(rounds):
        m = mounter.mount("cache")
        where = f"seed {seed}, round {round_number}"
        # The remount shows exactly Dropbox at once: our own earlier changes and the other
        # client's (the changes since the last mount are applied before the mount serves).
        diff = model.describe_difference(read_tree(m.path), "model", "mount")
        assert not diff, f"{where}, after the remount:\n" + "\n".join(diff[:30]) + "\n" + m.read_log()
        model, errors = run_workers(m.path, SUBTREES, model, seed * 100 + round_number, count=25)
        assert not errors, f"{where}: " + "\n".join(errors) + "\n" + m.read_log()
        diff = model.describe_difference(read_tree(m.path), "model", "mount")
        assert not diff, f"{where}, on the mount:\n" + "\n".join(diff[:30]) + "\n" + m.read_log()
        mounter.sync(m)
        diff = model.describe_difference(read_emulator_tree(emu), "model", "emulator")
        assert not diff, f"{where}, on the emulator after sync:\n" + "\n".join(diff[:30]) + "\n" + m.read_log()
        m.stop()
        # A fresh mount (empty cache) agrees too.
        fresh = mounter.mount(f"fresh{round_number}")
        diff = model.describe_difference(read_tree(fresh.path), "model", "fresh mount")
        assert not diff, f"{where}, on a fresh mount:\n" + "\n".join(diff[:30])
        fresh.stop()
        # Another client changes things while the kept-cache mount is down.
        remote_changes(emu, model, rng, count=6)
    last = mounter.mount("cache")
    diff = model.describe_difference(read_tree(last.path), "model", "mount")
    assert not diff, f"seed {seed}, final remount:\n" + "\n".join(diff[:30]) + "\n" + last.read_log()


OFFLINE = ("append", "truncate")   # need the old bytes of files only Dropbox has


def pending_changes(binary, m):
    result = subprocess.run([binary, "status", "--json", m.path], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["mounts"][0]["uploads"]["operations"]["pending"]


@pytest.mark.parametrize("seed", [7])
def test_model_holds_while_dropbox_is_unreachable_and_after_a_kill(mounter, emu, dbxfs_binary, seed):
    model = TreeModel(folders=set(SUBTREES))
    for subtree in SUBTREES:
        emu.api("files/create_folder_v2", {"path": "/" + subtree})
    # An ordinary round first, so the later ones work on files Dropbox has (read once, so that
    # offline reads of them come from the cache).
    m = mounter.mount("cache")
    model, errors = run_workers(m.path, SUBTREES, model, seed * 100, count=25)
    assert not errors, "\n".join(errors) + "\n" + m.read_log()
    mounter.sync(m)
    assert not model.describe_difference(read_tree(m.path), "model", "mount")

    # Dropbox unreachable: every request answers 500 while the workers run.
    emu.config(fail_rate=1.0)
    try:
        model, errors = run_workers(m.path, SUBTREES, model, seed * 100 + 1, count=25, exclude=OFFLINE)
        assert not errors, "\n".join(errors) + "\n" + m.read_log()
        diff = model.describe_difference(read_tree(m.path), "model", "mount")
        assert not diff, "while Dropbox is unreachable:\n" + "\n".join(diff[:30]) + "\n" + m.read_log()
        waiting = pending_changes(dbxfs_binary, m)
        print(f"changes waiting for Dropbox: {waiting}")
        assert waiting > 0
    finally:
        emu.config(fail_rate=0)
    mounter.sync(m)
    diff = model.describe_difference(read_emulator_tree(emu), "model", "emulator")
    assert not diff, "after Dropbox came back:\n" + "\n".join(diff[:30]) + "\n" + m.read_log()
    read_tree(m.path)
    m.stop()

    # Killed with everything pending, then mounted again on the same cache.
    m = mounter.mount("cache")
    emu.config(fail_rate=1.0)
    try:
        model, errors = run_workers(m.path, SUBTREES, model, seed * 100 + 2, count=25, exclude=OFFLINE)
        assert not errors, "\n".join(errors) + "\n" + m.read_log()
        assert pending_changes(dbxfs_binary, m) > 0
        m.proc.kill()
        m.stop()
    finally:
        emu.config(fail_rate=0)
    m = mounter.mount("cache")
    # The changes show before the mount serves; files left in the journal a moment later.
    deadline = time.monotonic() + 30
    while True:
        diff = model.describe_difference(read_tree(m.path), "model", "mount")
        if not diff or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not diff, "after kill -9 and a remount:\n" + "\n".join(diff[:30]) + "\n" + m.read_log()
    mounter.sync(m)
    diff = model.describe_difference(read_emulator_tree(emu), "model", "emulator")
    assert not diff, "on the emulator after the remount's sync:\n" + "\n".join(diff[:30]) + "\n" + m.read_log()
    m.stop()
    fresh = mounter.mount("fresh")
    diff = model.describe_difference(read_tree(fresh.path), "model", "fresh mount")
    assert not diff, "on a fresh mount:\n" + "\n".join(diff[:30])
