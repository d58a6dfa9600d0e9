"""Fixtures for the emulator suite: one TLS emulator per session, driven by the official SDK.

The Python SDK reads its host names from the environment once, when `dropbox` is imported, and
always speaks https. So at import time this file makes a throwaway certificate with the
openssl CLI, picks a free port, and points DROPBOX_API_HOST / _CONTENT_HOST / _NOTIFY_HOST /
DROPBOX_WEB_HOST at 127.0.0.1:PORT. requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE override
`ca_certs` (both are set on these machines), so they are pointed at the test certificate too.
"""

import os
import shutil
import socket
import sys
import tempfile
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "support"))

from emulator import Emulator, make_certificate  # noqa: E402

APP_KEY = "test-app-key"
WORK_DIR = tempfile.mkdtemp(prefix="emu-suite-")
CERT, KEY = make_certificate(WORK_DIR)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT = _free_port()
HOST = f"127.0.0.1:{PORT}"
for var in ("DROPBOX_API_HOST", "DROPBOX_API_CONTENT_HOST", "DROPBOX_API_NOTIFY_HOST", "DROPBOX_WEB_HOST"):
    os.environ[var] = HOST
os.environ["REQUESTS_CA_BUNDLE"] = CERT
os.environ["CURL_CA_BUNDLE"] = CERT

import dropbox  # noqa: E402  (must come after the environment is set)


@pytest.fixture(scope="session")
def emu():
    emulator = Emulator(os.path.join(WORK_DIR, "data"), token="test-token", tls=True, port=PORT,
                        tls_cert=CERT, tls_key=KEY, extra_args=["--app-key", APP_KEY])
    emulator.start()
    yield emulator
    emulator.stop()
    shutil.rmtree(WORK_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def clean_settings(request):
    """Every test starts and ends with all faults off."""
    yield
    if "emu" in request.fixturenames:
        request.getfixturevalue("emu").config(
            latency_ms=0, bandwidth=0, fail_rate=0, reset_rate=0, rate_limit=0, write_rate_limit=0,
            token_ttl=0, quota=0, longpoll_max_wait=0, longpoll_backoff=0)


@pytest.fixture
def dbx(emu):
    client = dropbox.Dropbox(emu.token, ca_certs=CERT, max_retries_on_error=0, max_retries_on_rate_limit=0,
                             timeout=60)
    yield client
    client.close()


@pytest.fixture
def base(dbx):
    """A fresh folder for one test, so tests never see each other's files."""
    path = "/t-" + uuid.uuid4().hex[:10]
    dbx.files_create_folder_v2(path)
    return path
