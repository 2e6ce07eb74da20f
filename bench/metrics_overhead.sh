#!/usr/bin/env bash
# metrics_overhead.sh: what --metrics-listen costs a save, in one run.
#
#   bench/metrics_overhead.sh path/to/sluice DIR [SIZE] [ROUNDS]
#
# Alternates `sluice bench` (write then restore, SIZE per checkpoint, 3
# checkpoints) without and with --metrics-listen, the latter scraped every
# 0.5 s by curl meanwhile, ROUNDS pairs (default 5), on a store in DIR
# (removed after each round). Prints each round's median write and read
# GiB/s, then the medians and the with/without ratios next to the spread
# between rounds without metrics.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 path/to/sluice DIR [SIZE] [ROUNDS]" >&2; exit 2; }
SLUICE=$1 DIR=$2 SIZE=${3:-2GiB} ROUNDS=${4:-5}
command -v curl >/dev/null || { echo "curl is required" >&2; exit 2; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
results=$(mktemp)
trap 'rm -rf "$DIR/metrics-bench" "$results"' EXIT
run() {  # run LABEL [FLAGS...]
  local label=$1
  shift
  rm -rf "$DIR/metrics-bench"
  local scraper=""
  if [ $# -gt 0 ]; then
    (set +e; while sleep 0.5; do curl -s -o /dev/null "http://127.0.0.1:$port/metrics"; done) &
    scraper=$!
  fi
  "$SLUICE" bench --store "$DIR/metrics-bench" --size "$SIZE" --checkpoints 3 --json "$@" 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(sys.argv[1], d["write"]["median_gib_per_second"], d["read"]["median_gib_per_second"])' "$label" |
    tee -a "$results"
  [ -z "$scraper" ] || kill "$scraper" 2>/dev/null || true
}
for r in $(seq "$ROUNDS"); do
  run without
  run with --metrics-listen "127.0.0.1:$port"
done
python3 - "$results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def col(label, i): return [float(r[i]) for r in rows if r[0] == label]
for i, what in ((1, "write"), (2, "read")):
    wo, w = col("without", i), col("with", i)
    spread = (max(wo) - min(wo)) / statistics.median(wo)
    print(f"{what}: without {statistics.median(wo):.3f} GiB/s, with metrics {statistics.median(w):.3f} GiB/s, "
          f"ratio {statistics.median(w) / statistics.median(wo):.3f}; spread without metrics {spread:.1%}")
PY
