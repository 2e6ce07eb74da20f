#!/usr/bin/env bash
# A file store over two directories, one on a slow device: a loop device
# whose writes this test throttles with the cgroup block-I/O controller
# (cgroup v1 blkio.throttle.write_bps_device, or v2 io.max) for the sluice
# processes it starts. Checks that hedged writes keep a save off the slow
# device (and far faster than with hedge=off), that only the copies the
# manifest names remain, that the checkpoint restores bit-exact from the
# home directory alone, that a save killed mid-hedge leaves nothing gc does
# not reclaim, and that the slow directory is refused as a store of its own.
#
# Usage: tests/slow_dir_test.sh SLUICE_BIN
# Needs root, loop devices and a block-I/O cgroup controller; without them
# it skips (exit 77), except under CI=true, where a skip is a failure.
set -u
sluice=$1
pass=0 fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "not ok - $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@" >/dev/null; then ok "$what"; else bad "$what"; fi; }

skip() {
  if [ "${CI:-}" = true ]; then echo "not ok - cannot run under CI=true: $*"; echo "0 passed, 1 failed"; exit 1; fi
  echo "SKIP: $*"; exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root for a loop device and a cgroup"
command -v mkfs.ext4 >/dev/null || skip "mkfs.ext4 missing (apt-get install e2fsprogs)"

rate=$((8 << 20))  # the slow device's write rate, bytes/s
work=$(mktemp -d /tmp/sluice-slowdir-XXXXXX)
loop="" cg=""
cleanup() {
  # A killed writer's I/O threads may linger while the device absorbs
  # what it had queued: the cgroup goes once they have.
  if [ -n "$cg" ]; then
    for _ in $(seq 1 150); do rmdir "$cg" 2>/dev/null && break; sleep 0.2; done
    [ -d "$cg" ] && echo "# cgroup $cg could not be removed"
  fi
  mountpoint -q "$work/slow" 2>/dev/null && umount -l "$work/slow"
  [ -n "$loop" ] && losetup -d "$loop" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

truncate -s 1G "$work/slow.img"
loop=$(losetup -f --show "$work/slow.img" 2>/dev/null) || skip "no loop device"
mkfs.ext4 -q "$loop" || skip "mkfs.ext4 failed on $loop"
mkdir -p "$work/slow" "$work/fast" "$work/in"
mount "$loop" "$work/slow" || skip "cannot mount $loop"
majmin=$(lsblk -dno MAJ:MIN "$loop" | tr -d ' ')
if [ -d /sys/fs/cgroup/blkio ] && [ -f /sys/fs/cgroup/blkio/cgroup.procs ]; then
  cg=/sys/fs/cgroup/blkio/sluice-slowdir-$$
  mkdir "$cg" && echo "$majmin $rate" > "$cg/blkio.throttle.write_bps_device" || skip "cannot set a blkio throttle"
elif grep -qw io /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  echo +io > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
  cg=/sys/fs/cgroup/sluice-slowdir-$$
  mkdir "$cg" && echo "$majmin wbps=$rate" > "$cg/io.max" || skip "cannot set io.max"
elif [ ! -e /sys/fs/cgroup/cgroup.controllers ] && [ ! -d /sys/fs/cgroup/blkio ]; then
  # A chroot (e.g. debootstrap) without /sys mounted: the machine may
  # well have the controller; this environment cannot reach it.
  skip "no cgroup filesystem at /sys/fs/cgroup (a chroot or container without /sys/fs/cgroup mounted?)"
else
  skip "no block-I/O cgroup controller here (cgroup v1 blkio, or v2 io in $(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null || echo '?'))"
fi
# Runs a command in the throttled cgroup.
slow() { bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" "$@"; }

# The throttle works: 8 MiB of direct writes take about a second.
t0=$(date +%s.%N)
slow dd if=/dev/zero of="$work/slow/probe" bs=1M count=8 oflag=direct status=none
t1=$(date +%s.%N)
rm -f "$work/slow/probe"
python3 -c "import sys; sys.exit(0 if $t1 - $t0 > 0.5 else 1)" || skip "the throttle did not slow the loop device"

head -c $((256 << 20)) /dev/urandom > "$work/in/blob.bin"
store="file://$work/fast?dirs=$work/slow/d"

field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
data_files() {  # data objects of checkpoint $1 in both directories
  find "$work/fast/ckpt/$1" "$work/slow/d/ckpt/$1" -name '*.dat' 2>/dev/null | wc -l
}

# ---------------------------------------------------------- 1. hedged save
t0=$(date +%s.%N)
slow "$sluice" save --tier "$store" --name j --step 1 --from "$work/in" --json > "$work/j.json" 2> "$work/j.err"
rc=$?
t1=$(date +%s.%N)
check "hedged save past a slow directory exits 0" test $rc -eq 0
[ $rc -eq 0 ] || cat "$work/j.err"
hedged_s=$(field "$work/j.json" "d['seconds']")
hedged_wall=$(python3 -c "print(round($t1 - $t0, 2))")
moved=$(field "$work/j.json" "d['tiers'][0]['hedging']['objects_hedged'] + d['tiers'][0]['hedging']['slow_placements_avoided']")
check "it hedged or placed objects away from the slow directory ($moved)" test "$moved" -ge 1
check "its extra bytes stay within the budget" python3 -c "
import json; h = json.load(open('$work/j.json'))['tiers'][0]['hedging']
assert h['extra_bytes'] <= h['budget'] * (h['bytes_written'] + (256 << 20)), h"
check "the save is committed" test "$(field "$work/j.json" "d['committed']")" = True
check "only the 4 copies the manifest names remain" test "$(data_files j)" -eq 4

# ------------------------------------------------ 2. hedge=off, for contrast
slow "$sluice" save --tier "file://$work/fast?hedge=off" --name k --step 1 --from "$work/in" --json > "$work/k.json"
check "an unhedged save exits 0" test $? -eq 0
off_s=$(field "$work/k.json" "d['seconds']")
echo "# 256 MiB save, one of two directories written at 8 MiB/s: hedged ${hedged_s}s (process ${hedged_wall}s), hedge=off ${off_s}s"
check "hedged saves are at least 3x faster than hedge=off ($hedged_s s vs $off_s s)" \
  python3 -c "import sys; sys.exit(0 if $hedged_s * 3 < $off_s else 1)"
check "hedge=off spreads objects over both directories" \
  test "$(find "$work/slow/d/ckpt/k" -name '*-d1.dat' | wc -l)" -ge 1

# ---------------------------------------- 3. restore from the home directory
"$sluice" restore --tier "file://$work/fast" --name j --step 1 --to "$work/out-j" > /dev/null
check "the hedged checkpoint restores" test $? -eq 0
check "bit-exact" cmp "$work/in/blob.bin" "$work/out-j/blob.bin"
"$sluice" restore --tier "file://$work/fast" --name k --step 1 --to "$work/out-k" > /dev/null
check "the spread checkpoint restores bit-exact" cmp "$work/in/blob.bin" "$work/out-k/blob.bin"
"$sluice" verify --store "file://$work/fast" --name k --step 1 > /dev/null
check "verify reads objects in both directories" test $? -eq 0

# --------------------------------------------- 4. kill -9 mid-hedge, then gc
# Killed once a hedge is under way: an object has a copy in the slow
# directory and another, under its plain name, in the home.
# (bash -c itself, not through slow(): $! must be the process that execs sluice.)
bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" \
  "$sluice" save --tier "$store" --name m --step 1 --from "$work/in" > /dev/null 2>&1 &
pid=$!
mid_hedge=""
for _ in $(seq 1 1500); do
  for f in $(find "$work/slow/d/ckpt/m" -name '*-d1.dat' 2>/dev/null); do
    rel=${f#"$work/slow/d/"}
    if [ -e "$work/fast/${rel%-d1.dat}.dat" ]; then kill -9 "$pid"; mid_hedge=$rel; break 2; fi
  done
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.01
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
check "a save was killed with -9 mid-hedge (${mid_hedge:-never seen})" test -n "$mid_hedge"
"$sluice" ls --store "file://$work/fast" --name m --json > "$work/m.json"
check "the killed save is not committed" python3 -c "
import json; assert not [c for c in json.load(open('$work/m.json')) if c.get('name') == 'm'], 'listed'"
"$sluice" gc --store "file://$work/fast" --min-age 0 > /dev/null
check "gc exits 0" test $? -eq 0
check "gc leaves none of the killed save's copies, in either directory" test "$(data_files m)" -eq 0
[ "$(data_files m)" -eq 0 ] || find "$work/fast/ckpt/m" "$work/slow/d/ckpt/m" -type f
check "gc keeps the committed checkpoints' objects" test "$(( $(data_files j) + $(data_files k) ))" -eq 8
"$sluice" restore --tier "file://$work/fast" --name j --step 1 --to "$work/out-j2" > /dev/null
check "j still restores bit-exact after gc" cmp "$work/in/blob.bin" "$work/out-j2/blob.bin"

# ------------------------------------------------------------ 5. bad input
out=$("$sluice" ls --store "file://$work/slow/d" 2>&1)
check "the slow directory alone is refused (exit 2)" test $? -eq 2
check "naming the store it belongs to" grep -q "directory 1 of the multi-directory store at $work/fast" <<< "$out"
out=$("$sluice" ls --store "file://$work/fast?dirs=$work/elsewhere" 2>&1)
check "other directories than the recorded ones are refused (exit 2)" test $? -eq 2
check "naming the recorded ones" grep -q "spans $work/slow/d" <<< "$out"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
