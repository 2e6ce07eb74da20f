#!/usr/bin/env bash
# The ceiling and sluice in one run: fio sequential O_DIRECT write and read on
# the same filesystem as the store, then `sluice bench`, then fio again (the
# disk of a shared VM drifts), and the sluice/fio ratios against fio's best.
#
# Usage: bench/run_bench.sh [STORE_DIR] [sluice bench flags...]
#   STORE_DIR defaults to /tmp/sluice-bench (created, and removed afterwards).
#   SLUICE=path/to/sluice overrides the binary (default build/sluice).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
sluice=${SLUICE:-$here/build/sluice}
dir=${1:-/tmp/sluice-bench}
shift || true
[ -x "$sluice" ] || { echo "run_bench: $sluice not built (cmake --build build)" >&2; exit 1; }
command -v fio >/dev/null || { echo "run_bench: fio not installed (scripts/install-deps.sh)" >&2; exit 1; }
mkdir -p "$dir"
cleanup() { rm -rf "$dir/fio.dat" "$dir/ckpt"; }
trap cleanup EXIT

size=${FIO_SIZE:-4G}   # matches sluice bench's default checkpoint size
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }

# fio: 2 jobs, each half the file, 4 MiB blocks, 16 deep, io_uring, O_DIRECT:
# the best of the configurations measured on this kind of machine.
fio_run() {  # $1 = write|read; prints MiB/s
  local rw=$1
  [ "$rw" = write ] && rm -f "$dir/fio.dat"
  drop
  fio --name=seq$rw --rw=$rw --filename="$dir/fio.dat" --bs=4M --iodepth=16 \
      --ioengine=io_uring --direct=1 --size=$((${size%G} / 2))G --numjobs=2 \
      --offset_increment=$((${size%G} / 2))G --group_reporting --end_fsync=1 \
      --output-format=json 2>/dev/null |
    python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(j['$rw']['bw_bytes']/2**20)"
}

echo "== fio (before)" >&2
w1=$(fio_run write); r1=$(fio_run read)
echo "fio write ${w1%.*} MiB/s, read ${r1%.*} MiB/s" >&2
rm -f "$dir/fio.dat"
echo "== sluice bench" >&2
json=$("$sluice" bench --store "$dir" --json "$@")
echo "== fio (after)" >&2
w2=$(fio_run write); r2=$(fio_run read)
echo "fio write ${w2%.*} MiB/s, read ${r2%.*} MiB/s" >&2
rm -f "$dir/fio.dat"

python3 - "$json" "$w1" "$w2" "$r1" "$r2" <<'PY'
import json, sys
s = json.loads(sys.argv[1])
fw = max(float(sys.argv[2]), float(sys.argv[3])) / 1024
fr = max(float(sys.argv[4]), float(sys.argv[5])) / 1024
sw, sr = s["write"]["median_gib_per_second"], s["read"]["median_gib_per_second"]
print(f"sluice bench: preset {s['preset']}, {s['ranks']} ranks ({s['mode']}), "
      f"{s['checkpoint_bytes']/2**30:.2f} GiB x {s['checkpoints']} checkpoints, {s['io_path']}")
print(f"{'':8}{'sluice GiB/s':>14}{'fio best GiB/s':>16}{'ratio':>8}{'CPU s/GiB':>11}")
print(f"{'write':8}{sw:14.2f}{fw:16.2f}{sw/fw:8.2f}{s['write']['cpu_seconds_per_gib']:11.3f}")
print(f"{'read':8}{sr:14.2f}{fr:16.2f}{sr/fr:8.2f}{s['read']['cpu_seconds_per_gib']:11.3f}")
print("per-checkpoint seconds: write " + " ".join(f"{x:.2f}" for x in s["write"]["checkpoint_seconds"]) +
      ", read " + " ".join(f"{x:.2f}" for x in s["read"]["checkpoint_seconds"]))
print("(sluice: median over checkpoints, checksummed + fsynced + committed / verified; "
      "fio: best of the runs before and after)")
PY

# The stall: a 2 GiB state held in memory, snapshotted through the staged
# pipeline, next to a bare memcpy of the same bytes (one tier: this store).
echo "== sluice bench --async (the checkpoint stall)" >&2
"$sluice" bench --async --tier "$dir" --size "${ASYNC_SIZE:-2GiB}" --checkpoints 3
