#!/usr/bin/env bash
# Does a capped drain leave the rest of the device to others? Measures fio's
# sequential O_DIRECT write throughput alone, then again while `sluice drain`
# copies a checkpoint between two stores on the same filesystem with its
# write cap at CAP_PCT% (default 50) of fio's solo figure; prints fio's share
# kept and the drain's realized rate against its cap.
#
# usage: bench/rate_cap_bench.sh [DIR] (env: SLUICE, SIZE=6GiB, SECONDS_FIO=15, CAP_PCT=50)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${SLUICE:-$here/build/sluice}
DIR=${1:-/tmp/sluice-ratecap}
SIZE=${SIZE:-6GiB}
SECS=${SECONDS_FIO:-15}
CAP_PCT=${CAP_PCT:-50}
rm -rf "$DIR"; mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT
fio_bw() {  # MiB/s of a time-based sequential direct write
  fio --name=w --rw=write --bs=1M --iodepth=16 --ioengine=io_uring --direct=1 --size=2G \
      --runtime="$SECS" --time_based --filename="$DIR/fio.dat" --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["write"]["bw_bytes"]/2**20)'
}
solo=$(fio_bw)
cap=$(python3 -c "print(int($solo * $CAP_PCT / 100))")
"$SLUICE" save --store "$DIR/a" --name capped --step 1 --synthetic "$SIZE" >/dev/null
start=$(date +%s.%N)
"$SLUICE" drain --tier "$DIR/a" --tier "$DIR/b" --rate-limit "1=${cap}MiB" --json > "$DIR/drain.json" &
drain=$!
sleep 2
with=$(fio_bw)
wait "$drain"
end=$(date +%s.%N)
python3 - "$solo" "$with" "$cap" "$DIR/drain.json" "$start" "$end" <<'PY'
import json, sys
solo, with_, cap = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
d = json.load(open(sys.argv[4]))
rate = d["bytes"] / 2**20 / d["seconds"]
print(f"fio solo write: {solo:.0f} MiB/s; drain cap {cap:.0f} MiB/s ({cap/solo*100:.0f}% of solo)")
print(f"fio during the capped drain: {with_:.0f} MiB/s = {with_/solo:.2f} of solo (target >= 0.40)")
print(f"drain realized {rate:.0f} MiB/s over {d['seconds']:.1f} s = {rate/cap:.3f} of its cap")
PY
