#!/usr/bin/env bash
# Hosts whose clocks disagree. Each "host" is a process in a UTS namespace
# of its own (its own hostname, so that sluice judges its locks as another
# host's) under libfaketime (its own wall clock, hours off). Checks:
# - a crashed launch whose ranks' clocks run 30 h ahead (their manifests
#   look newest) is never committed by a relaunch whose rank 0 runs 30 h
#   behind, nor when one rank still passes the crashed launch's --attempt;
#   a relaunch with one id everywhere commits its own bytes;
# - gc on a host 20 h ahead, with --min-age 1h, leaves a save running on
#   another host alone (a lock from another host is judged by its age
#   only past 24 h), and the save commits bit-exact;
# - past that bound (a host 25 h ahead) gc does reclaim the running save:
#   the save then fails, and nothing torn is ever committed (doc/format.md,
#   writer locks).
#
# Usage: tests/clock_skew_test.sh SLUICE_BIN
# Needs root (unshare --uts) and faketime; without them it skips (exit 77),
# except under CI=true, where a skip is a failure.
set -u
SLUICE=$1
pass=0 fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "not ok - $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@" >/dev/null; then ok "$what"; else bad "$what"; fi; }

skip() {
  if [ "${CI:-}" = true ]; then echo "not ok - cannot run under CI=true: $*"; echo "0 passed, 1 failed"; exit 1; fi
  echo "SKIP: $*"; exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root for UTS namespaces"
command -v faketime >/dev/null || skip "faketime missing (apt-get install faketime)"
command -v unshare >/dev/null || skip "unshare missing (apt-get install util-linux)"

W=$(mktemp -d /tmp/sluice-skew-XXXXXX)
trap 'jobs -p | xargs -r kill -9 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
STORE=$W/store

# host NAME SKEW CMD...: CMD as host NAME whose wall clock is SKEW off
# (faketime's "+30h", "-30h"); steady clocks stay true.
host() {
  local name=$1 skew=$2
  shift 2
  # (A sanitizer build's runtime must come first among the libraries;
  # faketime preloads its own before it.)
  ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}verify_asan_link_order=0" \
  FAKETIME_DONT_FAKE_MONOTONIC=1 unshare --uts sh -c 'hostname "$0" && s=$1 && shift && exec faketime -f "$s" "$@"' \
    "$name" "$skew" "$@"
}
skewed_year=$(host h1 +30h date -u +%d)
check "a host's clock can be set 30 h ahead ($(date -u +%d) -> $skewed_year)" [ "$skewed_year" != "$(date -u +%d)" ]
[ "$(host h1 +0 hostname)" = h1 ] || skip "unshare --uts cannot set a hostname here"

not_same() { ! cmp -s "$1" "$2"; }
digest() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum; }
pyj() { python3 -c "import json,sys; d=json.load(open('$W/ls.json')); print($1)"; }

# ------------------------------------------- 1. a crashed launch, skewed
# launch TIMEOUT RANK:ATTEMPT:SKEW...: ranks of job@20 (world 3) with fresh
# bytes, each on host h<rank> with its clock SKEW off; sets FAILS.
launch() {
  local timeout=$1 pids=() r a s spec
  shift
  for spec in "$@"; do
    IFS=: read -r r a s <<<"$spec"
    mkdir -p "$W/rank$r"
    head -c $((1 << 20)) /dev/urandom >"$W/rank$r/shard-$r.bin"
    host "h$r" "$s" "$SLUICE" save --store "$STORE" --name job --step 20 --from "$W/rank$r" \
      --rank "$r" --world 3 --attempt "$a" --timeout "$timeout" >"$W/job-$r.out" 2>&1 &
    pids+=($!)
  done
  FAILS=0
  for p in "${pids[@]}"; do wait "$p" || FAILS=$((FAILS + 1)); done
}
launch 3s 1:A:+30h 2:A:+30h
check "launch A (clocks 30 h ahead) without its rank 0: both ranks give up ($FAILS of 2 failed)" [ "$FAILS" -eq 2 ]
cp "$W/rank2/shard-2.bin" "$W/stale.bin"
launch 5s 0:B:-30h 1:B:+0h 2:A:+30h
"$SLUICE" ls --store "$STORE" --name job --all --json >"$W/ls.json"
check "launch B, rank 0 30 h behind, rank 2 still on --attempt A 30 h ahead: no rank commits ($FAILS of 3 failed; $(pyj '[(c["step"], c["complete"]) for c in d]'))" \
  [ "$FAILS" -eq 3 -a "$(pyj '[c["complete"] for c in d]')" = "[False]" ]
launch 30s 0:C:-30h 1:C:+30h 2:C:+0h
check "launch C, one id on every rank, clocks 60 h apart: committed ($FAILS failed)" [ "$FAILS" -eq 0 ]
for r in 1 2; do
  "$SLUICE" restore --store "$STORE" --name job --step 20 --rank "$r" --to "$W/restored-$r" >/dev/null
  check "rank $r of job@20 holds launch C's bytes" [ "$(digest "$W/restored-$r")" = "$(digest "$W/rank$r")" ]
done
check "not the crashed launch's" not_same "$W/stale.bin" "$W/rank2/shard-2.bin"

# ------------------------------------- 2. gc on a host whose clock is ahead
# A save on host h1 (true clock) held to 8 MiB/s; gc --min-age 1h runs on
# host hx, SKEW ahead, while it writes.
mkdir -p "$W/live"
gc_during_save() {  # gc_during_save STEP SKEW: sets SAVE_RC, GC_OUT
  # Fresh bytes: an incremental save of unchanged ones would write nothing.
  head -c $((32 << 20)) /dev/urandom >"$W/live/live.bin"
  host h1 +0h "$SLUICE" save --store "$STORE" --name live --step "$1" --from "$W/live" --rate-limit 0=8MiB \
    >"$W/live-$1.out" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do
    [ -n "$(find "$STORE/ckpt/live/$(printf %020d "$1")" -name '*.dat' 2>/dev/null)" ] && break
    sleep 0.05
  done
  sleep 0.5
  GC_OUT=$(host hx "$2" "$SLUICE" gc --store "$STORE" --min-age 1h 2>&1)
  wait "$pid"
  SAVE_RC=$?
}
gc_during_save 1 +20h
check "gc on a host 20 h ahead ran ($GC_OUT)" grep -q "^gc: removed" <<<"$GC_OUT"
check "it left the running save from another host alone: the save commits (exit $SAVE_RC)" [ "$SAVE_RC" -eq 0 ]
"$SLUICE" restore --store "$STORE" --name live --step 1 --to "$W/restored-live" >/dev/null
check "and restores bit-exact" cmp "$W/live/live.bin" "$W/restored-live/live.bin"
cp "$W/live/live.bin" "$W/live-1.bin"

gc_during_save 2 +25h
check "gc on a host 25 h ahead takes the running save for a dead one past 24 h ($GC_OUT)" grep -q "removed [1-9]" <<<"$GC_OUT"
check "the save then fails (exit $SAVE_RC): $(tail -1 "$W/live-2.out")" [ "$SAVE_RC" -ne 0 ]
"$SLUICE" ls --store "$STORE" --name live --json >"$W/ls.json"
check "and nothing torn is committed: only live@1 is listed ($(pyj '[c["step"] for c in d]'))" [ "$(pyj '[c["step"] for c in d]')" = "[1]" ]
"$SLUICE" restore --store "$STORE" --name live --step 1 --to "$W/restored-live-again" >/dev/null
check "live@1 still restores bit-exact" cmp "$W/live-1.bin" "$W/restored-live-again/live.bin"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
