"""Peer replicas: time until safe against the peer cap, time until durable,
and the trainer's stall with peers on and off, on fake hosts of one machine
(each rank its own $SLUICE_HOST and tier 0 directory; tier 1 shared).

    PYTHONPATH=build/python .venv/bin/python bench/peer_bench.py \\
        [--hosts 4] [--mib 256] [--cap-mbit 200] [--rounds 5] [--dir /tmp/sluice-peer-bench]

Each round starts `--hosts` fresh processes (a gloo world) that save one
step of `--mib` MiB per host with dcp.async_save `--saves` times (the
first save, which also sets the process up, is left out), rounds alternating peers
on (peer_replicas=1, peer_rate_limit = the cap) and off. Per round: the
stall (async_save's return), the time until safe (async_save to the peer
commit in 2 domains) and until durable (the shared tier's commit), medians
over ranks. The ceiling of time until safe is part bytes / cap (every host
sends its part at once, each capped); the figure printed is the median of
safe / ceiling over the peer rounds, and the median stall with peers over
the median stall without. The links here are loopback: the cap is what
binds, as `peer_rate_limit` binds a real host's link share.

On the test bed (`--testbed scripts/testbed --link-mbit 1000`, as root, with
`scripts/testbed up` done): rank r runs on compute host c<r+1> (gloo over
its eth0), tier 0 is that host's NVMe directory and tier 1 the test bed's
RADOS pool; every compute host's link is capped at --link-mbit both ways,
and the link is split between the peer cap (--cap-mbit) and the drain's
cap (the rest), as doc/peer.md says to. The ceiling of time until safe is
then part bytes / min(link, cap).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testbed_ranks import CappedLinks, nvme, run_ranks  # noqa: E402


def worker(args):
    import torch
    import torch.distributed as dist
    import sluice
    from sluice.torch import StorageWriter, async_save
    rank = args.worker
    os.environ["SLUICE_HOST"] = f"h{rank}"
    dist.init_process_group("gloo", init_method=f"file://{args.init}", rank=rank, world_size=args.hosts)
    peers = args.peers
    sluice.configure(tier0_per_host=True, peer_replicas=1 if peers else 0,
                     peer_rate_limit=int(args.cap_mbit * 1e6 / 8) if peers else 0,
                     staging_bytes=(args.mib + 64) << 20, peer_timeout_seconds=600)
    tiers = [os.path.join(args.dir, f"h{rank}"), os.path.join(args.dir, "shared")]
    if args.tier0:
        # The test bed: this host's NVMe, the RADOS pool; the link split
        # between the peer cap and the drain's; old steps off the pool.
        tiers = [args.tier0, args.tier1]
        drain = max(args.link_mbit - (args.cap_mbit if peers else 0), args.link_mbit / 10)
        sluice.configure(rate_bytes_per_sec=[0, int(drain * 1e6 / 8)], keep_last=[1, 1])
    # A key of its own per rank: DCP saves one copy of a key every rank has.
    state = {f"w{rank}": torch.full((args.mib << 18,), float(rank))}
    sluice.pipeline(tiers)
    results = []
    for k in range(args.saves):
        dist.barrier()
        t0 = time.monotonic()
        writer = StorageWriter(tiers, args.name, args.step * 100 + k)
        future = async_save(state, storage_writer=writer)
        stall = time.monotonic() - t0
        future.result()
        writer.handle.wait()
        safe = writer.handle.wait_safe()._peer.safe_seconds if peers else None
        # Seconds from the save's start to the shared tier's commit.
        durable = writer.handle.progress()[1]["durable_seconds"]
        results.append({"stall": stall, "safe": safe, "durable": durable})
        state[f"w{rank}"].add_(1)
    # The first save also sets up the process (its pipeline's arena is made
    # before; the peer group is made at the first save): a trainer saves
    # many times, so the figures are the later saves'.
    later = results[1:] or results
    mine = {key: (statistics.median(r[key] for r in later) if later[0][key] is not None else None)
            for key in ("stall", "safe", "durable")}
    out = [None] * args.hosts
    dist.all_gather_object(out, mine)
    if rank == 0:
        print(json.dumps(out))
    dist.destroy_process_group()
    sluice.close()


def run_round(args, peers, step):
    init = os.path.join(args.dir, f"init-{step}")

    def command_of(r):
        cmd = ["--worker", str(r), "--init", init, "--hosts", str(args.hosts), "--mib", str(args.mib),
               "--cap-mbit", str(args.cap_mbit), "--dir", args.dir, "--saves", str(args.saves), "--step", str(step),
               "--name", args.name] + (["--peers"] if peers else [])
        if args.testbed:
            cmd += ["--tier0", os.path.join(nvme(args.testbed, r), "peer-bench"), "--tier1", "TESTBED_RADOS",
                    "--link-mbit", str(args.link_mbit)]
        return cmd
    return run_ranks(__file__, args.hosts, command_of, args.testbed)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--mib", type=int, default=256, help="MiB per host")
    ap.add_argument("--cap-mbit", type=float, default=200, help="peer_rate_limit, in Mbit/s")
    ap.add_argument("--rounds", type=int, default=5, help="rounds with peers (as many without)")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--saves", type=int, default=3, help="saves per round (the first one's figures are left out)")
    ap.add_argument("--testbed", default=None, help="scripts/testbed: run on its compute hosts c1..")
    ap.add_argument("--link-mbit", type=float, default=1000, help="with --testbed: each compute host's link")
    ap.add_argument("--name", default=f"bench-{os.getpid()}", help=argparse.SUPPRESS)
    ap.add_argument("--tier0", help=argparse.SUPPRESS)
    ap.add_argument("--tier1", help=argparse.SUPPRESS)
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--init", help=argparse.SUPPRESS)
    ap.add_argument("--step", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--peers", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        if args.tier1 == "TESTBED_RADOS":
            args.tier1 = os.environ["SLUICE_TESTBED_RADOS_URI"]
        return worker(args)
    own_dir = args.dir is None
    args.dir = args.dir or tempfile.mkdtemp(prefix="sluice-peer-bench-")
    rate = min(args.cap_mbit, args.link_mbit) if args.testbed else args.cap_mbit
    ceiling = (args.mib << 20) / (rate * 1e6 / 8)
    rows = []
    try:
        with CappedLinks(args.testbed, args.hosts, args.link_mbit):
            step = 1
            for r in range(args.rounds):
                for peers in ((True, False) if r % 2 == 0 else (False, True)):
                    ranks = run_round(args, peers, step)
                    step += 1
                    row = {"peers": peers,
                           "stall": statistics.median(x["stall"] for x in ranks),
                           "durable": statistics.median(x["durable"] for x in ranks),
                           "safe": statistics.median(x["safe"] for x in ranks) if peers else None}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    # Each round's steps off the disk: rounds stay alike.
                    for d in os.listdir(args.dir):
                        if d.startswith("h") or d == "shared":
                            shutil.rmtree(os.path.join(args.dir, d), ignore_errors=True)
                    for h in range(args.hosts if args.testbed else 0):
                        shutil.rmtree(os.path.join(nvme(args.testbed, h), "peer-bench"), ignore_errors=True)
    finally:
        if args.testbed:
            # The run's steps off the pool: the test bed's OSDs are small.
            sluice_bin = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "sluice")
            subprocess.run([args.testbed, "exec", "c1", "sh", "-c", f'{sluice_bin} rm --store '
                            f'"$SLUICE_TESTBED_RADOS_URI" --name {args.name} --all-steps'], check=False,
                           capture_output=True)
        if own_dir:
            shutil.rmtree(args.dir, ignore_errors=True)
    on = [r for r in rows if r["peers"]]
    off = [r for r in rows if not r["peers"]]
    safe = statistics.median(r["safe"] for r in on)
    print(json.dumps({
        "hosts": args.hosts, "mib_per_host": args.mib, "cap_mbit": args.cap_mbit, "rounds": args.rounds,
        "testbed_link_mbit": args.link_mbit if args.testbed else None,
        "ceiling_safe_s": round(ceiling, 3), "median_safe_s": round(safe, 3),
        "safe_over_ceiling": round(safe / ceiling, 3),
        "median_durable_s_with_peers": round(statistics.median(r["durable"] for r in on), 3),
        "median_durable_s_without": round(statistics.median(r["durable"] for r in off), 3),
        "stall_with_over_without": round(statistics.median(r["stall"] for r in on) /
                                         statistics.median(r["stall"] for r in off), 3),
    }))


if __name__ == "__main__":
    main()
