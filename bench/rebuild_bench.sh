#!/usr/bin/env bash
# What a throttled rebuild costs the workload on the same disk. Measures fio's
# sequential O_DIRECT write throughput alone, then again while `sluice
# rebuild` refills an empty tier 0 from tier 1 (both on DIR's filesystem)
# with its write cap at CAP_PCT% (default 30) of fio's solo figure; samples
# the rebuilt tier's size every second to check the cap over 10 s windows.
# Prints fio's share kept (target >= 0.65) and the rebuild's rate per window
# against its cap (target within 5%).
#
# usage: bench/rebuild_bench.sh [DIR] (env: SLUICE, SIZE=4GiB or 22 s at the
#        cap if larger, SECONDS_FIO=15, CAP_PCT=30)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${SLUICE:-$here/build/sluice}
DIR=${1:-/tmp/sluice-rebuild-bench}
SECS=${SECONDS_FIO:-15}
CAP_PCT=${CAP_PCT:-30}
rm -rf "$DIR"; mkdir -p "$DIR"
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$DIR"' EXIT
fio_bw() {  # MiB/s of a time-based sequential direct write
  fio --name=w --rw=write --bs=1M --iodepth=16 --ioengine=io_uring --direct=1 --size=2G \
      --runtime="$1" --time_based --filename="$DIR/fio.dat" --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["write"]["bw_bytes"]/2**20)'
}
solo=$(fio_bw "$SECS")
cap=$(python3 -c "print(int($solo * $CAP_PCT / 100))")
# At least 4 GiB, and enough for 22 s at the cap: two full 10 s windows.
size_mib=$(python3 -c "print(max(4096, $cap * 22))")
SIZE=${SIZE:-${size_mib}MiB}
"$SLUICE" save --store "$DIR/b" --name rb --step 1 --synthetic "$SIZE" --items 16 >/dev/null
mkdir -p "$DIR/a"
"$SLUICE" rebuild --tier "$DIR/a" --tier "$DIR/b" --rate-limit "${cap}MiB" --json > "$DIR/rebuild.json" &
rb=$!
( while kill -0 "$rb" 2>/dev/null; do
    printf '%s %s\n' "$(date +%s.%N)" "$(du -sb "$DIR/a" | cut -f1)"
    sleep 1
  done ) > "$DIR/samples" &
sleep 2
with=$(fio_bw "$SECS")
wait "$rb"
sleep 1
python3 - "$solo" "$with" "$cap" "$DIR/rebuild.json" "$DIR/samples" <<'PY'
import json, sys
solo, with_, cap = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
d = json.load(open(sys.argv[4]))
samples = [tuple(map(float, l.split())) for l in open(sys.argv[5]) if len(l.split()) == 2]
rate = d["bytes"] / 2**20 / d["seconds"]
print(f"fio solo write: {solo:.0f} MiB/s; rebuild cap {cap:.0f} MiB/s ({cap/solo*100:.0f}% of solo)")
print(f"fio during the capped rebuild: {with_:.0f} MiB/s = {with_/solo:.2f} of solo (target >= 0.65)")
print(f"rebuild: {d['bytes']/2**30:.2f} GiB in {d['seconds']:.1f} s = {rate:.0f} MiB/s = {rate/cap:.3f} of its cap, "
      f"{d['cpu_seconds']:.2f} CPU-s, ok={d['ok']}")
# 10 s windows between samples, skipping the first second (start-up).
ratios = []
for i, (t0, b0) in enumerate(samples):
    if t0 - samples[0][0] < 1:
        continue
    for t1, b1 in samples[i + 1:]:
        if t1 - t0 >= 10:
            if b1 > b0 and b1 < samples[-1][1]:  # inside the copy, not after it ended
                ratios.append((b1 - b0) / 2**20 / (t1 - t0) / cap)
            break
if ratios:
    ratios.sort()
    print(f"rebuild rate over {len(ratios)} sliding 10 s windows: min {ratios[0]:.3f}, median "
          f"{ratios[len(ratios)//2]:.3f}, max {ratios[-1]:.3f} of its cap (target within 0.95-1.05)")
else:
    print("rebuild too short for a 10 s window")
PY
