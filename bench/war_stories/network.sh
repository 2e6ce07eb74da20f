#!/usr/bin/env bash
# War story 3, network saturation: checkpoint drains sharing a capped link
# with training traffic.
#
#   bench/war_stories/network.sh [OUT_DIR] [ROUNDS]     (as root; default /tmp/sluice-war-network, 3)
#
# On scripts/testbed (2 compute and 3 storage hosts, 1 OSD each, brought up
# unless one is up, and taken down again if this started it), compute host
# c1's link is capped with tc at $LINK (default 200mbit, both directions). A
# training-traffic stand-in (allreduce_loop.py: torch.distributed gloo, ranks
# on c1 and c2, $COMPUTE_MS ms of compute then an all-reduce of $MIB MiB,
# $ITERS times) runs three ways, rounds alternating the order:
#   none      no drain;
#   uncapped  `sluice drain` from c1's NVMe directory to RADOS, no cap;
#   capped    the same drain at --rate-limit half the link;
#   capped+qos  the same, with the link prioritizing training traffic over
#             traffic to the storage hosts (scripts/testbed cap --prioritize).
# The drain has $STEPS checkpoints of $STATE each to copy (more than the
# window takes), and is stopped once the all-reduce loop ends. Writes
# OUT_DIR/report.md (median all-reduce time per way, medians over rounds, and
# the Ceph client write rate during the window) and OUT_DIR/allreduce.svg.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-/tmp/sluice-war-network}
ROUNDS=${2:-3}
LINK=${LINK:-200mbit}
MIB=${MIB:-2}
ITERS=${ITERS:-40}
COMPUTE_MS=${COMPUTE_MS:-150}
STEPS=${STEPS:-4}
STATE=${STATE:-64MiB}
ME=network.sh
. "$HERE/bench/war_stories/lib.sh"
[[ $LINK =~ ^([0-9]+)mbit$ ]] || { echo "network.sh: LINK must be Nmbit, e.g. 200mbit" >&2; exit 2; }
HALF=$((BASH_REMATCH[1] * 1000000 / 16))  # half the link, in bytes/s
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.txt

war_testbed_up --compute 2 --storage 3 --osds-per-host 1
DRAIN_PID=""
finish() {
  [ -n "$DRAIN_PID" ] && kill -9 "$DRAIN_PID" 2>/dev/null
  "$TB" uncap c1 2>/dev/null || true
  war_testbed_done
}
trap finish EXIT
NVME=$("$TB" nvme c1)
"$TB" cap c1 "$LINK"

# client write bytes/s of the pool, sampled every second until $1 exists
sample_writes() {
  while [ ! -e "$1" ]; do
    "$TB" exec s1 ceph osd pool stats "$SLUICE_TESTBED_POOL" -f json 2>/dev/null |
      python3 -c 'import json,sys; d=json.load(sys.stdin); print(d[0]["client_io_rate"].get("write_bytes_sec", 0))' \
      2>/dev/null || true
    sleep 1
  done
}

run() {  # run WAY ROUND
  local way=$1 r=$2 name="net-$1-$2-$$" s
  # The cluster settles after the previous way's drain (OSD background work,
  # Ceph's rate figures are averaged over the last seconds).
  sleep "${SETTLE:-8}"
  if [ "$way" != none ]; then
    for ((s = 1; s <= STEPS; s++)); do
      "$TB" exec c1 "$SLUICE" save --store "$NVME" --name "$name" --step $s --synthetic "$STATE" --full >/dev/null
    done
    local cap=()
    [ "$way" != uncapped ] && cap=(--rate-limit "1=$HALF")
    if [ "$way" = capped+qos ]; then "$TB" cap c1 "$LINK" --prioritize; else "$TB" cap c1 "$LINK"; fi
    "$TB" exec c1 "$SLUICE" drain --tier "$NVME" --tier "$SLUICE_TESTBED_RADOS_URI" --name "$name" \
      --backlog-policy drain-every "${cap[@]}" >/dev/null 2>&1 &
    DRAIN_PID=$!
    sleep 2  # the drain is under way
  fi
  local done_flag="$OUT/.done-$way-$r"
  rm -f "$done_flag"
  sample_writes "$done_flag" >"$OUT/writes-$way-$r.txt" &
  local sampler=$!
  local at
  at=$(python3 -c 'import time; print(time.time() + 3)')
  "$TB" exec c2 env GLOO_SOCKET_IFNAME=eth0 PYTHONPATH="$HERE/build/python" "$PY" "$HERE/bench/war_stories/allreduce_loop.py" \
    --rank 1 --master 10.99.0.11 --mib "$MIB" --iters "$ITERS" --compute-ms "$COMPUTE_MS" --start-at "$at" \
    >/dev/null 2>"$OUT/rank1-$way-$r.err" &
  local r1=$!
  "$TB" exec c1 env GLOO_SOCKET_IFNAME=eth0 PYTHONPATH="$HERE/build/python" "$PY" "$HERE/bench/war_stories/allreduce_loop.py" \
    --rank 0 --master 10.99.0.11 --mib "$MIB" --iters "$ITERS" --compute-ms "$COMPUTE_MS" --start-at "$at" \
    >"$OUT/allreduce-$way-$r.json" 2>"$OUT/rank0-$way-$r.err"
  wait "$r1"
  touch "$done_flag"
  wait "$sampler"
  rm -f "$done_flag"
  if [ -n "$DRAIN_PID" ]; then
    kill -0 "$DRAIN_PID" 2>/dev/null || echo "network.sh: the $way drain ended before the loop did" >&2
    # kill -9 is safe for a drain (an unfinished copy is never committed),
    # and nothing of it may run into the next way's window.
    kill -9 "$DRAIN_PID" 2>/dev/null || true
    wait "$DRAIN_PID" 2>/dev/null || true
    DRAIN_PID=""
  fi
}

