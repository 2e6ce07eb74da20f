"""Peer replicas: how fast a replacement host's ranks load a step from its
peers, against its link rate.

    PYTHONPATH=build/python .venv/bin/python bench/peer_restore_bench.py \\
        --testbed scripts/testbed [--link-mbit 1000] [--hosts 4] [--mib 1024] [--rounds 5]

On the test bed (as root, `scripts/testbed up` done): rank r runs on
compute host c<r+1> (gloo over its eth0), each host's link capped at
--link-mbit both ways, tier 0 its NVMe directory and no shared tier, so
the step is only safe (peer_replicas=1): a restore can read it only from
peers. Each round saves one step of --mib MiB per host, then loads it with
every rank (DCP, `latest`), in rounds alternating:
- lost: the last host's tier 0 is wiped first (a replacement host), so its
  rank gets its part from the peer that holds the replica;
- intact: every host reads its own tier 0.
The figure is the replacement rank's load seconds (StorageReader made to
dcp.load's return, every byte checked after), as a rate: part bytes /
seconds, over the link rate. Without --testbed the hosts are fake (one
machine, loopback, no cap): the rate is printed, not a ratio.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testbed_ranks import CappedLinks, nvme, run_ranks  # noqa: E402


def worker(args):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import sluice
    from sluice.torch import StorageReader, StorageWriter
    rank = args.worker
    os.environ.setdefault("SLUICE_HOST", f"h{rank}")
    dist.init_process_group("gloo", init_method=f"file://{args.init}", rank=rank, world_size=args.hosts)
    sluice.configure(tier0_per_host=True, peer_replicas=1, peer_rate_limit=0,
                     staging_bytes=(args.mib + 64) << 20, peer_timeout_seconds=600)
    tiers = [args.tier0 or os.path.join(args.dir, f"h{rank}")]
    key = f"w{rank}"  # a key of its own per rank: DCP saves one copy of a key every rank has
    if args.mode == "save":
        state = {key: torch.full((args.mib << 18,), float(rank + args.step))}
        dcp.save(state, storage_writer=StorageWriter(tiers, args.name, args.step, complete_on="safe"))
        seconds = None
    else:
        state = {key: torch.empty(args.mib << 18)}
        dist.barrier()
        t0 = time.monotonic()
        dcp.load(state, storage_reader=StorageReader(tiers, args.name, "latest"))
        seconds = time.monotonic() - t0
        if not torch.equal(state[key], torch.full_like(state[key], float(rank + args.step))):
            raise SystemExit(f"rank {rank}: wrong bytes after the load")
    out = [None] * args.hosts
    dist.all_gather_object(out, seconds)
    if rank == 0:
        print(json.dumps(out))
    dist.destroy_process_group()
    sluice.close()


def tier0(args, r):
    return os.path.join(nvme(args.testbed, r), "peer-restore-bench") if args.testbed else os.path.join(args.dir, f"h{r}")


def run_world(args, mode, step):
    init = os.path.join(args.dir, f"init-{mode}-{step}")

    def command_of(r):
        return (["--worker", str(r), "--mode", mode, "--init", init, "--hosts", str(args.hosts), "--mib",
                 str(args.mib), "--dir", args.dir, "--step", str(step), "--name", args.name]
                + (["--tier0", tier0(args, r)] if args.testbed else []))
    return run_ranks(__file__, args.hosts, command_of, args.testbed, f"a rank ({mode})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--mib", type=int, default=1024, help="MiB per host")
    ap.add_argument("--rounds", type=int, default=5, help="rounds with a lost host (as many intact)")
    ap.add_argument("--testbed", default=None, help="scripts/testbed: run on its compute hosts c1..")
    ap.add_argument("--link-mbit", type=float, default=1000, help="with --testbed: each compute host's link")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--name", default=f"restore-{os.getpid()}", help=argparse.SUPPRESS)
    ap.add_argument("--tier0", help=argparse.SUPPRESS)
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("save", "load"), help=argparse.SUPPRESS)
    ap.add_argument("--init", help=argparse.SUPPRESS)
    ap.add_argument("--step", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        return worker(args)
    own_dir = args.dir is None
    args.dir = args.dir or tempfile.mkdtemp(prefix="sluice-peer-restore-")
    last = args.hosts - 1
    rows = []
    with CappedLinks(args.testbed, args.hosts, args.link_mbit):
        step = 1
        for k in range(args.rounds):
            for lost in ((True, False) if k % 2 == 0 else (False, True)):
                run_world(args, "save", step)
                if lost:
                    shutil.rmtree(tier0(args, last))
                seconds = run_world(args, "load", step)
                row = {"lost": lost, "replacement_s": seconds[last], "survivors_s": statistics.median(seconds[:last])}
                rows.append(row)
                print(json.dumps(row), flush=True)
                for r in range(args.hosts):
                    shutil.rmtree(tier0(args, r), ignore_errors=True)  # rounds stay alike
                step += 1
    if own_dir:
        shutil.rmtree(args.dir, ignore_errors=True)
    lost = statistics.median(r["replacement_s"] for r in rows if r["lost"])
    intact = statistics.median(r["replacement_s"] for r in rows if not r["lost"])
    rate = (args.mib << 20) / lost
    link = args.link_mbit * 1e6 / 8 if args.testbed else None
    print(json.dumps({
        "hosts": args.hosts, "mib_per_host": args.mib, "rounds": args.rounds,
        "testbed_link_mbit": args.link_mbit if args.testbed else None,
        "median_load_s_replacement": round(lost, 3), "median_load_s_intact": round(intact, 3),
        "replacement_mb_per_s": round(rate / 1e6, 1),
        "replacement_rate_over_link": round(rate / link, 3) if link else None,
    }))


if __name__ == "__main__":
    main()
