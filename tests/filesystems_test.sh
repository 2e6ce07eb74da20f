#!/usr/bin/env bash
# The file backend on real filesystems that this test mounts itself: XFS and
# btrfs (loop devices), ZFS (a zfs-fuse pool on a file), and a tiny ext4 for
# disk-full behaviour. On each: the backend conformance suite, a CLI round
# trip, and kill -9 during saves.
#
# Usage: tests/filesystems_test.sh SLUICE_BIN CONFORMANCE_TEST_BIN
# Needs root and loop devices; without them it skips (exit 77), except under
# CI=true, where a skip is a failure.
set -u
sluice=$1
conformance=$2
pass=0 fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "not ok - $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@" >/dev/null; then ok "$what"; else bad "$what"; fi; }
not() { ! "$@"; }

skip() {
  if [ "${CI:-}" = true ]; then echo "not ok - cannot run under CI=true: $*"; echo "0 passed, 1 failed"; exit 1; fi
  echo "SKIP: $*"; exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root to loop-mount filesystems"
command -v mkfs.xfs >/dev/null || skip "mkfs.xfs missing (apt-get install xfsprogs)"
command -v mkfs.btrfs >/dev/null || skip "mkfs.btrfs missing (apt-get install btrfs-progs)"
command -v mkfs.ext4 >/dev/null || skip "mkfs.ext4 missing (apt-get install e2fsprogs)"

work=$(mktemp -d /tmp/sluice-fs-XXXXXX)
mounts=()
zfs_cleanup() { :; }  # set once the test starts zfs-fuse
cleanup() {
  zfs_cleanup
  for m in "${mounts[@]}"; do umount -l "$m" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

mount_fs() {  # $1 = type, $2 = size; mounts at $work/$1
  local type=$1 size=$2 img=$work/$1.img mnt=$work/$1
  mkdir -p "$mnt"
  truncate -s "$size" "$img" || return 1
  case $type in
    xfs) mkfs.xfs -q -f "$img" >/dev/null 2>&1 ;;
    btrfs) mkfs.btrfs -q -f "$img" >/dev/null 2>&1 ;;
    ext4*) mkfs.ext4 -q -F "$img" >/dev/null 2>&1 ;;
  esac || return 1
  mount -o loop "$img" "$mnt" 2>/dev/null || return 1
  mounts+=("$mnt")
}

mkdir -p "$work/tree/a/b/c"
head -c 3000000 /dev/urandom > "$work/tree/a/big.bin"
: > "$work/tree/empty"
echo "small" > "$work/tree/a/b/c/small.txt"
printf 'x' > "$work/tree/$(printf 'caf\xc3\xa9')"

# On one mounted filesystem: the backend conformance suite, a CLI round trip,
# kill -9 during saves, then verify and gc.
exercise() {  # $1 = name, $2 = mount point, $3 = 1 if O_DIRECT io_uring is expected
  local fs=$1 mnt=$2 expect_direct=$3 out store info path i pid s left
  out=$(SLUICE_CONFORMANCE_ROOTS=$mnt "$conformance" --gtest_filter='*root0*' 2>&1)
  if echo "$out" | grep -q '\[  PASSED  \]' && ! echo "$out" | grep -q '\[  FAILED  \]'; then
    ok "$fs: backend conformance suite ($(echo "$out" | grep -o '[0-9]* tests' | tail -1))"
  else
    bad "$fs: backend conformance suite"; echo "$out" | grep -E 'FAILED|Failure' | head -20
  fi
  store=$mnt/store
  check "$fs: save tree" "$sluice" save --store "$store" --name t --step 1 --from "$work/tree" --chunk-size 64KiB
  rm -rf "$work/out"
  check "$fs: restore tree" "$sluice" restore --store "$store" --name t --to "$work/out"
  check "$fs: restored tree is bit-exact" diff -r "$work/tree" "$work/out"
  check "$fs: verify" "$sluice" verify --store "$store" --name t --step 1
  info=$("$sluice" save --store "$store" --name t --step 2 --synthetic 64MiB --json)
  if [ "$expect_direct" = 1 ]; then
    check "$fs: save reports the O_DIRECT io_uring path" grep -q '"io_path":"io_uring, O_DIRECT' <<<"$info"
  else
    path=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["io_path"])' <<<"$info")
    check "$fs: save reports its I/O path ($path)" [ -n "$path" ]
  fi
  # kill -9 at random moments; committed steps 1 and 2 must survive.
  for i in $(seq 1 6); do
    "$sluice" save --store "$store" --name t --step $((100 + i)) --synthetic 200MiB --object-size 32MiB >/dev/null 2>&1 &
    pid=$!
    sleep "0.$((RANDOM % 4))$((RANDOM % 10))"
    kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  done
  check "$fs: earlier checkpoints verify after kills" "$sluice" verify --store "$store" --name t --step 1
  check "$fs: step 2 verifies after kills" "$sluice" verify --store "$store" --name t --step 2
  for s in $("$sluice" ls --store "$store" --json | python3 -c 'import json,sys; print(" ".join(str(c["step"]) for c in json.load(sys.stdin)))'); do
    "$sluice" verify --store "$store" --name t --step "$s" >/dev/null || bad "$fs: committed step $s fails verify after kills"
  done
  check "$fs: gc after kills" "$sluice" gc --store "$store"
  left=$("$sluice" ls --store "$store" --all --json | python3 -c 'import json,sys; print(sum(1 for c in json.load(sys.stdin) if not c["complete"]))')
  check "$fs: nothing incomplete left after gc" [ "$left" = 0 ]
  check "$fs: no temporary files left after gc" [ -z "$(find "$store" -name '*.tmp.*')" ]
  check "$fs: scrub of every committed checkpoint" "$sluice" scrub --store "$store"
}

