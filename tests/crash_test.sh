#!/usr/bin/env bash
# crash_test.sh: sluice save killed with SIGKILL at random moments never leaves
# a torn, unverified or lost checkpoint, and gc reclaims every leftover.
#
#   tests/crash_test.sh path/to/sluice
#
# Environment: CRASH_TRIALS (single-rank kill trials, default 25),
# CRASH_QUICK_TRIALS (small saves killed early, default 60),
# CRASH_MR_TRIALS (two-rank kill trials, default 4), CRASH_DRAIN_TRIALS
# (drains killed, default 60), CRASH_GC_KILLS (rm + gc killed, default 60),
# CRASH_GC_RACES (saves racing a gc loop, default 100), CRASH_SEED (for
# $RANDOM). By default 209 processes are killed with SIGKILL.
# Runs on a real filesystem in a fresh temporary directory (removed on exit).
# Prints one "ok - ..." / "not ok - ..." line per check and last
# "N passed, M failed"; exits 1 if any check failed, 2 on bad usage.
set -u
TESTS_DIR=$(cd "$(dirname "$0")" && pwd)

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 path/to/sluice" >&2
  exit 2
fi
SLUICE=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
command -v python3 >/dev/null || { echo "crash_test.sh: python3 is required" >&2; exit 2; }
TRIALS=${CRASH_TRIALS:-25}
MR_TRIALS=${CRASH_MR_TRIALS:-4}
SEED=${CRASH_SEED:-$(( $(date +%s) % 100000 ))}
RANDOM=$SEED

