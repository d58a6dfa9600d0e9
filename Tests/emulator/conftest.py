"""Fixtures for the emulator suite: one TLS emulator per session, driven by the official SDK.

The certificate, the port and the SDK host variables come from `emulator_suite` (imported
before `dropbox`). requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE override `ca_certs` (both
are set on these machines), so every test in this folder runs with them pointed at the test
certificate; they are restored afterwards, so other suites in the same pytest run are untouched.
"""

import os
import shutil
import uuid

import pytest

from emulator_suite import APP_KEY, CERT, KEY, PORT, WORK_DIR  # noqa: F401  (sets the SDK hosts first)

from emulator import Emulator  # noqa: E402

import dropbox  # noqa: E402  (must come after emulator_suite)


@pytest.fixture(scope="session")
def emu():
    emulator = Emulator(os.path.join(WORK_DIR, "data"), token="test-token", tls=True, port=PORT,
                        tls_cert=CERT, tls_key=KEY, extra_args=["--app-key", APP_KEY])
    emulator.start()
    yield emulator
    emulator.stop()
    shutil.rmtree(WORK_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def test_ca_bundle(monkeypatch):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", CERT)
    monkeypatch.setenv("CURL_CA_BUNDLE", CERT)


@pytest.fixture(autouse=True)
def clean_settings(request):
    """Every test starts and ends with all faults off."""
    yield
    if "emu" in request.fixturenames:
        request.getfixturevalue("emu").config(
            latency_ms=0, handshake_round_trips=0, bandwidth=0, fail_rate=0, reset_rate=0, rate_limit=0, write_rate_limit=0,
            token_ttl=0, quota=0, longpoll_max_wait=0, longpoll_backoff=0, retry_after=1,
            write_contention_rate=0, write_contention_next=0, write_contention_form="mixed",
            serialize_batch_commits=1, refuse_identical_listings=1, listing_order="shuffled", listing_pages="uneven", change_feed="varied", move_limit=10000, batch_async_over=10, upload_session_ttl=None, longpoll_jitter=None, fail_next=0, fail_status=500,
            fail_body="text", deny_next=0, deny_form="missing_scope")


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
