#!/usr/bin/env python3
"""Fault injection against scrub across two tiers.

Saves STEPS checkpoints of a random tree to two file tiers, then for each of
TRIALS trials injects one fault at random into one step's copy on one tier
(or, one trial in ten, the same fault into both tiers' copies, so that no
good copy exists): a random bit flip in a data object, a truncated data
object, a deleted data object, a deleted manifest, or the commit record
swapped with another step's. Then:
  1. `sluice scrub --no-repair` must detect it (the copy is not ok);
  2. `sluice restore` over both tiers must return the tree bit-exact or fail,
     never wrong bytes;
  3. `sluice scrub` must repair it where the other tier holds a good copy
     (of each bad object: two copies bad in different objects heal each
     other), and name it unrepairable where not; a final verify of every
     copy must pass wherever it was repaired.
Prints the counts and exits 1 if any target is missed.

usage: bench/scrub_faults.py [--trials 100] [--sluice build/sluice] [--dir /tmp/sluice-faults]
"""
import argparse
import filecmp
import json
import os
import random
import shutil
import subprocess
import sys

KINDS = ["flip", "truncate", "delete_object", "delete_manifest", "swap_commit"]


def run(args, check=False):
    p = subprocess.run(args, capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"failed: {' '.join(args)}: {p.stderr}")
    return p


def step_dir(store, step):
    return os.path.join(store, "ckpt", "f", "%020d" % step)


def files_in(d):
    return sorted(os.path.join(d, f) for f in os.listdir(d)) if os.path.isdir(d) else []


def inject(kind, store, step, steps, rng):
    sd = step_dir(store, step)
    data = files_in(os.path.join(sd, "data"))
    if kind == "flip":
        f = rng.choice(data)
        size = os.path.getsize(f)
        off, bit = rng.randrange(size), 1 << rng.randrange(8)
        with open(f, "r+b") as fh:
            fh.seek(off)
            b = fh.read(1)[0]
            fh.seek(off)
            fh.write(bytes([b ^ bit]))
    elif kind == "truncate":
        f = rng.choice(data)
        os.truncate(f, rng.randrange(os.path.getsize(f)))
    elif kind == "delete_object":
        os.remove(rng.choice(data))
    elif kind == "delete_manifest":
        os.remove(rng.choice(files_in(os.path.join(sd, "manifest"))))
    elif kind == "swap_commit":
        other = rng.choice([s for s in range(1, steps + 1) if s != step])
        shutil.copyfile(os.path.join(step_dir(store, other), "COMMIT"), os.path.join(sd, "COMMIT"))


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--sluice", default=os.path.join(here, "build", "sluice"))
    ap.add_argument("--dir", default="/tmp/sluice-faults")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    shutil.rmtree(a.dir, ignore_errors=True)
    tree, A, B = (os.path.join(a.dir, x) for x in ("tree", "a", "b"))
    os.makedirs(tree)
    for i in range(6):
        with open(os.path.join(tree, f"t{i}.bin"), "wb") as fh:
            fh.write(rng.randbytes(rng.randrange(1, 5 << 20)))
    for s in range(1, a.steps + 1):
        run([a.sluice, "save", "--tier", A, "--tier", B, "--name", "f", "--step", str(s), "--from", tree,
             "--chunk-size", "512KiB", "--object-size", "4MiB"], check=True)
    pristine = {t: t + ".pristine" for t in (A, B)}
    for t, p in pristine.items():
        shutil.copytree(t, p)
    counts = dict(faults=0, detected=0, repairable=0, repaired=0, unrepairable_named=0, both_healed_across=0,
                  wrong_bytes=0, restore_failed=0)
    by_kind = {k: [0, 0] for k in KINDS}
    for trial in range(a.trials):
        kind = rng.choice(KINDS)
        step = rng.randrange(1, a.steps + 1)
        both = rng.random() < 0.1
        tiers = [0, 1] if both else [rng.randrange(2)]
        for t in tiers:
            inject(kind, (A, B)[t], step, a.steps, rng)
        counts["faults"] += 1
        by_kind[kind][0] += 1
        # 1. detection
        p = run([a.sluice, "scrub", "--tier", A, "--tier", B, "--no-repair", "--json"])
        d = json.loads(p.stdout)
        states = {(c["tier"], c["step"]): c["state"] for c in d["copies"]}
        # A copy whose commit record went is not a copy: swap_commit keeps one.
        if all(states.get((t, step), "ok") != "ok" for t in tiers):
            counts["detected"] += 1
            by_kind[kind][1] += 1
        else:
            print(f"trial {trial}: {kind} on tier(s) {tiers} step {step} NOT detected: {states}")
        # 2. no wrong bytes
        out = os.path.join(a.dir, "restored")
        shutil.rmtree(out, ignore_errors=True)
        p = run([a.sluice, "restore", "--tier", A, "--tier", B, "--name", "f", "--step", str(step), "--to", out])
        if p.returncode == 0:
            cmp = filecmp.dircmp(tree, out)
            same = not cmp.diff_files and not cmp.left_only and not cmp.right_only and all(
                filecmp.cmp(os.path.join(tree, f), os.path.join(out, f), shallow=False) for f in cmp.common_files)
            if not same:
                counts["wrong_bytes"] += 1
                print(f"trial {trial}: restore returned WRONG BYTES after {kind} on {tiers} step {step}")
        else:
            counts["restore_failed"] += 1
        # 3. repair, or name
        p = run([a.sluice, "scrub", "--tier", A, "--tier", B, "--json"])
        d = json.loads(p.stdout)
        states = {(c["tier"], c["step"]): c["state"] for c in d["copies"]}
        if both:
            # Bad on both tiers: healed if the two copies are bad in
            # different objects (each repaired from the other), else named.
            healed = p.returncode == 0 and all(
                run([a.sluice, "verify", "--store", t, "--name", "f", "--step", str(step)]).returncode == 0
                for t in (A, B))
            if healed:
                counts["both_healed_across"] += 1
            elif all(states.get((t, step)) == "unrepairable" for t in tiers):
                counts["unrepairable_named"] += 1
            else:
                print(f"trial {trial}: {kind} on both tiers step {step}: neither healed nor named: {states}")
            for t, pth in pristine.items():  # start the next trial from good copies
                shutil.rmtree(t)
                shutil.copytree(pth, t)
            continue
        counts["repairable"] += 1
        ok = p.returncode == 0 and all(
            run([a.sluice, "verify", "--store", t, "--name", "f", "--step", str(step)]).returncode == 0 for t in (A, B))
        if ok:
            counts["repaired"] += 1
        else:
            print(f"trial {trial}: {kind} on tier {tiers[0]} step {step} NOT repaired: {states} {p.stderr.strip()}")
    print(json.dumps(counts))
    print("per kind (injected, detected): " + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in by_kind.items()))
    print(f"detected {counts['detected']}/{counts['faults']}, repaired {counts['repaired']}/{counts['repairable']} "
          f"where a good copy existed; of {counts['faults'] - counts['repairable']} faults on both tiers, "
          f"{counts['both_healed_across']} healed (bad in different objects) and {counts['unrepairable_named']} "
          f"named unrepairable; restores with wrong bytes: {counts['wrong_bytes']}")
    shutil.rmtree(a.dir, ignore_errors=True)
    good = (counts["detected"] == counts["faults"] and counts["repaired"] == counts["repairable"] and
            counts["unrepairable_named"] + counts["both_healed_across"] == counts["faults"] - counts["repairable"] and
            counts["wrong_bytes"] == 0)
    sys.exit(0 if good else 1)


if __name__ == "__main__":
    main()
