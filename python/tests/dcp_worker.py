"""One rank of a DCP save or load over a gloo group (run by test_dcp.py).

    dcp_worker.py MODE STORE NAME STEP RANK WORLD INIT_FILE ROWS COLS

With SLUICE_TEST_PER_HOST=DIR, STORE is ignored: rank R's tiers are
[DIR/hostR, DIR/shared] with tier0_per_host ([DIR/hostR] alone with
SLUICE_TEST_NO_SHARED=1).

MODE: save, save-rank1-fails, save-rank1-fails-writing, save-no-collectives (use_collectives=False),
save-async (dcp.async_save), save-async-lazy (async_staging=True), save-process and save-process-default-stager
(dcp.async_save in DCP's checkpoint process; process_mode()), load;
save-replicated and load-replicated (replicated_mode()); with DTensors: save-dtensor,
load-dtensor-rows, load-dtensor-cols.

The state is a ShardedTensor of ROWS x COLS (value r*COLS+c at row r, col c),
sharded by rows across the WORLD ranks, plus a dense tensor and a plain
value. `save` saves it (`save-rank1-fails`: rank 1 fails staging its items); rank 0 then prints, as JSON, which rank wrote which
item. `load` loads into zeroed state laid out for WORLD ranks (which may differ
from the world that saved) and exits 1 if any value differs.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

from sluice.torch import StorageReader, StorageWriter, dcp
import sluice
from torch.distributed._shard.sharded_tensor import Shard, ShardMetadata, init_from_local_shards


def rows_of(rank, world, rows):
    per = rows // world
    return rank * per, per


def sharded(rank, world, rows, cols, fill=None):
    start, count = rows_of(rank, world, rows)
    if fill is None:
        local = (torch.arange(start * cols, (start + count) * cols, dtype=torch.float32)
                 .reshape(count, cols))
    else:
        local = torch.full((count, cols), fill, dtype=torch.float32)
    meta = ShardMetadata(shard_offsets=[start, 0], shard_sizes=[count, cols],
                         placement=f"rank:{rank}/cpu")
    return init_from_local_shards([Shard(local, meta)], rows, cols)


def dtensor(world, rows, cols, dim, fill=None):
    """A rows x cols DTensor (value r*cols+c, or `fill`) sharded along `dim`."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (world,))
    if fill is None:
        full = torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols)
    else:
        full = torch.full((rows, cols), fill, dtype=torch.float32)
    return distribute_tensor(full, mesh, [Shard(dim)])


def dtensor_mode(mode, store, name, step, rank, world, rows, cols):
    """save-dtensor: rows-sharded. load-dtensor-rows / load-dtensor-cols:
    into a rows- / columns-sharded DTensor; prints what this rank asked the
    store for, and exits 1 on a wrong value."""
    if mode == "save-dtensor":
        dcp.save({"emb": dtensor(world, rows, cols, 0)},
                 storage_writer=StorageWriter(store, name, step))
        return
    state = {"emb": dtensor(world, rows, cols, 0 if mode == "load-dtensor-rows" else 1, fill=-1.0)}
    reader = StorageReader(store, name, step)
    dcp.load(state, storage_reader=reader)
    local = state["emb"].to_local()
    full = torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols)
    if mode == "load-dtensor-rows":
        per = rows // world
        expected = full[rank * per:(rank + 1) * per]
    else:
        per = cols // world
        expected = full[:, rank * per:(rank + 1) * per]
    if not torch.equal(local, expected):
        print(f"rank {rank}: wrong values after load", file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"bytes_requested": reader.bytes_requested,
                      "local_bytes": local.numel() * local.element_size()}))


def replicated_mode(mode, store, name, step, rank, world):
    """save-replicated: every rank holds the same 8 tensors (a DDP model).
    load-replicated: each rank loads the ones it wants (all, except that
    rank r skips every (r+2)-th, so ranks disagree) and prints, as JSON,
    the bytes it asked the store for; $SLUICE_TEST_SHARE_READS=0 turns
    sharing off. Exits 1 on a wrong value."""
    def full(i, fill=None):
        return torch.full((64, 1024), float(i) if fill is None else fill)
    keys = [f"w{i}" for i in range(8)]
    if mode == "save-replicated":
        dcp.save({k: full(i) for i, k in enumerate(keys)}, storage_writer=StorageWriter(store, name, step))
        return
    wanted = {k: full(i, -1.0) for i, k in enumerate(keys) if i % (rank + 2) != 0}
    reader = StorageReader(store, name, step, share_reads=os.environ.get("SLUICE_TEST_SHARE_READS") != "0")
    dcp.load(wanted, storage_reader=reader)
    for k, t in wanted.items():
        if not torch.equal(t, full(int(k[1:]))):
            print(f"rank {rank}: wrong values in {k}", file=sys.stderr)
            sys.exit(1)
    print(json.dumps({"rank": rank, "bytes_requested": reader.bytes_requested, "wanted": sorted(wanted)}))


