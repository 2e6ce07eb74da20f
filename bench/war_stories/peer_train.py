"""One rank of the peer-replica war story (peer_host_lost.sh): a gloo job
whose ranks each run on a test bed compute host, training in fixed-time
steps (compute, then an all-reduce over the job's own gloo group), with a
DCP async_save every --every steps to [the host's NVMe, RADOS] through
sluice, peer replicas on or off.

With --resume it first loads the newest step the job can (sluice's
StorageReader, "latest": safe or durable) and says which. Every step it
reached is appended to --progress (one line per step: the step, wall time),
so that a driver that kills its host knows how far it got. Ends by printing
one JSON line: resumed step, seconds the load took, saves and their stalls.

    peer_train.py --rank R --world W --init FILE --tier0 DIR --tier1 URI \\
        --name NAME --progress FILE [--peers] [--resume] [--steps N]
"""

import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import sluice
from sluice.torch import StorageReader, StorageWriter, async_save, dcp


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--init", required=True, help="file for the gloo world's rendezvous")
    ap.add_argument("--tier0", required=True)
    ap.add_argument("--tier1", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--progress", required=True)
    ap.add_argument("--peers", action="store_true")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--every", type=int, default=10, help="checkpoint every N steps")
    ap.add_argument("--step-ms", type=float, default=900, help="compute time of one step")
    ap.add_argument("--state-mib", type=int, default=256, help="per rank")
    ap.add_argument("--drain-mbit", type=float, default=100, help="this host's share of the durable tier")
    ap.add_argument("--peer-mbit", type=float, default=500, help="peer_rate_limit")
    args = ap.parse_args()

    os.environ["SLUICE_HOST"] = os.environ.get("SLUICE_TESTBED_HOST", f"h{args.rank}")
    # A lost peer fails the job's collectives in 20 s, not gloo's 30 minutes.
    dist.init_process_group("gloo", init_method=f"file://{args.init}", rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=20))
    sluice.configure(tier0_per_host=True, peer_replicas=1 if args.peers else 0,
                     peer_rate_limit=int(args.peer_mbit * 1e6 / 8), peer_timeout_seconds=20,
                     rate_bytes_per_sec=[0, int(args.drain_mbit * 1e6 / 8)], keep_last=[2, 2],
                     staging_bytes=(2 * args.state_mib + 64) << 20)
    store = [args.tier0, args.tier1]
    # A key of its own per rank: DCP saves one copy of a key every rank has.
    weights = f"w{args.rank}"
    state = {weights: torch.zeros(args.state_mib << 18), "step": torch.zeros(1, dtype=torch.int64)}
    start_step, load_seconds = 0, 0.0
    if args.resume:
        t0 = time.monotonic()
        reader = StorageReader(store, args.name, "latest")
        try:
            dcp.load(state, storage_reader=reader)
        except Exception as e:  # noqa: BLE001 - DCP wraps every rank's error
            if "no committed checkpoint" not in str(e):
                raise
            print(f"rank {args.rank}: no checkpoint to resume from: starting over", file=sys.stderr)
        else:
            start_step = int(state["step"].item())
            assert reader._reader.info["step"] == start_step, (reader._reader.info["step"], start_step)
            assert torch.all(state[weights] == float(start_step * args.world + args.rank)), "wrong bytes"
        load_seconds = time.monotonic() - t0
    grads = torch.ones(1 << 18)
    saves, futures = [], []
    with open(args.progress, "a") as progress:
        for step in range(start_step + 1, start_step + 1 + args.steps):
            time.sleep(args.step_ms / 1000)
            dist.all_reduce(grads)  # the job's own traffic
            state[weights].fill_(float(step * args.world + args.rank))
            state["step"].fill_(step)
            progress.write(f"{step} {time.time():.3f}\n")
            progress.flush()
            if step % args.every == 0:
                t0 = time.monotonic()
                futures.append(async_save(state, storage_writer=StorageWriter(store, args.name, step)))
                saves.append({"step": step, "stall": time.monotonic() - t0})
    for f in futures:
        f.result()
    print(json.dumps({"rank": args.rank, "resumed_step": start_step, "load_seconds": load_seconds,
                      "saves": saves}))
    dist.destroy_process_group()
    sluice.close()


if __name__ == "__main__":
    main()
