#!/usr/bin/env python3
"""One host's part of bench/planner_validation.py: saves a state of MIB MiB
(random float32, in memory) with sluice.save to [NVME, RADOS] and prints
its stall and each tier's time to durable as JSON.

    PYTHONPATH=build/python python3 bench/planner_save.py NVME RADOS_URI NAME STEP MIB [--drain-cap RATE] [--keep] [--at T]
        [--every SECONDS --count K]

The checkpoint is removed from both tiers afterwards unless --keep. --at T
(a Unix time): the save starts then, after the state and the pipeline are
ready, so that the saves of several hosts start together. --every/--count:
K saves (steps STEP..) SECONDS apart instead, printing the backlog each
found on tier 1 (steps due there, and superseded so far).
"""
import json
import sys
import time

import torch

import sluice


def main():
    nvme, rados, name, step, mib = sys.argv[1:6]
    rest = sys.argv[6:]
    state = {"state": torch.rand(int(mib) << 18)}  # MIB MiB of float32
    options = {"staging_bytes": (int(mib) + 64) << 20}
    if "--drain-cap" in rest:
        options["rate_bytes_per_sec"] = [0, int(rest[rest.index("--drain-cap") + 1])]
    sluice.configure(**options)
    store = [nvme, rados]
    sluice.pipeline(store)  # the arena is made and faulted in before the save, as in training
    if "--at" in rest:
        time.sleep(max(0.0, float(rest[rest.index("--at") + 1]) - time.time()))
    if "--every" in rest:  # K saves, SECONDS apart: the backlog each one finds on tier 1
        every = float(rest[rest.index("--every") + 1])
        count = int(rest[rest.index("--count") + 1])
        backlog, handles = [], []
        for k in range(count):
            started = time.time()
            handles.append(sluice.save(store, name, int(step) + k, state, incremental=False))
            tier1 = handles[-1].backlog()[1]
            backlog.append({"steps": tier1["steps"], "superseded": tier1["superseded"]})
            if k + 1 < count:
                time.sleep(max(0.0, started + every - time.time()))
        for h in handles:
            try:
                h.wait()
            except sluice.UnavailableError:  # superseded on tier 1 by a newer step
                pass
        print(json.dumps({"backlog": backlog}))
        sluice.close()
        return
    handle = sluice.save(store, name, int(step), state, incremental=False)
    handle.wait()
    progress = handle.progress()
    out = {"stall_seconds": handle.stall_seconds,
           "tiers": [{"uri": p["uri"], "durable_seconds": p["durable_seconds"]} for p in progress]}
    if "--keep" not in rest:
        sluice.remove(store, name, int(step))
    sluice.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
