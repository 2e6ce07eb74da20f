#!/usr/bin/env bash
# What a throttled rebuild costs the workload on the same disk. Each round
# measures fio's sequential O_DIRECT write throughput alone, then again while
# `sluice rebuild` refills an empty tier 0 (in DIR) from tier 1 with its write
# cap at CAP_PCT% (default 30) of that round's solo figure, sampling the
# rebuilt tier's size every second to check the cap over 10 s windows. Prints
# per round and the medians over ROUNDS (default 3): fio's share kept (target
# >= 0.65) and the rebuild's rate per 10 s window against its cap (target
# within 5%).
#
# Tier 1 is SRC (default a directory in /dev/shm): it stands in for the
# durable tier a lost tier 0 is rebuilt from (Ceph, across the network), so
# the disk carries the rebuild's writes alone. SRC on DIR's disk measures the
# co-located case, where the rebuild's reads come out of the same device.
#
# usage: bench/rebuild_bench.sh [DIR] (env: SLUICE, SRC=/dev/shm/..., SIZE=
#        4GiB or 22 s at the cap if larger, SECONDS_FIO=15, CAP_PCT=30, ROUNDS=3)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${SLUICE:-$here/build/sluice}
DIR=${1:-/tmp/sluice-rebuild-bench}
SECS=${SECONDS_FIO:-15}
CAP_PCT=${CAP_PCT:-30}
ROUNDS=${ROUNDS:-3}
SRC=${SRC:-/dev/shm/sluice-rebuild-src}
rm -rf "$DIR" "$SRC"; mkdir -p "$DIR"
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$DIR" "$SRC"' EXIT
fio_bw() {  # MiB/s of a time-based sequential direct write
  fio --name=w --rw=write --bs=1M --iodepth=16 --ioengine=io_uring --direct=1 --size=2G \
      --runtime="$1" --time_based --filename="$DIR/fio.dat" --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["write"]["bw_bytes"]/2**20)'
}
for r in $(seq "$ROUNDS"); do
  solo=$(fio_bw "$SECS")
  cap=$(python3 -c "print(int($solo * $CAP_PCT / 100))")
  if [ "$r" = 1 ]; then
    # At least 4 GiB, and enough for 22 s at the cap: two full 10 s windows.
    SIZE=${SIZE:-$(python3 -c "print(max(4096, $cap * 22))")MiB}
    # 64 MiB objects: the rebuilt tier grows in steps small against a window.
    "$SLUICE" save --store "$SRC" --name rb --step 1 --synthetic "$SIZE" --items 16 --object-size 64MiB >/dev/null
  fi
  rm -rf "$DIR/a"; mkdir -p "$DIR/a"
  "$SLUICE" rebuild --tier "$DIR/a" --tier "$SRC" --rate-limit "${cap}MiB" --json > "$DIR/rebuild.$r.json" &
  rb=$!
  ( while kill -0 "$rb" 2>/dev/null; do
      printf '%s %s\n' "$(date +%s.%N)" "$(du -sb "$DIR/a" | cut -f1)"
      sleep 1
    done ) > "$DIR/samples.$r" &
  sleep 2
  with=$(fio_bw "$SECS")
  wait "$rb"
  sleep 1
  echo "$solo $with $cap" > "$DIR/fio.$r"
done
python3 - "$DIR" "$ROUNDS" <<'PY'
import json, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
shares, caps, medians = [], [], []
for r in range(1, n + 1):
    solo, with_, cap = map(float, open(f"{d}/fio.{r}").read().split())
    j = json.load(open(f"{d}/rebuild.{r}.json"))
    samples = [tuple(map(float, l.split())) for l in open(f"{d}/samples.{r}") if len(l.split()) == 2]
    rate = j["bytes"] / 2**20 / j["seconds"]
    ratios = []
    for i, (t0, b0) in enumerate(samples):
        if t0 - samples[0][0] < 1:
            continue  # start-up
        for t1, b1 in samples[i + 1:]:
            if t1 - t0 >= 10:
                if b1 < samples[-1][1]:  # inside the copy, not after it ended
                    ratios.append((b1 - b0) / 2**20 / (t1 - t0) / cap)
                break
    ratios.sort()
    shares.append(with_ / solo)
    caps.append(rate / cap)
    w = f"10 s windows min {ratios[0]:.3f} median {statistics.median(ratios):.3f} max {ratios[-1]:.3f}" if ratios else "no full 10 s window"
    if ratios:
        medians.append(statistics.median(ratios))
    print(f"round {r}: fio solo {solo:.0f} MiB/s, during the rebuild {with_:.0f} = {with_/solo:.2f} of solo; "
          f"rebuild {j['bytes']/2**30:.2f} GiB at {rate:.0f} MiB/s = {rate/cap:.3f} of its {cap:.0f} MiB/s cap "
          f"({w}), {j['cpu_seconds']:.2f} CPU-s, ok={j['ok']}")
print(f"median over {n} rounds: fio keeps {statistics.median(shares):.2f} of solo (target >= 0.65); "
      f"rebuild at {statistics.median(caps):.3f} of its cap overall, "
      f"{statistics.median(medians) if medians else float('nan'):.3f} per 10 s window (target 0.95-1.05)")
PY
