"""The command line's manners: `--help` says how to call every command and where defaults live
(once); every option `--help` lists is in the man page (in its command's paragraph) and in the
docs; a mount that works prints nothing on the terminal; cache bookkeeping does not pile up, and
a mount that fails leaves no cache directory behind."""

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, STATIC_TOKEN, Mount, force_unmount, mounted_at, needs_fuse
from daemon_support import stop_daemon_at

MAN = (REPO / "docs" / "dbxfs.1").read_text()
CLI_MD = (REPO / "docs" / "CLI.md").read_text()
SEMANTICS_MD = (REPO / "docs" / "SEMANTICS.md").read_text()
COMMANDS = ["auth", "unlink", "status", "sync"]


def options_in_help(text):
    """The options of a usage text's "options:" section: -x and --long, as written."""
    found, inside = [], False
    for line in text.splitlines():
        if line.strip() == "options:":
            inside = True
            continue
        if inside and line and not line.startswith(" "):
            inside = False
        if inside:
            match = re.match(r"\s+((?:-\w|--[\w-]+)(?:,\s*(?:-\w|--[\w-]+))*)", line)
            if match:
                found.append(re.findall(r"--?[\w-]+", match.group(1)))
    return found


def man_text(source):
    """Roff to plain text, enough to search: \\- is -, font escapes go."""
    return re.sub(r"\\f[BIRP]", "", source.replace("\\-", "-"))


def man_paragraph(command):
    """The man page's paragraph of `command` (COMMANDS section), or its MOUNT OPTIONS section."""
    text = man_text(MAN)
    if command is None:
        return text[text.index(".SH MOUNT OPTIONS"):text.index(".SH CREDENTIALS")]
    commands = text[text.index(".SH COMMANDS"):text.index(".SH MOUNT OPTIONS")]
    blocks = commands.split(".TP")
    return next(b for b in blocks if re.match(rf"\s*\.BR? {command}\b", b))


def test_help_shows_how_to_call_each_command_and_the_config_once(cli):
    top = cli.run("--help")
    assert top.returncode == 0
    usage = top.stdout.split("\n\n")[0]
    assert "dbxfs [options] MOUNTPOINT" in usage and "dbxfs COMMAND" in usage, usage
    assert top.stdout.count("dbxfs/config") == 1, top.stdout


@pytest.mark.parametrize("command", [None] + COMMANDS)
def test_every_option_in_help_is_in_the_man_page_and_the_docs(cli, command):
    help_text = cli.run(*([command] if command else []), "--help").stdout
    options = options_in_help(help_text)
    assert options, help_text
    paragraph = man_paragraph(command)
    # The mount's options are documented in SEMANTICS.md ("Mounting", which CLI.md points to);
    # the commands' in CLI.md.
    docs = SEMANTICS_MD + CLI_MD if command is None else CLI_MD
    missing = []
    for spellings in options:
        if spellings in (["-h", "--help"],):
            continue
        if not any(re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", paragraph) for s in spellings):
            missing.append(f"{'/'.join(spellings)} not in the man page ({command or 'mount'} paragraph)")
        if not any(re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", docs) for s in spellings):
            missing.append(f"{'/'.join(spellings)} not in docs/{'SEMANTICS.md or CLI.md' if command is None else 'CLI.md'}")
    assert not missing, "\n".join(missing)


@needs_fuse
def test_a_detached_mount_prints_nothing_and_logs_everything(cli, emulator, mountpoint):
    """A mount that resumes an upload left by a killed daemon logs info lines while it starts;
    they belong in its log file, not on the terminal of the command that mounted it."""
    cache = cli.home / "cache-detached"
    args = ["--api-base", emulator.url, "--cache-dir", str(cache)]
    env = {"DBXFS_ACCESS_TOKEN": STATIC_TOKEN}
    first = Mount(cli, mountpoint, args, env=env).start()
    try:
        # The create looks its name up in the root: list it before every request fails (under
        # load the mount's own first listing may not be done yet, and the create was EIO).
        os.listdir(mountpoint)
        emulator.config(fail_rate=1.0)
        (mountpoint / "left-behind.txt").write_text("left behind\n")
        first.proc.kill()
        first.proc.wait()
    finally:
        emulator.config(fail_rate=0)
        first.stop()
    force_unmount(mountpoint)

    result = cli.run(*args, str(mountpoint), env=env)
    try:
        assert result.returncode == 0, result.stderr
        assert mounted_at(mountpoint)
        assert result.stdout == "" and result.stderr == "", f"printed: {result.stdout!r} {result.stderr!r}"
        log = (cache / "dbxfs.log").read_text()
        assert "resuming the upload of /left-behind.txt" in log and "mounted " in log, log
    finally:
        stop_daemon_at(cli, mountpoint)
    assert emulator.download("/left-behind.txt") == b"left behind\n"


@needs_fuse
def test_mount_bookkeeping_does_not_pile_up(cli, emulator, mountpoint):
    """`last-mount-*` (where an account's default cache is, for offline starts) is written for the
    default cache directory only, and index files whose cache directory is gone are dropped."""
    base = cli.home / "cache" / "dbxfs"
    base.mkdir(parents=True)
    (base / "last-mount-0123456789abcdef").write_text(str(cli.home / "long-gone-cache"))
    env = {"DBXFS_ACCESS_TOKEN": STATIC_TOKEN}
    for name in ("one", "two"):
        with Mount(cli, mountpoint, ["--api-base", emulator.url, "--cache-dir", str(cli.home / name)], env=env):
            pass
    with Mount(cli, mountpoint, ["--api-base", emulator.url], env=env):
        pass
    indexes = sorted(base.glob("last-mount-*"))
    assert len(indexes) == 1, [(p.name, p.read_text()) for p in indexes]
    assert Path(indexes[0].read_text()).parent == base


@needs_fuse
def test_a_failed_mount_by_another_user_leaves_no_cache_directory(cli, emulator):
    """As a user who may not open /dev/fuse (nobody), the FUSE mount fails after the account
    was checked and the cache directory made: the directory must go again."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run as nobody")
    work = Path(tempfile.mkdtemp(prefix="dbxfs-nobody-"))
    try:
        work.chmod(0o755)
        home, mnt = work / "home", work / "mnt"
        home.mkdir()
        mnt.mkdir()
        shutil.chown(home, "nobody", "nogroup")
        shutil.chown(mnt, "nobody", "nogroup")
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"),
               "XDG_CONFIG_HOME": str(home / "config"), "XDG_RUNTIME_DIR": str(home / "run"),
               "DBXFS_CONFIG": str(home / "no-config"), "DBXFS_ACCESS_TOKEN": STATIC_TOKEN}
        result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", cli.binary,
                                 "--api-base", emulator.url, str(mnt)], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 1, result.stdout + result.stderr
        assert not mounted_at(mnt)
        cache = home / "cache"
        left = sorted(str(p.relative_to(cache)) for p in cache.rglob("*")) if cache.exists() else []
        assert not [p for p in left if p != "dbxfs"], f"left behind: {left}"
    finally:
        force_unmount(work / "mnt")
        shutil.rmtree(work, ignore_errors=True)
