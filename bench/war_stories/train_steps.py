"""A training loop stand-in for the war stories: fixed-time steps (a GPU
trainer waiting on its kernels), a slice of the state changed each step, and
a checkpoint every --every steps through sluice.save, synchronous or async.
Prints one JSON object: every step's wall time, and per save its stall and,
when the loop ended, each tier's state and durable time.

    PYTHONPATH=build/python python3 bench/war_stories/train_steps.py \\
        --tier /nvme/ckpt --tier rados://... --mode async --state-mib 64
"""

import argparse
import json
import time

import torch

import sluice


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tier", action="append", required=True, help="a tier URI, fastest first (repeat)")
    ap.add_argument("--name", default="war")
    ap.add_argument("--mode", choices=("sync", "async"), required=True,
                    help="sync: each save returns once every tier committed; async: after the snapshot")
    ap.add_argument("--state-mib", type=int, default=64)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--every", type=int, default=5, help="checkpoint every N steps")
    ap.add_argument("--step-ms", type=float, default=200, help="compute time of one step")
    ap.add_argument("--backlog-policy", default="coalesce", choices=("coalesce", "drain-every"))
    ap.add_argument("--rate-limit-mib", type=float, default=0,
                    help="cap drains into the last tier at this many MiB/s (0: no cap)")
    ap.add_argument("--object-mib", type=int, default=8,
                    help="data object size: a checkpoint spreads over that many RADOS placement groups")
    args = ap.parse_args()

    sluice.configure(staging_bytes=max(256, 4 * args.state_mib) << 20, backlog_policy=args.backlog_policy,
                     object_bytes=args.object_mib << 20,
                     rate_bytes_per_sec=[0] * (len(args.tier) - 1) + [int(args.rate_limit_mib * (1 << 20))])
    state = {"w": torch.randn(args.state_mib << 18), "step": 0}
    sluice.pipeline(args.tier)  # the arena is made before the loop, as a trainer would
    slice_len = max(1, state["w"].numel() // 50)
    step_times, step_ends, saves = [], [], []
    t_unix = time.time()
    t_loop = time.monotonic()
    for step in range(1, args.steps + 1):
        t0 = time.monotonic()
        deadline = t0 + args.step_ms / 1000
        lo = (step * slice_len) % (state["w"].numel() - slice_len)
        state["w"][lo:lo + slice_len].add_(0.001)  # the step's update
        state["step"] = step
        while time.monotonic() < deadline:  # the GPU's compute
            time.sleep(min(0.005, max(0.0, deadline - time.monotonic())))
        if step % args.every == 0:
            h = sluice.save(args.tier, args.name, step, state, async_=(args.mode == "async"))
            saves.append((step, time.monotonic() - t_loop, h))
        step_times.append(time.monotonic() - t0)
        step_ends.append(time.monotonic() - t_loop)
    loop_seconds = time.monotonic() - t_loop
    out = {"mode": args.mode, "tiers": args.tier, "state_mib": args.state_mib, "step_ms": args.step_ms,
           "every": args.every, "step_times": step_times, "step_ends": step_ends, "loop_start_unix": t_unix,
           "loop_seconds": loop_seconds, "saves": []}
    for step, at, h in saves:
        out["saves"].append({"step": step, "at": at, "stall": h.stall_seconds,
                             "tiers": [{"state": p["state"], "durable_seconds": p["durable_seconds"]}
                                       for p in h.progress()]})
    if saves:
        out["backlog"] = saves[-1][2].backlog()
    print(json.dumps(out))
    sluice.close()


if __name__ == "__main__":
    main()
