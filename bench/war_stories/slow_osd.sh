#!/usr/bin/env bash
# War story 1, latency amplification: one slow Ceph OSD and a training loop.
#
#   bench/war_stories/slow_osd.sh [OUT_DIR] [ROUNDS]     (as root; default /tmp/sluice-war-slow-osd, 2)
#
# On scripts/testbed (brought up with 1 compute and 3 storage hosts, 2 OSDs
# each, unless one is up; taken down again if this started it), a training
# loop stand-in (train_steps.py: 200 ms steps, a 64 MiB state, a checkpoint
# every 5 steps) runs on compute host c1 with
#   (a) synchronous saves to RADOS (what writing straight to Ceph costs), and
#   (b) sluice async saves to [c1's NVMe directory, RADOS],
# each with the cluster healthy and with one OSD slowed: half of its ops
# delayed by 200 ms (osd_debug_inject_dispatch_delay_probability 0.5,
# _duration 0.2). Rounds alternate healthy/slow and sync/async. Beside them:
# `rados bench` 4 MiB writes and a WRITE_MIB (512) MiB `sluice save`
# straight to RADOS, hedged (the default) and with hedge=off, healthy and
# slow; the hedged runs' JSON says what hedging cost; and a WRITE_MIB save
# to [c1's NVMe directory, RADOS], timed until the step is durable on RADOS
# (the drain from the NVMe tier), healthy and slow. Writes OUT_DIR/report.md (medians over rounds) and
# OUT_DIR/step_times.svg (gnuplot), and the raw JSON of every run.
# Knobs: STATE_MIB, STEPS, EVERY, STEP_MS, SLOW_OSD (default 0), PYTHON,
# PARTS (default "train write drain": which of the three to run).
set -euo pipefail
HERE=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-/tmp/sluice-war-slow-osd}
ROUNDS=${2:-2}
STATE_MIB=${STATE_MIB:-64}
STEPS=${STEPS:-20}
EVERY=${EVERY:-5}
STEP_MS=${STEP_MS:-200}
SLOW_OSD=${SLOW_OSD:-0}
WRITE_MIB=${WRITE_MIB:-512}
PARTS=${PARTS:-train write drain}
ME=slow_osd.sh
. "$HERE/bench/war_stories/lib.sh"
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.txt

war_testbed_up --compute 1 --storage 3 --osds-per-host 2
set_delay() {
  "$TB" exec s1 ceph tell "osd.$SLOW_OSD" config set osd_debug_inject_dispatch_delay_probability "$1" >/dev/null
  "$TB" exec s1 ceph tell "osd.$SLOW_OSD" config set osd_debug_inject_dispatch_delay_duration "$2" >/dev/null
}
finish() {
  set_delay 0 0 2>/dev/null || true
  war_testbed_done
}
trap finish EXIT
NVME=$("$TB" nvme c1)

train() {  # train MODE HEALTH ROUND
  local tiers=(--tier "$SLUICE_TESTBED_RADOS_URI")
  [ "$1" = async ] && tiers=(--tier "$NVME" "${tiers[@]}")
  "$TB" exec c1 env PYTHONPATH="$HERE/build/python" "$PY" "$HERE/bench/war_stories/train_steps.py" \
    "${tiers[@]}" --name "war-$1-$2-$3-$$" --mode "$1" --state-mib "$STATE_MIB" --steps "$STEPS" \
    --every "$EVERY" --step-ms "$STEP_MS" >"$OUT/train-$1-$2-$3.json"
}
rados_bench() {  # rados_bench HEALTH ROUND: MiB/s of a 5 s 4 MiB write bench
  "$TB" exec c1 rados -p "$SLUICE_TESTBED_POOL" bench 5 write -b 4M -t 16 --no-cleanup --run-name "war$1$2" \
    >"$OUT/rados-$1-$2.txt" 2>&1 || true
  "$TB" exec c1 rados -p "$SLUICE_TESTBED_POOL" cleanup --run-name "war$1$2" >/dev/null 2>&1 || true
}
# As a trainer saves: successive steps of one name (one per hedge mode),
# every byte changed since the step before (--change 1), so that each save
# writes all WRITE_MIB and finds its base by the name's latest-step hint.
declare -A write_step
sluice_write() {  # sluice_write HEDGE HEALTH ROUND: a WRITE_MIB save straight to RADOS
  local uri=$SLUICE_TESTBED_RADOS_URI name="war-write-$1-$$"
  [ "$1" = off ] && uri="$uri&hedge=off"
  local step=$((${write_step[$1]:-0} + 1))
  write_step[$1]=$step
  "$TB" exec c1 "$SLUICE" save --store "$uri" --name "$name" --step "$step" --synthetic "${WRITE_MIB}MiB" \
    --items 32 --change 1 --object-size 8MiB --json >"$OUT/write-$1-$2-$3.json" 2>/dev/null || true
  # The pool is small: the step before the last goes (untimed).
  [ "$step" -gt 2 ] && "$TB" exec c1 "$SLUICE" rm --store "$SLUICE_TESTBED_RADOS_URI" --name "$name" \
    --step $((step - 2)) >/dev/null 2>&1
  return 0
}

