"""No silent overwrite (the brief), checked as a property: files written on the mount while
another client overwrites the same files on Dropbox at the same moments.

The local side, one thread, picks a file, opens it on the mount, reads it through that open
(what the mount showed it), then truncates it and writes new bytes through the same open and
closes; the other client, another thread, overwrites
random files through the API, and now and then deletes one or moves it to a new name of its own
(`f1.txt.moved-7`), which it never touches again. Which side wins a race is not fixed, so the check is what must
hold whatever the order (docs/SEMANTICS.md, "Conflicts"), once `dbxfs sync` has returned and
the mount shows what the emulator holds:
- the bytes of each side's last write of a file are still there, at the file's name or in one
  of its conflicted copies, except when the other side replaced them knowingly: the other
  client's last bytes may be gone only if the mount showed them to a local write that came
  after (that write replaced what it had seen); the mount's last bytes only if the other client
  overwrote or deleted the file after that write's close returned (Dropbox took a later change);
  an edit racing a delete brings the file back (docs/SEMANTICS.md, "Edited here, deleted
  elsewhere"); a move takes a file's bytes along, so they may also be at a name it was moved to
  (or in a conflicted copy of one);
- nothing there was never written (no mixed or stale bytes), and every conflicted copy holds
  bytes the mount wrote;
- the mount and the emulator agree.
"""

import os
import random
import subprocess
import threading
import time

import pytest

from mount_support import TOKEN, Emulator, Mount, dropbox_args, dropbox_env, force_unmount
from emulator import EmulatorError

FILES = 5
STEPS = 60


def versions(listing, name):
    """The entries of `listing` (name → bytes) that hold a version of `name`: itself, a name the
    other client moved it to (`name.moved-N`), or a conflicted copy of either."""
    stem, ext = os.path.splitext(name)
    return {entry: data for entry, data in listing.items()
            if entry == name or (entry.startswith(stem + " (") and entry.endswith(ext))
            or entry.startswith(name + ".moved-") or entry.startswith(name + " (")}


def mount_listing(folder):
    listing = {}
    for entry in os.listdir(folder):
        try:
            listing[entry] = (folder / entry).read_bytes()
        except FileNotFoundError:   # listed, then gone: a change applied meanwhile
            pass
    return listing


def emulator_listing(emu):
    entries = emu.listing("/c")
    return {e["name"]: emu.download(e["path_display"]) for e in entries if e[".tag"] == "file"}


