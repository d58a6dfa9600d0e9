"""The mount against an emulator as strict as real Dropbox (issue 13; docs/EMULATOR.md "Stricter
than kind" cites what each behaviour follows): write contention in every form, bounded waits for
FUSE callers, case-only renames, children listed before their parents, names Dropbox refuses.

Each test gets its own small emulator, so its settings and counters are its own. Every mount is
unmounted in teardown, even when a test fails (Mount is a context manager)."""

import errno
import os
import subprocess
import threading
import time

import pytest

from mount_support import TOKEN, Emulator, Mount, dropbox_args, dropbox_env


@pytest.fixture
def emu(tmp_path):
    seed = tmp_path / "seed"
    (seed / "docs" / "deep" / "deeper").mkdir(parents=True)
    (seed / "hello.txt").write_text("hello\n")
    (seed / "docs" / "a.txt").write_text("a\n")
    (seed / "docs" / "deep" / "deeper" / "leaf.txt").write_text("leaf\n")
    for i in range(30):
        (seed / "docs" / "deep" / f"n{i:02d}.txt").write_text(f"{i}\n")
    e = Emulator(tmp_path / "data", token=TOKEN, seed=str(seed), extra_args=["--listing-seed", "11"]).start()
    e.config(longpoll_max_wait=5)
    yield e
    e.stop()


def mount(binary, emu, base, env=None):
    mnt = base / "mnt"
    mnt.mkdir(exist_ok=True)
    return Mount(binary, mnt, dropbox_args(emu, base / "cache"), env={**dropbox_env(), **(env or {})},
                 log_path=base / "dbxfs.log")


def sync(binary, path, timeout=120):
    return subprocess.run([binary, "sync", str(path)], capture_output=True, text=True, timeout=timeout)


def wait_until(predicate, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"not true within {timeout} s")


def contend(emu, form, count):
    emu.config(write_contention_form=form, write_contention_next=count)


# ----- item 4 of issue 13: write contention -----

def test_namespace_changes_survive_write_contention(dbxfs_binary, emu, tmp_path):
    """mkdir, rename and unlink meet too_many_write_operations as a 409 route error or a per-entry
    failure of their batch (and the 429 forms): each is retried and succeeds, nothing is undone.
    They return once journaled, so `dbxfs sync` after each sends it while the contention lasts."""
    with mount(dbxfs_binary, emu, tmp_path) as m:
        root = m.path

        def synced():
            result = sync(dbxfs_binary, root)
            assert result.returncode == 0, result.stdout + result.stderr + m.read_log()

        for form in ("409", "429_header_only", "429"):
            contend(emu, form, 2)
            os.mkdir(f"{root}/made-{form}")
            synced()
            contend(emu, form, 2)
            os.rename(f"{root}/made-{form}", f"{root}/moved-{form}")
            synced()
        contend(emu, "409", 2)
        os.unlink(f"{root}/hello.txt")
        synced()
        assert emu.stats()["faults"]["write_contention"] == 14
    names = {e["name"] for e in emu.listing("")}
    assert names == {"docs", "moved-409", "moved-429_header_only", "moved-429"}