W=$(mktemp -d /tmp/sluice-crash-test.XXXXXX) || exit 2
cleanup() {
  # Only this shell's own still-running jobs (never a recycled pid).
  local p
  for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
cd "$W" || exit 2
S=$W/store

. "$TESTS_DIR/lib.sh"
stepdir() { printf '%s/ckpt/%s/%020d' "$S" "$1" "$2"; }
digest() { (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum) | sha256sum | cut -c1-64; }
pick() { local a=("$@"); echo "${a[$((RANDOM % ${#a[@]}))]}"; }
# wait_bounded PID SECONDS: waits for PID; kills it after SECONDS. Sets WRC
# (exit status; 124 if it had to be killed for hanging).
wait_bounded() {
  local pid=$1 left=$(($2 * 10))
  while kill -0 "$pid" 2>/dev/null && [ $left -gt 0 ]; do sleep 0.1; left=$((left - 1)); done
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; WRC=124
  else
    wait "$pid" 2>/dev/null; WRC=$?
  fi
}
# committed_steps NAME: steps of NAME that ls --json lists (space separated).
committed_steps() {
  "$SLUICE" ls --store "$S" --name "$1" --json >"$W/ls.json" 2>/dev/null &&
    python3 -c 'import json,sys; print(" ".join(str(c["step"]) for c in json.load(open(sys.argv[1])) if c["complete"]))' "$W/ls.json"
}
# verify_all: verifies every committed checkpoint; prints the failures.
verify_all() {
  "$SLUICE" ls --store "$S" --json >"$W/lsall.json" 2>/dev/null || { echo "ls failed"; return; }
  python3 -c 'import json,sys; [print(c["name"], c["step"]) for c in json.load(open(sys.argv[1]))]' "$W/lsall.json" |
    while read -r n st; do
      "$SLUICE" verify --store "$S" --name "$n" --step "$st" >/dev/null 2>"$W/verr" || echo "$n@$st: $(head -c 200 "$W/verr")"
    done
}
# restore_matches STEP WANT_DIGEST: restore of base@STEP is bit-exact.
restore_matches() {
  rm -rf "$W/rs"
  "$SLUICE" restore --store "$S" --name base --step "$1" --to "$W/rs" >/dev/null 2>&1 &&
    [ "$(digest "$W/rs")" = "$2" ]
}

restore_both() { restore_matches 1 "$SHA1" && restore_matches 2 "$SHA2"; }

T0=$(date +%s)
echo "# crash_test.sh: $TRIALS single-rank trials, $MR_TRIALS two-rank trials, CRASH_SEED=$SEED"

# ---------------------------------------------- two good checkpoints first
for t in 1 2; do
  python3 - "$W/tree$t" "$SEED$t" <<'EOF'
import os, random, sys
root, seed = sys.argv[1], int(sys.argv[2])
r = random.Random(seed)
for i in range(14):
    d = os.path.join(root, *['dir%d' % r.randrange(3) for _ in range(r.randrange(3))])
    os.makedirs(d, exist_ok=True)
    n = r.choice([0, 0, 1, 4095, 4096, 65537, r.randrange(1 << 20), r.randrange(3 << 20)])
    with open(os.path.join(d, 'file%02d.bin' % i), 'wb') as f:
        f.write(r.randbytes(n))
EOF
  sl save --store "$S" --name base --step $t --from "$W/tree$t" --chunk-size 256KiB
  check "base@$t saved from a generated tree" [ "$RC" -eq 0 ]
done
SRC1=$(digest "$W/tree1")
SRC2=$(digest "$W/tree2")
rm -rf "$W/rs"; "$SLUICE" restore --store "$S" --name base --step 1 --to "$W/rs" >/dev/null 2>&1
SHA1=$(digest "$W/rs")
rm -rf "$W/rs"; "$SLUICE" restore --store "$S" --name base --step 2 --to "$W/rs" >/dev/null 2>&1
SHA2=$(digest "$W/rs")
check "base@1 and base@2 restore bit-exact before any crash (sha ${SHA1:0:12}, ${SHA2:0:12})" \
  [ "$SHA1" = "$SRC1" -a "$SHA2" = "$SRC2" -a "$SRC1" != "$SRC2" ]

# ------------------------------------------- single-rank saves killed at random
killed=0; finished=0; committed_killed=0
for i in $(seq 1 "$TRIALS"); do
  step=$((100 + i))
  size=$(pick 256MiB 512MiB 768MiB 1GiB 128MiB)
  chunk=$(pick 4MiB 64KiB 1MiB 16MiB 256KiB)
  io=$(pick 4MiB 64KiB 1MiB 16MiB 256KiB 4KiB)
  items=$(pick 8 1 3 100 2000)
  obj=$(pick 1GiB 16MiB 64MiB 256MiB)
  [ "$io" = 4KiB ] && size=$(pick 16MiB 32MiB)   # keep tiny I/Os short
  ms=$((RANDOM % 401))
  params="size $size items $items chunk $chunk io $io object $obj, kill at ${ms} ms"
  "$SLUICE" save --store "$S" --name crash --step $step --synthetic "$size" --items "$items" \
    --chunk-size "$chunk" --io-size "$io" --object-size "$obj" >/dev/null 2>"$W/save.err" &
  pid=$!
  sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null; src=$?
  case $src in
    137) killed=$((killed + 1)) ;;
    0) finished=$((finished + 1)) ;;
    *) nok "trial $i ($params): save exited $src before the kill: $(head -c 200 "$W/save.err")" ;;
  esac
  sl ls --store "$S" --all --json
  if [ "$RC" -eq 0 ] && [ "$(pyj 'isinstance(d, list)')" = "True" ]; then
    ok "trial $i ($params, exit $src): ls --all --json parses"
  else
    nok "trial $i ($params, exit $src): ls --all --json exit $RC, stderr $(errtext), stdout $(head -c 200 "$W/out")"
  fi
  steps=" $(committed_steps crash) "
  if [[ $steps == *" $step "* ]]; then
    [ "$src" -eq 137 ] && committed_killed=$((committed_killed + 1))
    sl verify --store "$S" --name crash --step $step --json
    check "trial $i: crash@$step is committed and verifies clean" [ "$RC" -eq 0 -a "$(pyj 'd["ok"]')" = "True" ]
  else
    check "trial $i: crash@$step was killed (exit $src) and is not committed" [ "$src" -eq 137 ]
    sl restore --store "$S" --name crash --step $step --to "$W/never"
    check "trial $i: restore of the uncommitted crash@$step exits 1 (got $RC)" [ "$RC" -eq 1 ]
    sl save --store "$S" --name crash --step $step --synthetic 8MiB --items 3 --chunk-size 1MiB
    check "trial $i: a retry of crash@$step after the crash commits (exit $RC)" [ "$RC" -eq 0 ]
    sl verify --store "$S" --name crash --step $step
    check "trial $i: the retried crash@$step verifies" [ "$RC" -eq 0 ]
  fi
  vf=$(verify_all)
  check "trial $i: every committed checkpoint (base@1, base@2, earlier trials) verifies${vf:+: $vf}" [ -z "$vf" ]
  if [ $((i % 5)) -eq 0 ]; then
    check "trial $i: base@1 and base@2 still restore bit-exact" restore_both
    # Keep the store small: drop all but the newest three trial checkpoints.
    for st in $(committed_steps crash | tr ' ' '\n' | sort -n | head -n -3); do
      "$SLUICE" rm --store "$S" --name crash --step "$st" >/dev/null 2>&1 || nok "rm crash@$st failed"
    done
  fi
