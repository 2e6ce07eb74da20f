"""Peer replicas (doc/peer.md) over gloo, each rank a host of its own
($SLUICE_HOST), with tier 0 its own directory and tier 1 shared."""

import json
import os
import shutil
import time
import subprocess
import sys

import pytest

import sluice
from test_dcp import run_world


def peer_env(base, replicas=1, complete_on="safe"):
    return {"SLUICE_TEST_PER_HOST": str(base), "SLUICE_TEST_PEERS": str(replicas),
            "SLUICE_TEST_COMPLETE_ON": complete_on}


def rot_replica(host, rank):
    """Flips one byte of the first data object `host` holds of `rank`."""
    data = sorted(host.rglob(f"data/r{rank:06d}-*.dat"))
    assert data, f"{host} holds no data of rank {rank}"
    with open(data[0], "r+b") as f:
        f.seek(8)
        byte = f.read(1)
        f.seek(8)
        f.write(bytes([byte[0] ^ 0xFF]))


def files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_each_host_holds_its_peers_part_and_the_peer_commit(tmp_path):
    base = tmp_path / "cluster"
    run_world("save", "-", "ph", 3, 2, tmp_path, env=peer_env(base))
    for host in ("host0", "host1"):
        held = files(base / host)
        assert sum("/manifest/r000000-" in f for f in held) == 1, held
        assert sum("/manifest/r000001-" in f for f in held) == 1, held
        assert any(f.endswith("/parts/peer.commit") for f in held), held
        assert not any("/writers/" in f for f in held), held  # replica locks released
        store = sluice._sluice.PeerStore(str(base / host))
        assert store.ranks_held("ph", 3) == [0, 1]
        record = store.read_peer_commit("ph", 3)
        assert record["replicas"] == 1 and [h["host"] for h in record["holders"]] == ["host0", "host1"]
        # ls says where the step is safe, and which ranks each host holds.
        listed = sluice.pipeline([str(base / host), str(base / "shared")], _reading=True).list("ph")
        assert [t["state"] for t in listed[0]["tiers"]] == ["part", "committed"]
        assert listed[0]["tiers"][0]["reason"] == "ranks 0,1 of 2 held here; safe: peer commit on host0,host1"
        out = subprocess.run([os.environ.get("SLUICE_BIN", "sluice"), "ls", "--json", "--tier", str(base / host),
                              "--tier", str(base / "shared")], capture_output=True, text=True, check=True).stdout
        assert "safe: peer commit on host0,host1" in out, out
        status = json.loads(subprocess.run(
            [os.environ.get("SLUICE_BIN", "sluice"), "status", "--json", "--tier", str(base / host), "--tier",
             str(base / "shared")], capture_output=True, text=True, check=True).stdout)
        tier0 = status["names"][0]["tiers"][0]
        assert (tier0["newest_safe_step"], tier0["safe_hosts"]) == (3, ["host0", "host1"]), status
        assert status["names"][0]["tiers"][1]["newest_safe_step"] is None  # durable there, no peer commit
    sluice.close()


@pytest.mark.parametrize("mode", ["save-async", "save-async-lazy"])
def test_async_saves_replicate_too(tmp_path, mode):
    base = tmp_path / "cluster"
    run_world(mode, "-", "pa", 7, 2, tmp_path, env=peer_env(base))
    for host in ("host0", "host1"):
        store = sluice._sluice.PeerStore(str(base / host))
        assert store.ranks_held("pa", 7) == [0, 1]
    sluice.close()


