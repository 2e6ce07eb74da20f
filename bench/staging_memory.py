#!/usr/bin/env python3
"""Resident memory of one process that saves into many stores in turn.

    PYTHONPATH=build/python .venv/bin/python bench/staging_memory.py [--stores 50]
        [--state-mib 64] [--staging-mib 1024] [--dir /tmp/sluice-staging-bench]

Each store gets one sluice.save of a --state-mib state (waited for), as a
test suite or a job that checkpoints into many directories does. Prints the
process's resident memory (VmRSS) before the first save, after the first and
after the last, the staging pool's size, and the stall of the first save
into the first store against the median of the first saves into the others
(a new store must not fault the staging memory in again). One JSON line.
"""
import argparse
import json
import os
import shutil
import statistics
import sys


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stores", type=int, default=50)
    ap.add_argument("--state-mib", type=int, default=64)
    ap.add_argument("--staging-mib", type=int, default=1024)
    ap.add_argument("--dir", default="/tmp/sluice-staging-bench")
    args = ap.parse_args()
    import torch
    import sluice
    sluice.configure(staging_bytes=args.staging_mib << 20)
    state = {"w": torch.randn(args.state_mib << 18)}  # 4-byte floats
    shutil.rmtree(args.dir, ignore_errors=True)
    before = rss_bytes()
    stalls, rss = [], []
    for k in range(args.stores):
        h = sluice.save(os.path.join(args.dir, f"store{k}"), "m", 1, state)
        h.wait()
        stalls.append(h.stall_seconds)
        rss.append(rss_bytes())
    report = {
        "stores": args.stores, "state_bytes": args.state_mib << 20,
        "staging_pool_bytes": sluice.staging()["bytes"],
        "rss_before_bytes": before, "rss_after_first_bytes": rss[0], "rss_after_last_bytes": rss[-1],
        "rss_max_bytes": max(rss),
        "first_store_stall_s": stalls[0],
        "other_stores_stall_median_s": statistics.median(stalls[1:]) if len(stalls) > 1 else None,
    }
    sluice.close()
    shutil.rmtree(args.dir, ignore_errors=True)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