done
echo "# $killed saves killed mid-flight ($committed_killed of them after their commit), $finished finished before the kill"

# --------------------------------------------- two-rank saves killed at random
for j in $(seq 1 "$MR_TRIALS"); do
  step=$((500 + j))
  size=$(pick 64MiB 128MiB 256MiB)
  victim=$(pick 0 1 both)
  ms=$((RANDOM % 401))
  params="world 2, $size per rank, kill rank $victim at ${ms} ms"
  p=()
  for r in 0 1; do
    "$SLUICE" save --store "$S" --name mr --step $step --synthetic "$size" --world 2 --rank $r \
      --timeout 3s --chunk-size 1MiB >/dev/null 2>"$W/mr$r.err" &
    p[$r]=$!
  done
  sleep "$(printf '0.%03d' $((ms % 1000)))"
  case $victim in
    0) kill -9 "${p[0]}" 2>/dev/null ;;
    1) kill -9 "${p[1]}" 2>/dev/null ;;
    both) kill -9 "${p[0]}" "${p[1]}" 2>/dev/null ;;
  esac
  rc=()
  for r in 0 1; do wait_bounded "${p[$r]}" 30 2>/dev/null; rc[$r]=$WRC; done
  hung=0
  for r in 0 1; do
    if [ "$victim" != "$r" ] && [ "$victim" != both ]; then
      [ "${rc[$r]}" -eq 0 ] || [ "${rc[$r]}" -eq 1 ] || hung=1
    fi
  done
  check "mr trial $j ($params): every rank not killed exits 0 or 1 within the timeout (exits: ${rc[*]})" [ "$hung" -eq 0 ]
  sl ls --store "$S" --all --json
  check "mr trial $j: ls --all --json parses" [ "$RC" -eq 0 -a "$(pyj 'isinstance(d, list)')" = "True" ]
  steps=" $(committed_steps mr) "
  if [[ $steps == *" $step "* ]]; then
    sl verify --store "$S" --name mr --step $step --json
    check "mr trial $j: mr@$step is committed, has 2 ranks' items and verifies" \
      [ "$RC" -eq 0 -a "$(pyj '(d["ok"], d["items"])')" = "(True, 16)" ]
  else
    sl restore --store "$S" --name mr --step $step --to "$W/never"
    check "mr trial $j: mr@$step is not committed; restore of it exits 1 (got $RC)" [ "$RC" -eq 1 ]
  fi
done

# A retry right after a crash must commit this attempt's data, not the
# manifest the crashed attempt left behind.
"$SLUICE" save --store "$S" --name retry --step 1 --synthetic 8MiB --world 2 --rank 1 --timeout 30s \
  >/dev/null 2>&1 &
pid=$!
for _ in $(seq 50); do
  [ -n "$(find "$(stepdir retry 1)/manifest" -name '*.man' 2>/dev/null)" ] && break
  sleep 0.1
done
sleep 0.1
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
# Ranks of the retry start half a second apart (well within --timeout).
p=()
for r in 0 1; do
  [ $r -eq 1 ] && sleep 0.5
  "$SLUICE" save --store "$S" --name retry --step 1 --synthetic 64MiB --world 2 --rank $r \
    --timeout 30s >/dev/null 2>"$W/retry$r.err" &
  p[$r]=$!
