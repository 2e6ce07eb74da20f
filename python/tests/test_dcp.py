"""sluice.torch StorageWriter/StorageReader under real torch Distributed
Checkpoint: without a process group, and over gloo groups of 2 and 4
processes on localhost."""

import json
import re
import os
import shutil
import subprocess
import time
import sys

import pytest
import torch

import sluice
import sluice.torch as st
from conftest import data_objects, flip_byte

dcp = st.dcp
WORKER = os.path.join(os.path.dirname(__file__), "dcp_worker.py")


def raised_by_ranks(error):
    """The exceptions behind a DCP CheckpointException (which wraps what
    each rank raised), or the error itself."""
    failures = getattr(error, "failures", None)
    if not failures:
        return [error]
    return [f[0] if isinstance(f, tuple) else f for f in failures.values()]


def assert_rank_raised(error, exception_type, pattern):
    inner = raised_by_ranks(error)
    assert any(isinstance(e, exception_type) and re.search(pattern, str(e)) for e in inner), inner


def read_metadata_error(pattern):
    """What dcp.load reports when read_metadata raises: torch 2.13 quotes the
    reader's error; older torch (2.11) swallows it (logging a warning with
    it) and raises only "metadata is None"."""
    import inspect
    from torch.distributed.checkpoint import state_dict_loader
    quotes = "global metadata read failed" in inspect.getsource(state_dict_loader)
    return pattern if quotes else "metadata is None"


def test_the_plugin_implements_torch_2_dcp():
    assert dcp.__name__ == "torch.distributed.checkpoint"
    assert issubclass(st.StorageWriter, dcp.StorageWriter)
    assert issubclass(st.StorageReader, dcp.StorageReader)
    assert isinstance(st.StorageWriter(), dcp.staging.AsyncStager)
    for method in ("reset", "set_up_storage_writer", "validate_checkpoint_id", "storage_meta",
                   "prepare_local_plan", "prepare_global_plan", "write_data", "finish", "stage"):
        assert callable(getattr(st.StorageWriter, method))
    for method in ("reset", "set_up_storage_reader", "validate_checkpoint_id", "read_metadata",
                   "prepare_local_plan", "prepare_global_plan", "read_data"):
        assert callable(getattr(st.StorageReader, method))
    assert st.StorageWriter.validate_checkpoint_id("run@12")
    assert st.StorageWriter.validate_checkpoint_id("/data/ckpt/run@12")
    assert st.StorageWriter.validate_checkpoint_id("rados://pool/ckpt/run@12")
    assert not st.StorageWriter.validate_checkpoint_id("/data/ckpt/run@latest")
    assert st.StorageReader.validate_checkpoint_id("/data/ckpt/run@latest")
    assert st.StorageWriter.validate_checkpoint_id("no-step")  # a directory id: no-step@0
    assert not st.StorageWriter.validate_checkpoint_id("run@not-a-step")
    assert not st.StorageWriter.validate_checkpoint_id("/data/ckpt/run@-1")
    assert st.parse_checkpoint_id("file:///data/ckpt/run.a@7") == ("file:///data/ckpt", "run.a", 7)
    assert st.parse_checkpoint_id("run@7") == (None, "run", 7)
    assert st.parse_checkpoint_id(("run", 7)) == (None, "run", 7)


def test_save_and_load_without_process_group(store):
    model = torch.nn.Linear(8, 4)
    state = {"weight": model.weight.detach().clone(), "bias": model.bias.detach().clone(),
             "step": torch.tensor(7), "bf16": torch.randn(3, 5).bfloat16(),
             "extra": {"lr": 0.01, "betas": (0.9, 0.999)}}
    writer = st.StorageWriter(store, "dcp", 3)
    dcp.save(state, storage_writer=writer, no_dist=True)
    assert writer.handle.done()

    dest = {"weight": torch.zeros(4, 8), "bias": torch.zeros(4), "step": torch.tensor(0),
            "bf16": torch.zeros(3, 5, dtype=torch.bfloat16),
            "extra": {"lr": None, "betas": None}}  # torch 2 DCP loads nested values by key
    weight_address = dest["weight"].data_ptr()
    dcp.load(dest, storage_reader=st.StorageReader(store, "dcp", 3), no_dist=True)
    for k in ("weight", "bias", "step", "bf16"):
        assert torch.equal(dest[k], state[k]), k
    assert dest["weight"].data_ptr() == weight_address  # read in place
    assert dest["extra"] == {"lr": 0.01, "betas": (0.9, 0.999)}

    # 'latest' and the checkpoint as sluice lists it: one commit, one rank.
    dest2 = {"bias": torch.zeros(4)}
    dcp.load(dest2, storage_reader=st.StorageReader(store, "dcp"), no_dist=True)
    assert torch.equal(dest2["bias"], state["bias"])
    [ckpt] = sluice.list_checkpoints(store, "dcp")
    assert ckpt["step"] == 3 and ckpt["ranks"] == 1 and ckpt["complete"]


