#!/usr/bin/env bash
# War story 2, recovery eating bandwidth: an OSD lost while drains run.
#
#   bench/war_stories/osd_lost.sh [OUT_DIR]     (as root; default /tmp/sluice-war-osd-lost)
#
# On scripts/testbed (1 compute and 3 storage hosts, 2 OSDs each, brought up
# unless one is up, and taken down again if this started it): the pool is
# first filled with $FILL_SECONDS s of `rados bench` writes, so that losing an
# OSD leaves data to recover. Then the training-loop stand-in
# (train_steps.py: 200 ms steps, a 64 MiB state, a checkpoint every 5 steps,
# $STEPS steps) runs on c1 with sluice async saves to [c1's NVMe directory,
# RADOS], drains capped at $RATE_MIB MiB/s. $KILL_AT s into the loop osd.0 is
# killed (kill -9) (counted from 3 s after the loop's process starts), and
# $OUT_AT s in it is marked out, so Ceph recovers and
# backfills. Every second the Ceph recovery rate and client write rate are
# sampled. At the end every step RADOS holds committed is verified there
# (`sluice verify`). Writes OUT_DIR/report.md and OUT_DIR/timeline.svg (step
# time, recovery and client writes over time).
set -euo pipefail
HERE=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-/tmp/sluice-war-osd-lost}
STEPS=${STEPS:-150}
RATE_MIB=${RATE_MIB:-40}
KILL_AT=${KILL_AT:-6}
OUT_AT=${OUT_AT:-9}
FILL_SECONDS=${FILL_SECONDS:-8}
ME=osd_lost.sh
. "$HERE/bench/war_stories/lib.sh"
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.txt "$OUT"/*.dat
war_testbed_up --compute 1 --storage 3 --osds-per-host 2
SAMPLER=""
finish() {
  [ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null
  "$TB" exec s1 ceph osd in 0 >/dev/null 2>&1 || true
  war_testbed_done
}
trap finish EXIT
NVME=$("$TB" nvme c1)
NAME=war-osd-lost-$$
up=$("$TB" exec s1 ceph osd stat -f json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["num_up_osds"] == d["num_osds"])')
[ "$up" = True ] || { echo "$ME: needs every OSD up (a test bed an earlier run left degraded?): scripts/testbed down, then rerun" >&2; exit 1; }

"$TB" exec c1 rados -p "$SLUICE_TESTBED_POOL" bench "$FILL_SECONDS" write -b 4M -t 16 --no-cleanup \
  --run-name "fill$$" >"$OUT/fill.txt" 2>&1

# time, recovery bytes/s, client write bytes/s: every second until $1 exists
sample() {
  while [ ! -e "$1" ]; do
    "$TB" exec s1 ceph pg stat -f json 2>/dev/null | python3 -c '
import json, sys, time
d = json.load(sys.stdin)["pg_summary"]
print("%.1f %d %d" % (time.time(), d.get("recovering_bytes_per_sec", 0), d.get("write_bytes_sec", 0)))' \
      2>/dev/null || true
    sleep 1
  done
}
flag=$OUT/.done
rm -f "$flag"
sample "$flag" >"$OUT/ceph.txt" &
SAMPLER=$!
"$TB" exec c1 env PYTHONPATH="$HERE/build/python" "$PY" "$HERE/bench/war_stories/train_steps.py" \
  --tier "$NVME" --tier "$SLUICE_TESTBED_RADOS_URI" --name "$NAME" --mode async --steps "$STEPS" \
  --rate-limit-mib "$RATE_MIB" >"$OUT/train.json" 2>"$OUT/train.err" &
trainer=$!
# Wait for the loop to start (it prints nothing until it ends: poll its
# pipeline's arena being made is not visible; give the interpreter 3 s).
sleep 3
sleep "$KILL_AT"
kill -9 "$(cat "$SLUICE_TESTBED_DIR/ceph/run/osd.0.pid")"
echo "kill $(date +%s.%N)" >"$OUT/events.txt"
sleep $((OUT_AT - KILL_AT))
"$TB" exec s1 ceph osd out 0 >/dev/null 2>&1
echo "out $(date +%s.%N)" >>"$OUT/events.txt"
wait "$trainer"
# The last drains finish with the loop's pipeline closed: a drain picks them up.
"$TB" exec c1 "$SLUICE" drain --tier "$NVME" --tier "$SLUICE_TESTBED_RADOS_URI" --name "$NAME" \
  --retry-for 2m >"$OUT/drain.txt" 2>&1 || true
touch "$flag"
wait "$SAMPLER"
SAMPLER=""
"$TB" exec c1 "$SLUICE" ls --store "$SLUICE_TESTBED_RADOS_URI" --name "$NAME" --json >"$OUT/ls.json"
bad=0
steps=$(python3 -c 'import json,sys; print(" ".join(str(c["step"]) for c in json.load(open(sys.argv[1])) if c["complete"]))' "$OUT/ls.json")
for s in $steps; do
  "$TB" exec c1 "$SLUICE" verify --store "$SLUICE_TESTBED_RADOS_URI" --name "$NAME" --step "$s" >/dev/null 2>&1 || bad=$((bad + 1))
done
echo "$steps" >"$OUT/verified.txt"
echo "$bad" >"$OUT/verify_failures.txt"

"$PY" - "$OUT" "$RATE_MIB" <<'PYEOF'
import json, os, statistics, sys
out, rate_mib = sys.argv[1], float(sys.argv[2])
d = json.load(open(os.path.join(out, "train.json")))
t0 = d["loop_start_unix"]
events = dict(l.split() for l in open(os.path.join(out, "events.txt")))
kill_at, out_at = float(events["kill"]) - t0, float(events["out"]) - t0
def pct(xs, p):
    xs = sorted(xs); k = (len(xs) - 1) * p / 100; lo = int(k); hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)
before = [t for t, e in zip(d["step_times"], d["step_ends"]) if e < kill_at]
during = [t for t, e in zip(d["step_times"], d["step_ends"]) if e >= kill_at]
samples = [tuple(map(float, l.split())) for l in open(os.path.join(out, "ceph.txt")) if len(l.split()) == 3]
rec = [(t - t0, r / (1 << 20), w / (1 << 20)) for t, r, w in samples]
recovering = [r for t, r, w in rec if r > 0]
writes = [w for t, r, w in rec if w > 0 and 0 <= t <= d["loop_seconds"]]
states = [s["tiers"][-1]["state"] for s in d["saves"]]
verified = open(os.path.join(out, "verified.txt")).read().split()
bad = int(open(os.path.join(out, "verify_failures.txt")).read())
lines = ["# War story: an OSD lost while checkpoints drain", "",
         f"osd.0 killed {kill_at:.1f} s into the loop, marked out at {out_at:.1f} s; drains capped; "
         f"{len(d['saves'])} saves during the loop.", "",
         "| | step p50 (s) | step p99 (s) | step max (s) |", "|---|---|---|---|"]
for name, xs in (("before the loss", before), ("from the loss on", during)):
    if xs:
        lines.append(f"| {name} | {pct(xs, 50):.3f} | {pct(xs, 99):.3f} | {max(xs):.3f} |")
lines += ["",
          f"- Ceph recovery: {len(recovering)} s with recovery traffic, peak {max(recovering, default=0):.1f} MiB/s, "
          f"median {statistics.median(recovering) if recovering else 0:.1f} MiB/s.",
          f"- Client writes to the pool (the drains; Ceph's smoothed rate, so the fill's tail shows at first) "
          f"during the loop: median {statistics.median(writes) if writes else 0:.1f} MiB/s, drains capped at {rate_mib:.0f} MiB/s.",
          f"- Saves' state on RADOS when the loop ended: " + ", ".join(f"{s} {states.count(s)}" for s in sorted(set(states))) + ".",
          f"- After a final `sluice drain`: {len(verified)} steps committed on RADOS, {bad} failed `sluice verify` there."]
if before and during:
    lines.append(f"- Step p99 from the loss on / before it: **{pct(during, 99) / pct(before, 99):.3f}x**.")
open(os.path.join(out, "report.md"), "w").write("\n".join(lines) + "\n")
with open(os.path.join(out, "steps.dat"), "w") as f:
    for t, e in zip(d["step_times"], d["step_ends"]):
        f.write(f"{e} {t}\n")
with open(os.path.join(out, "ceph.dat"), "w") as f:
    for t, r, w in rec:
        f.write(f"{t} {r} {w}\n")
print("\n".join(lines))
PYEOF
gnuplot <<GNUPLOT
set terminal svg size 900,600 dynamic
set output "$OUT/timeline.svg"
set multiplot layout 2,1 title "An OSD lost while checkpoints drain"
set xlabel "seconds into the loop"
set ylabel "step time (s)"
plot "$OUT/steps.dat" using 1:2 with linespoints title "training step"
set ylabel "MiB/s"
plot "$OUT/ceph.dat" using 1:2 with lines title "Ceph recovery", "$OUT/ceph.dat" using 1:3 with lines title "client writes (drains)"
unset multiplot
GNUPLOT
echo "$ME: $OUT/report.md, $OUT/timeline.svg" >&2