ways=(none uncapped capped capped+qos)
for ((r = 1; r <= ROUNDS; r++)); do
  # Rotate the order so no way always runs first.
  for ((i = 0; i < 4; i++)); do
    way=${ways[$(((i + r - 1) % 4))]}
    echo "network.sh: round $r, $way" >&2
    run "$way" "$r"
  done
done

"$PY" - "$OUT" "$ROUNDS" "$LINK" "$HALF" "$MIB" "$COMPUTE_MS" <<'PYEOF'
import json, os, statistics, sys
out, rounds, link, half, mib, compute_ms = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
def pct(xs, p):
    xs = sorted(xs); k = (len(xs) - 1) * p / 100; lo = int(k); hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)
res = {}
for way in ("none", "uncapped", "capped", "capped+qos"):
    p50, p99, mean, wr = [], [], [], []
    for r in range(1, rounds + 1):
        f = os.path.join(out, f"allreduce-{way}-{r}.json")
        if not os.path.exists(f) or os.path.getsize(f) == 0:
            continue
        t = json.load(open(f))["times"]
        p50.append(pct(t, 50)); p99.append(pct(t, 99)); mean.append(statistics.mean(t))
        w = [float(x) for x in open(os.path.join(out, f"writes-{way}-{r}.txt")).read().split() if x.strip()]
        if w:
            wr.append(statistics.median(w) / (1 << 20))
    if p50:
        res[way] = dict(p50=statistics.median(p50), p99=statistics.median(p99), mean=statistics.median(mean),
                        writes=statistics.median(wr) if wr else 0.0)
base = res.get("none")
lines = ["# War story: checkpoint drains on a link shared with training traffic", "",
         f"c1's link capped at {link} (both ways); all-reduce of {mib} MiB between c1 and c2 after {compute_ms} ms of "
         f"compute; the drain from c1 to RADOS. Medians over {rounds} round(s).", "",
         "| drain | all-reduce p50 (s) | p99 (s) | mean (s) | mean vs no drain | Ceph client writes (MiB/s) |",
         "|---|---|---|---|---|---|"]
names = {"none": "none", "uncapped": "uncapped", "capped": f"--rate-limit {half / (1 << 20):.1f} MiB/s (half the link)",
         "capped+qos": f"--rate-limit {half / (1 << 20):.1f} MiB/s, storage traffic low priority (htb)"}
for way, v in res.items():
    ratio = f"{v['mean'] / base['mean']:.3f}x" if base else "n/a"
    lines.append(f"| {names[way]} | {v['p50']:.4f} | {v['p99']:.4f} | {v['mean']:.4f} | {ratio} | {v['writes']:.1f} |")
if base and "capped" in res:
    lines += ["", f"All-reduce time with the drain capped at half the link: **{res['capped']['mean'] / base['mean']:.3f}x** "
              f"no drain (target <= 1.10x); uncapped: {res['uncapped']['mean'] / base['mean']:.3f}x."]
    if "capped+qos" in res:
        lines.append(f"The same cap with storage traffic at low priority on the link: "
                     f"**{res['capped+qos']['mean'] / base['mean']:.3f}x**.")
open(os.path.join(out, "report.md"), "w").write("\n".join(lines) + "\n")
with open(os.path.join(out, "allreduce.dat"), "w") as f:
    for way in ("none", "uncapped", "capped", "capped+qos"):
        p = os.path.join(out, f"allreduce-{way}-1.json")
        if not os.path.exists(p) or os.path.getsize(p) == 0:
            continue
        d = json.load(open(p))
        f.write(f'"{names[way]}"\n')
        for s, t in zip(d["starts"], d["times"]):
            f.write(f"{s} {t}\n")
        f.write("\n\n")
print("\n".join(lines))
PYEOF
gnuplot <<GNUPLOT
set terminal svg size 900,500 dynamic
set output "$OUT/allreduce.svg"
set title "All-reduce time on a ${LINK} link shared with a checkpoint drain (round 1)"
set xlabel "time in the loop (s)"
set ylabel "all-reduce time (s)"
set key outside right
plot for [i=0:3] "$OUT/allreduce.dat" index i using 1:2 with linespoints title columnheader(1)
GNUPLOT
echo "network.sh: $OUT/report.md, $OUT/allreduce.svg" >&2