for fs in xfs btrfs; do
  mount_fs $fs 1G || skip "cannot loop-mount $fs (no loop devices?)"
  ok "$fs: loop-mounted at $work/$fs"
  exercise $fs "$work/$fs" 1
done

# ZFS, as zfs-fuse (Debian's: a userspace daemon over FUSE) gives it: a pool
# on a sparse file. A zfs-fuse daemon already running is used, not stopped.
if command -v zfs-fuse >/dev/null && command -v zpool >/dev/null && [ -e /dev/fuse ]; then
  zdir=$work/zfs
  mkdir -p "$zdir"
  zpool_name=sluicetest$$
  started_zfs=""
  cache=/var/lib/zfs/zpool.cache
  [ -e "$cache" ] && cp -p "$cache" "$zdir/zpool.cache.saved"
  if ! pgrep -x zfs-fuse >/dev/null; then
    zfs-fuse --pidfile "$zdir/zfs-fuse.pid" --no-kstat-mount && started_zfs=1
    for i in $(seq 1 50); do zpool list >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  zfs_cleanup() {
    # zfs-fuse may call its pool busy; stopping the daemon (if ours) ends it.
    zpool destroy -f "$zpool_name" 2>/dev/null
    if [ -n "$started_zfs" ]; then
      local zpid i
      zpid=$(cat "$zdir/zfs-fuse.pid" 2>/dev/null)
      kill -TERM "$zpid" 2>/dev/null
      for i in $(seq 1 60); do kill -0 "$zpid" 2>/dev/null || break; sleep 0.25; done
      kill -KILL "$zpid" 2>/dev/null
      umount -l "$zdir/mnt" 2>/dev/null  # a daemon that had to be killed leaves its mount
    fi
    if [ -e "$zdir/zpool.cache.saved" ]; then cp -p "$zdir/zpool.cache.saved" "$cache"; else rm -f "$cache"; fi
    zfs_cleanup() { :; }
  }
  truncate -s 4G "$zdir/pool.img"
  if zpool create -m "$zdir/mnt" "$zpool_name" "$zdir/pool.img" >/dev/null 2>&1; then
    ok "zfs: pool $zpool_name (zfs-fuse) mounted at $zdir/mnt"
    exercise zfs "$zdir/mnt" 0
  else
    bad "zfs: cannot create a zfs-fuse pool"
  fi
  zfs_cleanup
  check "zfs: the test's pool and daemon are gone" not pgrep -f "zfs-fuse --pidfile $zdir/"
elif [ "${CI:-}" = true ]; then
  bad "zfs: zfs-fuse is not installed (scripts/install-deps.sh installs it)"
else
  echo "SKIP: zfs (zfs-fuse not installed)"
fi

# Disk full: a 64 MiB ext4.
mount_fs ext4small 64M || skip "cannot loop-mount ext4"
mnt=$work/ext4small
store=$mnt/store
check "enospc: a small checkpoint fits" "$sluice" save --store "$store" --name f --step 1 --synthetic 8MiB
for objsize in 1GiB 8MiB; do
  err=$("$sluice" save --store "$store" --name f --step 2 --synthetic 100MiB --object-size $objsize 2>&1 >/dev/null); rc=$?
  check "enospc (objects of $objsize): save fails with exit 1" [ $rc = 1 ]
  check "enospc (objects of $objsize): the error says the disk is full" grep -q "No space left on device" <<<"$err"
  check "enospc (objects of $objsize): the error is one sluice: line" [ "$(echo "$err" | wc -l)" = 1 -a "${err:0:7}" = sluice: ]
  check "enospc (objects of $objsize): step 2 is not committed" not "$sluice" verify --store "$store" --name f --step 2 2>/dev/null
  check "enospc (objects of $objsize): step 1 still verifies" "$sluice" verify --store "$store" --name f --step 1
  check "enospc (objects of $objsize): the partial data is reclaimed" [ -z "$(find "$store" -path '*00000000000000000002*' -name '*.dat')" ]
done
check "enospc: after the failure, a checkpoint that fits saves again" "$sluice" save --store "$store" --name f --step 3 --synthetic 8MiB

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
