#!/usr/bin/env bash
# Ceph's own ceiling and sluice in one run, on the same pool. For every rank
# layout RANKSxQD of PATTERNS, rados bench runs in that layout -- RANKS rados
# bench processes at once, each with QD operations in flight (write, then
# seq), at sluice's object and write size -- and so does
# `sluice bench --store rados://...` (RANKS ranks, qd QD). They take turns:
# rados bench in every layout, then ROUNDS rounds of [sluice in every
# layout; rados bench in every layout]. Each sluice run is compared with the
# mean of the rados bench runs of its layout on either side of it, so that
# the drift of a shared VM (rados bench alone moves 5-15% between runs
# here) falls on both sides of a ratio, and the median of those per-round
# ratios is printed. rados bench's seq follows the same page-cache drop as
# sluice bench's read phase (where the script may write
# /proc/sys/vm/drop_caches).
#
# Usage: bench/rados_bench.sh [sluice bench flags...]
#   SLUICE=path/to/sluice   binary (default build/sluice)
#   PATTERNS="1x16 8x2"     layouts RANKSxQD: ranks (rados bench processes),
#                           writes in flight per rank. 1x16 is rados bench's
#                           default pattern (one client, 16 writes in
#                           flight); 8x2 is eight ranks writing eight
#                           objects at once, the same 16 in flight
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

. "$here/bench/ceph_lib.sh"
run_name=sluice-rados-bench-$$
max_ranks=1
for p in $patterns; do [ "${p%x*}" -gt "$max_ranks" ] 2>/dev/null && max_ranks=${p%x*}; done
cleanup() {  # what an interrupted rados bench left behind
  local i
  for ((i = 0; i < max_ranks; i++)); do
    rados -p "${SLUICE_CEPH_POOL:-}" cleanup --run-name "$run_name-$i" >/dev/null 2>&1 || true
  done
  ceph_cluster_done
}
trap cleanup EXIT
ceph_cluster_up
pool=$SLUICE_CEPH_POOL
# The object size sluice will use: --object-size (1 GiB by default) clamped
# to the cluster's osd_max_object_size, which the backend reads the same way.
max_object=$(ceph config show osd.0 osd_max_object_size)
object=$((max_object < (1 << 30) ? max_object : (1 << 30)))
for p in $patterns; do
  [[ $p =~ ^[1-9][0-9]*x[1-9][0-9]*$ ]] || { echo "rados_bench: pattern '$p' is not RANKSxQD" >&2; exit 1; }
done

rb_run() {  # rb_run RANKS QD; prints "write_MiB/s read_MiB/s" of all RANKS processes together
  local ranks=$1 qd=$2 i
  local out=$(mktemp -d)
  for ((i = 0; i < ranks; i++)); do
    rados bench -p "$pool" "$seconds" write -b "$io" -O "$object" -t "$qd" \
      --no-cleanup --run-name "$run_name-$i" >"$out/w$i" 2>/dev/null &
  done
  wait
  # The page-cache drop sluice bench makes between its write and read phases
  # (on this single node it also evicts the OSDs' RocksDB files), before
  # rados bench's seq too, so that both read under the same conditions.
  sync
  { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null || true
  for ((i = 0; i < ranks; i++)); do
    rados bench -p "$pool" "$seconds" seq -t "$qd" --run-name "$run_name-$i" >"$out/r$i" 2>/dev/null &
  done
  wait
  for ((i = 0; i < ranks; i++)); do rados -p "$pool" cleanup --run-name "$run_name-$i" >/dev/null; done
  # All processes' bytes over the longest one's time (rados bench's "MB" is MiB).
  python3 - "$out" "$ranks" "$io" <<'PY'
import re, sys
out, ranks, io = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def rate(kind, count_label):
    total, longest = 0, 0.0
    for i in range(ranks):
        text = open(f"{out}/{kind}{i}").read()
        total += int(re.search(count_label + r":\s+(\d+)", text).group(1)) * io
        longest = max(longest, float(re.search(r"Total time run:\s+([\d.]+)", text).group(1)))
    return total / longest / 2**20
print(f"{rate('w', 'Total writes made'):.1f} {rate('r', 'Total reads made'):.1f}")
PY
  rm -rf "$out"
}

rb_round() {  # one rados bench run in every layout; appends "PATTERN W/R" to rb
  local p w r
  for p in $patterns; do
    echo "== rados bench, ${p%x*} process(es) x ${p#*x} in flight" >&2
    read -r w r <<<"$(rb_run "${p%x*}" "${p#*x}")"
    echo "rados bench ${p}: write $w MiB/s, seq $r MiB/s" >&2
    rb+=("$1 $p $w/$r")
  done
}

echo "== $((io >> 20)) MiB writes to $((object >> 20)) MiB objects, layouts $patterns" >&2
rb=()
rb_round 0
jsons=()
for ((round = 1; round <= rounds; round++)); do
  for p in $patterns; do
    ranks=${p%x*} qd=${p#*x}
    echo "== round $round/$rounds: sluice bench, $ranks ranks x qd $qd" >&2
    jsons+=("$round $p $("$sluice" bench --store "$SLUICE_RADOS_URI&qd=$qd" --ranks "$ranks" --size "$size" \
                           --checkpoints "$checkpoints" --object-size "$object" --io-size "$io" --json "$@")")
  done
  rb_round "$round"
done

python3 - "$patterns" "${#rb[@]}" "${rb[@]}" "${jsons[@]}" <<'PY'
import json, statistics, sys
patterns = sys.argv[1].split()
n_rb = int(sys.argv[2])
rb = {}  # (round, pattern) -> (write GiB/s, read GiB/s)
for arg in sys.argv[3:3 + n_rb]:
    round_, pattern, rates = arg.split()
    rb[(int(round_), pattern)] = tuple(float(x) / 1024 for x in rates.split("/"))
runs = {}
for arg in sys.argv[3 + n_rb:]:
    round_, pattern, text = arg.split(" ", 2)
    runs.setdefault(pattern, []).append((int(round_), json.loads(text)))
rounds = max(r for r, _ in rb)
for pattern in patterns:
    print(f"rados bench {pattern:5} write GiB/s: " + " ".join(f"{rb[(r, pattern)][0]:.3f}" for r in range(rounds + 1)))
    print(f"rados bench {pattern:5} seq   GiB/s: " + " ".join(f"{rb[(r, pattern)][1]:.3f}" for r in range(rounds + 1)))
print(f"{'sluice':18}{'GiB/s':>7}{'ratio':>7}{'CPU s/GiB':>11}   per round: GiB/s / rados bench of the layout on either side")
for pattern in patterns:
    for what, k in (("write", 0), ("read", 1)):
        rates, ratios, cpus, cells = [], [], [], []
        for round_, s in runs[pattern]:
            rate = s[what]["median_gib_per_second"]
            ceiling = (rb[(round_ - 1, pattern)][k] + rb[(round_, pattern)][k]) / 2
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
