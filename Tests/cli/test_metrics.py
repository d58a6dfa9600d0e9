"""Metrics for operators (issue 16, part 4), through a real mount against the emulator: the
`--metrics ADDR:PORT` endpoint and `dbxfs status --prometheus`, both parsed by prometheus_client's
own text-format parser, after reads, writes and faults injected through the emulator's
/_control (a 429, a 409, a 5xx), checking that each counter moved as it must. Also the option's
bad usage (one line, exit 2), the config-file key, a port already in use, and the endpoint's
answers to what is not a scrape."""

import os
import re
import socket
import urllib.error
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import Mount, needs_fuse, one_clear_line
from daemon_support import ENV, mount_args as daemon_args
from mounting import wait_until

pytestmark = needs_fuse


def mount_args(cli, emulator, *extra):
    return daemon_args(emulator, cli.home / "cache", *extra)


def endpoint_url(mount):
    """The URL the mount logged ("metrics: serving http://127.0.0.1:PORT/metrics"): port 0 lets
    the kernel pick a free one, so parallel runs never collide."""
    def logged():
        return re.findall(r"metrics: serving (http://\S+/metrics)", mount.read_log())
    return wait_until(logged)[-1]


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return response.read().decode()


def samples(text):
    """{(sample name, frozenset of labels): value}, via the real parser (which raises on any
    line the format does not allow)."""
    parsed = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            parsed[(s.name, frozenset(s.labels.items()))] = s.value
    return parsed