done
wait_bounded "${p[0]}" 60 2>/dev/null; r0=$WRC
wait_bounded "${p[1]}" 60 2>/dev/null; r1=$WRC
check "retry of a world-2 save whose rank 1 was killed after publishing: both ranks exit 0 (got $r0 $r1: $(cat "$W/retry0.err" "$W/retry1.err" | head -c 200 | tr '\n' '|'))" \
  [ "$r0" -eq 0 -a "$r1" -eq 0 ]
sl ls --store "$S" --name retry --json
check "the retried checkpoint holds this attempt's 2 x 64 MiB, not the crashed attempt's 8 MiB (bytes: $(pyj '[c["bytes"] for c in d]'))" \
  [ "$(pyj '[c["bytes"] for c in d]')" = "[134217728]" ]

# ------------------------------------- quick single-rank saves killed at random
# Small saves, killed within their first 80 ms: most die mid-write, some
# inside the commit.
QUICK=${CRASH_QUICK_TRIALS:-60}
qkilled=0
for i in $(seq 1 "$QUICK"); do
  step=$((2000 + i))
  size=$(pick 8MiB 32MiB 64MiB 16MiB)
  items=$(pick 1 4 50)
  ms=$((RANDOM % 81))
  "$SLUICE" save --store "$S" --name quick --step $step --synthetic "$size" --items "$items" \
    --chunk-size 1MiB --io-size 1MiB --object-size 16MiB >/dev/null 2>"$W/save.err" &
  pid=$!
  sleep "0.$(printf '%03d' "$ms")"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null; src=$?
  [ "$src" -eq 137 ] && qkilled=$((qkilled + 1))
  steps=" $(committed_steps quick) "
  if [[ $steps == *" $step "* ]]; then
    sl verify --store "$S" --name quick --step $step
    check "quick trial $i ($size, $items items, kill at $ms ms, exit $src): committed and verifies" [ "$RC" -eq 0 ]
  else
    check "quick trial $i ($size, kill at $ms ms): not committed, so it was killed (exit $src)" [ "$src" -eq 137 ]
  fi
  if [ $((i % 20)) -eq 0 ]; then
    vf=$(verify_all)
    check "quick trial $i: every committed checkpoint verifies${vf:+: $vf}" [ -z "$vf" ]
    for st in $(committed_steps quick | tr ' ' '\n' | sort -n | head -n -2); do
      "$SLUICE" rm --store "$S" --name quick --step "$st" >/dev/null 2>&1 || nok "rm quick@$st failed"
    done
  fi
done
echo "# $qkilled of $QUICK quick saves killed mid-flight"

# -------------------------------------------------- drains killed at random
# A checkpoint committed on tier 0 (save --detach), then `sluice drain`
# killed mid-copy: tier 1 holds it committed and verifying, or not at all,
# and the next drain finishes the job.
TIER0=$W/tier0; TIER1=$W/tier1
DRAINS=${CRASH_DRAIN_TRIALS:-60}
dkilled=0
for i in $(seq 1 "$DRAINS"); do
  sl save --tier "$TIER0" --tier "$TIER1" --name d --step $i --synthetic "$(pick 16MiB 32MiB 48MiB)" \
    --chunk-size 1MiB --io-size 1MiB --async --detach
  if [ "$RC" -ne 0 ]; then nok "drain trial $i: save --detach failed: $(errtext)"; continue; fi
  ms=$((RANDOM % 201))
  "$SLUICE" drain --tier "$TIER0" --tier "$TIER1" --rate-limit 1=$(pick 100MiB 200MiB 400MiB) >/dev/null 2>"$W/drain.err" &
  pid=$!
  sleep "0.$(printf '%03d' "$ms")"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null; src=$?
  [ "$src" -eq 137 ] && dkilled=$((dkilled + 1))
  bad=""
  for st in $(S=$TIER1 committed_steps d); do
    "$SLUICE" verify --store "$TIER1" --name d --step "$st" >/dev/null 2>&1 || bad="$bad d@$st"
  done
  check "drain trial $i (kill at $ms ms, exit $src): every checkpoint committed on tier 1 verifies${bad:+ (bad:$bad)}" [ -z "$bad" ]
  sl drain --tier "$TIER0" --tier "$TIER1"
  drc=$RC
  steps=" $(S=$TIER1 committed_steps d) "
  on1=no; [[ $steps == *" $i "* ]] && on1=yes
  check "drain trial $i: the next drain exits 0 ($drc) and d@$i is committed on tier 1 ($on1)" \
    [ "$drc" -eq 0 -a "$on1" = yes ]
  if [ $((i % 10)) -eq 0 ]; then
    for st in $(S=$TIER1 committed_steps d | tr ' ' '\n' | sort -n | head -n -2); do
      "$SLUICE" rm --store "$TIER0" --name d --step "$st" >/dev/null 2>&1
      "$SLUICE" rm --store "$TIER1" --name d --step "$st" >/dev/null 2>&1
    done
  fi
