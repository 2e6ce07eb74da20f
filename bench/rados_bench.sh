#!/usr/bin/env bash
# Ceph's own ceiling and sluice in one run, on the same pool. rados bench
# (write then seq, at the object size, write size and concurrency sluice
# uses) and `sluice bench --store rados://...` take turns: rados bench, then
# ROUNDS rounds of [sluice bench in each rank layout of PATTERNS, rados bench].
# Each sluice run is compared with the mean of the two rados bench runs on
# either side of it, so that the drift of a shared VM (rados bench alone
# moves 5-15% between runs here) falls on both sides of a ratio, and the
# median of those per-round ratios is printed. rados bench's seq follows the
# same page-cache drop as sluice bench's read phase (where the script may
# write /proc/sys/vm/drop_caches).
#
# Usage: bench/rados_bench.sh [sluice bench flags...]
#   SLUICE=path/to/sluice   binary (default build/sluice)
#   PATTERNS="1x16 8x2"     sluice layouts RANKSxQD: ranks, writes in flight
#                           per rank. 1x16 is rados bench's own pattern (one
#                           client, 16 writes in flight); 8x2 is eight ranks
#                           writing eight objects at once. rados bench runs
#                           RANKS*QD operations in flight (the same for all)
#   ROUNDS=3                rounds (one sluice run per layout in each)
#   SIZE=3GiB CHECKPOINTS=1 each sluice run's checkpoint size and count
#   SECONDS_PER_RUN=20      each rados bench write
# Uses the cluster of scripts/ceph-dev-cluster ($SLUICE_CEPH_DIR), starting
# one if none runs (and stopping it at the end).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
sluice=${SLUICE:-$here/build/sluice}
patterns=${PATTERNS:-1x16 8x2}
size=${SIZE:-3GiB}
checkpoints=${CHECKPOINTS:-1}
rounds=${ROUNDS:-3}
seconds=${SECONDS_PER_RUN:-20}
io=4194304  # sluice's default --io-size: one RADOS write
[ -x "$sluice" ] || { echo "rados_bench: $sluice not built (cmake --build build)" >&2; exit 1; }
command -v rados >/dev/null || { echo "rados_bench: rados not installed (scripts/install-deps.sh)" >&2; exit 1; }

cluster=$here/scripts/ceph-dev-cluster
started=0
run_name=sluice-rados-bench-$$
cleanup() {
  rados -p "${SLUICE_CEPH_POOL:-}" cleanup --run-name "$run_name" >/dev/null 2>&1 || true
  [ "$started" = 1 ] && "$cluster" stop >/dev/null 2>&1 || true
}
trap cleanup EXIT
if ! "$cluster" status >/dev/null 2>&1; then
  started=1
  "$cluster" start >/dev/null
fi
eval "$("$cluster" env)"
pool=$SLUICE_CEPH_POOL
# The object size sluice will use: --object-size (1 GiB by default) clamped
# to the cluster's osd_max_object_size, which the backend reads the same way.
max_object=$(ceph config show osd.0 osd_max_object_size)
object=$((max_object < (1 << 30) ? max_object : (1 << 30)))
first=${patterns%% *}
threads=$((${first%x*} * ${first#*x}))
for p in $patterns; do
  [ $((${p%x*} * ${p#*x})) -eq "$threads" ] ||
    { echo "rados_bench: pattern $p does not have $threads writes in flight like $first" >&2; exit 1; }
done

rb_run() {  # prints "write_MiB/s read_MiB/s"
  local w r
  w=$(rados bench -p "$pool" "$seconds" write -b "$io" -O "$object" -t "$threads" \
        --no-cleanup --run-name "$run_name" 2>/dev/null | awk -F: '/^Bandwidth \(MB\/sec\)/ {print $2}')
  # The page-cache drop sluice bench makes between its write and read phases
  # (on this single node it also evicts the OSDs' RocksDB files), before
  # rados bench's seq too, so that both read under the same conditions.
  sync
  { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null || true
  r=$(rados bench -p "$pool" "$seconds" seq -t "$threads" --run-name "$run_name" 2>/dev/null |
        awk -F: '/^Bandwidth \(MB\/sec\)/ {print $2}')
  rados -p "$pool" cleanup --run-name "$run_name" >/dev/null
  echo "$w $r"  # rados bench's "MB/sec" is MiB/s
}

echo "== rados bench: $((io >> 20)) MiB writes to $((object >> 20)) MiB objects, $threads in flight" >&2
rb=()
read -r w r <<<"$(rb_run)"
echo "rados bench write $w MiB/s, seq $r MiB/s" >&2
rb+=("$w/$r")
jsons=()
for ((round = 1; round <= rounds; round++)); do
  for p in $patterns; do
    ranks=${p%x*} qd=${p#*x}
    echo "== round $round/$rounds: sluice bench, $ranks ranks x qd $qd" >&2
    jsons+=("$round $p $("$sluice" bench --store "$SLUICE_RADOS_URI&qd=$qd" --ranks "$ranks" --size "$size" \
                           --checkpoints "$checkpoints" --object-size "$object" --io-size "$io" --json "$@")")
  done
  echo "== round $round/$rounds: rados bench" >&2
  read -r w r <<<"$(rb_run)"
  echo "rados bench write $w MiB/s, seq $r MiB/s" >&2
  rb+=("$w/$r")
done

python3 - "$patterns" "${rb[*]}" "${jsons[@]}" <<'PY'
import json, statistics, sys
patterns = sys.argv[1].split()
rb = [tuple(float(x) / 1024 for x in run.split("/")) for run in sys.argv[2].split()]
runs = {}
for arg in sys.argv[3:]:
    round_, pattern, text = arg.split(" ", 2)
    runs.setdefault(pattern, []).append((int(round_), json.loads(text)))
print("rados bench write GiB/s: " + " ".join(f"{w:.3f}" for w, _ in rb))
print("rados bench seq   GiB/s: " + " ".join(f"{r:.3f}" for _, r in rb))
print(f"{'sluice':18}{'GiB/s':>7}{'ratio':>7}{'CPU s/GiB':>11}   per round: GiB/s / rados bench on either side")
for pattern in patterns:
    for what, k in (("write", 0), ("read", 1)):
        rates, ratios, cpus, cells = [], [], [], []
        for round_, s in runs[pattern]:
            rate = s[what]["median_gib_per_second"]
            ceiling = (rb[round_ - 1][k] + rb[round_][k]) / 2
            rates.append(rate)
            ratios.append(rate / ceiling)
            cpus.append(s[what]["cpu_seconds_per_gib"])
            cells.append(f"{rate:.3f}/{ceiling:.3f}={rate / ceiling:.2f}")
        print(f"{what + ' ' + pattern:18}{statistics.median(rates):7.3f}{statistics.median(ratios):7.2f}"
              f"{statistics.median(cpus):11.3f}   " + "  ".join(cells))
s = runs[patterns[0]][0][1]
print(f"(medians over {len(runs[patterns[0]])} rounds; {s['checkpoint_bytes']/2**30:.2f} GiB x {s['checkpoints']} "
      f"checkpoint(s) per sluice run, {s['io_path'].split(',')[0]}; sluice: each checkpoint checksummed + "
      "committed, then every chunk read back and verified)")
PY