def test_fuse_caller_waits_a_bounded_time_while_uploads_keep_retrying(dbxfs_binary, emu, tmp_path):
    """Every write refused for a while: a case-only rename (the one namespace change still sent
    while the caller waits, docs/WRITEBACK.md "Case-only renames") gives up with EAGAIN after the
    foreground wait (3 s here, 30 s by default) instead of retrying for minutes; a closed file and
    a mkdir return at once (journaled) and land once Dropbox accepts writes again."""
    with mount(dbxfs_binary, emu, tmp_path, env={"DBXFS_FOREGROUND_WAIT_SECONDS": "3"}) as m:
        root = m.path
        emu.config(write_contention_rate=1, write_contention_form="429_header_only", retry_after=2)
        with open(f"{root}/pending.txt", "w") as f:
            f.write("kept\n")   # close returns at once: the upload is queued
        started = time.monotonic()
        os.mkdir(f"{root}/queued")
        assert time.monotonic() - started < 3
        outcome = {}

        def rename_case():
            started = time.monotonic()
            try:
                os.rename(f"{root}/hello.txt", f"{root}/HELLO.txt")
                outcome["error"] = None
            except OSError as err:
                outcome["error"] = err.errno
            outcome["seconds"] = time.monotonic() - started

        caller = threading.Thread(target=rename_case, daemon=True)
        caller.start()
        caller.join(timeout=30)
        emu.config(write_contention_rate=0, retry_after=1)
        caller.join(timeout=120)
        print(f"case-only rename under constant contention: {outcome}")
        assert outcome.get("error") == errno.EAGAIN, outcome
        assert outcome["seconds"] < 30, outcome
        result = sync(dbxfs_binary, root)
        assert result.returncode == 0, result.stdout + result.stderr + m.read_log()
    assert emu.download("/pending.txt") == b"kept\n"
    names = {e["name"] for e in emu.listing("")}
    assert "queued" in names and "hello.txt" in names and "HELLO.txt" not in names


# ----- item 6: children listed before their parents -----

def test_listings_and_feed_with_children_before_parents(dbxfs_binary, emu, tmp_path):
    """The emulator lists children before their parents (reverse path order, shuffled pages):
    the whole tree still shows, and a tree created elsewhere while mounted shows too."""
    with mount(dbxfs_binary, emu, tmp_path) as m:
        root = m.path
        assert open(f"{root}/docs/deep/deeper/leaf.txt").read() == "leaf\n"
        assert sorted(os.listdir(f"{root}/docs/deep")) == ["deeper"] + [f"n{i:02d}.txt" for i in range(30)]
        emu.upload("/fresh/one/two/three.txt", b"3", mode="overwrite")
        for i in range(8):
            emu.upload(f"/fresh/one/f{i}.txt", b"f", mode="overwrite")
        expected = [f"f{i}.txt" for i in range(8)] + ["two"]
        wait_until(lambda: sorted(os.listdir(f"{root}/fresh/one")) == expected)
        assert open(f"{root}/fresh/one/two/three.txt").read() == "3"


# ----- smaller divergences: names Dropbox refuses -----