def process_mode(mode, state, writer, store, name, step, rank):
    """dcp.async_save with AsyncCheckpointerType.PROCESS: DCP pickles the
    writer into its checkpoint process. save-process: sluice's stager (the
    writer); save-process-default-stager: DCP's DefaultStager, after a save
    to a store the checkpoint process cannot open failed. Each saves step
    STEP, changes the state at once (not saved), then saves STEP+1 with
    the same writer."""
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
    from sluice.torch import async_save
    kwargs = {"async_checkpointer_type": AsyncCheckpointerType.PROCESS}
    if mode == "save-process-default-stager":
        # DCP's DefaultStager cannot copy a ShardedTensor: a tensor of this
        # rank's own instead.
        state["weights"] = torch.full((3,), float(rank))
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
        # On the CPU: no pinned memory, no CUDA stream.
        kwargs["async_stager"] = DefaultStager(StagingOptions(False, False, False, False))
        bad = StorageWriter("/proc/sluice-cannot-be-here", name, step)
        try:
            async_save(state, storage_writer=bad, **kwargs).result()
        except BaseException as error:  # DCP's CheckpointException: the checkpoint process's error, here
            assert "sluice-cannot-be-here" in str(error), error
            print(f"rank {rank}: unreachable store: {str(error).splitlines()[0]}")
        else:
            raise AssertionError("a save to an unreachable store succeeded")
    for s in (step, step + 1):
        result = async_save(state, checkpoint_id=f"{store}/{name}@{s}", storage_writer=writer, **kwargs)
        if mode == "save-process":
            assert writer.handle is not None  # staged here, before async_save returned
        state["dense"].add_(100)  # after staging: not in step s
        result.result()
        state["dense"].sub_(100)


