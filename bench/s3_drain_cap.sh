#!/usr/bin/env bash
# Does a drain from a file tier to an s3:// tier hold its rate cap? Saves
# SIZE to a file tier 0, then drains it to the S3 tier with
# --rate-limit 1=CAP, ROUNDS times; prints each drain's rate (its --json
# bytes over its seconds, and over the whole process) against the cap, and
# the median. The cap must be under what the server takes uncapped for the
# figure to mean anything: run bench/s3_bench.py for that.
#
# usage: eval "$(scripts/ceph-dev-cluster env)"; bench/s3_drain_cap.sh
#        (env: SLUICE, SIZE=3GiB, CAP_MIB=100, ROUNDS=3, DIR=/tmp/sluice-s3-drain,
#         SLUICE_S3_URI, SLUICE_S3_ACCESS_KEY / SLUICE_S3_SECRET_KEY or AWS_* credentials)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${SLUICE:-$here/build/sluice}
SIZE=${SIZE:-3GiB}
CAP=${CAP_MIB:-100}
ROUNDS=${ROUNDS:-3}
DIR=${DIR:-/tmp/sluice-s3-drain}
: "${SLUICE_S3_URI:?set it, e.g. eval \"\$(scripts/ceph-dev-cluster env)\"}"
export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-${SLUICE_S3_ACCESS_KEY:-}}
export AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-${SLUICE_S3_SECRET_KEY:-}}
location=${SLUICE_S3_URI%%\?*}
query=${SLUICE_S3_URI#"$location"}
S3=${location%/}/drain-cap-$$$query
rm -rf "$DIR"; mkdir -p "$DIR"
cleanup() { "$SLUICE" gc --store "$S3" >/dev/null 2>&1 || true; rm -rf "$DIR"; }
trap cleanup EXIT
rates=()
for r in $(seq "$ROUNDS"); do
  "$SLUICE" save --store "$DIR/t0" --name capped --step "$r" --synthetic "$SIZE" --full >/dev/null
  t0=$(date +%s.%N)
  "$SLUICE" drain --tier "$DIR/t0" --tier "$S3" --name capped --rate-limit "1=${CAP}MiB" --json >"$DIR/drain.json"
  t1=$(date +%s.%N)
  read -r own whole < <(python3 - "$DIR/drain.json" "$t0" "$t1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{d['bytes'] / d['seconds'] / 2**20:.1f} {d['bytes'] / (float(sys.argv[3]) - float(sys.argv[2])) / 2**20:.1f}")
EOF
)
  rates+=("$own")
  echo "round $r: drained at $own MiB/s (whole process $whole MiB/s), cap $CAP MiB/s: $(python3 -c "print(f'{$own / $CAP:.3f}')")x"
  "$SLUICE" rm --store "$S3" --name capped --step "$r" >/dev/null
  "$SLUICE" rm --store "$DIR/t0" --name capped --step "$r" >/dev/null
done
med=$(printf '%s\n' "${rates[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}')
echo "median: $med MiB/s against a cap of $CAP MiB/s = $(python3 -c "print(f'{$med / $CAP:.3f}')")x (within 10%: $(python3 -c "print(abs($med / $CAP - 1) <= 0.10)"))"
