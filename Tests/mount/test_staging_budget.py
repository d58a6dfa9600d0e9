"""The staging budget on the real mount (docs/SEMANTICS.md, "Staging budget"): a writer faster than
the uploads is paced by them once more than `--staging-budget` of written bytes wait, so the bytes
waiting (`dbxfs status`) stay near the budget instead of growing with everything written; and all
of it still lands on Dropbox. Mounts are always unmounted (mount_support.Mount)."""

import hashlib
import json
import os
import subprocess
import threading
import time

from mount_support import TOKEN, Emulator, Mount, dropbox_args, dropbox_env

MIB = 1 << 20


def uploads_status(m, mnt):
    result = subprocess.run([m.binary, "status", "--json", str(mnt)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["mounts"][0].get("uploads") or {}


def test_a_writer_faster_than_the_uploads_is_held_near_the_budget(dbxfs_binary, tmp_path):
    emu = Emulator(tmp_path / "emulator", token=TOKEN).start()
    try:
        # 4 MB/s per connection: the uploads are far slower than the writer.
        emu.config(bandwidth=4_000_000)
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        # Writers through dbxfs (with passthrough, each writer opened under the budget is the
        # kernel's and not held back: only later opens are).
        args = dropbox_args(emu, tmp_path / "cache", "--cache-size", "1G", "--staging-budget", "8M",
                            "--no-passthrough-writes")
        with Mount(dbxfs_binary, mnt, args, env=dropbox_env(), log_path=tmp_path / "mnt.log") as m:
            files = {f"f{i}.bin": os.urandom(4 * MIB) for i in range(10)}
            samples, held, texts = [], [], []
            done = threading.Event()

            def sample():
                while not done.is_set():
                    uploads = uploads_status(m, mnt)
                    samples.append(uploads.get("pending_bytes", 0))
                    held.append(uploads.get("writes_held", 0))
                    if held[-1]:
                        texts.append(subprocess.run([m.binary, "status", str(mnt)], capture_output=True, text=True,
                                                    timeout=60).stdout)
                    time.sleep(0.05)

            sampler = threading.Thread(target=sample)
            sampler.start()
            started = time.monotonic()
            try:
                for name, data in files.items():
                    with open(mnt / name, "wb") as f:
                        for at in range(0, len(data), MIB):
                            f.write(data[at:at + MIB])
            finally:
                written = time.monotonic() - started
                done.set()
                sampler.join()
            samples.append(uploads_status(m, mnt).get("pending_bytes", 0))
            # Without the wait, 40 MiB are written in well under a second and wait all at once.
            # With it: the budget, the file being written, and what one look every 10 ms lets by.
            assert max(samples) <= 16 * MIB, (f"peak {max(samples) / MIB:.1f} MiB waiting against an 8 MiB budget "
                                               f"(written in {written:.2f} s; samples in MiB: "
                                               f"{[round(s / MIB, 1) for s in samples]})")
            assert len(samples) >= 5
            # `dbxfs status` showed the writer held (docs/STATUS.md, uploads.writes_held).
            assert max(held) == 1, held
            assert any("1 write waits for them (more than the staging budget waits)" in t for t in texts), texts
            result = subprocess.run([m.binary, "sync", str(mnt)], capture_output=True, text=True, timeout=300)
            assert result.returncode == 0, result.stdout + result.stderr
        emu.config(bandwidth=0)
        for name, data in files.items():
            assert hashlib.sha256(emu.download(f"/{name}")).digest() == hashlib.sha256(data).digest(), name
    finally:
        emu.stop()