def main():
    mode, store, name, step, rank, world, init_file, rows, cols = sys.argv[1:]
    step, rank, world, rows, cols = int(step), int(rank), int(world), int(rows), int(cols)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    if os.environ.get("SLUICE_TEST_CHUNK_BYTES"):
        sluice.configure(chunk_bytes=int(os.environ["SLUICE_TEST_CHUNK_BYTES"]))
    if os.environ.get("SLUICE_TEST_PER_HOST"):
        # Each rank a host of its own: tier 0 its own directory, tier 1 shared.
        base = os.environ["SLUICE_TEST_PER_HOST"]
        store = [os.path.join(base, f"host{rank}"), os.path.join(base, "shared")]
        if os.environ.get("SLUICE_TEST_NO_SHARED"):
            store = store[:1]  # no tier every host shares: per-host NVMe and peers
        if os.environ.get("SLUICE_TEST_PEERS"):
            # Peer replicas: rank R is host R ($SLUICE_HOST), one domain each.
            os.environ["SLUICE_HOST"] = f"host{rank}"
            extra = json.loads(os.environ.get("SLUICE_TEST_PEER_OPTIONS", "{}"))  # options to add
            extra.update(json.loads(os.environ.get(f"SLUICE_TEST_PEER_OPTIONS_RANK{rank}", "{}")))
            sluice.configure(tier0_per_host=True, peer_replicas=int(os.environ["SLUICE_TEST_PEERS"]),
                             peer_timeout_seconds=float(os.environ.get("SLUICE_TEST_PEER_TIMEOUT", 30)), **extra)
            if os.environ.get("SLUICE_TEST_PEER_HANGS") and rank == 1:
                # A peer that never answers: rank 1's peer thread hangs.
                import time
                from sluice import _peer
                _peer._exchange = lambda *args: time.sleep(3600)
        else:
            sluice.configure(tier0_per_host=True)
    if "replicated" in mode:
        replicated_mode(mode, store, name, step, rank, world)
        dist.destroy_process_group()
        sluice.close()
        return
    if "dtensor" in mode:
        dtensor_mode(mode, store, name, step, rank, world, rows, cols)
        dist.destroy_process_group()
        sluice.close()
        return
    dense = torch.arange(10, dtype=torch.int64)
    if mode == "save-rank1-fails" and rank == 1:
        # A fault injected on one rank while it stages its items.
        from sluice import _state_dict

        def fail(tensor, where):
            raise ValueError(f"injected: rank 1 cannot stage {where}")
        _state_dict.check_tensor = fail
    if mode == "save-rank1-fails-writing" and rank == 1:
        # A fault on one rank after every rank agreed to write: its save is
        # abandoned while rank 0 waits for its manifest.
        import sluice.torch as sluice_torch
        agree = sluice_torch._agree_before_writing

        def agree_then_fail(assignment, error):
            agree(assignment, error)
            raise RuntimeError("injected: rank 1 fails while writing")
        sluice_torch._agree_before_writing = agree_then_fail
    if mode.startswith("save"):
        state = {"weights": sharded(rank, world, rows, cols), "dense": dense, "epoch": 11}
        if mode == "save-no-collectives":
            # A key only this rank holds (a pipeline stage's layer).
            state[f"only_r{rank}"] = torch.full((3,), float(rank))
        writer = StorageWriter(store, name, step,
                               complete_on=os.environ.get("SLUICE_TEST_COMPLETE_ON", "durable"))
        if mode == "save-no-collectives":
            dcp.save(state, storage_writer=writer, use_collectives=False)
        elif mode.startswith("save-process"):
            process_mode(mode, state, writer, store, name, step, rank)
        elif mode == "save-async":
            import warnings
            warnings.filterwarnings("error", message="sluice.torch")  # no fallback copy
            future = dcp.async_save(state, storage_writer=writer)
            # Staged into sluice before async_save returned, on every rank.
            assert writer.handle is not None and writer.handle.stall_seconds > 0
            state["weights"].local_shards()[0].tensor.fill_(-7.0)  # after staging: not saved
            future.result()
        elif mode == "save-async-lazy":
            # async_staging=True: a lazy snapshot; the tutorial's loop waits
            # on staging_completion before it changes the state.
            writer = StorageWriter(store, name, step, async_staging=True)
            response = dcp.async_save(state, storage_writer=writer)
            response.staging_completion.result()
            assert writer.handle.staged
            state["weights"].local_shards()[0].tensor.fill_(-7.0)  # after staging: not saved
            response.upload_completion.result()
        else:
            dcp.save(state, storage_writer=writer)
        dist.barrier()
        if os.environ.get("SLUICE_TEST_PEER_HANGS"):
            if rank == 1:
                os._exit(0)  # its hung peer thread would keep close() waiting
            try:
                writer.handle.wait_safe(timeout=120)
            except sluice.UnavailableError as e:
                print(f"not safe: {e}")
        if rank == 0 and not (os.environ.get("SLUICE_TEST_NO_SHARED") and world > 2):
            # (With no shared tier and more than two hosts, no host holds every rank.)
            reader = sluice.pipeline(store).open(name, step)
            by_rank = {}
            for key, _, _, item_rank in reader.items():
                by_rank.setdefault(str(item_rank), []).append(key)
            print(json.dumps({"items": by_rank, "info": reader.info}))
    else:
        state = {"weights": sharded(rank, world, rows, cols, fill=-1.0),
                 "dense": torch.zeros(10, dtype=torch.int64), "epoch": None}
        # STEP -1: the latest step, which the rank then prints.
        reader = StorageReader(store, name, "latest" if step < 0 else step)
        dcp.load(state, storage_reader=reader)
        if step < 0:
            print(json.dumps({"loaded_step": reader._reader.info["step"]}))
        start, count = rows_of(rank, world, rows)
        expected = (torch.arange(start * cols, (start + count) * cols, dtype=torch.float32)
                    .reshape(count, cols))
        local = state["weights"].local_shards()[0].tensor
        if not torch.equal(local, expected) or not torch.equal(state["dense"], dense) \
                or state["epoch"] != 11:
            print(f"rank {rank}: wrong values after load", file=sys.stderr)
            sys.exit(1)
    dist.destroy_process_group()
    sluice.close()


if __name__ == "__main__":
    main()
