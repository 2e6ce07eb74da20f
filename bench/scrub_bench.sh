#!/usr/bin/env bash
# Scrub's cost and cap. Saves SIZE (default 2GiB) to a file store in DIR and
# scrubs it uncapped (rate and CPU-s per GiB, target <= 0.2) against fio's
# sequential O_DIRECT read of a file of the same size on the same filesystem
# (the ceiling), runs alternating ROUNDS times (default 3) and prints medians;
# then scrubs with --rate-limit at CAP_PCT% (default 50) of fio's figure and
# prints the realized rate against the cap (target within 5%).
#
# usage: bench/scrub_bench.sh [DIR] (env: SLUICE, SIZE=2GiB, ROUNDS=3, CAP_PCT=50)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${SLUICE:-$here/build/sluice}
DIR=${1:-/tmp/sluice-scrub-bench}
SIZE=${SIZE:-2GiB}
ROUNDS=${ROUNDS:-3}
CAP_PCT=${CAP_PCT:-50}
rm -rf "$DIR"; mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT
"$SLUICE" save --store "$DIR/s" --name sc --step 1 --synthetic "$SIZE" --items 16 >/dev/null
bytes=$("$SLUICE" ls --store "$DIR/s" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["bytes"])')
fio --name=prep --rw=write --bs=4M --direct=1 --size="$bytes" --filename="$DIR/fio.dat" >/dev/null 2>&1
for i in $(seq "$ROUNDS"); do
  "$SLUICE" scrub --store "$DIR/s" --json > "$DIR/scrub.$i.json"
  fio --name=r --rw=read --bs=4M --iodepth=16 --ioengine=io_uring --direct=1 --size="$bytes" \
      --filename="$DIR/fio.dat" --output-format=json 2>/dev/null > "$DIR/fio.$i.json"
done
fio_med=$(python3 - "$DIR" "$ROUNDS" <<'PY'
import json, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
fio = [json.load(open(f"{d}/fio.{i}.json"))["jobs"][0]["read"]["bw_bytes"] / 2**20 for i in range(1, n + 1)]
print(statistics.median(fio))
PY
)
cap=$(python3 -c "print(int($fio_med * $CAP_PCT / 100))")
"$SLUICE" scrub --store "$DIR/s" --rate-limit "${cap}MiB" --json > "$DIR/capped.json"
python3 - "$DIR" "$ROUNDS" "$cap" <<'PY'
import json, statistics, sys
d, n, cap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
sc = [json.load(open(f"{d}/scrub.{i}.json")) for i in range(1, n + 1)]
fio = [json.load(open(f"{d}/fio.{i}.json"))["jobs"][0]["read"]["bw_bytes"] / 2**20 for i in range(1, n + 1)]
rates = [s["bytes"] / 2**20 / s["seconds"] for s in sc]
cpu = [s["cpu_seconds"] / (s["bytes"] / 2**30) for s in sc]
gib = sc[0]["bytes"] / 2**30
print(f"scrub uncapped of {gib:.2f} GiB: median {statistics.median(rates):.0f} MiB/s "
      f"(min {min(rates):.0f}, max {max(rates):.0f}); fio read median {statistics.median(fio):.0f} MiB/s; "
      f"ratio {statistics.median(rates)/statistics.median(fio):.2f}")
print(f"scrub CPU: median {statistics.median(cpu):.3f} CPU-s per GiB (target <= 0.2)")
c = json.load(open(f"{d}/capped.json"))
rate = c["bytes"] / 2**20 / c["seconds"]
print(f"scrub --rate-limit {cap:.0f}MiB: {rate:.0f} MiB/s over {c['seconds']:.1f} s = {rate/cap:.3f} of its cap "
      f"(target within 0.95-1.05), {c['cpu_seconds']/gib:.3f} CPU-s per GiB")
PY
