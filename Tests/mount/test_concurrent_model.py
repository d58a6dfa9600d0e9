"""Several processes hammer one mount at once with creates, writes, appends, truncates, file and
folder renames across folders, mkdir, rmdir and unlink, each in its own subtree and with no
pauses, so renames race with the uploads and the change feed of the others (issue 12, part 4:
what xfstests' fsstress found). Every operation must succeed as on a local disk; afterwards the
mount, the emulator after `dbxfs sync`, and a fresh mount with an empty cache must all equal the
merged in-memory model, and the daemon's log must show no conflicted copy (one writer never
conflicts with itself).
"""

import subprocess
from pathlib import Path

import pytest

from mount_support import TOKEN, Emulator, Mount, dropbox_args, dropbox_env
from model_support import TreeModel, read_emulator_tree, read_tree, run_workers

PROCESSES = 4
OPERATIONS = 1500


@pytest.mark.parametrize("seed", [11, 12])
def test_processes_racing_renames_and_uploads(dbxfs_binary, tmp_path, seed):
    subtrees = [f"p{i}" for i in range(PROCESSES)]
    with Emulator(tmp_path / "emulator-data", token=TOKEN) as emu:
        for subtree in subtrees:
            emu.api("files/create_folder_v2", {"path": "/" + subtree})
        model = TreeModel(folders=set(subtrees))
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        with Mount(dbxfs_binary, mnt, dropbox_args(emu, tmp_path / "cache"), env=dropbox_env()) as m:
            model, errors = run_workers(mnt, subtrees, model, seed, count=OPERATIONS)
            assert not errors, "\n".join(errors) + "\n" + m.read_log()
            diff = model.describe_difference(read_tree(mnt), "model", "mount")
            assert not diff, "on the mount:\n" + "\n".join(diff[:30]) + "\n" + m.read_log()
            result = subprocess.run([dbxfs_binary, "sync", str(mnt)], capture_output=True, text=True, timeout=600)
            assert result.returncode == 0, result.stdout + result.stderr
            log = Path(m.log_path).read_text(errors="replace")
        diff = model.describe_difference(read_emulator_tree(emu), "model", "emulator")
        assert not diff, "on the emulator after sync:\n" + "\n".join(diff[:30])
        assert "conflict" not in log, [line for line in log.splitlines() if "conflict" in line][:10]
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        with Mount(dbxfs_binary, fresh, dropbox_args(emu, tmp_path / "fresh-cache"), env=dropbox_env()):
            diff = model.describe_difference(read_tree(fresh), "model", "fresh mount")
            assert not diff, "on a fresh mount:\n" + "\n".join(diff[:30])