def test_a_second_save_of_the_same_step_fails_and_keeps_the_first(store):
    dcp.save({"t": torch.ones(2)}, storage_writer=st.StorageWriter(store, "once", 1),
                        no_dist=True)
    with pytest.raises(BaseException) as failed:
        dcp.save({"t": torch.zeros(2)},
                            storage_writer=st.StorageWriter(store, "once", 1), no_dist=True)
    assert_rank_raised(failed.value, sluice.AlreadyExistsError, "once@1 is already committed")
    dest = {"t": torch.zeros(2)}
    dcp.load(dest, storage_reader=st.StorageReader(store, "once", 1), no_dist=True)
    assert torch.equal(dest["t"], torch.ones(2))


def test_reading_a_region_reads_only_the_chunks_it_overlaps(store, small_chunks):
    rows, cols = 64, 1024  # 4 KiB rows, 16 rows per 64 KiB chunk, 4 chunks
    full = torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols)
    dcp.save({"w": full}, storage_writer=st.StorageWriter(store, "region", 1),
                        no_dist=True)
    [obj] = data_objects(store, "region", 1)
    flip_byte(obj, 100)  # chunk 0: rows 0..15

    reader = st.StorageReader(store, "region", 1)
    metadata = reader.read_metadata()
    reader.set_up_storage_reader(metadata, True)
    index = dcp.metadata.MetadataIndex("w", [0, 0])
    # Rows 40..55, columns 100..199: a region inside chunks 2 and 3, the way
    # a resharded load asks for it.
    dest = torch.zeros(16, 100)
    planner = dcp.DefaultLoadPlanner() if hasattr(dcp, "DefaultLoadPlanner") else \
        dcp.default_planner.DefaultLoadPlanner()
    planner.set_up_planner({"w": dest}, metadata, True)
    item = dcp.ReadItem(type=dcp.planner.LoadItemType.TENSOR,
                        dest_index=dcp.metadata.MetadataIndex("w", [0, 0]),
                        dest_offsets=torch.Size([0, 0]), storage_index=index,
                        storage_offsets=torch.Size([40, 100]), lengths=torch.Size([16, 100]))
    reader.read_data(dcp.LoadPlan([item]), planner).wait()
    assert torch.equal(dest, full[40:56, 100:200])

    # The whole tensor needs chunk 0: the flipped byte is found, never returned.
    with pytest.raises(BaseException) as failed:
        dcp.load({"w": torch.zeros(rows, cols)},
                            storage_reader=st.StorageReader(store, "region", 1), no_dist=True)
    assert_rank_raised(failed.value, sluice.CorruptionError, r"item 'dcp/w@0_0'.* chunk 0 ")


def test_metadata_less_checkpoint_is_refused_clearly(store):
    sluice.save(store, "plain", 1, {"t": torch.ones(1)}).wait()
    with pytest.raises(BaseException) as failed:
        dcp.load({"t": torch.zeros(1)},
                            storage_reader=st.StorageReader(store, "plain", 1), no_dist=True)
    # torch 2 re-raises a failed read_metadata as an AssertionError quoting it.
    assert_rank_raised(failed.value, Exception, read_metadata_error("plain@1 is not a DCP checkpoint"))


