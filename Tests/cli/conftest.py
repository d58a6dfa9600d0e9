"""Fixtures for the command-line tests (auth, unlink, status, sync, bad input): the built `dbxfs`
binary, an emulator with an app key and short-lived tokens, a private set of XDG directories
per test (so nothing touches the real ~/.config), and `Mount`, which runs the binary and always
unmounts and reaps it, even when the test fails.

Tests that mount skip cleanly when /dev/fuse or fusermount3 is missing.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "Tests" / "support"))
from emulator import EMULATOR, Emulator  # noqa: E402  (the shared emulator handle)
import mounting  # noqa: E402
from mounting import force_unmount, mounted_at  # noqa: E402,F401

APP_KEY = "cli-test-app"
STATIC_TOKEN = "cli-static-token"
HAVE_FUSE = os.path.exists("/dev/fuse") and shutil.which("fusermount3") is not None
needs_fuse = pytest.mark.skipif(not HAVE_FUSE, reason="needs /dev/fuse and fusermount3")


@pytest.fixture(scope="session")
def dbxfs_binary():
    """The dbxfs executable: $DBXFS_BIN, or the package's debug build (built if missing)."""
    if os.environ.get("DBXFS_BIN"):
        return os.environ["DBXFS_BIN"]
    bin_path = subprocess.run(["swift", "build", "--show-bin-path"], cwd=REPO, check=True,
                              capture_output=True, text=True).stdout.strip()
    binary = Path(bin_path) / "dbxfs"
    if not binary.exists():
        subprocess.run(["swift", "build", "--product", "dbxfs"], cwd=REPO, check=True)
    return str(binary)


@pytest.fixture(scope="session")
def seed_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-seed") / "tree"
    (root / "Docs").mkdir(parents=True)
    (root / "hello.txt").write_text("hello from the emulator\n")
    (root / "Docs" / "a.txt").write_text("a\n" * 1000)
    (root / "Docs" / "b.txt").write_text("b\n" * 1000)
    return root


@pytest.fixture(scope="session")
def emulator(tmp_path_factory, seed_tree):
    """One emulator for the session: app key APP_KEY, access tokens from OAuth live 3 s (so a
    test can watch a refresh), plus a static token for tests that don't need OAuth."""
    if not os.path.exists(EMULATOR):
        pytest.skip("scripts/dbx-emulator is not in the tree")
    emu = Emulator(tmp_path_factory.mktemp("cli-emulator") / "data", token=STATIC_TOKEN, seed=str(seed_tree),
                   extra_args=["--app-key", APP_KEY, "--token-ttl", "3"]).start()
    yield emu
    emu.stop()


class CLI:
    """Runs dbxfs with a private environment: its own XDG config, cache, state and runtime
    directories, and none of the caller's DBXFS_* variables."""

    def __init__(self, binary, home):
        self.binary = binary
        self.home = Path(home)
        # Unix socket paths are limited to 108 bytes: keep the runtime dir short.
        self.runtime = Path(tempfile.mkdtemp(prefix="dbxrt-"))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("DBXFS_") and not k.startswith("XDG_")}
        self.env.update(HOME=str(self.home), XDG_CONFIG_HOME=str(self.home / "config"),
                        XDG_CACHE_HOME=str(self.home / "cache"), XDG_STATE_HOME=str(self.home / "state"),
                        XDG_RUNTIME_DIR=str(self.runtime))

    @property
    def config_dir(self):
        return self.home / "config" / "dbxfs"

    def credentials_path(self, profile="default"):
        return self.config_dir / "accounts" / f"{profile}.json"

    def run(self, *args, input=None, timeout=60, env=None):
        return subprocess.run([self.binary, *args], input=input, capture_output=True, text=True,
                              timeout=timeout, env=dict(self.env, **(env or {})))

    def link(self, emulator, profile="default", extra=(), umask=None):
        """`dbxfs auth` the way a user does it: read the URL it prints, approve it in the
        "browser" (the emulator's approve=1 automation), paste the code on stdin. `umask`: the
        one dbxfs runs with (default: the test's)."""
        args = [self.binary, "auth", "--app-key", APP_KEY, "--api-base", emulator.url, *extra]
        if profile != "default":
            args += ["--profile", profile]
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=self.env,
                                preexec_fn=None if umask is None else (lambda: os.umask(umask)))
        printed = []
        try:
            url = None
            while url is None:
                line = proc.stdout.readline()
                if not line:
                    raise AssertionError(f"auth printed no URL: {''.join(printed)} {proc.stderr.read()}")
                printed.append(line)
                match = re.search(r"(https?://\S+/oauth2/authorize\?\S+)", line)
                url = match.group(1) if match else None
            code = approve(url)
            out, err = proc.communicate(code + "\n", timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return subprocess.CompletedProcess(args, proc.returncode, "".join(printed) + out, err)

    def cleanup(self):
        shutil.rmtree(self.runtime, ignore_errors=True)


def approve(url):
    """Clicks "Allow" on the emulator's authorize page and returns the code it shows."""
    with urllib.request.urlopen(url + "&approve=1", timeout=30) as response:
        page = response.read().decode()
    return re.search(r'id="auth-code">([^<]+)<', page).group(1)


@pytest.fixture
def cli(dbxfs_binary, tmp_path):
    c = CLI(dbxfs_binary, tmp_path / "home")
    yield c
    c.cleanup()


class Mount(mounting.Mount):
    """One `dbxfs -f` process for a CLI test: the CLI's binary, in the CLI's isolated environment."""

    def __init__(self, cli, mountpoint, args, env=None):
        super().__init__(cli.binary, mountpoint, args, env=env, base_env=cli.env)
        self.cli = cli


@pytest.fixture
def mountpoint(tmp_path):
    path = tmp_path / "mnt"
    path.mkdir()
    yield path
    force_unmount(path)


def one_clear_line(result):
    """The bad-input contract: non-zero exit, exactly one line on stderr starting with
    "dbxfs:", and nothing that looks like a crash."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0, f"expected failure, got 0: {result.stdout}"
    assert len(lines) == 1, f"expected one line on stderr, got: {result.stderr!r}"
    assert lines[0].startswith("dbxfs: "), lines[0]
    for marker in ("Fatal error", "Stack dump", "Backtrace", "Traceback", "0x0000"):
        assert marker not in result.stderr + result.stdout
    return lines[0]
