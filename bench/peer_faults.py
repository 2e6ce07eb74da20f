"""Peer replicas under host loss: trials that kill one fake host at a random
moment (during a save, a replication, a drain, or a restore), destroy its
tier 0, bring up a replacement and resume, then check what the resume read.

    PYTHONPATH=build/python .venv/bin/python bench/peer_faults.py [--trials 40] [--hosts 3] [--seed 1]

Each trial runs `--hosts` ranks over gloo, each a host of its own
($SLUICE_HOST, one tier 0 directory each, tier 1 shared), with
peer_replicas=1. The ranks save steps 1, 2, ... with dcp.save
(complete_on="safe"), rank r's tensor holding step * 10 + r, and note each
step once it is safe. At a random moment one host is killed (SIGKILL) and
its tier 0 removed; the others are killed a moment later (their job fails,
as torchrun would fail it). Then the job restarts, the lost host's
replacement with an empty tier 0, and loads the latest step; in a quarter
of the trials a host is killed during that restore as well, and the job
restarts once more. A trial passes when:
  - every rank loaded the same step, holding exactly step * 10 + rank;
  - that step is no older than the newest step any rank noted safe before
    the kill (a safe step survives the loss of any one host);
  - or no step was saved yet, and the load says so.
Prints one line per trial and a summary; exits 1 if any trial failed.
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

N = 1 << 16  # float32 per rank: 256 KiB


def worker(args):
    import torch
    import torch.distributed as dist
    import sluice
    from sluice.torch import StorageReader, StorageWriter, dcp
    rank = args.worker
    os.environ["SLUICE_HOST"] = f"h{rank}"
    dist.init_process_group("gloo", init_method=f"file://{args.init}", rank=rank, world_size=args.hosts)
    sluice.configure(tier0_per_host=True, peer_replicas=1, peer_timeout_seconds=10,
                     staging_bytes=64 << 20, rank_timeout_ms=10_000)
    tiers = [os.path.join(args.dir, f"h{rank}"), os.path.join(args.dir, "shared")]
    if args.mode == "save":
        for step in range(args.first, args.first + 1000):
            state = {f"w{rank}": torch.full((N,), float(step * 10 + rank))}
            writer = StorageWriter(tiers, "job", step, complete_on="safe")
            dcp.save(state, storage_writer=writer)
            with open(os.path.join(args.dir, f"safe-{rank}"), "a") as f:
                f.write(f"{step}\n")
    else:
        state = {f"w{rank}": torch.zeros(N)}
        reader = StorageReader(tiers, "job")
        try:
            dcp.load(state, storage_reader=reader)
        except Exception as e:  # noqa: BLE001 - reported
            print(json.dumps({"rank": rank, "error": f"{type(e).__name__}: {str(e)[:300]}"}), flush=True)
            sys.exit(3)
        values = set(state[f"w{rank}"].tolist())
        print(json.dumps({"rank": rank, "values": sorted(values)[:3]}), flush=True)
    dist.destroy_process_group()
    sluice.close()


def start(args, mode, tag, first=1):
    init = os.path.join(args.dir, f"init-{tag}-{time.monotonic_ns()}")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return [subprocess.Popen([sys.executable, __file__, "--worker", str(r), "--mode", mode, "--init", init,
                              "--hosts", str(args.hosts), "--dir", args.dir, "--first", str(first)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             start_new_session=True)
            for r in range(args.hosts)]


def kill_host(args, procs, victim, wipe=True):
    os.killpg(procs[victim].pid, signal.SIGKILL)
    if wipe:
        shutil.rmtree(os.path.join(args.dir, f"h{victim}"), ignore_errors=True)


def kill_all(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in procs:
        p.communicate()


def noted_safe(args):
    best = 0
    for r in range(args.hosts):
        try:
            with open(os.path.join(args.dir, f"safe-{r}")) as f:
                steps = [int(x) for x in f.read().split()]
            best = max([best] + steps)
        except FileNotFoundError:
            pass
    return best


def load(args, tag, rng, kill_during):
    procs = start(args, "load", tag)
    if kill_during:
        time.sleep(rng.uniform(0.5, 4.0))
        victim = rng.randrange(args.hosts)
        if procs[victim].poll() is None:
            kill_host(args, procs, victim)
            time.sleep(0.5)
            kill_all(procs)
            return None, f"killed h{victim} during the restore"
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            kill_all(procs)
            return [], "a restore hung"
        lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        results.append((p.returncode, lines[-1] if lines else {"error": err[-300:]}))
    return results, ""


def trial(args, k, rng):
    for d in os.listdir(args.dir):
        shutil.rmtree(os.path.join(args.dir, d), ignore_errors=True) if os.path.isdir(
            os.path.join(args.dir, d)) else os.remove(os.path.join(args.dir, d))
    procs = start(args, "save", f"{k}-save")
    time.sleep(rng.uniform(4.0, 12.0))
    victim = rng.randrange(args.hosts)
    safe_before = noted_safe(args)
    kill_host(args, procs, victim)
    time.sleep(rng.uniform(0.0, 1.0))
    kill_all(procs)
    notes = [f"killed h{victim} after step {safe_before} was safe"]
    results, why = load(args, f"{k}-load", rng, kill_during=rng.random() < 0.25)
    if results is None:
        notes.append(why)
        results, why = load(args, f"{k}-load2", rng, kill_during=False)
    if why:
        return False, notes + [why]
    errors = [r.get("error") for _, r in results if "error" in r]
    if errors:
        if safe_before == 0 and all("no committed" in e or "NotFound" in e for e in errors):
            return True, notes + ["nothing was saved yet: the load says so"]
        return False, notes + errors[:2]
    steps = set()
    for rank, (_, r) in enumerate(results):
        vals = r["values"]
        if len(vals) != 1 or (vals[0] - rank) % 10 != 0:
            return False, notes + [f"rank {rank} read {vals}: not one step's bytes"]
        steps.add(int(vals[0] - rank) // 10)
    if len(steps) != 1:
        return False, notes + [f"ranks loaded different steps {sorted(steps)}"]
    step = steps.pop()
    if step < safe_before:
        return False, notes + [f"loaded step {step}, older than the safe step {safe_before}"]
    return True, notes + [f"loaded step {step}"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--init", help=argparse.SUPPRESS)
    ap.add_argument("--first", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        return worker(args)
    own = args.dir is None
    args.dir = args.dir or tempfile.mkdtemp(prefix="sluice-peer-faults-")
    rng = random.Random(args.seed)
    failed = 0
    try:
        for k in range(args.trials):
            ok, notes = trial(args, k, rng)
            failed += not ok
            print(f"trial {k + 1}: {'ok' if ok else 'FAILED'}: " + "; ".join(notes), flush=True)
    finally:
        if own:
            shutil.rmtree(args.dir, ignore_errors=True)
    print(f"{args.trials - failed} of {args.trials} trials ok")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