@pytest.mark.parametrize("name", ["trailing space ", "back\\slash.txt", "del\x7f.txt", "emoji \U0001F600.txt"])
def test_names_dropbox_refuses_are_refused_at_once(dbxfs_binary, emu, tmp_path, name):
    """Dropbox answers malformed_path for these names: the mount refuses them with EINVAL at
    create, mkdir and rename, before anything is staged, so nothing is held in the upload queue."""
    with mount(dbxfs_binary, emu, tmp_path) as m:
        root = m.path
        with pytest.raises(OSError) as err:
            open(f"{root}/{name}", "w").close()
        assert err.value.errno == errno.EINVAL
        with pytest.raises(OSError) as err:
            os.mkdir(f"{root}/{name}")
        assert err.value.errno == errno.EINVAL
        with pytest.raises(OSError) as err:
            os.rename(f"{root}/hello.txt", f"{root}/{name}")
        assert err.value.errno == errno.EINVAL
        result = sync(dbxfs_binary, root, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        assert os.path.exists(f"{root}/hello.txt")
        assert name.lower() not in "\n".join(os.listdir(root)).lower()


# ----- smaller divergences: Unicode -----

def test_non_ascii_root_matches_dropbox_lowercasing(dbxfs_binary, emu, tmp_path):
    """A --root that Dropbox lowercases otherwise than Swift (İ: Dropbox's path_lower has i,
    Swift's lowercased() i + U+0307), given decomposed (NFD): the mount shows the folder's files,
    not an empty folder."""
    emu.upload("/İstanbul Café/inside.txt", b"in", mode="overwrite")
    emu.upload("/İstanbul Café/sub/deeper.txt", b"deep", mode="overwrite")
    root = "/İstanbul Cafe\u0301"
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with Mount(dbxfs_binary, mnt, dropbox_args(emu, tmp_path / "cache", "--root", root), env=dropbox_env(),
               log_path=tmp_path / "dbxfs.log"):
        assert sorted(os.listdir(mnt)) == ["inside.txt", "sub"]
        assert (mnt / "sub" / "deeper.txt").read_bytes() == b"deep"
        (mnt / "written.txt").write_bytes(b"w")
        result = sync(dbxfs_binary, mnt)
        assert result.returncode == 0, result.stdout + result.stderr
    assert emu.download("/İstanbul Café/written.txt") == b"w"


# ----- smaller divergences: restricted content, locked files, moves over 10,000 entries -----

def test_restricted_locked_and_too_many_files_have_their_own_errno(dbxfs_binary, emu, tmp_path):
    """Each refusal says what happened, with a log line naming Dropbox's reason: reading
    restricted content is EACCES. An unlink or rename returns once journaled (docs/SEMANTICS.md,
    "Writing"), so a locked file and a move over Dropbox's entry limit are refused later: the
    unlink of a locked file waits in the queue (held, retried) until the lock goes; the move is
    undone, the folder shows where Dropbox has it, and `dbxfs sync` names both. A folder over
    the 10,000-entry limit as far as the tree knows is refused at once with EXDEV (a unit test,
    VFSWriteTests, covers it with a lower limit)."""
    emu.upload("/restricted.bin", b"not for you", mode="overwrite")
    emu.upload("/locked.txt", b"held", mode="overwrite")
    emu.path_state("/restricted.bin", "restricted_content")
    emu.path_state("/locked.txt", "locked")
    emu.config(move_limit=3)   # docs/deep holds 32 entries
    with mount(dbxfs_binary, emu, tmp_path) as m:
        root = m.path
        with pytest.raises(OSError) as err:
            open(f"{root}/restricted.bin", "rb").read()
        assert err.value.errno == errno.EACCES
        os.unlink(f"{root}/locked.txt")
        os.rename(f"{root}/docs/deep", f"{root}/deep-moved")
        result = sync(dbxfs_binary, root, timeout=60)
        print(result.stderr)
        assert result.returncode == 1
        assert "unlink /locked.txt" in result.stderr and "locked" in result.stderr
        assert "rename /docs/deep → /deep-moved: undone" in result.stderr and "too_many_files" in result.stderr
        wait_until(lambda: os.path.isdir(f"{root}/docs/deep") and not os.path.exists(f"{root}/deep-moved"))
        assert len(os.listdir(f"{root}/docs/deep")) == 31
        log = m.read_log()
        for reason in ("restricted_content", "locked", "too_many_files"):
            assert reason in log, reason
        # The lock goes: the held unlink goes through at the next sync.
        emu.path_state("/locked.txt", None)
        assert sync(dbxfs_binary, root, timeout=60).returncode == 0
    assert "locked.txt" not in {e["name"] for e in emu.listing("")}


# ----- smaller divergences: error answers -----

def test_missing_scope_and_server_error_pages(dbxfs_binary, emu, tmp_path):
    """A 401 missing_scope says which permission the app lacks, in the log; the refused change is
    kept and retried (sync retries it at once); 5xx answers whose body is an HTML page or nothing
    are retried like any 5xx."""
    with mount(dbxfs_binary, emu, tmp_path) as m:
        root = m.path
        emu.config(fail_next=2, fail_status=502, fail_body="html")
        with open(f"{root}/after-html.txt", "w") as f:
            f.write("html\n")
        assert sync(dbxfs_binary, root).returncode == 0
        emu.config(fail_next=2, fail_status=503, fail_body="empty")
        with open(f"{root}/after-empty.txt", "w") as f:
            f.write("empty\n")
        assert sync(dbxfs_binary, root).returncode == 0
        # A refused write is kept and retried: the app may get the permission (and be linked again).
        emu.config(deny_next=1, deny_form="missing_scope")
        os.mkdir(f"{root}/denied")
        wait_until(lambda: "lacks the permission files.content.write" in m.read_log())
        assert os.path.isdir(f"{root}/denied")
        assert sync(dbxfs_binary, root).returncode == 0
    names = {e["name"] for e in emu.listing("")}
    assert {"after-html.txt", "after-empty.txt", "denied"} <= names
