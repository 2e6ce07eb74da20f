#!/usr/bin/env bash
# The engine against fio on one filesystem, each tool's own figure, in
# alternating pairs:
#   write: `sluice save --synthetic SIZE --full --json` (its bytes over its
#          seconds) against fio's sequential O_DIRECT write bandwidth (4 MiB
#          blocks, queue depth 16, io_uring, fsync at the end);
#   read:  `sluice verify --json` after dropping the page cache (every chunk
#          read and checked) against fio's sequential O_DIRECT read.
# Prints every pair and the medians of the ratios.
#
# Usage: bench/fio_pairs.sh [DIR]     (DIR defaults to /tmp/sluice-fio-pairs; removed afterwards)
#   SLUICE=path/to/sluice  PAIRS=7  SIZE=2GiB (a size fio also takes: 2GiB -> 2g)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
sluice=${SLUICE:-$here/build/sluice}
dir=${1:-/tmp/sluice-fio-pairs}
pairs=${PAIRS:-7}
size=${SIZE:-2GiB}
fio_size=$(echo "$size" | sed 's/GiB$/g/; s/MiB$/m/')
[ -x "$sluice" ] || { echo "fio_pairs: $sluice not built (cmake --build build)" >&2; exit 1; }
command -v fio >/dev/null || { echo "fio_pairs: fio not installed (scripts/install-deps.sh)" >&2; exit 1; }
mkdir -p "$dir"
cleanup() { rm -rf "$dir"; }
trap cleanup EXIT
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
fio_mibps() {  # fio_mibps write|read: fio's own bandwidth in MiB/s
  local rw=$1
  drop
  fio --name=seq$rw --rw=$rw --filename="$dir/fio.dat" --bs=4M --iodepth=16 --ioengine=io_uring --direct=1 \
      --size="$fio_size" --end_fsync=1 --output-format=json 2>/dev/null |
    python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]['$rw']; print('%.1f' % (j['bw_bytes'] / 2**20))"
}
json_mibps() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.1f" % (d["bytes"] / d["seconds"] / 2**20))' "$1"; }
w_ratios="" r_ratios=""
for ((p = 1; p <= pairs; p++)); do
  rm -rf "$dir/store"
  drop
  "$sluice" save --store "$dir/store" --name f --step 1 --synthetic "$size" --full --json >"$dir/save.json"
  sw=$(json_mibps "$dir/save.json")
  rm -f "$dir/fio.dat"
  fw=$(fio_mibps write)
  drop
  "$sluice" verify --store "$dir/store" --name f --json >"$dir/verify.json"
  sr=$(json_mibps "$dir/verify.json")
  fr=$(fio_mibps read)
  rw=$(python3 -c "print('%.3f' % ($sw / $fw))")
  rr=$(python3 -c "print('%.3f' % ($sr / $fr))")
  echo "pair $p: save $sw MiB/s vs fio write $fw = ${rw}x; verify $sr MiB/s vs fio read $fr = ${rr}x"
  w_ratios+="$rw " r_ratios+="$rr "
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
echo "save vs fio write: median $(echo "$w_ratios" | median)x ($w_ratios)"
echo "verify vs fio read: median $(echo "$r_ratios" | median)x ($r_ratios)"
