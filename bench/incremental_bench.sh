#!/usr/bin/env bash
# incremental_bench.sh: what an incremental save saves, against a full save
# of the same state, in alternating rounds on the same store.
#
#   bench/incremental_bench.sh [DIR] [SIZE] [ROUNDS]
#
# DIR (default /var/tmp/sluice-incr-bench) is a file store on the disk under
# test. Each round saves SIZE (default 4GiB) of synthetic state in 100 items
# with `sluice save --async`: step 2r-1 with --full, then step 2r with 5% of
# the items changed (--change 0.05, the rest as in step 2r-1), then removes
# both. Prints per kind the median bytes written (from the step's data
# objects on disk), time until durable on tier 0, and stall, and the
# ratios incremental / full. Then the cost of hashing itself:
# build/sluice-hash-bench (XXH3-128 and CRC32C against memcpy, one core).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${SLUICE:-$here/build/sluice}
DIR=${1:-/var/tmp/sluice-incr-bench}
SIZE=${2:-4GiB}
ROUNDS=${3:-5}
rm -rf "$DIR"
mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT
data_bytes() { du -sb "$DIR/ckpt/$1/$(printf '%020d' "$2")/data" 2>/dev/null | cut -f1; }
out=$(mktemp)
for r in $(seq 1 "$ROUNDS"); do
  full=$((2 * r - 1)) inc=$((2 * r))
  for kind in full incremental; do
    step=$full flags=(--full --change 0.05)
    [ "$kind" = incremental ] && step=$inc flags=(--change 0.05)
    sync
    "$SLUICE" save --store "$DIR" --name bench --step "$step" --synthetic "$SIZE" --items 100 --async \
      "${flags[@]}" --json >"$DIR/r.json"
    python3 - "$DIR/r.json" "$kind" "$(data_bytes bench "$step")" >>"$out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], int(sys.argv[3]), d["tiers"][0]["durable_seconds"], d["stall_seconds"], d["referenced_bytes"], d["bytes"])
PY
  done
  "$SLUICE" rm --store "$DIR" --name bench --step "$full" >/dev/null
  "$SLUICE" rm --store "$DIR" --name bench --step "$inc" >/dev/null
done
python3 - "$out" "$SIZE" "$ROUNDS" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def med(kind, col):
    return statistics.median(float(r[col]) for r in rows if r[0] == kind)
print(f"incremental vs full save, {sys.argv[2]} in 100 items, 5% of items changed, {sys.argv[3]} rounds alternating, medians")
print(f"{'':14}{'written':>14}{'durable (s)':>14}{'stall (s)':>12}")
for kind in ("full", "incremental"):
    print(f"{kind:14}{med(kind, 1) / 2**20:11.1f} MiB{med(kind, 2):14.3f}{med(kind, 3):12.3f}")
print(f"{'ratio':14}{med('incremental', 1) / med('full', 1):14.3f}{med('incremental', 2) / med('full', 2):14.3f}"
      f"{med('incremental', 3) / med('full', 3):12.3f}")
print(f"incremental steps referenced {med('incremental', 4) / med('incremental', 5):.3f} of their bytes")
PY
rm -f "$out"
"$here/build/sluice-hash-bench" 1 5
