"""A throwaway second local user, for tests of what other users on the machine can do with a
mount, its cache and its control socket (issue 14). Creating users needs root: `throwaway_user`
skips the test otherwise. The user has no home and no login shell, belongs to `nogroup`, and is
removed when the `with` block ends, even when the test failed.

    with throwaway_user() as other:
        other.run("cat", path)          # as that user (setpriv: no PAM, no login session)
        other.uid, other.gid, other.name

    with folder_others_can_reach("prefix-") as folder:   # pytest's tmp_path is 0700 under root
        ...
"""

import contextlib
import grp
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest


class LocalUser:
    def __init__(self, name):
        entry = pwd.getpwnam(name)
        self.name = name
        self.uid = entry.pw_uid
        self.gid = entry.pw_gid

    def command(self, *argv):
        """argv run as this user, with only its own uid and gid (no supplementary groups)."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--", *argv]

    def run(self, *argv, timeout=60, **kwargs):
        env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": "/", "LANG": "C.UTF-8"}
        return subprocess.run(self.command(*argv), capture_output=True, text=True, timeout=timeout,
                              env=kwargs.pop("env", env), **kwargs)


def _retrying(argv, attempts=40):
    """useradd/userdel fail while another process holds /etc/passwd's lock: try again."""
    result = None
    for _ in range(attempts):
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode == 0:
            return result
        time.sleep(0.25)
    raise AssertionError(f"{' '.join(argv)} failed: {result.stderr}")


@contextlib.contextmanager
def throwaway_user():
    if os.geteuid() != 0:
        pytest.skip("needs root to create a second local user")
    for tool in ("useradd", "userdel", "setpriv"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            pytest.skip(f"needs {tool}")
    name = "dbxt" + secrets.token_hex(5)
    group = "nogroup" if _group_exists("nogroup") else "nobody"
    _retrying(["useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
               "--gid", group, "--no-user-group", name])
    try:
        yield LocalUser(name)
    finally:
        _retrying(["userdel", name])


def _group_exists(name):
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


@contextlib.contextmanager
def folder_others_can_reach(prefix):
    """A fresh 0755 folder under /tmp (pytest's own temporary folders are private to root),
    removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
