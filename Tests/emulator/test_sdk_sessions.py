"""Conformance of upload sessions (sequential and concurrent, single and batch), through the SDK."""

import os
import threading

import pytest
from dropbox import files
from dropbox.exceptions import ApiError

from emulator_suite import dropbox_hash

MIB = 1024 * 1024
BLOCK = 4 * MIB


def commit(path, mode=files.WriteMode.add):
    return files.CommitInfo(path=path, mode=mode)


def test_sequential_session_multi_chunk_hash(dbx, base):
    # Chunks that straddle the 4 MiB hash blocks, so the running hash must carry partial blocks.
    data = os.urandom(9 * MIB + 12345)
    cuts = [0, 3 * MIB + 7, 5 * MIB, 8 * MIB + 1, len(data)]
    start = dbx.files_upload_session_start(data[:cuts[1]])
    cursor = files.UploadSessionCursor(start.session_id, cuts[1])
    for a, b in zip(cuts[1:-2], cuts[2:-1]):
        dbx.files_upload_session_append_v2(data[a:b], cursor)
        cursor.offset = b
    md = dbx.files_upload_session_finish(data[cuts[-2]:], cursor, commit(base + "/big.bin"))
    assert md.size == len(data)
    assert md.content_hash == dropbox_hash(data)
    assert dbx.files_download(base + "/big.bin")[1].content == data


def test_session_closed_then_finish_without_data(dbx, base):
    start = dbx.files_upload_session_start(b"abc")
    cursor = files.UploadSessionCursor(start.session_id, 3)
    dbx.files_upload_session_append_v2(b"def", cursor, close=True)
    cursor.offset = 6
    md = dbx.files_upload_session_finish(b"", cursor, commit(base + "/closed.txt"))
    assert dbx.files_download(md.path_lower)[1].content == b"abcdef"


def test_append_incorrect_offset(dbx):
    start = dbx.files_upload_session_start(b"12345")
    with pytest.raises(ApiError) as exc:
        dbx.files_upload_session_append_v2(b"x", files.UploadSessionCursor(start.session_id, 2))
    err = exc.value.error
    assert err.is_incorrect_offset() and err.get_incorrect_offset().correct_offset == 5


def test_append_to_closed_session(dbx):
    start = dbx.files_upload_session_start(b"12345", close=True)
    with pytest.raises(ApiError) as exc:
        dbx.files_upload_session_append_v2(b"x", files.UploadSessionCursor(start.session_id, 5))
    assert exc.value.error.is_closed()


def test_append_unknown_session(dbx):
    with pytest.raises(ApiError) as exc:
        dbx.files_upload_session_append_v2(b"x", files.UploadSessionCursor("pid_upload_session:nope", 0))
    assert exc.value.error.is_not_found()


def test_finish_incorrect_offset_and_write_conflict(dbx, base):
    dbx.files_upload(b"taken", base + "/taken.txt")
    start = dbx.files_upload_session_start(b"abc")
    with pytest.raises(ApiError) as exc:
        dbx.files_upload_session_finish(b"", files.UploadSessionCursor(start.session_id, 1), commit(base + "/x"))
    err = exc.value.error
    assert err.is_lookup_failed() and err.get_lookup_failed().get_incorrect_offset().correct_offset == 3
    with pytest.raises(ApiError) as exc:
        dbx.files_upload_session_finish(b"", files.UploadSessionCursor(start.session_id, 3),
                                        commit(base + "/taken.txt"))
    assert exc.value.error.is_path() and exc.value.error.get_path().get_conflict().is_file()


def test_finished_session_is_gone(dbx, base):
    start = dbx.files_upload_session_start(b"abc")
    cursor = files.UploadSessionCursor(start.session_id, 3)
    dbx.files_upload_session_finish(b"", cursor, commit(base + "/once.txt"))
    with pytest.raises(ApiError) as exc:
        dbx.files_upload_session_finish(b"", cursor, commit(base + "/twice.txt"))
    assert exc.value.error.get_lookup_failed().is_not_found()


