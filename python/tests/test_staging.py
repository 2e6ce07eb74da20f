"""One staging pool per process: saves into many stores share one arena,
and its memory goes back to the system when no save used it for a while."""

import json
import os
import subprocess
import sys
import time

import torch

import sluice

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "staging_memory.py")


def test_a_process_saving_into_20_stores_holds_one_staging_arena(tmp_path):
    # In a process of its own, so that its resident memory is its own:
    # 20 stores x a 64 MiB arena each would be 1.25 GiB more.
    out = subprocess.run([sys.executable, BENCH, "--stores", "20", "--state-mib", "8",
                          "--staging-mib", "64", "--dir", str(tmp_path / "stores")],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["staging_pool_bytes"] == 64 << 20
    grew = report["rss_after_last_bytes"] - report["rss_after_first_bytes"]
    assert grew < 48 << 20, report  # less than one more arena


def test_idle_staging_memory_goes_back_and_the_next_save_still_works(tmp_path):
    sluice.close()
    sluice.configure(staging_idle_release_seconds=0.2)
    try:
        state = {"w": torch.arange(1 << 20, dtype=torch.float32)}
        sluice.save(str(tmp_path / "a"), "m", 1, state).wait()
        assert sluice.staging()["resident_bytes"] == sluice.staging()["bytes"] > 0
        deadline = time.monotonic() + 10
        while sluice.staging()["resident_bytes"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sluice.staging()["resident_bytes"] == 0
        sluice.save(str(tmp_path / "b"), "m", 1, state).wait()  # faults it in again
        for store in ("a", "b"):
            assert torch.equal(sluice.load(str(tmp_path / store), "m")["w"], state["w"])
    finally:
        sluice.close()
        sluice.configure(staging_bytes=int(os.environ.get("SLUICE_STAGING_BYTES", 1 << 30)))
        sluice.configure(staging_idle_release_seconds=1800)


def test_every_store_of_a_process_stages_into_the_same_pool(tmp_path):
    sluice.close()
    try:
        for k in range(3):
            sluice.pipeline(str(tmp_path / f"s{k}"))
        assert sluice.staging()["resident_bytes"] == sluice.staging()["bytes"]
        pool = sluice._pool[1]
        sluice.configure(staging_bytes=sluice.staging()["bytes"])  # the same options: the same pool
        sluice.pipeline(str(tmp_path / "s3"))
        assert sluice._pool[1] is pool
        sluice.configure(staging_bytes=pool.bytes + (1 << 20))  # another size: a new pool
        sluice.pipeline(str(tmp_path / "s4"))
        assert sluice._pool[1] is not pool and sluice.staging()["bytes"] == pool.bytes + (1 << 20)
    finally:
        sluice.close()
        sluice.configure(staging_bytes=int(os.environ.get("SLUICE_STAGING_BYTES", 1 << 30)))