# A drain as a tiered save makes one: a WRITE_MIB save to [c1's NVMe
# directory, RADOS] that waits for the drain (`sluice save --tier --tier`),
# timed by its own --json: when the step was durable on RADOS
# (tiers[1].durable_seconds) and on the NVMe tier (tiers[0]). Each save is a
# new name, written in full; both copies go after (untimed).
sluice_drain() {  # sluice_drain HEALTH ROUND
  local name="war-drain-$1-$2-$$"
  "$TB" exec c1 "$SLUICE" save --tier "$NVME" --tier "$SLUICE_TESTBED_RADOS_URI" --name "$name" --step 1 \
    --synthetic "${WRITE_MIB}MiB" --items 32 --object-size 8MiB --json >"$OUT/drain-$1-$2.json" 2>/dev/null || true
  "$TB" exec c1 "$SLUICE" rm --tier "$NVME" --tier "$SLUICE_TESTBED_RADOS_URI" --name "$name" --step 1 >/dev/null 2>&1
  return 0
}
has() { [[ " $PARTS " == *" $1 "* ]]; }

for ((r = 1; r <= ROUNDS; r++)); do
  for health in healthy slow; do
    if [ "$health" = slow ]; then set_delay 0.5 0.2; else set_delay 0 0; fi
    # Alternate which mode goes first, so neither always runs on a warmer cluster.
    if [ $((r % 2)) = 1 ]; then modes="sync async"; else modes="async sync"; fi
    if has train; then
      for mode in $modes; do
        echo "slow_osd.sh: round $r, $health, $mode" >&2
        train "$mode" "$health" "$r"
      done
    fi
    rados_bench "$health" "$r"
    if [ $((r % 2)) = 1 ]; then hedges="on off"; else hedges="off on"; fi
    if has write; then
      for hedge in $hedges; do sluice_write "$hedge" "$health" "$r"; done
    fi
    if has drain; then
      echo "slow_osd.sh: round $r, $health, drain" >&2
      sluice_drain "$health" "$r"
    fi
  done
done
set_delay 0 0

WRITE_MIB=$WRITE_MIB "$PY" - "$OUT" "$ROUNDS" "$STEP_MS" <<'PYEOF'
import glob, json, os, re, statistics, sys
out, rounds, step_ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])

