#!/usr/bin/env bash
# A new user's `sluice save` straight to RADOS, default settings, against
# `rados bench` write with its own defaults (4 MiB objects, 16 in flight), on
# the same pool, taking turns. Each tool's own figure: the save's bytes over
# its --json seconds, rados bench's "Bandwidth (MB/sec)" (MiB/s). How sluice
# lays its objects out is sluice's choice, so rados bench is not shaped like
# it (bench/rados_bench.sh does that). With VARIANTS also `hedge=off`, to show
# what the slow-OSD insurance costs a healthy cluster.
#
# Usage: bench/rados_save_bench.sh
#   SLUICE=path/to/sluice   binary (default build/sluice)
#   PAIRS=3                 alternating pairs (save, rados bench)
#   SIZE=1GiB               each save's size (--synthetic)
#   SECONDS_PER_RUN=10      each rados bench write
#   VARIANTS="default hedge=off"   store URI options of the saves in each pair
# Uses the cluster of scripts/ceph-dev-cluster ($SLUICE_CEPH_DIR), starting
# one if none runs (and stopping it at the end). Prints each run, then the
# medians and ratios.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
sluice=${SLUICE:-$here/build/sluice}
pairs=${PAIRS:-3}
size=${SIZE:-1GiB}
seconds=${SECONDS_PER_RUN:-10}
variants=${VARIANTS:-default hedge=off}
[ -x "$sluice" ] || { echo "rados_save_bench: $sluice not built (cmake --build build)" >&2; exit 1; }
command -v rados >/dev/null || { echo "rados_save_bench: rados not installed (scripts/install-deps.sh)" >&2; exit 1; }
. "$here/bench/ceph_lib.sh"
run_name=sluice-save-bench-$$
cleanup() {
  rados -p "${SLUICE_CEPH_POOL:-}" cleanup --run-name "$run_name" >/dev/null 2>&1 || true
  ceph_cluster_done
}
trap cleanup EXIT
ceph_cluster_up
pool=$SLUICE_CEPH_POOL
store_of() {  # store_of VARIANT PAIR: the URI scripts/ceph-dev-cluster gives, under a prefix of its own
  local uri="rados://$pool/save-bench-$$-$2?${SLUICE_RADOS_URI#*\?}"
  [ "$1" != default ] && uri="$uri&$1"
  echo "$uri"
}
out=$(mktemp -d /tmp/rados-save-bench.XXXXXX)
declare -A mibps
for ((p = 1; p <= pairs; p++)); do
  for v in $variants; do
    store=$(store_of "$v" "$p")
    "$sluice" save --store "$store" --name bench --step "$p" --synthetic "$size" --full --json >"$out/save.json"
    rate=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.1f" % (d["bytes"] / d["seconds"] / 2**20))' "$out/save.json")
    hedged=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); h=d["tiers"][0].get("hedging") or {}; print(h.get("objects_hedged", "-"), h.get("extra_bytes", "-"))' "$out/save.json")
    echo "pair $p: sluice save ($v) $rate MiB/s (objects hedged, extra bytes: $hedged)"
    mibps[$v]+="$rate "
    "$sluice" rm --store "$store" --name bench --step "$p" >/dev/null
    "$sluice" gc --store "$store" --min-age 0s >/dev/null 2>&1 || true
  done
  rados bench -p "$pool" "$seconds" write --run-name "$run_name" >"$out/rb.txt" 2>&1
  rb=$(awk '/^Bandwidth \(MB\/sec\)/ {print $3}' "$out/rb.txt")
  echo "pair $p: rados bench write (4 MiB, 16 in flight) $rb MiB/s"
  mibps[rados]+="$rb "
  rados -p "$pool" cleanup --run-name "$run_name" >/dev/null 2>&1 || true
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
rbm=$(echo "${mibps[rados]}" | median)
echo "rados bench write: median $rbm MiB/s (${mibps[rados]})"
for v in $variants; do
  m=$(echo "${mibps[$v]}" | median)
  echo "sluice save ($v): median $m MiB/s (${mibps[$v]}) = $(python3 -c "print('%.3f' % ($m / $rbm))")x rados bench"
done
rm -rf "$out"