done
echo "# $dkilled of $DRAINS drains killed mid-flight"
rm -rf "$TIER0" "$TIER1"

# ---------------------------------------------- rm and gc killed at random
# Garbage (a killed save) and a removed step, then gc killed mid-pass:
# every committed checkpoint still verifies, and the next gc finishes.
K=$W/gckill
for i in $(seq 1 20); do "$SLUICE" save --store "$K" --name keep --step $i --synthetic 64K --items 2 >/dev/null 2>&1; done
GCK=${CRASH_GC_KILLS:-60}
gkilled=0
for i in $(seq 1 "$GCK"); do
  "$SLUICE" save --store "$K" --name doomed --step $i --synthetic 8MiB --chunk-size 1MiB >/dev/null 2>&1 &
  pid=$!; sleep 0.0$((RANDOM % 5)); kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  "$SLUICE" save --store "$K" --name gone --step $i --synthetic 1MiB --items 3 >/dev/null 2>&1
  "$SLUICE" rm --store "$K" --name gone --step $i >/dev/null 2>&1 &
  rpid=$!
  "$SLUICE" gc --store "$K" --min-age 0s >/dev/null 2>&1 &
  pid=$!
  ms=$((RANDOM % 16))
  sleep "0.$(printf '%03d' "$ms")"
  kill -9 "$pid" "$rpid" 2>/dev/null
  wait "$pid" 2>/dev/null; src=$?; wait "$rpid" 2>/dev/null
  [ "$src" -eq 137 ] && gkilled=$((gkilled + 1))
  vf=$(S=$K verify_all)
  check "gc trial $i (kill at $ms ms, exit $src): every committed checkpoint verifies${vf:+: $vf}" [ -z "$vf" ]
  keep=$(S=$K committed_steps keep | wc -w)
  check "gc trial $i: all 20 keep@N are still committed (found $keep)" [ "$keep" -eq 20 ]
done
echo "# $gkilled of $GCK gc runs killed mid-flight"
sl gc --store "$K" --min-age 0s
check "gc after the killed ones exits 0" [ "$RC" -eq 0 ]
sl ls --store "$K" --all --json
check "after it, ls --all shows only complete checkpoints" \
  [ "$RC" -eq 0 -a "$(pyj 'all(c["complete"] for c in d)')" = "True" ]
rm -rf "$K"

# ------------------------------------------ gc racing saves (separate store)
# gc --help: a save running during gc --min-age 0 "then fails before
# committing (it never commits a checkpoint with missing data)". Many small
# committed steps make each gc pass long enough for the race to show.
G=$W/gcstore
for i in $(seq 1 100); do
  "$SLUICE" save --store "$G" --name filler --step $i --synthetic 4K --items 1 >/dev/null 2>&1
done
( while :; do "$SLUICE" gc --store "$G" --min-age 0s >/dev/null 2>&1; sleep "0.0$((RANDOM % 10))"; done ) &
gcpid=$!
gc_ok=0; gc_failed=0; gc_bad=""; gc_odd=""
for i in $(seq 1 "${CRASH_GC_RACES:-100}"); do
  "$SLUICE" save --store "$G" --name z --step $i --synthetic 16MiB >/dev/null 2>&1
  rc=$?
  case $rc in
    0) gc_ok=$((gc_ok + 1))
       "$SLUICE" verify --store "$G" --name z --step $i >/dev/null 2>&1 || gc_bad="$gc_bad z@$i" ;;
    1) gc_failed=$((gc_failed + 1)) ;;
    *) gc_odd="$gc_odd z@$i:exit$rc" ;;
  esac