def test_a_peer_that_never_answers_fails_the_replica_in_bounded_time_and_the_step_is_still_durable(tmp_path):
    base = tmp_path / "cluster"
    env = {**peer_env(base, complete_on="durable"), "SLUICE_TEST_PEER_HANGS": "1",
           "SLUICE_TEST_PEER_TIMEOUT": "3"}
    start = time.monotonic()
    outputs = run_world("save", "-", "hang", 2, 2, tmp_path, env=env)
    assert time.monotonic() - start < 60
    assert "not safe:" in outputs[0], outputs[0]
    report = json.loads(outputs[0].strip().splitlines()[-1])
    assert report["info"]["complete"]  # durable on the shared tier all the same
    for host in ("host0", "host1"):
        assert not [f for f in files(base / host) if f.endswith("peer.commit")]
    sluice.close()


def test_a_lost_host_loads_its_part_from_its_peer_when_no_durable_tier_holds_the_step(tmp_path):
    base = tmp_path / "cluster"
    env = peer_env(base)
    run_world("save", "-", "ph", 4, 2, tmp_path, env=env)
    # The step is only safe: the shared tier loses it, and host 1 is lost
    # with its disk. Its replacement gets from host 0 the part its rank
    # reads (rank 1's), and the checkpoint's metadata, not rank 0's part.
    shutil.rmtree(base / "shared" / "ckpt" / "ph" / f"{4:020d}")
    shutil.rmtree(base / "host1")
    run_world("load", "-", "ph", 4, 2, tmp_path, env=env)
    assert sluice._sluice.PeerStore(str(base / "host1")).ranks_held("ph", 4) == [1]
    # The durable tier gets the safe step from a host that holds all of it.
    tiers = ["--tier", str(base / "host0"), "--tier", str(base / "shared")]
    subprocess.run([os.environ.get("SLUICE_BIN", "sluice"), "drain", *tiers], check=True, capture_output=True)
    listed = sluice.pipeline([str(base / "shared")], _reading=True).list("ph")
    assert [(c["step"], c["tiers"][0]["state"]) for c in listed if c["step"] == 4] == [(4, "committed")]
    sluice.close()


def test_a_job_with_no_shared_tier_saves_loads_and_survives_a_lost_host_from_its_peers(tmp_path):
    base = tmp_path / "cluster"
    env = {**peer_env(base), "SLUICE_TEST_NO_SHARED": "1"}
    for step in (3, 4):
        run_world("save", "-", "ns", step, 2, tmp_path, env=env)
    assert not (base / "shared").exists()
    for host in ("host0", "host1"):
        store = sluice._sluice.PeerStore(str(base / host))
        assert store.ranks_held("ns", 4) == [0, 1]
        listed = sluice.pipeline([str(base / host)], _reading=True).list("ns")
        assert [(c["step"], c["tiers"][0]["state"]) for c in listed] == [(3, "part"), (4, "part")]
        assert listed[-1]["tiers"][0]["reason"].endswith("safe: peer commit on host0,host1")
        # gc keeps what a peer commit records.
        subprocess.run([os.environ.get("SLUICE_BIN", "sluice"), "gc", "--store", str(base / host)], check=True,
                       capture_output=True)
    outputs = run_world("load", "-", "ns", -1, 2, tmp_path, env=env)
    assert all(json.loads(o.strip().splitlines()[-1]) == {"loaded_step": 4} for o in outputs), outputs
    # Host 1 is lost with its disk: its replacement loads its rank's part from host 0.
    shutil.rmtree(base / "host1")
    outputs = run_world("load", "-", "ns", -1, 2, tmp_path, env=env)
    assert all(json.loads(o.strip().splitlines()[-1]) == {"loaded_step": 4} for o in outputs), outputs
    assert sluice._sluice.PeerStore(str(base / "host1")).ranks_held("ns", 4) == [1]
    # Its peer commit is there too: a second load finds every part it reads at home.
    outputs = run_world("load", "-", "ns", -1, 2, tmp_path, env=env)
    assert all(json.loads(o.strip().splitlines()[-1]) == {"loaded_step": 4} for o in outputs), outputs
    sluice.close()


