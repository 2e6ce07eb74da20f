"""Peer replicas: the link training keeps while a replication runs, against
link - peer_rate_limit.

    PYTHONPATH=build/python .venv/bin/python bench/peer_link_share.py \\
        --testbed scripts/testbed --link-mbit 200 --cap-mbit 100 --mib 256 --rounds 3

On the test bed (as root, `scripts/testbed up` done): rank r runs on
compute host c<r+1>, each link capped at --link-mbit both ways, tier 0 the
host's NVMe directory and no shared tier (so no drain shares the link:
only the replication and the training). Each rank runs a stand-in for
training traffic on a gloo group of its own: ring exchanges of 4 MiB with
its neighbours (send to rank+1, receive from rank-1), as a ring all-reduce
moves its bytes, back to back, counting the bytes it receives. Two
seconds in, the job saves --mib MiB per host with dcp.async_save. Rounds
alternate peers on (peer_replicas=1, peer_rate_limit = --cap-mbit) and off.

Per round: training's receive rate from the save's start to the step being
safe (peers on), or over as long a window (peers off), median over ranks.
Printed: that rate with peers / (link - cap), and without peers / link
(what training gets of an idle link here: the shaping and TCP's share).
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testbed_ranks import CappedLinks, nvme, run_ranks  # noqa: E402

PIECE = 4 << 20


def worker(args):
    import torch
    import torch.distributed as dist
    import sluice
    from sluice.torch import StorageWriter, async_save
    rank, world = args.worker, args.hosts
    os.environ.setdefault("SLUICE_HOST", f"h{rank}")
    dist.init_process_group("gloo", init_method=f"file://{args.init}", rank=rank, world_size=world)
    train = dist.new_group(backend="gloo")
    sluice.configure(tier0_per_host=True, peer_replicas=1 if args.peers else 0,
                     peer_rate_limit=int(args.cap_mbit * 1e6 / 8), staging_bytes=(args.mib + 64) << 20,
                     peer_timeout_seconds=600)
    tiers = [args.tier0 or os.path.join(args.dir, f"h{rank}")]
    state = {f"w{rank}": torch.full((args.mib << 18,), float(rank))}
    received = []  # (time, bytes) per exchange
    stop = threading.Event()

    def training():
        out, into = torch.ones(PIECE, dtype=torch.uint8), torch.empty(PIECE, dtype=torch.uint8)
        while True:
            go = torch.tensor([0 if stop.is_set() else 1])
            dist.all_reduce(go, op=dist.ReduceOp.MIN, group=train)  # every rank stops at the same exchange
            if not go.item():
                return
            work = dist.isend(out, (rank + 1) % world, group=train)
            dist.recv(into, (rank - 1) % world, group=train)
            work.wait()
            received.append((time.monotonic(), PIECE))

    thread = threading.Thread(target=training)
    thread.start()
    time.sleep(2)
    start = time.monotonic()
    if args.peers:
        writer = StorageWriter(tiers, args.name, 1, complete_on="safe")
        async_save(state, storage_writer=writer).result()
        writer.handle.wait_safe()
        end = time.monotonic()
    else:
        end = start + args.window
        time.sleep(args.window)
    stop.set()
    thread.join()
    moved = sum(n for t, n in received if start <= t <= end)
    rate = moved / (end - start)
    out = [None] * world
    dist.all_gather_object(out, (rate, end - start))
    if rank == 0:
        print(json.dumps(out))
    dist.destroy_process_group()
    sluice.close()


def tier0(args, r):
    return os.path.join(nvme(args.testbed, r), "peer-link-share") if args.testbed else os.path.join(args.dir, f"h{r}")


def run_round(args, peers, k, window):
    init = os.path.join(args.dir, f"init-{k}")

    def command_of(r):
        return (["--worker", str(r), "--init", init, "--hosts", str(args.hosts), "--mib", str(args.mib),
                 "--cap-mbit", str(args.cap_mbit), "--dir", args.dir, "--window", str(window), "--name", args.name,
                 "--tier0", tier0(args, r)] + (["--peers"] if peers else []))
    out = run_ranks(__file__, args.hosts, command_of, args.testbed)
    for r in range(args.hosts):
        shutil.rmtree(tier0(args, r), ignore_errors=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--mib", type=int, default=256, help="MiB per host")
    ap.add_argument("--cap-mbit", type=float, default=100, help="peer_rate_limit, in Mbit/s")
    ap.add_argument("--link-mbit", type=float, default=200, help="with --testbed: each compute host's link")
    ap.add_argument("--rounds", type=int, default=3, help="rounds with peers (as many without)")
    ap.add_argument("--testbed", default=None, help="scripts/testbed: run on its compute hosts c1..")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--name", default=f"share-{os.getpid()}", help=argparse.SUPPRESS)
    ap.add_argument("--tier0", help=argparse.SUPPRESS)
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--init", help=argparse.SUPPRESS)
    ap.add_argument("--window", type=float, default=10, help=argparse.SUPPRESS)
    ap.add_argument("--peers", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        return worker(args)
    own_dir = args.dir is None
    args.dir = args.dir or tempfile.mkdtemp(prefix="sluice-peer-link-")
    link = args.link_mbit * 1e6 / 8
    cap = args.cap_mbit * 1e6 / 8
    window = (args.mib << 20) / cap  # as long as a replication at the cap
    rows = []
    with CappedLinks(args.testbed, args.hosts, args.link_mbit):
        k = 0
        for i in range(args.rounds):
            for peers in ((True, False) if i % 2 == 0 else (False, True)):
                ranks = run_round(args, peers, k, window)
                k += 1
                row = {"peers": peers, "training_mb_per_s": round(statistics.median(r[0] for r in ranks) / 1e6, 2),
                       "window_s": round(statistics.median(r[1] for r in ranks), 2)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if own_dir:
        shutil.rmtree(args.dir, ignore_errors=True)
    on = statistics.median(r["training_mb_per_s"] for r in rows if r["peers"]) * 1e6
    off = statistics.median(r["training_mb_per_s"] for r in rows if not r["peers"]) * 1e6
    print(json.dumps({
        "hosts": args.hosts, "mib_per_host": args.mib, "rounds": args.rounds, "link_mbit": args.link_mbit,
        "cap_mbit": args.cap_mbit, "training_mb_per_s_during_replication": round(on / 1e6, 2),
        "training_mb_per_s_idle_link": round(off / 1e6, 2),
        "during_replication_over_link_minus_cap": round(on / (link - cap), 3) if args.testbed else None,
        "idle_over_link": round(off / link, 3) if args.testbed else None,
    }))


if __name__ == "__main__":
    main()
