"""The mount follows another client's changes while it is busy with its own (the brief: "a
local view that follows remote changes", "no silent overwrite").

Model-checked rounds on one emulator: several local processes run random file and folder
operations on the mount, each in its own subtree, while another client changes a subtree of its
own through the API at the same time; the mount must then show the model (the other client's
changes arrive through the change feed, so it is polled for a while). After `dbxfs sync` the
emulator must equal the model. Then, with the mount idle, the other client changes files and
folders anywhere, including in the subtrees the local processes write; the mount must show them
before the next round's processes work on top of them (an append or a rename of a file the
mount still showed in its old version would lose the other client's bytes or make a conflicted
copy). The mount is remounted on the same cache between rounds, and a fresh mount with an empty
cache must show the model at the end. No conflicted copy may appear: nothing here edits one file
from both sides at once.
"""

import random
import threading
import time

import pytest

from mount_support import TOKEN, Emulator
from model_support import TreeModel, read_emulator_tree, read_tree, remote_changes, run_workers
from test_remount_integrity import Mounter

LOCAL = ["w0", "w1", "w2"]
REMOTE = "r"


def wait_for_model(path, model, where, log, timeout=60):
    """Polls the mount until it shows `model` (the change feed brings the other client's changes)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            diff = model.describe_difference(read_tree(path), "model", "mount")
        except FileNotFoundError as error:   # listed, then gone: a change applied during the walk
            diff = [f"changing while read: {error}"]
        if not diff:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{where}, {timeout} s later:\n" + "\n".join(diff[:30]) + "\n" + log())
        time.sleep(0.5)


@pytest.fixture
def emu(tmp_path):
    emulator = Emulator(tmp_path / "emulator-data", token=TOKEN).start()
    yield emulator
    emulator.stop()


@pytest.fixture
def mounter(dbxfs_binary, emu, tmp_path):
    m = Mounter(dbxfs_binary, emu, tmp_path)
    yield m
    m.stop_all()


@pytest.mark.parametrize("seed", [1, 2])
def test_the_mount_follows_another_clients_changes_while_it_writes(mounter, emu, seed):
    rng = random.Random(seed)
    model = TreeModel(folders=set(LOCAL) | {REMOTE})
    for folder in LOCAL + [REMOTE]:
        emu.api("files/create_folder_v2", {"path": "/" + folder})
    rounds = 4
    for round_number in range(rounds):
        m = mounter.mount("cache")
        where = f"seed {seed}, round {round_number}"
        wait_for_model(m.path, model, f"{where}, after the remount", m.read_log)
        # The other client works in its own subtree while the local processes work in theirs.
        remote_files, remote_folders = model.under(REMOTE)
        remote = TreeModel({f: model.files[f] for f in remote_files}, remote_folders)
        remote_rng = random.Random(seed * 1000 + round_number)
        failures = []

        def other_client():
            try:
                for _ in range(10):
                    remote_changes(emu, remote, remote_rng, count=2, within=REMOTE)
                    time.sleep(0.05)
            except Exception as error:   # reported by the main thread
                failures.append(repr(error))

        thread = threading.Thread(target=other_client)
        thread.start()
        model, errors = run_workers(m.path, LOCAL, model, seed * 100 + round_number, count=25)
        thread.join()
        assert not failures, f"{where}: the other client failed: {failures}"
        assert not errors, f"{where}: " + "\n".join(errors) + "\n" + m.read_log()
        model = TreeModel({f: d for f, d in model.files.items() if not f.startswith(REMOTE + "/")},
                          {d for d in model.folders if d != REMOTE and not d.startswith(REMOTE + "/")})
        model.merge(remote)
        wait_for_model(m.path, model, f"{where}, on the mount", m.read_log)
        mounter.sync(m)
        diff = model.describe_difference(read_emulator_tree(emu), "model", "emulator")
        assert not diff, f"{where}, on the emulator after sync:\n" + "\n".join(diff[:30]) + "\n" + m.read_log()
        # The mount idle: the other client changes things anywhere, the local subtrees included.
        remote_changes(emu, model, rng, count=8)
        wait_for_model(m.path, model, f"{where}, after the other client's changes", m.read_log)
        conflicts = [line for line in m.read_log().splitlines() if "conflict" in line]
        assert not conflicts, f"{where}: " + "\n".join(conflicts[:10])
        m.stop()
    fresh = mounter.mount("fresh")
    diff = model.describe_difference(read_tree(fresh.path), "model", "fresh mount")
    assert not diff, f"seed {seed}, on a fresh mount:\n" + "\n".join(diff[:30])