@pytest.mark.parametrize("seed", [1, 2])
def test_a_file_written_on_both_sides_at_once_keeps_every_last_version(dbxfs_binary, tmp_path, seed):
    rng = random.Random(seed)
    names = [f"f{i}.txt" for i in range(FILES)]
    written = set()
    with Emulator(tmp_path / "emulator-data", token=TOKEN) as emu:
        for name in names:
            data = f"initial {name}\n".encode()
            written.add(data)
            emu.upload("/c/" + name, data, mode="overwrite")
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        local = {name: [] for name in names}    # (opened at, closed at, bytes, bytes seen before)
        remote = {name: [] for name in names}   # (started at, done at, bytes)
        moved = {name: [] for name in names}    # (started at, done at) of the other client's moves
        failures = []
        try:
            with Mount(dbxfs_binary, mnt, dropbox_args(emu, tmp_path / "cache"), env=dropbox_env()) as m:
                folder = mnt / "c"

                def other_client():
                    other = random.Random(seed * 7919)
                    try:
                        for step in range(STEPS):
                            time.sleep(other.random() * 0.03)
                            name = other.choice(names)
                            started = time.monotonic()
                            dice = other.random()
                            if dice < 0.1:
                                try:
                                    emu.api("files/delete_v2", {"path": "/c/" + name})
                                except EmulatorError:   # not there: already deleted or moved
                                    continue
                                remote[name].append((started, time.monotonic(), None))
                                continue
                            if dice < 0.2:
                                try:
                                    emu.api("files/move_v2", {"from_path": "/c/" + name, "to_path": f"/c/{name}.moved-{step}"})
                                except EmulatorError:   # not there: already deleted or moved
                                    continue
                                moved[name].append((started, time.monotonic()))
                                continue
                            data = f"remote {name} {step}\n".encode() * other.randint(1, 40)
                            written.add(data)
                            emu.upload("/c/" + name, data, mode="overwrite")
                            remote[name].append((started, time.monotonic(), data))
                    except Exception as error:   # reported by the test's thread
                        failures.append(repr(error))

                thread = threading.Thread(target=other_client)
                thread.start()
                try:
                    for step in range(STEPS):
                        name = rng.choice(names)
                        data = f"local {name} {step}\n".encode() * rng.randint(1, 40)
                        written.add(data)
                        opened = time.monotonic()
                        # What this open shows is what its write replaces: read, then rewrite.
                        try:
                            fd = os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o644)
                            try:
                                seen = b""
                                while chunk := os.read(fd, 1 << 16):
                                    seen += chunk
                                os.ftruncate(fd, 0)
                                os.pwrite(fd, data, 0)
                            finally:
                                os.close(fd)
                        except OSError as error:
                            raise AssertionError(f"rewriting {name} on the mount: {error}\n" + m.read_log()[-8000:])
                        local[name].append((opened, time.monotonic(), data, seen or None))
                        time.sleep(rng.random() * 0.03)
                finally:
                    thread.join()
                assert not failures, failures
                sync = subprocess.run([dbxfs_binary, "sync", str(mnt)], capture_output=True, text=True, timeout=300)
                assert sync.returncode == 0, sync.stdout + sync.stderr + m.read_log()[-5000:]
                # The change feed brings the other client's last writes (and our conflicted copies).
                on_dropbox = emulator_listing(emu)
                deadline = time.monotonic() + 60
                while mount_listing(folder) != on_dropbox and time.monotonic() < deadline:
                    time.sleep(0.5)
                    on_dropbox = emulator_listing(emu)
                on_mount = mount_listing(folder)
                differ = [f"{entry}: mount {on_mount.get(entry, b'(none)')[:24]!r}, Dropbox {on_dropbox.get(entry, b'(none)')[:24]!r}"
                          for entry in sorted(set(on_mount) | set(on_dropbox)) if on_mount.get(entry) != on_dropbox.get(entry)]
                assert not differ, "the mount and Dropbox differ a minute after sync:\n" + "\n".join(differ) + "\n" + m.read_log()[-5000:]
        finally:
            force_unmount(str(mnt))

        ours = {data for writes in local.values() for _, _, data, _ in writes}
        problems = []
        for name in names:
            kept = versions(on_dropbox, name)
            contents = set(kept.values())
            for entry, data in kept.items():
                if data not in written:
                    problems.append(f"{entry}: bytes nobody wrote: {data[:40]!r}")
                if entry != name and ".moved-" not in entry and data not in ours:
                    problems.append(f"{entry}: a conflicted copy of bytes the mount did not write: {data[:40]!r}")
            if local[name]:
                _, closed, data, _ = local[name][-1]
                replaced = any(started > closed for started, _, _ in remote[name])
                if data not in contents and not replaced:
                    problems.append(f"{name}: the mount's last write ({data[:24]!r}, closed at {closed:.3f}) is gone; "
                                    f"kept: {sorted(kept)}")
            if remote[name] and remote[name][-1][2] is not None:   # a delete keeps nothing
                _, done, data = remote[name][-1]
                seen_then_replaced = any(seen == data for _, _, _, seen in local[name])
                if data not in contents and not seen_then_replaced:
                    history = "".join(f"\n  local write opened {opened:.3f}, closed {closed:.3f}, saw {seen[:24] if seen else None!r} "
                                      f"({len(seen or b'')} bytes)" for opened, closed, _, seen in local[name])
                    problems.append(f"{name}: the other client's last write ({data[:24]!r}, {len(data)} bytes, done at {done:.3f}) "
                                    f"is gone though no local write saw it; kept: {sorted(kept)}{history}")
        copies = [entry for entry in on_dropbox if entry not in names and ".moved-" not in entry]
        print(f"seed {seed}: {len(copies)} conflicted copies, {sum(map(len, local.values()))} local and "
              f"{sum(map(len, remote.values()))} remote writes, {sum(map(len, moved.values()))} moves")
        assert not problems, "\n".join(problems)
