#!/usr/bin/env python3
"""A LoRA run's checkpoints through sluice.save: a frozen base and a small
adapter that changes every step. Bytes written, against what a full save of
every step writes (torch.save, or sluice with incremental=False), same run.

    PYTHONPATH=build/python .venv/bin/python bench/lora_bench.py [--base-gib 2] \
        [--adapter-mib 20] [--steps 10] [--dir DIR] [--rados rados://POOL/PREFIX?conf=...]

The state is {"base": {frozen bf16 matrices}, "lora": {"A", "B"} (fp32)}. Each
of --steps checkpoints changes the adapter (in place, as an optimizer step
would) and saves with sluice.save(..., async_=False): incremental, the
default. Then the same --steps again with incremental=False, under another
name. Prints per mode the bytes written to tier 0 (from the steps' data
objects on disk) and per tier (the handle's bytes_written), the median save
time (until every tier committed), and the ratio incremental / full. With --rados the store is
[DIR, RADOS] and the drains to RADOS are counted the same way.
"""

import argparse
import glob
import os
import shutil
import statistics
import time

import torch

import sluice


def data_bytes(store_dir, name):
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(store_dir, "ckpt", name, "*", "data", "*.dat")))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-gib", type=float, default=2.0)
    ap.add_argument("--adapter-mib", type=float, default=20.0)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--dir", default="/var/tmp/sluice-lora-bench")
    ap.add_argument("--rados", default=None)
    ap.add_argument("--skip-full", action="store_true", help="only the incremental run (e.g. on a small Ceph)")
    args = ap.parse_args()

    shutil.rmtree(args.dir, ignore_errors=True)
    width = 4096
    mats = max(1, round(args.base_gib * 2**30 / (width * width * 2)))
    g = torch.Generator().manual_seed(0)
    base = {f"layers.{i}.weight": torch.randn(width, width, generator=g).to(torch.bfloat16) for i in range(mats)}
    rank = max(1, round(args.adapter_mib * 2**20 / (2 * width * 4)))
    lora = {"A": torch.randn(rank, width, generator=g), "B": torch.zeros(width, rank)}
    state = {"base": base, "lora": lora}
    base_bytes = sum(t.numel() * t.element_size() for t in base.values())
    adapter_bytes = sum(t.numel() * t.element_size() for t in lora.values())
    store = [args.dir] if args.rados is None else [args.dir, args.rados]
    sluice.configure(staging_bytes=min(8 << 30, base_bytes + adapter_bytes + (256 << 20)))
    sluice.pipeline(store)  # staging allocated before the first timed save, as a training job would

    results = {}
    modes = (("incremental", True),) if args.skip_full else (("incremental", True), ("full", False))
    for mode, incremental in modes:
        name = f"lora-{mode}"
        seconds, tier_bytes, referenced = [], [0] * len(store), 0
        for step in range(1, args.steps + 1):
            with torch.no_grad():
                lora["A"].add_(0.01)
                lora["B"].add_(0.01)
            t0 = time.perf_counter()
            h = sluice.save(store, name, step, state, async_=False, incremental=incremental)
            seconds.append(time.perf_counter() - t0)
            for k, p in enumerate(h.progress()):
                tier_bytes[k] += p["bytes_written"]
            referenced += h.stats()["referenced_bytes"]
        results[mode] = (data_bytes(args.dir, name), tier_bytes, statistics.median(seconds), referenced)

    print(f"LoRA: frozen base {base_bytes / 2**30:.2f} GiB (bf16) + adapter {adapter_bytes / 2**20:.1f} MiB (fp32), "
          f"{args.steps} checkpoints, sluice.save(async_=False), tiers: {', '.join(store)}")
    print(f"{'':13}{'tier 0 data':>16}{'written per tier':>36}{'median save (s)':>17}")
    for mode in results:
        on_disk, tier_bytes, mean_s, _ = results[mode]
        per_tier = ", ".join(f"{b / 2**30:.3f} GiB" for b in tier_bytes)
        print(f"{mode:13}{on_disk / 2**30:12.3f} GiB{per_tier:>36}{mean_s:17.2f}")
    inc = results["incremental"]
    budget = base_bytes + args.steps * 30 * 2**20
    if "full" in results:
        full = results["full"]
        print(f"incremental / full: tier 0 {inc[0] / full[0]:.3f}, save time {inc[2] / full[2]:.3f}")
    print(f"target: total written <= base + {args.steps} x 30 MiB = {budget / 2**30:.3f} GiB: "
          f"tier 0 {inc[0] / 2**30:.3f} GiB ({'met' if inc[0] <= budget else 'NOT met'})"
          + ("" if len(store) == 1 else f"; RADOS {inc[1][1] / 2**30:.3f} GiB ({'met' if inc[1][1] <= budget else 'NOT met'})"))
    sluice.close()
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
