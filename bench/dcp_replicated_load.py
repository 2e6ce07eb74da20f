#!/usr/bin/env python3
"""DCP loads of a replicated state on 4 gloo ranks: sluice's StorageReader
(by default, regions several ranks want are read once and broadcast; and
with share_reads=False) against DCP's own
FileSystemReader (every rank reads all it wants), same state, same disk,
rounds alternating, cold page cache before each load.

    PYTHONPATH=build/python .venv/bin/python bench/dcp_replicated_load.py [--gib 1] [--ranks 4]
        [--runs 3] [--dir /tmp/sluice-repl-bench]

The state is bench/torch_bench.py's model + Adam state, whole on every rank
(DDP). Saved once each way (DCP dedups: each item written once). Each load
fills zeroed tensors on every rank. Per load: the wall time (rank 0's,
between barriers) and the bytes each rank asked its store for (sluice:
StorageReader.bytes_requested; DCP: the bytes of the read items its
read_data served), against the checkpoint's size. Prints medians and the
ratios; the last line is JSON.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.checkpoint.planner import LoadItemType

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dcp_bench import zeros_like_state  # noqa: E402
from torch_bench import drop_caches, make_state, nbytes  # noqa: E402


# DCP's reader; sluice's (shared reads, its default); sluice's with
# share_reads=False (each rank reads all it wants).
KINDS = ("dcp", "sluice", "sluice-unshared")


class CountingFileSystemReader(dcp.FileSystemReader):
    """DCP's reader, counting the bytes of the items it reads."""
    bytes_requested = 0

    def read_data(self, plan, planner):
        for item in plan.items:
            if item.type == LoadItemType.TENSOR:
                count = 1
                for n in item.lengths:
                    count *= int(n)
                dtype = planner.metadata.state_dict_metadata[item.dest_index.fqn].properties.dtype
                self.bytes_requested += count * torch.tensor([], dtype=dtype).element_size()
        return super().read_data(plan, planner)


def rank_main(rank, world, args, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port), OMP_NUM_THREADS="1")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import sluice
    import sluice.torch
    state = make_state(int(args.gib * (1 << 30)))
    fs_dir, store = os.path.join(args.dir, "fs"), os.path.join(args.dir, "sluice")
    dcp.save(state, storage_writer=dcp.FileSystemWriter(fs_dir))
    dcp.save(state, storage_writer=sluice.torch.StorageWriter(store, "repl", 1))
    rows = []
    for _ in range(args.runs):
        for kind in KINDS:
            dest = zeros_like_state(state)
            reader = (CountingFileSystemReader(fs_dir) if kind == "dcp" else
                      sluice.torch.StorageReader(store, "repl", 1, share_reads=kind == "sluice"))
            if rank == 0:
                drop_caches()
            dist.barrier()
            t0 = time.perf_counter()
            dcp.load(dest, storage_reader=reader)
            dist.barrier()
            seconds = time.perf_counter() - t0
            ok = torch.equal(dest["model"]["layers.0.weight"], state["model"]["layers.0.weight"])
            got = [None] * world
            dist.all_gather_object(got, (reader.bytes_requested, ok))
            rows.append({"kind": kind, "seconds": seconds, "bytes": [b for b, _ in got],
                         "ok": all(o for _, o in got)})
    if rank == 0:
        results.put({"rows": rows, "state_bytes": nbytes(state)})
    dist.destroy_process_group()
    sluice.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/sluice-repl-bench")
    ap.add_argument("--port", type=int, default=29513)
    args = ap.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    os.environ.setdefault("SLUICE_STAGING_BYTES", str(256 << 20))
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, args.ranks, args, results)) for r in range(args.ranks)]
    for p in procs:
        p.start()
    out = results.get(timeout=3600)
    for p in procs:
        p.join()
    shutil.rmtree(args.dir, ignore_errors=True)
    size = out["state_bytes"]
    report = {"ranks": args.ranks, "state_bytes": size, "cold": os.geteuid() == 0}
    for kind in KINDS:
        rows = [r for r in out["rows"] if r["kind"] == kind]
        assert all(r["ok"] for r in rows), f"{kind}: wrong values after load"
        per_job = statistics.median(sum(r["bytes"]) for r in rows)
        report[kind] = {"seconds": statistics.median(r["seconds"] for r in rows),
                        "seconds_all": [round(r["seconds"], 3) for r in rows],
                        "bytes_per_rank": rows[-1]["bytes"], "bytes_per_job_over_size": per_job / size}
        print(f"{kind:7s} load {report[kind]['seconds']:.3f} s (runs {report[kind]['seconds_all']}), "
              f"store bytes per job {per_job / size:.2f}x the checkpoint, per rank {rows[-1]['bytes']}")
    for kind in KINDS[1:]:
        report[f"time_dcp_over_{kind}"] = report["dcp"]["seconds"] / report[kind]["seconds"]
        print(f"{args.ranks} ranks, {size / 2**30:.2f} GiB replicated, "
              f"{'cold' if report['cold'] else 'WARM'} loads: {kind} {report[f'time_dcp_over_{kind}']:.2f}x "
              f"faster than FileSystemReader")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
