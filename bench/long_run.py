#!/usr/bin/env python3
"""long_run.py: what each operation costs as a store's history grows.

    bench/long_run.py --store URI [--steps 10,100,1000] [--size 2MiB]
                      [--change 0.5] [--reps 5] [--remove-every 10]
                      [--report DIR] [--json FILE]

Saves small incremental checkpoints of one name (`--synthetic SIZE --change
FRACTION`) into the store, removing every REMOVE_EVERY-th step along the
way, as a month of training with retention would. When the store holds each
count of --steps, times, as whole `sluice` processes (what a user runs),
median of REPS:

  save            the next step (incremental)
  restore         `restore --step latest` into a fresh directory
  ls              `ls` of the whole store
  ls_step         `ls --name N --step S` of the newest step
  rm              `rm` of one step from the middle of the history
  backlog         `ls --backlog` (with --tier1: the steps due on it)
  gc_first        the first gc after the steps saved since the last one
  gc_second       a second gc at once (nothing new to collect)

and prints each operation's time at the largest count against its time at
the smallest as a ratio (flat: <= 1.5x; gc and ls: <= 1.2x per 1x of steps).
--report DIR draws seconds per operation against steps held (gnuplot).

The store is emptied first: give it a URI of its own. SLUICE names the CLI
(default build/sluice).
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

HERE = os.path.dirname(os.path.abspath(__file__))
SLUICE = os.environ.get("SLUICE", os.path.join(HERE, "..", "build", "sluice"))
NAME = "long"
OPS = ["save", "restore", "ls", "ls_step", "rm", "backlog", "gc_first", "gc_second"]


def run(args, check=True):
    """(seconds, stdout) of one whole sluice process; seconds is None when it failed and check is off."""
    start = time.monotonic()
    p = subprocess.run([SLUICE] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seconds = time.monotonic() - start
    if p.returncode != 0:
        if check:
            sys.exit(f"long_run: sluice {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
        return None, p.stdout
    return seconds, p.stdout


class Run:
    def __init__(self, a):
        self.a = a
        self.step = 0
        self.held = 0
        self.held_steps = []
        self.scratch = tempfile.mkdtemp(prefix="sluice-long-run-")
        self.tiers = ["--tier", a.store] + (["--tier", a.tier1] if a.tier1 else [])

    def save(self, extra=()):
        self.step += 1
        t, _ = run(["save", *self.tiers, "--name", NAME, "--step", str(self.step), "--synthetic", self.a.size,
                    "--items", "8", "--change", str(self.a.change), *extra])
        self.held += 1
        self.held_steps.append(self.step)
        if self.a.remove_every and self.step % self.a.remove_every == 0:
            # One from the middle of the history: a base later steps share chunks with.
            victim = self.held_steps.pop(len(self.held_steps) // 2)
            run(["rm", "--store", self.a.store, "--name", NAME, "--step", str(victim)])
            self.held -= 1
        return t

    def grow_to(self, count):
        while self.held < count:
            self.save()

    def measure(self):
        a, store = self.a, self.a.store
        out = {op: [] for op in OPS}
        for _ in range(a.reps):
            out["save"].append(self.save())
            dest = os.path.join(self.scratch, "restored")
            shutil.rmtree(dest, ignore_errors=True)
            out["restore"].append(run(["restore", "--store", store, "--name", NAME, "--step", "latest",
                                       "--to", dest])[0])
            out["ls"].append(run(["ls", "--store", store])[0])
            out["ls_step"].append(run(["ls", "--store", store, "--name", NAME, "--step", str(self.step)], check=False)[0])
            out["backlog"].append(run(["ls", *self.tiers, "--name", NAME, "--backlog"])[0])
            # rm of a step from the middle of the history (what retention and
            # users remove: not the newest, whose removal also drops the
            # latest-step hint), then a save so the count held stays.
            victim = self.held_steps.pop(len(self.held_steps) // 2)
            out["rm"].append(run(["rm", "--store", store, "--name", NAME, "--step", str(victim)])[0])
            self.held -= 1
            self.save()
        # gc: the first after every step saved since the last gc, then one more.
        out["gc_first"].append(run(["gc", "--store", store, "--min-age", "0"])[0])
        out["gc_second"].append(run(["gc", "--store", store, "--min-age", "0"])[0])
        # An operation this sluice does not have (every run failed) is None.
        return {op: (statistics.median(v) if None not in v else None) for op, v in out.items()}


def fmt(seconds):
    return "failed" if seconds is None else f"{seconds:.3f}"


def plot(report_dir, rows):
    os.makedirs(report_dir, exist_ok=True)
    data = os.path.join(report_dir, "long_run.dat")
    with open(data, "w") as f:
        f.write("# steps " + " ".join(OPS) + "\n")
        for held, r in rows:
            f.write(f"{held} " + " ".join("NaN" if r[op] is None else f"{r[op]:.4f}" for op in OPS) + "\n")
    png = os.path.join(report_dir, "long_run.png")
    lines = ", ".join(f"'{data}' using 1:{i + 2} with linespoints title '{op}'" for i, op in enumerate(OPS))
    script = (f"set terminal pngcairo size 900,600; set output '{png}'; set logscale xy; "
              f"set xlabel 'steps held'; set ylabel 'seconds (median)'; set key outside; plot {lines}")
    if shutil.which("gnuplot"):
        subprocess.run(["gnuplot", "-e", script], check=True)
        print(f"report: {png}")
    else:
        print(f"report: {data} (gnuplot not found: no plot)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--store", required=True, help="store URI (emptied first)")
    p.add_argument("--tier1", help="a later tier, for the backlog count (emptied first)")
    p.add_argument("--steps", default="10,100,1000", help="counts of steps held to measure at")
    p.add_argument("--size", default="2MiB")
    p.add_argument("--change", type=float, default=0.5)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--remove-every", type=int, default=10)
    p.add_argument("--report", help="directory for the plot")
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args()
    counts = sorted(int(c) for c in a.steps.split(","))
    for uri in filter(None, [a.store, a.tier1]):
        run(["rm", "--store", uri, "--name", NAME, "--all-steps"], check=False)
        run(["gc", "--store", uri, "--min-age", "0"], check=False)
    r = Run(a)
    rows = []
    try:
        for count in counts:
            start = time.monotonic()
            r.grow_to(count)
            grown = time.monotonic() - start
            figures = r.measure()
            rows.append((count, figures))
            print(f"{count:>6} steps (grown in {grown:.0f} s): " +
                  "  ".join(f"{op} {fmt(figures[op])}" for op in OPS), flush=True)
    finally:
        shutil.rmtree(r.scratch, ignore_errors=True)
    (lo, first), (hi, last) = rows[0], rows[-1]
    print(f"\nratios at {hi} steps against {lo} ({hi / lo:.0f}x the steps):")
    for op in OPS:
        if first[op] is None or last[op] is None:
            print(f"  {op:<10}    n/a  (failed: {fmt(first[op])} -> {fmt(last[op])})")
            continue
        print(f"  {op:<10} {last[op] / first[op]:6.2f}x  ({first[op]:.3f} -> {last[op]:.3f} s)")
    if a.report:
        plot(a.report, rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"store": a.store, "rows": [{"steps": h, **r} for h, r in rows]}, f, indent=1)


if __name__ == "__main__":
    main()
