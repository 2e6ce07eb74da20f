#!/usr/bin/env python3
"""torch.distributed.checkpoint (DCP) with sluice's StorageWriter/Reader
against DCP with its own FileSystemWriter/Reader, same state, same disk, same
run, rounds alternating; torch.save + fsync as a reference.

    PYTHONPATH=build/python .venv/bin/python bench/dcp_bench.py [--gib 2.25] [--runs 3] [--dir DIR]

The state is a model + torch.optim.Adam state dict (bench/torch_bench.py's).
Per round:
  - dcp.async_save(state, storage_writer=FileSystemWriter(dir)): DCP's own
    path, its writer staging the state (its default: a CPU copy) before it
    returns, then writing and fsyncing in a background thread;
  - dcp.async_save(state, storage_writer=sluice.torch.StorageWriter(...)):
    one copy into sluice's staging arena (opened once, before the rounds, as
    a training job opens it), then the commit in the background;
  - "resume" is the time async_save blocked (training may go on), "durable"
    the time until its future is done (fsynced / committed);
  - dcp.load into preallocated tensors from a cold page cache (needs root
    to drop it; otherwise the figures are marked warm);
  - torch.save + flush + fsync of the same state.
Prints medians (min-max) and the ratios sluice/DCP.
"""

import argparse
import os
import shutil
import statistics
import sys
import time
import warnings

import torch
import torch.distributed.checkpoint as dcp

import sluice
import sluice.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_bench import drop_caches, make_state, nbytes  # noqa: E402


def zeros_like_state(state):
    if isinstance(state, torch.Tensor):
        return torch.zeros_like(state)
    if isinstance(state, dict):
        return {k: zeros_like_state(v) for k, v in state.items()}
    if isinstance(state, list):
        return [zeros_like_state(v) for v in state]
    return state


def med(xs):
    return statistics.median(xs)


def fmt(xs):
    return f"{med(xs):7.3f} s ({min(xs):.3f}-{max(xs):.3f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=2.25, help="state size in GiB")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default="/tmp/sluice-dcp-bench")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)

    state = make_state(int(args.gib * (1 << 30)))
    size = nbytes(state)
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    store = os.path.join(args.dir, "sluice")
    sluice.configure(staging_bytes=((size >> 21) + 16) << 21)
    sluice.pipeline(store)  # the arena, once, as a training job makes it before training
    dest = zeros_like_state(state)
    r = {k: [] for k in ("dcp_resume", "dcp_durable", "sl_resume", "sl_durable", "dcp_load",
                         "sl_load", "torch_save")}
    cold = True
    for run in range(1, args.runs + 1):
        # DCP's own writer.
        path = os.path.join(args.dir, f"dcp-{run}")
        t0 = time.perf_counter()
        future = dcp.async_save(state, storage_writer=dcp.FileSystemWriter(path), no_dist=True)
        r["dcp_resume"].append(time.perf_counter() - t0)
        future.result()
        r["dcp_durable"].append(time.perf_counter() - t0)
        # sluice's writer and staging.
        t0 = time.perf_counter()
        future = dcp.async_save(state, storage_writer=sluice.torch.StorageWriter(store, "bench", run),
                                no_dist=True)
        r["sl_resume"].append(time.perf_counter() - t0)
        future.result()
        r["sl_durable"].append(time.perf_counter() - t0)
        # Cold loads, alternating.
        cold &= drop_caches()
        t0 = time.perf_counter()
        dcp.load(dest, storage_reader=dcp.FileSystemReader(path), no_dist=True)
        r["dcp_load"].append(time.perf_counter() - t0)
        cold &= drop_caches()
        t0 = time.perf_counter()
        dcp.load(dest, storage_reader=sluice.torch.StorageReader(store, "bench", run), no_dist=True)
        r["sl_load"].append(time.perf_counter() - t0)
        # torch.save + fsync, for reference.
        t0 = time.perf_counter()
        with open(os.path.join(args.dir, "torch.pt"), "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        r["torch_save"].append(time.perf_counter() - t0)
        shutil.rmtree(path)
        print(f"round {run}: " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in r.items()), flush=True)

    print(f"\nstate {size / (1 << 30):.2f} GiB, {args.runs} rounds, torch {torch.__version__}, "
          f"loads {'cold' if cold else 'WARM (no root to drop the page cache)'}")
    print(f"  DCP FileSystemWriter  resume {fmt(r['dcp_resume'])}  durable {fmt(r['dcp_durable'])}")
    print(f"  sluice StorageWriter  resume {fmt(r['sl_resume'])}  durable {fmt(r['sl_durable'])}")
    print(f"  dcp.load  DCP {fmt(r['dcp_load'])}  sluice {fmt(r['sl_load'])}")
    print(f"  torch.save + fsync {fmt(r['torch_save'])}")
    print(f"ratios (medians): resume sluice/DCP {med(r['sl_resume']) / med(r['dcp_resume']):.3f}, "
          f"durable sluice/DCP {med(r['sl_durable']) / med(r['dcp_durable']):.3f}, "
          f"load DCP/sluice {med(r['dcp_load']) / med(r['sl_load']):.2f}x")
    sluice.close()
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
