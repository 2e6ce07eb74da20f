"""War story 5, a lost host: a compute host dies with its NVMe, and the job
resumes from its peers' replicas, or, without peers, from the durable tier.

    PYTHONPATH=build/python .venv/bin/python bench/war_stories/peer_host_lost.py \\
        [--trials 3] [--out /tmp/sluice-war-peer]          (as root)

On scripts/testbed (4 compute hosts and 3 storage hosts, brought up unless
one is up, taken down again if this started it): every compute host's link
is capped at --link (htb-free tbf, both ways). A gloo job of one rank per
compute host (peer_train.py: 0.9 s steps, an all-reduce each step, a 128 MiB
state per rank (--state-mib), a DCP async_save every 10 steps to [the host's NVMe,
RADOS]; each host's drain capped at --drain-mbit, its share of a durable
tier many hosts share; the peer cap --peer-mbit) runs until, at a random
moment, host c3 is lost (`scripts/testbed lose`: processes killed, NVMe
gone). The survivors' collectives then fail (their gloo timeout is 20 s)
and they are stopped; c3 is replaced by an empty host; every rank restarts
and loads the latest step. Trials alternate peers on and off.

Per trial: the step the job had reached, the step it resumed from (and
whether RADOS held it when the host was lost), the work lost (steps), and
how long the restarted job took to load. Every resume must land on the
newest step that was safe (with peers) or durable (without) when the host
was lost, and every loaded byte is checked by the rank (peer_train.py).
Writes OUT/report.md and OUT/trials.json.
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TB = os.path.join(ROOT, "scripts", "testbed")
SLUICE = os.path.join(ROOT, "build", "sluice")
HOSTS = ["c1", "c2", "c3", "c4"]
LOST = "c3"


def tb(*args, check=True):
    return subprocess.run([TB, *args], capture_output=True, text=True, check=check).stdout


def rados_uri():
    for line in tb("env").splitlines():
        if "SLUICE_TESTBED_RADOS_URI=" in line:
            return line.split("=", 1)[1].strip().strip("'")
    raise SystemExit("peer_host_lost: no RADOS URI in `scripts/testbed env`")


def start_job(args, name, peers, resume, workdir, attempt):
    init = os.path.join(workdir, f"init-{name}-{attempt}")
    procs = []
    for rank, host in enumerate(HOSTS):
        nvme = tb("nvme", host).strip()
        cmd = [TB, "exec", host, "env", "GLOO_SOCKET_IFNAME=eth0", "OMP_NUM_THREADS=1",
               f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}", sys.executable,
               os.path.join(HERE, "peer_train.py"), "--rank", str(rank), "--world", str(len(HOSTS)),
               "--init", init, "--tier0", os.path.join(nvme, "ckpt"), "--tier1", args.rados, "--name", name,
               "--progress", os.path.join(workdir, f"{name}-{rank}.progress"),
               "--drain-mbit", str(args.drain_mbit), "--peer-mbit", str(args.peer_mbit),
               "--state-mib", str(args.state_mib)]
        cmd += (["--peers"] if peers else []) + (["--resume", "--steps", "12"] if resume else [])
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def reached(workdir, name):
    """The newest step every rank reached (the job's progress)."""
    steps = []
    for rank in range(len(HOSTS)):
        path = os.path.join(workdir, f"{name}-{rank}.progress")
        lines = open(path).read().split() if os.path.exists(path) else []
        steps.append(int(lines[-2]) if len(lines) >= 2 else 0)
    return min(steps)


def durable_steps(args, name):
    out = subprocess.run([TB, "exec", "c1", SLUICE, "ls", "--store", args.rados, "--name", name, "--json"],
                         capture_output=True, text=True).stdout
    try:
        return sorted(c["step"] for c in json.loads(out) if c.get("complete"))
    except ValueError:
        return []


def safe_steps(name):
    """Steps a surviving host's tier 0 holds a peer commit of."""
    steps = set()
    for host in HOSTS:
        if host == LOST:
            continue
        root = os.path.join(tb("nvme", host).strip(), "ckpt", "ckpt", name)
        for step in (os.listdir(root) if os.path.isdir(root) else []):
            if os.path.exists(os.path.join(root, step, "parts", "peer.commit")):
                steps.add(int(step))
    return sorted(steps)


def trial(args, k, peers, workdir):
    name = f"war-peer-{os.getpid()}-{k}"
    job = start_job(args, name, peers, False, workdir, 0)
    kill_at = random.uniform(args.kill_after, args.kill_after + 20)
    time.sleep(kill_at)
    at_loss = reached(workdir, name)
    tb("lose", LOST)
    # What the job had, as the host died: RADOS's commits, the survivors' peer commits.
    durable, safe = durable_steps(args, name), safe_steps(name)
    # The survivors' collectives fail within their 20 s gloo timeout; a
    # launcher (torchrun) then restarts the whole job. Those still up at
    # 30 s (gloo may spin on a pair whose peer vanished) are stopped.
    deadline = time.monotonic() + 30
    for p in job:
        try:
            p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
    tb("replace", LOST)
    tb("cap", LOST, args.link)
    t0 = time.monotonic()
    resumed = start_job(args, name, peers, True, workdir, 1)
    outs = [p.communicate(timeout=600) for p in resumed]
    if any(p.returncode != 0 for p in resumed):
        errs = "\n".join(err[-1500:] for _, err in outs)
        raise SystemExit(f"peer_host_lost: the resumed job failed (trial {k}):\n{errs}")
    ranks = [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]
    # The trial's steps off the disks: the test bed's OSDs are small.
    for host in HOSTS:
        shutil.rmtree(os.path.join(tb("nvme", host).strip(), "ckpt"), ignore_errors=True)
    subprocess.run([TB, "exec", "c1", SLUICE, "rm", "--store", args.rados, "--name", name, "--all-steps"],
                   capture_output=True)
    step = ranks[0]["resumed_step"]
    assert all(r["resumed_step"] == step for r in ranks), ranks
    newest = max((safe if peers else []) + durable, default=0)
    return {"trial": k, "peers": peers, "kill_after_s": round(kill_at, 1), "reached": at_loss,
            "durable_at_loss": durable[-1] if durable else None, "safe_at_loss": safe[-1] if safe else None,
            "resumed": step, "expected": newest, "lost_steps": at_loss - step,
            "load_s": round(statistics.median(r["load_seconds"] for r in ranks), 2),
            "resumed_job_s": round(time.monotonic() - t0, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3, help="trials with peers (as many without)")
    ap.add_argument("--out", default="/tmp/sluice-war-peer")
    ap.add_argument("--link", default="1000mbit")
    ap.add_argument("--drain-mbit", type=float, default=100)
    ap.add_argument("--state-mib", type=int, default=128, help="per rank")
    ap.add_argument("--peer-mbit", type=float, default=500)
    ap.add_argument("--kill-after", type=float, default=25, help="the loss comes 0-20 s after this")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    started = subprocess.run([TB, "status"], capture_output=True).returncode != 0
    if started:
        subprocess.run([TB, "up"], check=True, capture_output=True)
    args.rados = rados_uri()
    rows = []
    try:
        for host in HOSTS:
            tb("cap", host, args.link)
        for k in range(args.trials):
            for peers in ((True, False) if k % 2 == 0 else (False, True)):
                row = trial(args, len(rows), peers, args.out)
                rows.append(row)
                print(json.dumps(row), flush=True)
                if row["resumed"] != row["expected"]:
                    print(f"peer_host_lost: trial {row['trial']} resumed at {row['resumed']}, not at the newest "
                          f"{'safe or durable' if peers else 'durable'} step {row['expected']}", file=sys.stderr)
    finally:
        for host in HOSTS:
            tb("uncap", host, check=False)
        if started:
            subprocess.run([TB, "down"], capture_output=True)
    with open(os.path.join(args.out, "trials.json"), "w") as f:
        json.dump(rows, f, indent=1)
    on = [r for r in rows if r["peers"]]
    off = [r for r in rows if not r["peers"]]
    lines = ["# War story 5: a lost host", "",
             f"4 compute hosts, links {args.link}, {args.state_mib} MiB per rank, a save every 10 steps of 0.9 s, "
             f"drain {args.drain_mbit:g} Mbit/s per host, peer cap {args.peer_mbit:g} Mbit/s.", "",
             "| trial | peers | reached | durable at loss | safe at loss | resumed | lost steps | load s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['trial']} | {'on' if r['peers'] else 'off'} | {r['reached']} | {r['durable_at_loss']} | "
                     f"{r['safe_at_loss']} | {r['resumed']} | {r['lost_steps']} | {r['load_s']} |")
    for label, group in (("with peers", on), ("without", off)):
        if group:
            lines.append(f"\nMedian lost steps {label}: {statistics.median(r['lost_steps'] for r in group)}; "
                         f"median load {statistics.median(r['load_s'] for r in group)} s.")
    wrong = [r for r in rows if r["resumed"] != r["expected"]]
    lines.append(f"\nResumes on the newest safe-or-durable step: {len(rows) - len(wrong)}/{len(rows)}.")
    open(os.path.join(args.out, "report.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