def total(parsed, name, **labels):
    """The sum of a sample over every series whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in parsed.items() if n == name and wanted <= ls)


@pytest.fixture
def folder(emulator):
    name = "metrics-" + uuid.uuid4().hex[:8]
    emulator.api("files/create_folder_v2", {"path": "/" + name})
    return name


def test_the_endpoint_and_status_prometheus_count_what_the_mount_did(cli, emulator, mountpoint, folder):
    content = bytes(range(256)) * 4096 * 4   # 4 MiB: one block
    remote = emulator.upload(f"/{folder}/remote.bin", content)
    with Mount(cli, mountpoint, mount_args(cli, emulator, "--metrics", "127.0.0.1:0"), env=ENV) as mount:
        url = endpoint_url(mount)
        before = samples(scrape(url))
        assert total(before, "dbxfs_uploaded_bytes_total") == 0

        # Reads: the first read downloads the block; one near its end, past what the kernel read
        # ahead, finds it in memory. A second open is served from the kernel page cache (same rev).
        path = mountpoint / folder / "remote.bin"
        wait_until(path.exists)
        with open(path, "rb") as f:
            assert os.pread(f.fileno(), 4096, 0) == content[:4096]
            end = len(content) - 8192
            assert os.pread(f.fileno(), 4096, end) == content[end:end + 4096]
        assert path.read_bytes() == content
        assert path.read_bytes() == content

        # A write, whose upload first meets a 429 (too_many_write_operations, Retry-After 1)
        # and then a 500: both retried.
        emulator.config(write_contention_next=1, write_contention_form="429")
        data = b"x" * 300_000
        (mountpoint / folder / "written.bin").write_bytes(data)
        emulator.config(fail_next=1)
        result = cli.run("sync", str(mountpoint), env=ENV)
        assert result.returncode == 0, result.stderr
        assert emulator.download(f"/{folder}/written.bin") == data

        # A 409 with its tag: Dropbox refuses to serve a restricted file.
        emulator.upload(f"/{folder}/restricted.bin", b"secret" * 100)
        emulator.path_state(f"/{folder}/restricted.bin", "restricted_content")
        wait_until((mountpoint / folder / "restricted.bin").exists)
        with pytest.raises(PermissionError):
            (mountpoint / folder / "restricted.bin").read_bytes()
        emulator.path_state(f"/{folder}/restricted.bin", None)

        after = samples(scrape(url))
        assert total(after, "dbxfs_uploaded_bytes_total") >= len(data)
        assert total(after, "dbxfs_downloaded_bytes_total") >= remote["size"]
        assert total(after, "dbxfs_api_requests_total", outcome="rate_limited") >= 1
        assert total(after, "dbxfs_api_requests_total", outcome="server_error") >= 1
        assert total(after, "dbxfs_api_requests_total", route="files/download", outcome="conflict",
                     tag="path/restricted_content") >= 1
        assert total(after, "dbxfs_api_requests_total", route="files/download", outcome="ok") >= 1
        assert total(after, "dbxfs_api_retries_total", reason="rate_limited") >= 1
        assert total(after, "dbxfs_api_retries_total", reason="server_error") >= 1
        assert total(after, "dbxfs_api_rate_limit_wait_seconds_total", wait="retry_after") >= 0.5
        assert total(after, "dbxfs_cache_misses_total") >= 1
        assert total(after, "dbxfs_cache_hits_total", tier="memory") >= 1
        assert total(after, "dbxfs_file_opens_total", served_by="page_cache") >= 1
        assert total(after, "dbxfs_fuse_operation_duration_seconds_count", operation="read") >= 2
        # Run as root, the new file is written by the kernel itself (passthrough writes): its
        # open is counted instead of its writes.
        assert (total(after, "dbxfs_fuse_operation_duration_seconds_count", operation="write") >= 1
                or total(after, "dbxfs_file_opens_total", served_by="passthrough") >= 1)
        assert total(after, "dbxfs_fuse_operation_errors_total", operation="read") >= 1   # the EACCES
        assert total(after, "dbxfs_transfer_duration_seconds_count", direction="upload") >= 1
        assert total(after, "dbxfs_transfer_duration_seconds_count", direction="download") >= 1
        # A histogram's +Inf bucket is its count.
        assert total(after, "dbxfs_api_request_duration_seconds_bucket", route="files/download", le="+Inf") == \
            total(after, "dbxfs_api_request_duration_seconds_count", route="files/download")
        assert total(after, "dbxfs_connection_state", state="online") == 1
        assert total(after, "dbxfs_connection_state", state="offline") == 0
        assert total(after, "dbxfs_writeback_pending_files") == 0
        assert total(after, "dbxfs_writeback_oldest_pending_age_seconds") == 0
        assert ("dbxfs_change_feed_lag_seconds", frozenset()) in after
        assert total(after, "dbxfs_cache_budget_bytes", tier="memory") > 0
        # No label holds a path.
        assert not any(folder in value for (_, labels) in after for _, value in labels)

        # The same metrics through the control socket, each series labelled with its mountpoint.
        result = cli.run("status", "--prometheus", str(mountpoint))
        assert result.returncode == 0, result.stderr
        through_socket = samples(result.stdout)
        assert total(through_socket, "dbxfs_uploaded_bytes_total", mountpoint=str(mountpoint)) >= len(data)
        assert total(through_socket, "dbxfs_api_requests_total", mountpoint=str(mountpoint), outcome="rate_limited") >= 1
        # Without MOUNTPOINT: every mount (here the one).
        result = cli.run("status", "--prometheus")
        assert result.returncode == 0, result.stderr
        assert total(samples(result.stdout), "dbxfs_cache_misses_total", mountpoint=str(mountpoint)) >= 1


def test_a_pending_upload_shows_in_the_queue_gauges(cli, emulator, mountpoint, folder):
    with Mount(cli, mountpoint, mount_args(cli, emulator), env=dict(ENV, DBXFS_UNMOUNT_DRAIN_SECONDS="1")):
        # The folder listed first: with every request failing, creating a file in a folder not
        # listed yet fails (EIO) before anything is queued.
        wait_until((mountpoint / folder).exists)
        assert os.listdir(mountpoint / folder) == []
        emulator.config(fail_rate=1)
        try:
            (mountpoint / folder / "stuck.txt").write_bytes(b"waiting\n")

            def queued():
                result = cli.run("status", "--prometheus", str(mountpoint))
                parsed = samples(result.stdout)
                return total(parsed, "dbxfs_writeback_pending_files") == 1 and \
                    total(parsed, "dbxfs_writeback_oldest_pending_age_seconds") > 0.5
            wait_until(queued)
        finally:
            emulator.config(fail_rate=0)


def test_the_endpoint_answers_only_scrapes(cli, emulator, mountpoint):
    with Mount(cli, mountpoint, mount_args(cli, emulator, "--metrics", "127.0.0.1:0"), env=ENV) as mount:
        url = endpoint_url(mount)
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url.replace("/metrics", "/other"), timeout=10)
        assert missing.value.code == 404
        with pytest.raises(urllib.error.HTTPError) as posted:
            urllib.request.urlopen(urllib.request.Request(url, data=b"x", method="POST"), timeout=10)
        assert posted.value.code == 405
        # A client that connects and says nothing is dropped after the endpoint's timeout: the
        # next scrape is answered.
        host, port = re.match(r"http://([\d.]+):(\d+)/", url).groups()
        with socket.create_connection((host, int(port)), timeout=10):
            with urllib.request.urlopen(url, timeout=60) as response:
                assert "dbxfs_api_requests_total" in response.read().decode()


@pytest.mark.parametrize("value, words", [
    ("0.0.0.0:9101", "is not a loopback address"),
    ("192.0.2.1:9101", "is not a loopback address"),
    ("[::]:9101", "is not a loopback address"),
    ("example.com:9101", "is not an IP address"),
    ("127.0.0.1:99999", "bad port"),
    ("127.0.0.1:", "bad port"),
])
def test_a_bad_metrics_address_is_bad_usage(cli, mountpoint, value, words):
    result = cli.run("--metrics", value, str(mountpoint), env=ENV)
    assert result.returncode == 2 and words in one_clear_line(result), result.stderr


def test_metrics_from_the_config_file(cli, emulator, mountpoint):
    cli.config_dir.mkdir(parents=True)
    config = cli.config_dir / "config"
    config.write_text("metrics = nonsense\n")
    result = cli.run("--api-base", emulator.url, str(mountpoint), env=ENV)
    assert result.returncode == 2 and "config:1" in one_clear_line(result)
    config.write_text("metrics = 0.0.0.0:9101\n")
    result = cli.run("--api-base", emulator.url, str(mountpoint), env=ENV)
    assert result.returncode == 2 and "--metrics-allow-remote" in one_clear_line(result)
    config.write_text("metrics = 127.0.0.1:0\n")
    with Mount(cli, mountpoint, mount_args(cli, emulator), env=ENV) as mount:
        assert "dbxfs_uploaded_bytes_total" in scrape(endpoint_url(mount))


def test_a_port_in_use_refuses_the_mount(cli, emulator, mountpoint):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        port = holder.getsockname()[1]
        result = cli.run(*mount_args(cli, emulator, "--metrics", f"127.0.0.1:{port}"), str(mountpoint), env=ENV)
        assert result.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in one_clear_line(result)
    finally:
        holder.close()


def test_status_prometheus_usage_and_a_mount_without_metrics(cli, emulator, mountpoint):
    result = cli.run("status", "--prometheus", "--json")
    assert result.returncode == 2 and "--prometheus" in one_clear_line(result)
    with Mount(cli, mountpoint, mount_args(cli, emulator, "--no-metrics"), env=ENV):
        result = cli.run("status", "--prometheus", str(mountpoint))
        assert result.returncode == 1 and "keeps no metrics" in one_clear_line(result)