def test_a_restore_from_peers_moves_only_the_parts_the_lost_hosts_ranks_read(tmp_path):
    base = tmp_path / "cluster"
    env = {**peer_env(base), "SLUICE_TEST_NO_SHARED": "1"}
    run_world("save", "-", "few", 4, 3, tmp_path, rows=18, env=env)
    held = {h: sluice._sluice.PeerStore(str(base / h)).ranks_held("few", 4) for h in ("host0", "host1", "host2")}
    assert sorted(len(r) for r in held.values()) == [2, 2, 2]  # its own rank and one peer's
    before = {h: files(base / h) for h in ("host0", "host1")}
    shutil.rmtree(base / "host2")
    outputs = run_world("load", "-", "few", -1, 3, tmp_path, rows=18, env=env)
    assert all(json.loads(o.strip().splitlines()[-1]) == {"loaded_step": 4} for o in outputs), outputs
    # The replacement took rank 2's part alone; the survivors, which each
    # lack a part their ranks do not read, took nothing.
    assert sluice._sluice.PeerStore(str(base / "host2")).ranks_held("few", 4) == [2]
    assert {h: files(base / h) for h in ("host0", "host1")} == before
    # With host 0 lost too, rank 2's part is still on host 2 and rank 0's
    # survives only on its peer: the load gets it from there.
    shutil.rmtree(base / "host0")
    outputs = run_world("load", "-", "few", -1, 3, tmp_path, rows=18, env=env)
    assert all(json.loads(o.strip().splitlines()[-1]) == {"loaded_step": 4} for o in outputs), outputs
    assert sluice._sluice.PeerStore(str(base / "host0")).ranks_held("few", 4) == [0]
    sluice.close()


def test_a_job_with_no_shared_tier_and_no_peers_is_refused_on_every_rank(tmp_path):
    base = tmp_path / "cluster"
    env = {"SLUICE_TEST_PER_HOST": str(base), "SLUICE_TEST_NO_SHARED": "1"}
    results = run_world("save", "-", "ns", 1, 2, tmp_path, env=env, expect_ok=False)
    assert all(code != 0 and "needs peer_replicas >= 1" in err for code, err in results), \
        [err[-400:] for _, err in results]
    assert not any((base / t / "ckpt").exists() for t in ("host0", "host1"))


def test_a_corrupt_replica_is_never_loaded(tmp_path):
    base = tmp_path / "cluster"
    env = peer_env(base)
    run_world("save", "-", "ph", 5, 2, tmp_path, env=env)
    shutil.rmtree(base / "shared" / "ckpt" / "ph" / f"{5:020d}")
    shutil.rmtree(base / "host1")
    # Host 0's replica of rank 1 rots: its data fails its checksum when read
    # for sending, and the load fails instead of returning wrong bytes.
    rot_replica(base / "host0", rank=1)
    results = run_world("load", "-", "ph", 5, 2, tmp_path, env=env, expect_ok=False)
    assert any(code != 0 for code, _ in results)
    assert any("checksum" in err for _, err in results), [err[-400:] for _, err in results]
    sluice.close()


@pytest.mark.parametrize("options,message", [
    ({"peer_replicas": 1}, "peer_replicas needs tier0_per_host=True"),
    ({"tier0_per_host": True, "peer_replicas": -1}, "peer_replicas must be an int >= 0"),
    ({"tier0_per_host": True, "peer_replicas": 1, "peer_timeout_seconds": 0}, "must be > 0"),
    ({"tier0_per_host": True, "peer_replicas": 1, "peer_domains": "rack"}, "peer_domains must be"),
])
def test_bad_peer_settings_are_refused_at_configure(options, message):
    with pytest.raises((ValueError, TypeError), match=message):
        sluice.configure(**options)