def pct(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

rows = {}
for mode in ("sync", "async"):
    for health in ("healthy", "slow"):
        p50s, p99s, maxs, lags, sup, stalls = [], [], [], [], [], []
        for r in range(1, rounds + 1):
            f = os.path.join(out, f"train-{mode}-{health}-{r}.json")
            if not os.path.exists(f):
                continue
            d = json.load(open(f))
            t = d["step_times"]
            p50s.append(pct(t, 50)); p99s.append(pct(t, 99)); maxs.append(max(t))
            stalls += [s["stall"] for s in d["saves"]]
            last = [s for s in d["saves"] if s["tiers"][-1]["state"] == "committed"]
            # Durability lag at the end of the loop: how old the newest step
            # committed on RADOS was (seconds of loop time).
            lags.append(d["loop_seconds"] - last[-1]["at"] if last else d["loop_seconds"])
            sup.append(sum(1 for s in d["saves"] if s["tiers"][-1]["state"] == "superseded"))
        rows[(mode, health)] = dict(p50=med(p50s), p99=med(p99s), max=med(maxs), lag=med(lags),
                                    superseded=med(sup), stall=med(stalls))

def rados_mibs(health):
    v = []
    for f in glob.glob(os.path.join(out, f"rados-{health}-*.txt")):
        m = re.search(r"Bandwidth \(MB/sec\):\s+([\d.]+)", open(f).read())
        if m:
            v.append(float(m.group(1)))
    return med(v)

def sluice_mibs(hedge, health):
    v = []
    for f in glob.glob(os.path.join(out, f"write-{hedge}-{health}-*.json")):
        try:
            d = json.load(open(f))
            v.append(d["bytes"] / (1 << 20) / d["seconds"])
        except Exception:
            pass
    return med(v)

def drain_mibs(health):
    # WRITE_MIB over the time until the step was durable on RADOS.
    v = []
    for f in glob.glob(os.path.join(out, f"drain-{health}-*.json")):
        try:
            d = json.load(open(f))
            t = d["tiers"][1]
            if t["state"] == "committed":
                v.append(d["bytes"] / (1 << 20) / t["durable_seconds"])
        except Exception:
            pass
    return med(v)

def sluice_data_mibs(health):
    # The hedged saves' data writes alone: bytes over the wall time writes
    # of hedged objects were in flight (tiers[0].hedging.write_seconds),
    # without the records a save writes one at a time (lock, manifest,
    # commit record), whose names the format fixes.
    v = []
    for f in glob.glob(os.path.join(out, f"write-on-{health}-*.json")):
        try:
            h = json.load(open(f))["tiers"][0]["hedging"]
            if h.get("write_seconds", 0) > 0:
                v.append(h["bytes_written"] / (1 << 20) / h["write_seconds"])
        except Exception:
            pass
    return med(v)

def fmt(x, unit=""):
    return "n/a" if x is None else f"{x:.3f}{unit}"

lines = ["# War story: one slow OSD under a training loop", "",
         f"Medians over {rounds} round(s); {step_ms:.0f} ms steps; checkpoint p50/p99/max step time in seconds.",
         "Slow: half of one OSD's ops delayed 200 ms. Lag: age of the newest step durable on RADOS when the loop ended.", "",
         "| saves | cluster | step p50 | step p99 | step max | save stall | RADOS lag at end | superseded |",
         "|---|---|---|---|---|---|---|---|"]
for (mode, health), v in rows.items():
    name = "synchronous to RADOS" if mode == "sync" else "sluice async [local, RADOS]"
    lines.append(f"| {name} | {health} | {fmt(v['p50'])} | {fmt(v['p99'])} | {fmt(v['max'])} | {fmt(v['stall'])} | "
                 f"{fmt(v['lag'], ' s')} | {fmt(v['superseded'])} |")
h, s = rows.get(("async", "healthy")), rows.get(("async", "slow"))
if h and s and h["p99"] and s["p99"]:
    lines += ["", f"sluice async p99 step time, slow / healthy: **{s['p99'] / h['p99']:.3f}x** (target <= 1.05x)"]
hs, ss = rows.get(("sync", "healthy")), rows.get(("sync", "slow"))
if hs and ss and hs["p99"] and ss["p99"]:
    lines.append(f"synchronous p99 step time, slow / healthy: {ss['p99'] / hs['p99']:.3f}x")
lines += ["", "| writer | healthy MiB/s | slow MiB/s | slow / healthy |", "|---|---|---|---|"]
write_mib = int(os.environ.get("WRITE_MIB", "512"))
for name, f in (("rados bench write, 4 MiB, 16 in flight", rados_mibs),
                (f"sluice save, {write_mib} MiB to RADOS, hedged (default)", lambda h: sluice_mibs("on", h)),
                ("  its data writes alone (hedging.write_seconds)", sluice_data_mibs),
                (f"sluice save, {write_mib} MiB to RADOS, hedge=off", lambda h: sluice_mibs("off", h)),
                (f"sluice save to [NVMe dir, RADOS], {write_mib} MiB until durable on RADOS (target slow/healthy >= 0.667x)", drain_mibs)):
    a, b = f("healthy"), f("slow")
    ratio = f"{b / a:.3f}x" if a and b else "n/a"
    lines.append(f"| {name} | {fmt(a)} | {fmt(b)} | {ratio} |")
# What hedging cost under the fault (medians over rounds).
hs = []
for f in glob.glob(os.path.join(out, "write-on-slow-*.json")):
    try:
        hs.append(json.load(open(f))["tiers"][0]["hedging"])
    except Exception:
        pass
if hs:
    lines += ["", "Hedged saves under the fault, medians: "
              f"{med([h['objects_hedged'] for h in hs]):.0f} objects hedged, "
              f"{med([h['slow_placements_avoided'] for h in hs]):.0f} new objects placed away from the slow OSD, "
              f"extra bytes {100 * med([h['extra_fraction'] for h in hs]):.1f}% of those written "
              f"(budget: {100 * hs[0]['budget']:.0f}% of the bytes written plus 256 MiB), suspected OSDs {hs[0]['suspect_devices']}."]
open(os.path.join(out, "report.md"), "w").write("\n".join(lines) + "\n")

# Step times of round 1, one series per configuration.
with open(os.path.join(out, "steps.dat"), "w") as f:
    for (mode, health) in rows:
        p = os.path.join(out, f"train-{mode}-{health}-1.json")
        if not os.path.exists(p):
            continue
        f.write(f'"{mode} {health}"\n')
        for i, t in enumerate(json.load(open(p))["step_times"], 1):
            f.write(f"{i} {t}\n")
        f.write("\n\n")
print("\n".join(lines))
PYEOF
gnuplot <<GNUPLOT
set terminal svg size 900,500 dynamic
set output "$OUT/step_times.svg"
set title "Training step time, one slow OSD (round 1)"
set xlabel "step"
set ylabel "step time (s)"
set logscale y
set key outside right
plot for [i=0:3] "$OUT/steps.dat" index i using 1:2 with linespoints title columnheader(1)
GNUPLOT
echo "slow_osd.sh: $OUT/report.md, $OUT/step_times.svg" >&2