done
kill "$gcpid" 2>/dev/null; wait "$gcpid" 2>/dev/null
check "saves racing a gc loop exit 0 or 1 ($gc_ok committed, $gc_failed failed)${gc_odd:+:$gc_odd}" [ -z "$gc_odd" ]
check "no save racing gc --min-age 0s commits a checkpoint that then fails verify${gc_bad:+ (damaged:$gc_bad)}" [ -z "$gc_bad" ]
rm -rf "$G"

# ------------------------------------------------------------- gc at the end
sl gc --store "$S" --min-age 0s --json
check "gc --min-age 0s after all crashes exits 0" [ "$RC" -eq 0 ]
sl ls --store "$S" --all --json
check "after gc, ls --all --json shows only complete checkpoints" \
  [ "$RC" -eq 0 -a "$(pyj 'all(c["complete"] for c in d) and len(d) > 0')" = "True" ]
cp "$W/out" "$W/final.json"
nocommit=""
for d in "$S"/ckpt/*/*/; do
  [ -d "$d" ] || continue
  # A step removed (by rm or retention) whose data objects a later
  # incremental step still shares keeps those, and nothing else.
  [ -f "$d/COMMIT" ] || [ -z "$(cd "$d" && find . -type f ! -path './data/*')" ] || nocommit="$nocommit ${d#$S/}"
done
check "after gc, every step directory left has a COMMIT or only shared data objects${nocommit:+ (neither:$nocommit)}" [ -z "$nocommit" ]
tmps=$(find "$S" -name '*.tmp.*' -o -name '.sluice-probe*' | head -n 5)
check "after gc, no *.tmp.* or probe files remain${tmps:+: $tmps}" [ -z "$tmps" ]
odd=$(cd "$S" && find . -type f | grep -Ev '^\./ckpt/[^/]+/([0-9]{20}/(COMMIT|seal/[0-9a-f]+-[0-9a-f]{2}|manifest/r[0-9]{6}-[0-9a-f]+\.man|data/r[0-9]{6}-[0-9a-f]+-[0-9]{6}\.dat)|LATEST)$' | head -n 5)
check "after gc, the store holds only commit claims and seals, manifests, data objects and latest-step hints${odd:+: $odd}" [ -z "$odd" ]
stale=""
for h in "$S"/ckpt/*/LATEST; do
  [ -f "$h" ] || continue
  step=$(head -n1 "$h")  # the step; a commit record may follow
  [ -n "$(ls "$(dirname "$h")/$(printf %020d "$step")/seal" 2>/dev/null)" ] || stale="$stale ${h#$S/}=$step"
done
check "after gc, every latest-step hint names a committed step${stale:+ (not:$stale)}" [ -z "$stale" ]
# Data objects hold exactly the chunk bytes, so a step with no garbage has
# one manifest per rank and data objects summing to the checkpoint's own
# bytes (those it did not share with an earlier step).
extra=$(python3 - "$S" "$W/final.json" <<'EOF'
import json, os, sys
store, listing = sys.argv[1], json.load(open(sys.argv[2]))
for c in listing:
    d = os.path.join(store, 'ckpt', c['name'], '%020d' % c['step'])
    mans = os.listdir(os.path.join(d, 'manifest')) if os.path.isdir(os.path.join(d, 'manifest')) else []
    dd = os.path.join(d, 'data')
    data = sum(os.path.getsize(os.path.join(dd, f)) for f in os.listdir(dd)) if os.path.isdir(dd) else 0
    if len(mans) != c['ranks'] or data != c['own_bytes']:
        print('%s@%d: %d manifests for %d ranks, %d data bytes for %d' % (c['name'], c['step'], len(mans), c['ranks'], data, c['own_bytes']))
EOF
)
check "after gc, committed steps hold no leftovers of crashed attempts${extra:+: $(echo "$extra" | head -n 3 | tr '\n' ';')}" [ -z "$extra" ]
vf=$(verify_all)
check "after gc, every committed checkpoint verifies${vf:+: $vf}" [ -z "$vf" ]
check "after gc, base@1 restores bit-exact" restore_matches 1 "$SHA1"
check "after gc, base@2 restores bit-exact" restore_matches 2 "$SHA2"

echo "# crash_test.sh took $(($(date +%s) - T0)) s"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
