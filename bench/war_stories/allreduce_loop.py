"""Training traffic stand-in for the network war story: two ranks over
torch.distributed (gloo, TCP) alternate a fixed compute time with an
all-reduce of a float32 tensor, and rank 0 prints one JSON object with each
all-reduce's wall time and when it started (seconds since the loop began).

    python3 allreduce_loop.py --rank R --master 10.99.0.11 [--mib 2] [--iters 60] [--compute-ms 100]
"""

import argparse
import json
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--master", required=True, help="rank 0's address")
    ap.add_argument("--port", type=int, default=29511)
    ap.add_argument("--mib", type=float, default=2, help="all-reduce size")
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--compute-ms", type=float, default=100)
    ap.add_argument("--start-at", type=float, default=0,
                    help="a time.time() to start the loop at (both ranks the same), 0: at once")
    args = ap.parse_args()
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}:{args.port}", rank=args.rank,
                            world_size=args.world)
    x = torch.ones(int(args.mib * (1 << 18)))
    dist.all_reduce(x)  # connections up before timing
    dist.barrier()
    if args.start_at:
        time.sleep(max(0.0, args.start_at - time.time()))
    times, starts = [], []
    t_loop = time.monotonic()
    for _ in range(args.iters):
        time.sleep(args.compute_ms / 1000)
        t0 = time.monotonic()
        dist.all_reduce(x)
        times.append(time.monotonic() - t0)
        starts.append(t0 - t_loop)
    if args.rank == 0:
        print(json.dumps({"mib": args.mib, "compute_ms": args.compute_ms, "times": times, "starts": starts}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