def run_world(mode, store, name, step, world, tmp_path, rows=16, cols=6, expect_ok=True, env=None):
    # A fresh rendezvous file per world: torch's FileStore need not delete
    # its file, and a second world on a left-over file can hang.
    init_file = tmp_path / f"init-{mode}-{world}-{time.monotonic_ns()}"
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    procs = [subprocess.Popen([sys.executable, WORKER, mode, store, name, str(step), str(rank),
                               str(world), str(init_file), str(rows), str(cols)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for rank in range(world)]
    outputs = []
    for rank, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        if expect_ok:
            assert p.returncode == 0, f"{mode} rank {rank} of {world} failed:\n{err}"
            outputs.append(out)
        else:
            outputs.append((p.returncode, err))
    return outputs


def test_gloo_a_rank_failing_to_stage_fails_every_rank_at_once(store, tmp_path):
    # Without the ranks' agreement before writing, rank 0 would wait for
    # rank 1's manifest for the whole rank timeout (10 minutes).
    start = time.monotonic()
    results = run_world("save-rank1-fails", store, "failing", 1, 2, tmp_path, expect_ok=False)
    assert time.monotonic() - start < 60
    (rc0, err0), (rc1, err1) = results
    assert rc0 != 0 and rc1 != 0
    assert "injected: rank 1 cannot stage" in err1
    assert "rank(s) 1" in err0 and "nothing was written or committed" in err0, err0
    assert [c for c in sluice.list_checkpoints(store, "failing") if c["complete"]] == []


def test_gloo_a_rank_failing_while_writing_fails_every_rank_within_seconds(store, tmp_path):
    # The rank timeout stays at its 10 minutes: rank 0 stops waiting because
    # rank 1's abandoned save leaves an abort note for this attempt.
    start = time.monotonic()
    results = run_world("save-rank1-fails-writing", store, "failwrite", 1, 2, tmp_path,
                        expect_ok=False)
    assert time.monotonic() - start < 60
    (rc0, err0), (rc1, err1) = results
    assert rc0 != 0 and rc1 != 0
    assert "injected: rank 1 fails while writing" in err1
    assert "rank 1 gave up" in err0, err0
    assert [c for c in sluice.list_checkpoints(store, "failwrite") if c["complete"]] == []


@pytest.mark.parametrize("world", [2, 4])
def test_gloo_group_each_rank_writes_its_shards_and_one_commit(store, tmp_path, world):
    outputs = run_world("save", store, "dist", world, world, tmp_path)
    report = json.loads(outputs[0].strip().splitlines()[-1])
    items, info = report["items"], report["info"]
    assert info["ranks"] == world and info["complete"]
    rows_per_rank = 16 // world
    for rank in range(world):
        # Each rank's own shard (by row offset) is in that rank's manifest.
        assert f"dcp/weights@{rank * rows_per_rank}_0" in items[str(rank)], items
    all_keys = [k for keys in items.values() for k in keys]
    assert len(all_keys) == len(set(all_keys))
    assert "dcp.metadata" in items["0"]
    assert len(sluice.list_checkpoints(store, "dist")) == 1
    run_world("load", store, "dist", world, world, tmp_path)


def test_gloo_ranks_with_a_tier0_each_commit_on_the_shared_tier_and_load_their_part(tmp_path):
    # Two ranks on "two hosts": each writes its shards to its own tier 0 and
    # copies them to the shared tier 1, where rank 0 commits.
    base = tmp_path / "cluster"
    env = {"SLUICE_TEST_PER_HOST": str(base)}
    outputs = run_world("save", "-", "ph", 3, 2, tmp_path, env=env)
    report = json.loads(outputs[0].strip().splitlines()[-1])
    assert report["info"]["ranks"] == 2 and report["info"]["complete"]
    for rank in range(2):
        tiers = [str(base / f"host{rank}"), str(base / "shared")]
        listed = sluice.pipeline(tiers, _reading=True).list("ph")
        assert [(c["step"], [t["state"] for t in c["tiers"]]) for c in listed] == [(3, ["part", "committed"])]
        assert listed[0]["tiers"][0]["reason"] == f"rank {rank} of 2 held here"
    # Neither host holds the other's shards.
    assert len(data_objects(str(base / "host1"), "ph", 3)) < len(data_objects(str(base / "shared"), "ph", 3))
    run_world("load", "-", "ph", 3, 2, tmp_path, env=env)
    # Host 1 lost with its disk: its replacement loads from the shared tier.
    shutil.rmtree(base / "host1")
    run_world("load", "-", "ph", 3, 2, tmp_path, env=env)
    sluice.close()


def test_gloo_load_with_another_world_size_reshards(store, tmp_path):
    run_world("save", store, "reshard", 1, 4, tmp_path)
    run_world("load", store, "reshard", 1, 2, tmp_path)  # each rank reads parts of 2 shards


def test_gloo_without_collectives_each_rank_stores_its_metadata_and_replicas_once(store, tmp_path):
    outputs = run_world("save-no-collectives", store, "nocoll", 1, 2, tmp_path)
    report = json.loads(outputs[0].strip().splitlines()[-1])
    items, info = report["items"], report["info"]
    assert info["ranks"] == 2 and info["complete"]
    assert "dcp.metadata.rank0" in items["0"] and "dcp.metadata.rank1" in items["1"]
    assert "dcp.metadata" not in items["0"]
    # Each rank writes all it holds, replicas too, under its own keys: no
    # rank can know what another holds.
    assert "dcp/r0/dense@0" in items["0"] and "dcp/r1/dense@0" in items["1"]
    assert "dcp/r0/epoch" in items["0"] and "dcp/r1/epoch" in items["1"]
    assert "dcp/r1/weights@8_0" in items["1"] and "dcp/r0/weights@0_0" in items["0"]
    assert "dcp/r1/only_r1@0" in items["1"]  # a key rank 0 never had is kept too
    dest = {"only_r1": torch.zeros(3), "only_r0": torch.ones(3)}
    dcp.load(dest, storage_reader=st.StorageReader(store, "nocoll", 1), no_dist=True)
    assert torch.equal(dest["only_r1"], torch.full((3,), 1.0)) and torch.equal(dest["only_r0"], torch.zeros(3))
    run_world("load", store, "nocoll", 1, 2, tmp_path)
    run_world("load", store, "nocoll", 1, 1, tmp_path)  # the merged metadata reshards too


@pytest.mark.parametrize("world", [2, 4])
def test_gloo_async_save_stages_on_every_rank_before_returning(store, tmp_path, world):
    run_world("save-async", store, "gasync", 1, world, tmp_path)
    run_world("load", store, "gasync", 1, world, tmp_path)  # the values from before the fill


def test_gloo_lazy_async_staging_commits_the_state_at_the_save_on_every_rank(store, tmp_path):
    run_world("save-async-lazy", store, "glazy", 1, 2, tmp_path)
    run_world("load", store, "glazy", 1, 2, tmp_path)  # the values from before the fill


@pytest.mark.parametrize("mode", ["save-process", "save-process-default-stager"])
def test_gloo_async_save_in_dcps_checkpoint_process_reports_each_save_exactly(store, tmp_path, mode):
    # DCP's PROCESS mode pickles the writer into a daemon per rank. With
    # sluice's stager the bytes were staged (and committed) here; with DCP's
    # DefaultStager the daemon opens the store and writes. Either way every
    # save that committed is reported as done, the state changed after
    # async_save returned is not in it, and a failed save (a store the
    # daemon cannot open) fails on the trainer's side, with the next working.
    outputs = run_world(mode, store, "proc", 5, 2, tmp_path)
    assert all("Traceback" not in out for out in outputs)
    listed = [(c["step"], c["complete"]) for c in sluice.list_checkpoints(store, "proc")]
    assert listed == [(5, True), (6, True)], listed
    for step in (5, 6):
        if mode == "save-process":
            run_world("load", store, "proc", step, 2, tmp_path)
            continue
        dest = {"weights": torch.zeros(3), "dense": torch.zeros(10, dtype=torch.int64), "epoch": None}
        dcp.load(dest, storage_reader=st.StorageReader(store, "proc", step), no_dist=True)
        assert torch.equal(dest["dense"], torch.arange(10)) and dest["epoch"] == 11
        assert torch.equal(dest["weights"], torch.zeros(3))  # each rank's own: rank 0's is saved once
    assert "unreachable store" in "".join(outputs) or mode == "save-process"


def test_gloo_4_ranks_loading_replicated_state_read_each_stored_byte_once(store, tmp_path):
    # A DDP-like state every rank holds whole; on load the ranks want
    # overlapping subsets (rank r skips every (r+2)-th tensor). Each region
    # two or more ranks want is read by one of them and broadcast.
    run_world("save-replicated", store, "repl", 1, 4, tmp_path)
    stored = 8 * 64 * 1024 * 4
    def load(share):
        env = {} if share is None else {"SLUICE_TEST_SHARE_READS": share}
        return [json.loads(o.strip().splitlines()[-1])
                for o in run_world("load-replicated", store, "repl", 1, 4, tmp_path, env=env)]
    shared, alone = load(None), load("0")
    wanted = {k for r in shared for k in r["wanted"]}
    assert sum(r["bytes_requested"] for r in shared) == len(wanted) * stored // 8
    assert sum(r["bytes_requested"] for r in alone) == sum(len(r["wanted"]) for r in alone) * stored // 8
    assert max(r["bytes_requested"] for r in shared) < max(r["bytes_requested"] for r in alone)


def _state(seed):
    g = torch.Generator().manual_seed(seed)
    return {"model": {"w": torch.randn(256, 128, generator=g), "b": torch.randn(128, generator=g)},
            "optim": {"step": seed, "lr": 0.5, "exp_avg": torch.randn(256, 128, generator=g)}}


def _dest():
    return {"model": {"w": torch.zeros(256, 128), "b": torch.zeros(128)},
            "optim": {"step": None, "lr": None, "exp_avg": torch.zeros(256, 128)}}


def _assert_equal(got, want):
    assert torch.equal(got["model"]["w"], want["model"]["w"])
    assert torch.equal(got["model"]["b"], want["model"]["b"])
    assert torch.equal(got["optim"]["exp_avg"], want["optim"]["exp_avg"])
    assert got["optim"]["step"] == want["optim"]["step"] and got["optim"]["lr"] == 0.5


def test_checkpoint_id_names_store_name_and_step(store):
    state = _state(1)
    dcp.save(state, checkpoint_id=f"{store}/byid@5", storage_writer=st.StorageWriter(), no_dist=True)
    dest = _dest()
    dcp.load(dest, checkpoint_id=f"{store}/byid@5", storage_reader=st.StorageReader(), no_dist=True)
    _assert_equal(dest, state)
    dest = _dest()
    dcp.load(dest, checkpoint_id=f"file://{store}/byid@latest", storage_reader=st.StorageReader(),
             no_dist=True)
    _assert_equal(dest, state)
    # One writer, reused with a new id per save, as a training loop does.
    writer = st.StorageWriter()
    for step in (6, 7):
        dcp.save(_state(step), checkpoint_id=f"{store}/byid@{step}", storage_writer=writer,
                 no_dist=True)
    assert [c["step"] for c in sluice.list_checkpoints(store, "byid")] == [5, 6, 7]
    with pytest.raises(ValueError, match="no checkpoint to write"):
        st.StorageWriter().storage_meta()
    with pytest.raises(ValueError, match="'STORE/NAME@STEP'"):
        st.StorageWriter(checkpoint_id="run@not-a-step")


def test_a_directory_checkpoint_id_is_a_step_of_its_parent_store(tmp_path):
    # What DCP users write: one directory per step.
    state = _state(5)
    base = tmp_path / "ckpts"
    dcp.save(state, checkpoint_id=str(base / "step_0100"), storage_writer=st.StorageWriter())
    dcp.save(state, checkpoint_id=str(base / "final"), storage_writer=st.StorageWriter())
    assert [c["step"] for c in sluice.list_checkpoints(str(base), "step_")] == [100]
    assert [c["step"] for c in sluice.list_checkpoints(str(base), "final")] == [0]
    for name in ("step_100", "step_0100/", "final"):
        dest = _dest()
        dcp.load(dest, checkpoint_id=str(base / name), storage_reader=st.StorageReader())
        _assert_equal(dest, state)
    assert st.StorageWriter.validate_checkpoint_id(str(base / "step_7"))
    assert st.parse_checkpoint_id("step_7") == (None, "step_", 7)


def test_without_collectives_in_one_process(store):
    state = _state(2)
    dcp.save(state, storage_writer=st.StorageWriter(store, "solo", 1), no_dist=True,
             use_collectives=False)
    dest = _dest()
    dcp.load(dest, storage_reader=st.StorageReader(store, "solo", 1), no_dist=True)
    _assert_equal(dest, state)


@pytest.mark.parametrize("entry", ["sluice", "dcp"])
def test_async_save_stages_once_and_training_may_change_the_state_at_once(store, entry):
    state = _state(3)
    want = {"model": {k: v.clone() for k, v in state["model"].items()},
            "optim": dict(state["optim"], exp_avg=state["optim"]["exp_avg"].clone())}
    writer = st.StorageWriter(store, "async", 1)
    if entry == "sluice":
        future = st.async_save(state, checkpoint_id=f"{store}/async@1", storage_writer=writer,
                               no_dist=True)
    else:
        future = dcp.async_save(state, storage_writer=writer, no_dist=True)
    # staged: the writer snapshotted into sluice's staging, no DCP copy made
    assert writer.handle is not None and writer.handle.stall_seconds > 0
    for t in (state["model"]["w"], state["model"]["b"], state["optim"]["exp_avg"]):
        t.fill_(123.0)  # training goes on
    state["optim"]["step"] = 99
    metadata = future.result()
    assert "model.w" in metadata.state_dict_metadata
    dest = _dest()
    dcp.load(dest, storage_reader=st.StorageReader(store, "async", 1), no_dist=True)
    _assert_equal(dest, want)


def test_async_staging_returns_dcps_response_with_staging_completion(store):
    state = _state(4)
    want = {"model": {k: v.clone() for k, v in state["model"].items()},
            "optim": dict(state["optim"], exp_avg=state["optim"]["exp_avg"].clone())}
    writer = st.StorageWriter(store, "resp", 1, async_staging=True)
    response = dcp.async_save(state, storage_writer=writer, no_dist=True)
    assert isinstance(response, dcp.state_dict_saver.AsyncSaveResponse)
    response.staging_completion.result(timeout=60)  # the lazy snapshot is in staging
    for t in (state["model"]["w"], state["model"]["b"], state["optim"]["exp_avg"]):
        t.fill_(-1.0)
    response.upload_completion.result()
    writer.handle.wait()  # durable on every tier
    dest = _dest()
    dcp.load(dest, storage_reader=st.StorageReader(store, "resp", 1), no_dist=True)
    _assert_equal(dest, want)


def test_a_pickled_writer_carries_no_handle_and_a_staged_save_as_committed(store):
    import pickle
    writer = st.StorageWriter(store, "pick", 1)
    stand_ins = writer.stage({"t": torch.ones(4), "n": 3})
    copy = pickle.loads(pickle.dumps(writer))  # waits for the commit on tier 0
    assert copy.handle is None and copy.process_group is None
    assert writer._staged is None and copy._staged is not None  # handed over
    assert [c["complete"] for c in sluice.list_checkpoints(store, "pick")] == [True]
    pickle.loads(pickle.dumps(stand_ins))  # no data: cheap to send
    assert len(pickle.dumps(stand_ins)) < 4096


def test_async_save_of_one_id_then_another_is_refused_not_mixed(store):
    writer = st.StorageWriter(store, "mix", 1)
    writer.stage({"t": torch.ones(4)})
    with pytest.raises(RuntimeError, match="staged mix@1 but DCP now saves mix@2"):
        writer.reset(f"{store}/mix@2")
    # The staged save still commits, as what it was staged as.
    writer.handle.wait(tier=0)
    assert [c["step"] for c in sluice.list_checkpoints(store, "mix") if c["complete"]] == [1]


@pytest.mark.parametrize("kind", ["meta", "sparse", "quantized"])
def test_unsupported_tensors_fail_naming_the_key_with_nothing_written(store, kind):
    bad = {"meta": lambda: torch.empty(4, device="meta"),
           "sparse": lambda: torch.eye(3).to_sparse(),
           "quantized": lambda: torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.quint8)}[kind]()
    with pytest.raises(BaseException) as failed:
        dcp.save({"fine": torch.ones(3), "layer": {"w": bad}},
                 storage_writer=st.StorageWriter(store, "bad", 1), no_dist=True)
    assert_rank_raised(failed.value, (TypeError, ValueError), r"'layer\.w'")
    assert sluice.list_checkpoints(store, "bad") == []
    with pytest.raises((TypeError, ValueError), match=r"'layer\.w'"):
        st.StorageWriter(store, "bad", 2).stage({"fine": torch.ones(3), "layer": {"w": bad}})
    assert sluice.list_checkpoints(store, "bad") == []


def test_loading_a_missing_step_or_name_says_which(store):
    dcp.save({"t": torch.ones(2)}, storage_writer=st.StorageWriter(store, "have", 1), no_dist=True)
    for checkpoint_id, label in ((f"{store}/have@2", "have@2"), (f"{store}/other@1", "other@1"),
                                 (f"{store}/other@latest", "other")):
        with pytest.raises(BaseException) as failed:
            dcp.load({"t": torch.zeros(2)}, checkpoint_id=checkpoint_id,
                     storage_reader=st.StorageReader(), no_dist=True)
        assert_rank_raised(failed.value, Exception, read_metadata_error(re.escape(label)))


def test_latest_good_skips_a_damaged_newest_step_saying_so_and_latest_refuses_it(store):
    for step in (1, 2):
        dcp.save({"t": torch.full((4,), float(step))}, checkpoint_id=f"{store}/dmg@{step}",
                 storage_writer=st.StorageWriter(), no_dist=True)
    for path in data_objects(store, "dmg", 2):
        os.unlink(path)
    with pytest.raises(BaseException) as failed:
        dcp.load({"t": torch.zeros(4)}, checkpoint_id=f"{store}/dmg@latest",
                 storage_reader=st.StorageReader(), no_dist=True)
    assert_rank_raised(failed.value, Exception, read_metadata_error("dmg@2.*damaged"))
    dest = {"t": torch.zeros(4)}
    with pytest.warns(UserWarning, match="reading dmg@1, the newest intact step"):
        dcp.load(dest, checkpoint_id=f"{store}/dmg@latest-good", storage_reader=st.StorageReader(),
                 no_dist=True)
    assert torch.equal(dest["t"], torch.full((4,), 1.0))
    assert not st.StorageWriter.validate_checkpoint_id(f"{store}/dmg@latest-good")
    assert st.StorageReader.validate_checkpoint_id(f"{store}/dmg@latest-good")


def test_dtensor_saved_by_4_loads_into_2_sharded_the_other_way_reading_only_its_part(store, tmp_path):
    # 64 x 65536 fp32 (16 MiB) sharded by rows over 4 ranks, in 64 KiB chunks.
    rows, cols, chunk = 64, 65536, 64 << 10
    env = {"SLUICE_TEST_CHUNK_BYTES": str(chunk)}
    run_world("save-dtensor", store, "dt", 1, 4, tmp_path, rows, cols, env=env)
    for mode in ("load-dtensor-cols", "load-dtensor-rows"):
        outputs = run_world(mode, store, "dt", 1, 2, tmp_path, rows, cols, env=env)
        for rank, out in enumerate(outputs):
            report = json.loads(out.strip().splitlines()[-1])
            # Each rank holds half (8 MiB). Column halves are 128 KiB runs,
            # 128 KiB apart: each is fetched alone, never the other half.
            assert report["local_bytes"] == rows * cols * 4 // 2
            assert report["bytes_requested"] == report["local_bytes"], (mode, rank, report)


def test_a_scalar_loads_into_another_dtype(store):
    dcp.save({"s": torch.tensor(2.5), "v": torch.arange(4.0)},
             storage_writer=st.StorageWriter(store, "scalar", 1), no_dist=True)
    dest = {"s": torch.tensor(0.0, dtype=torch.bfloat16), "v": torch.zeros(4, dtype=torch.float64)}
    dcp.load(dest, storage_reader=st.StorageReader(store, "scalar", 1), no_dist=True)
    assert dest["s"].dtype == torch.bfloat16 and dest["s"].item() == 2.5
    assert torch.equal(dest["v"], torch.arange(4.0, dtype=torch.float64))


def test_a_dcp_directory_imports_into_sluice_and_exports_back(tmp_path):
    # The migration path both ways, through the CLI and the functions.
    from sluice import dcp_convert
    state = _state(6)
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(tmp_path / "dcp")), no_dist=True)
    out = subprocess.run([sys.executable, "-m", "sluice.dcp_convert", "import", str(tmp_path / "dcp"),
                          "--store", str(tmp_path / "store"), "--name", "moved", "--step", "6"],
                         capture_output=True, text=True, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert [(c["step"], c["complete"]) for c in sluice.list_checkpoints(str(tmp_path / "store"), "moved")] == [(6, True)]
    dest = _dest()
    dcp.load(dest, storage_reader=st.StorageReader(str(tmp_path / "store"), "moved", 6), no_dist=True)
    _assert_equal(dest, state)
    assert dcp_convert.export_dcp(str(tmp_path / "store"), "moved", "latest", str(tmp_path / "back")) > 0
    dest = _dest()
    dcp.load(dest, storage_reader=dcp.FileSystemReader(str(tmp_path / "back")), no_dist=True)
    _assert_equal(dest, state)
    with pytest.raises(FileExistsError):
        dcp_convert.export_dcp(str(tmp_path / "store"), "moved", 6, str(tmp_path / "back"))
    bad = subprocess.run([sys.executable, "-m", "sluice.dcp_convert", "import", str(tmp_path / "nothing"),
                          "--store", str(tmp_path / "store"), "--name", "x", "--step", "1"],
                         capture_output=True, text=True, env=dict(os.environ))
    assert bad.returncode == 1 and "not a DCP checkpoint" in bad.stderr