def test_concurrent_sessions_with_finish_batch_v2(dbx, base):
    payloads = [os.urandom(2 * BLOCK + 1000), os.urandom(BLOCK), os.urandom(777)]
    ids = dbx.files_upload_session_start_batch(len(payloads), files.UploadSessionType.concurrent).session_ids
    assert len(ids) == 3 and len(set(ids)) == 3
    jobs = []
    for sid, data in zip(ids, payloads):
        pieces = [(o, data[o:o + BLOCK]) for o in range(0, len(data), BLOCK)]
        for i, (offset, piece) in enumerate(reversed(pieces)):  # out of order on purpose
            close = offset + len(piece) == len(data)
            jobs.append((sid, offset, piece, close))
    errors = []

    def send(sid, offset, piece, close):
        try:
            dbx.files_upload_session_append_v2(piece, files.UploadSessionCursor(sid, offset), close=close)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=send, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    entries = [files.UploadSessionFinishArg(files.UploadSessionCursor(sid, len(data)), commit(f"{base}/c{i}.bin"))
               for i, (sid, data) in enumerate(zip(ids, payloads))]
    result = dbx.files_upload_session_finish_batch_v2(entries)
    assert [e.is_success() for e in result.entries] == [True, True, True]
    for i, (entry, data) in enumerate(zip(result.entries, payloads)):
        md = entry.get_success()
        assert md.size == len(data) and md.content_hash == dropbox_hash(data)
        assert dbx.files_download(f"{base}/c{i}.bin")[1].content == data


def test_concurrent_session_rules(dbx):
    sid = dbx.files_upload_session_start(b"", session_type=files.UploadSessionType.concurrent).session_id
    with pytest.raises(ApiError) as exc:
        dbx.files_upload_session_append_v2(b"x" * 10, files.UploadSessionCursor(sid, 100))
    assert exc.value.error.is_concurrent_session_invalid_offset()
    with pytest.raises(ApiError) as exc:
        dbx.files_upload_session_append_v2(b"x" * 10, files.UploadSessionCursor(sid, 0))
    assert exc.value.error.is_concurrent_session_invalid_data_size()
    with pytest.raises(ApiError) as exc:
        dbx.files_upload_session_start(b"data", session_type=files.UploadSessionType.concurrent)
    assert exc.value.error.is_concurrent_session_data_not_allowed()


def test_concurrent_session_missing_data_and_not_closed(dbx, base):
    sid = dbx.files_upload_session_start(b"", session_type=files.UploadSessionType.concurrent).session_id
    with pytest.raises(ApiError) as exc:
        dbx.files_upload_session_finish(b"", files.UploadSessionCursor(sid, 0), commit(base + "/nc"))
    assert exc.value.error.is_concurrent_session_not_closed()
    dbx.files_upload_session_append_v2(b"z" * 5, files.UploadSessionCursor(sid, BLOCK), close=True)
    with pytest.raises(ApiError) as exc:
        dbx.files_upload_session_finish(b"", files.UploadSessionCursor(sid, BLOCK + 5), commit(base + "/nc"))
    assert exc.value.error.is_concurrent_session_missing_data()


def test_finish_batch_v2_reports_unclosed_session(dbx, base):
    open_sid = dbx.files_upload_session_start(b"abc").session_id
    closed_sid = dbx.files_upload_session_start(b"xyz", close=True).session_id
    result = dbx.files_upload_session_finish_batch_v2([
        files.UploadSessionFinishArg(files.UploadSessionCursor(open_sid, 3), commit(base + "/open")),
        files.UploadSessionFinishArg(files.UploadSessionCursor(closed_sid, 3), commit(base + "/closed")),
    ])
    first, second = result.entries
    assert first.is_failure() and first.get_failure().get_lookup_failed().is_not_closed()
    assert second.is_success() and second.get_success().name == "closed"


def test_finish_batch_v1_and_check(dbx, base):
    sid = dbx.files_upload_session_start(b"v1 batch", close=True).session_id
    launch = dbx.files_upload_session_finish_batch([
        files.UploadSessionFinishArg(files.UploadSessionCursor(sid, 8), commit(base + "/v1.txt"))])
    assert launch.is_async_job_id()
    status = dbx.files_upload_session_finish_batch_check(launch.get_async_job_id())
    assert status.is_complete()
    (entry,) = status.get_complete().entries
    assert entry.is_success() and entry.get_success().size == 8
