#!/usr/bin/env bash
# Ceph's own ceiling and sluice in one run, on the same pool: `rados bench`
# write then seq at the object size, write size and concurrency sluice uses,
# then `sluice bench --store rados://...` in each rank layout of PATTERNS
# (all at the same total writes in flight), then rados bench again (a shared
# VM drifts), and the sluice/rados-bench ratios against rados bench's best.
#
# Usage: bench/rados_bench.sh [sluice bench flags...]
#   SLUICE=path/to/sluice   binary (default build/sluice)
#   PATTERNS="1x16 8x2"     sluice layouts RANKSxQD: ranks, writes in flight
#                           per rank. 1x16 is rados bench's own pattern (one
#                           client, 16 writes in flight); 8x2 is eight ranks
#                           writing eight objects at once. rados bench runs
#                           RANKS*QD operations in flight (the same for all)
#   SIZE=3GiB CHECKPOINTS=2 sluice bench's checkpoint size and count (~1 min each)
#   SECONDS_PER_RUN=20      each rados bench write
# Uses the cluster of scripts/ceph-dev-cluster ($SLUICE_CEPH_DIR), starting
# one if none runs (and stopping it at the end).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
sluice=${SLUICE:-$here/build/sluice}
patterns=${PATTERNS:-1x16 8x2}
size=${SIZE:-3GiB}
checkpoints=${CHECKPOINTS:-2}
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
  r=$(rados bench -p "$pool" "$seconds" seq -t "$threads" --run-name "$run_name" 2>/dev/null |
        awk -F: '/^Bandwidth \(MB\/sec\)/ {print $2}')
  rados -p "$pool" cleanup --run-name "$run_name" >/dev/null
  echo "$w $r"  # rados bench's "MB/sec" is MiB/s
}

echo "== rados bench (before): $((io >> 20)) MiB writes to $((object >> 20)) MiB objects, $threads in flight" >&2
read -r w1 r1 <<<"$(rb_run)"
echo "rados bench write $w1 MiB/s, seq $r1 MiB/s" >&2
jsons=()
for p in $patterns; do
  ranks=${p%x*} qd=${p#*x}
  echo "== sluice bench: $ranks ranks x qd $qd" >&2
  jsons+=("$("$sluice" bench --store "$SLUICE_RADOS_URI&qd=$qd" --ranks "$ranks" --size "$size" \
              --checkpoints "$checkpoints" --object-size "$object" --io-size "$io" --json "$@")")
done
echo "== rados bench (after)" >&2
read -r w2 r2 <<<"$(rb_run)"
echo "rados bench write $w2 MiB/s, seq $r2 MiB/s" >&2

python3 - "$w1" "$w2" "$r1" "$r2" "${jsons[@]}" <<'PY'
import json, sys
bw = max(float(sys.argv[1]), float(sys.argv[2])) / 1024
br = max(float(sys.argv[3]), float(sys.argv[4])) / 1024
print(f"rados bench best: write {bw:.3f} GiB/s, seq {br:.3f} GiB/s")
print(f"{'sluice':22}{'GiB/s':>8}{'ratio':>7}{'CPU s/GiB':>11}   per-checkpoint seconds")
for arg in sys.argv[5:]:
    s = json.loads(arg)
    layout = f"{s['ranks']}x qd {s['io_path'].split('qd ')[1].split(',')[0]}"
    for what, best in (("write", bw), ("read", br)):
        r = s[what]
        print(f"{what + ' ' + layout:22}{r['median_gib_per_second']:8.3f}"
              f"{r['median_gib_per_second'] / best:7.2f}{r['cpu_seconds_per_gib']:11.3f}   "
              + " ".join(f"{x:.2f}" for x in r["checkpoint_seconds"]))
s = json.loads(sys.argv[5])
print(f"({s['checkpoint_bytes']/2**30:.2f} GiB x {s['checkpoints']} checkpoints, {s['io_path'].split(',')[0]}; "
      "sluice: median over checkpoints, each checksummed + committed / every chunk verified; "
      "rados bench: best of the runs before and after)")
PY