@pytest.mark.parametrize("options,message", [
    ({"SLUICE_TEST_PEERS": "2"}, "needs more than 2 failure domains; the job has 2"),
    ({"SLUICE_TEST_PEER_OPTIONS": '{"peer_domains": {"host0": "rack1", "host1": "rack1"}}'},
     "needs more than 1 failure domains; the job has 1 (rack1)"),
    ({"SLUICE_TEST_PEER_OPTIONS_RANK1": '{"peer_rate_limit": 1000000}'},
     "ranks disagree on the peer settings"),
])
def test_settings_that_cannot_work_fail_every_rank_before_anything_is_written(tmp_path, options, message):
    base = tmp_path / "cluster"
    results = run_world("save", "-", "bad", 1, 2, tmp_path, env={**peer_env(base), **options}, expect_ok=False)
    assert all(code != 0 for code, _ in results)
    assert all(message in err for _, err in results), [err[-500:] for _, err in results]
    assert not any((base / t / "ckpt").exists() for t in ("host0", "host1", "shared"))


def test_scrub_verifies_a_hosts_replicas_and_repairs_them_from_the_durable_tier(tmp_path):
    base = tmp_path / "cluster"
    run_world("save", "-", "ph", 3, 2, tmp_path, env=peer_env(base))
    rot_replica(base / "host0", rank=1)
    sluice_bin = os.environ.get("SLUICE_BIN", "sluice")
    alone = subprocess.run([sluice_bin, "scrub", "--tier", str(base / "host0")], capture_output=True, text=True)
    assert alone.returncode != 0 and "checksum mismatch" in alone.stdout, alone.stdout
    both = subprocess.run([sluice_bin, "scrub", "--tier", str(base / "host0"), "--tier", str(base / "shared")],
                          capture_output=True, text=True)
    assert both.returncode == 0 and "REPAIRED checkpoint ph@3 tier 0" in both.stdout, both.stdout
    again = subprocess.run([sluice_bin, "scrub", "--tier", str(base / "host0")], capture_output=True, text=True)
    assert again.returncode == 0 and "all ok" in again.stdout, again.stdout


def test_a_lost_host_reads_the_durable_tier_and_fetches_nothing_when_the_step_is_durable(tmp_path):
    base = tmp_path / "cluster"
    env = peer_env(base)
    run_world("save", "-", "ph", 4, 2, tmp_path, env=env)
    shutil.rmtree(base / "host1")
    run_world("load", "-", "ph", 4, 2, tmp_path, env=env)
    assert not list((base / "host1").rglob("*.dat"))  # read from the shared tier, nothing copied


def test_a_host_back_with_an_old_tier0_is_not_taken_for_newer_than_the_jobs_saves(tmp_path):
    base = tmp_path / "cluster"
    env = peer_env(base)
    for step in (3, 4, 5):  # attempt A of steps 4 and 5
        run_world("save", "-", "rb", step, 3, tmp_path, rows=18, env=env)
    shutil.copytree(base / "host2", tmp_path / "host2-old")
    # The job rolls back to step 3 and saves step 4 again (attempt B); the
    # shared tier has not got it yet.
    for tier in ("host0", "host1", "host2", "shared"):
        for step in (4, 5):
            shutil.rmtree(base / tier / "ckpt" / "rb" / f"{step:020d}", ignore_errors=True)
    run_world("save", "-", "rb", 4, 3, tmp_path, rows=18, env=env)
    shutil.rmtree(base / "shared" / "ckpt" / "rb" / f"{4:020d}")
    # Host 2 comes back with its old tier 0: steps 4 and 5 of attempt A.
    shutil.rmtree(base / "host2")
    shutil.copytree(tmp_path / "host2-old", base / "host2")
    outputs = run_world("load", "-", "rb", -1, 3, tmp_path, rows=18, env=env)
    assert all(json.loads(o.strip().splitlines()[-1]) == {"loaded_step": 4} for o in outputs), outputs
    attempts = {sluice._sluice.PeerStore(str(base / h)).read_peer_commit("rb", 4)["attempt"]
                for h in ("host0", "host1", "host2")}
    assert len(attempts) == 1  # host 2's stale copy of step 4 was replaced by the job's
