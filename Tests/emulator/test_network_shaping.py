"""Latency and bandwidth as a network path would apply them (docs/EMULATOR.md, "Network profiles").

The benchmarks' WAN profile (scripts/bench-vs-rclone) relies on these: the latency is paid by
every request, also on a kept-alive connection, and by the handshakes of a new connection; the
bandwidth cap belongs to each connection, each direction on its own, and a connection that sat
idle has earned no credit to burst with. Every bound here is a lower bound on a duration (or a
generous upper one that only a shared cap would break), so a slow machine cannot fail them.
"""

import http.client
import json
import ssl
import threading
import time

from emulator_suite import CERT


def tls_connection(emu):
    return http.client.HTTPSConnection("127.0.0.1", emu.port, timeout=60,
                                       context=ssl.create_default_context(cafile=CERT))


def timed_download(conn, emu, path):
    """(seconds, byte count) of one files/download on `conn`, body read to the end."""
    started = time.monotonic()
    conn.request("POST", "/content/2/files/download", headers={
        "Authorization": "Bearer " + emu.token, "Dropbox-API-Arg": json.dumps({"path": path})})
    resp = conn.getresponse()
    body = resp.read()
    assert resp.status == 200, body[:200]
    return time.monotonic() - started, len(body)


def timed_upload(conn, emu, path, data):
    started = time.monotonic()
    conn.request("POST", "/content/2/files/upload", body=data, headers={
        "Authorization": "Bearer " + emu.token, "Content-Type": "application/octet-stream",
        "Dropbox-API-Arg": json.dumps({"path": path, "mode": "overwrite"})})
    resp = conn.getresponse()
    body = resp.read()
    assert resp.status == 200, body[:200]
    return time.monotonic() - started


def timed_rpc(conn, emu):
    started = time.monotonic()
    conn.request("POST", "/api/2/users/get_space_usage", headers={"Authorization": "Bearer " + emu.token})
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 200
    return time.monotonic() - started


def test_idle_connection_earns_no_download_credit(dbx, emu, base):
    dbx.files_upload(b"s" * 50_000, base + "/small.bin")
    dbx.files_upload(b"i" * 400_000, base + "/idle.bin")
    emu.config(bandwidth=1_000_000)
    conn = tls_connection(emu)
    timed_download(conn, emu, base + "/small.bin")   # the connection has carried paced bytes
    time.sleep(1.0)                                  # then sits idle, kept alive
    elapsed, size = timed_download(conn, emu, base + "/idle.bin")
    conn.close()
    assert size == 400_000
    assert elapsed >= 0.35, f"400 kB at 1 MB/s took {elapsed:.3f} s: the idle second was spent as a burst"


def test_idle_connection_earns_no_upload_credit(dbx, emu, base):
    dbx.files_upload(b"s" * 50_000, base + "/small.bin")
    emu.config(bandwidth=1_000_000)
    conn = tls_connection(emu)
    timed_download(conn, emu, base + "/small.bin")
    time.sleep(1.0)
    elapsed = timed_upload(conn, emu, base + "/up.bin", b"u" * 400_000)
    conn.close()
    assert elapsed >= 0.35, f"a 400 kB upload at 1 MB/s took {elapsed:.3f} s after an idle second"
    assert dbx.files_get_metadata(base + "/up.bin").size == 400_000


def test_bandwidth_cap_belongs_to_each_connection(dbx, emu, base):
    """Three connections at 200 kB/s each move 200 kB each in about 1 s together (a cap shared by
    the connections would take 3 s)."""
    dbx.files_upload(b"p" * 200_000, base + "/par.bin")
    emu.config(bandwidth=200_000)
    times, errors = [], []

    def one():
        try:
            conn = tls_connection(emu)
            conn.connect()
            times.append(timed_download(conn, emu, base + "/par.bin")[0])
            conn.close()
        except Exception as err:  # noqa: BLE001 (reported below)
            errors.append(err)

    started = time.monotonic()
    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = time.monotonic() - started
    assert not errors, errors
    assert min(times) >= 0.9, times
    assert total < 2.5, f"three paced connections together took {total:.2f} s: the cap is shared"


def test_latency_is_paid_by_every_request_on_a_kept_alive_connection(emu):
    emu.config(latency_ms=200)
    conn = tls_connection(emu)
    times = [timed_rpc(conn, emu) for _ in range(3)]
    conn.close()
    assert all(t >= 0.2 for t in times), times


def test_new_connection_pays_its_handshake_round_trips(emu):
    """With handshake_round_trips 2 (TCP and TLS 1.3), the first request on a new connection
    takes three round trips, the next ones one."""
    emu.config(latency_ms=200, handshake_round_trips=2)
    conn = tls_connection(emu)
    first = timed_rpc(conn, emu)
    second = timed_rpc(conn, emu)
    conn.close()
    assert first >= 0.6, f"the first request on a new connection took {first:.3f} s"
    assert second >= 0.2


def test_a_connection_opened_by_options_has_paid_its_handshakes(emu):
    """A client may open its connection ahead of need with a token-less OPTIONS (dbxfs does, at
    mount time): that request pays the handshakes, as it would on Dropbox, and the API request
    after it on the same connection pays one round trip, not three."""
    emu.config(latency_ms=400, handshake_round_trips=2)
    before = emu.stats()["preflights"]
    conn = tls_connection(emu)
    started = time.monotonic()
    conn.request("OPTIONS", "/content/2/files/download")
    resp = conn.getresponse()
    resp.read()
    opening = time.monotonic() - started
    after_it = timed_rpc(conn, emu)
    conn.close()
    assert resp.status == 200
    assert opening >= 1.2, f"the OPTIONS that opened the connection took {opening:.3f} s"
    assert after_it < 1.0, f"the API request after it took {after_it:.3f} s: it paid the handshakes again"
    assert emu.stats()["preflights"] == before + 1


def test_handshake_round_trips_default_to_zero(emu):
    assert emu.config()["handshake_round_trips"] == 0
