#!/usr/bin/env bash
# incremental_test.sh: incremental saves through the command line.
#
#   tests/incremental_test.sh path/to/sluice [KILL_TRIALS]
#
# save --change writes only the changed items and references the rest in
# the newest step; what is restored is bit-identical to a --full save of the
# same data; rm of a base keeps what later steps share; gc reclaims shared
# objects once nothing names them; a bad shared chunk fails verify of both
# steps (naming the base) and one scrub heals both; a drain to a tier that
# never held the base copies the shared objects; bad flags. Then
# KILL_TRIALS (default 20) trials of an incremental save killed with -9 at a
# random moment while its base is removed, gc runs or retention applies:
# every committed step verifies after each. Prints "ok - ..." / "not ok -
# ..." per check and "N passed, M failed"; exit 0 if all passed, 1 if any
# failed, 77 without the binary.
TESTS_DIR=$(cd "$(dirname "$0")" && pwd)
set -u
if [ $# -lt 1 ]; then
  echo "usage: $0 path/to/sluice [KILL_TRIALS]" >&2
  exit 2
fi
if [ ! -x "$1" ]; then
  echo "ok - incremental_test.sh # SKIP no sluice binary at $1"
  exit 77
fi
SLUICE=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
TRIALS=${2:-${INCREMENTAL_KILL_TRIALS:-20}}
W=$(mktemp -d /tmp/sluice-incr-test.XXXXXX) || exit 2
BGPIDS=()
cleanup() {
  local p
  for p in "${BGPIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
cd "$W" || exit 2
. "$TESTS_DIR/lib.sh"

stepdir() { printf '%s/ckpt/%s/%020d' "$1" "$2" "$3"; }
data_bytes() { find "$(stepdir "$1" "$2" "$3")/data" -name '*.dat' -printf '%s\n' 2>/dev/null | awk '{s+=$1} END {print s+0}'; }
flip() {
  local b
  b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' \n')
  # shellcheck disable=SC2059
  printf "\\$(printf '%03o' $((b ^ 255)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
SAVE=(--synthetic 40MiB --items 20 --change 0.05 --chunk-size 1MiB --object-size 8MiB)

# ------------------------------------------------------------ save, ls, restore
S=$W/s
sl save --store "$S" --name inc --step 1 "${SAVE[@]}" --json
check "step 1: nothing to reference (referenced_bytes 0, base_step null)" \
  [ "$RC" = 0 -a "$(pyj '(d["referenced_bytes"], d["base_step"])')" = "(0, None)" ]
for st in 2 3; do
  sl save --store "$S" --name inc --step $st "${SAVE[@]}" --json
  check "step $st: 19 of 20 items referenced in step $((st - 1))" \
    [ "$RC" = 0 -a "$(pyj '(d["referenced_bytes"], d["base_step"], d["bytes"])')" = "($((38 << 20)), $((st - 1)), $((40 << 20)))" ]
  check "step $st wrote one item's 2 MiB ($(data_bytes "$S" inc $st) bytes)" [ "$(data_bytes "$S" inc $st)" = $((2 << 20)) ]
done
sl save --store "$S" --name inc --step 3 "${SAVE[@]}"
check "saving a committed step again is refused" [ "$RC" = 1 ]
sl ls --store "$S" --name inc --json
check "ls --json: own and referenced bytes per step" \
  [ "$(pyj '[(c["step"], c["own_bytes"], c["referenced_bytes"]) for c in d]')" = "[(1, $((40 << 20)), 0), (2, $((2 << 20)), $((38 << 20))), (3, $((2 << 20)), $((38 << 20)))]" ]
sl ls --store "$S" --name inc
check "ls shows the shared bytes in a SHARED column ($(grep -c 'MiB.*MiB' "$W/out") lines)" eval 'grep -q SHARED "$W/out" && [ "$(grep -c "MiB  *38" "$W/out")" = 2 ]'
for st in 1 2 3; do
  sl verify --store "$S" --name inc --step $st
  expect_ok "verify step $st"
done
# The same data saved in full elsewhere restores to the same files.
for st in 1 2 3; do
  "$SLUICE" save --store "$W/full" --name inc --step $st "${SAVE[@]}" --full >/dev/null 2>&1
done
sl restore --store "$S" --name inc --step 3 --to "$W/r-inc"
expect_ok "restore of the incremental step 3"
sl restore --store "$W/full" --name inc --step 3 --to "$W/r-full"
check "...bit-identical to a --full save of the same data" diff -r "$W/r-inc" "$W/r-full"
check "the --full store wrote every step in full" [ "$(data_bytes "$W/full" inc 3)" -ge $((40 << 20)) ]
sl save --store "$S" --name inc --step 4 "${SAVE[@]}" --full --json
check "save --full references nothing" [ "$RC" = 0 -a "$(pyj 'd["referenced_bytes"]')" = 0 ]

# ------------------------------------------------------------ removal and gc
sl rm --store "$S" --name inc --step 1
expect_ok "rm of step 1, the base of step 2"
sl rm --store "$S" --name inc --step 2
expect_ok "rm of step 2, the base of step 3"
sl verify --store "$S" --name inc --step 3
expect_ok "step 3 still verifies"
sl ls --store "$S" --all --json
check "ls --all lists steps 3 and 4 only (the kept shared objects are no incomplete save)" \
  [ "$(pyj '[(c["step"], c["complete"]) for c in d]')" = "[(3, True), (4, True)]" ]
sl gc --store "$S" --min-age 0s
expect_ok "gc"
sl restore --store "$S" --name inc --step 3 --to "$W/r-after"
check "after rm of its bases and gc, step 3 restores the same files" diff -r "$W/r-after" "$W/r-full"
"$SLUICE" rm --store "$S" --name inc --step 3 >/dev/null 2>&1
"$SLUICE" rm --store "$S" --name inc --step 4 >/dev/null 2>&1
"$SLUICE" gc --store "$S" --min-age 0s >/dev/null 2>&1
check "once no step names them, the shared objects are gone too" [ -z "$(find "$S/ckpt" -name '*.dat' 2>/dev/null)" ]

# ------------------------------------------------------------ a bad shared chunk
A=$W/a B=$W/b
for st in 1 2; do
  "$SLUICE" save --tier "$A" --tier "$B" --name sh --step $st --synthetic 20MiB --items 10 --change 0.1 \
    --chunk-size 1MiB --object-size 8MiB >/dev/null 2>&1
done
# Item 0 is unchanged at step 2 and comes first in step 1's first object.
first=$(find "$(stepdir "$A" sh 1)/data" -name '*.dat' | sort | head -1)
flip "$first" 100
sl verify --store "$A" --name sh --step 2
check "verify of step 2 fails on a bad chunk it shares with step 1 (exit 1)" [ "$RC" = 1 ]
check "...and names step 1" grep -q "shares with step 1" "$W/out" "$W/err"
sl verify --store "$A" --name sh --step 1
check "verify of step 1 fails too" [ "$RC" = 1 ]
sl scrub --tier "$A" --tier "$B" --json
expect_ok "scrub repairs it from tier 1"
bad=0
for st in 1 2; do "$SLUICE" verify --store "$A" --name sh --step $st >/dev/null 2>&1 || bad=$((bad + 1)); done
check "one repair heals both steps" [ "$bad" = 0 ]

# ------------------------------------------------------------ a drain to a tier without the base
C=$W/c D=$W/d
for st in 1 2; do
  "$SLUICE" save --store "$C" --name dr --step $st --synthetic 20MiB --items 10 --change 0.1 \
    --chunk-size 1MiB --object-size 8MiB >/dev/null 2>&1
done
"$SLUICE" rm --store "$C" --name dr --step 1 >/dev/null 2>&1
sl drain --tier "$C" --tier "$D" --json
expect_ok "drain of step 2, whose base is gone from tier 0, to an empty tier"
sl verify --store "$D" --name dr --step 2
expect_ok "step 2 verifies on the new tier (the shared objects were copied)"
sl gc --store "$D" --min-age 0s
sl verify --store "$D" --name dr --step 2
expect_ok "...also after gc there"
sl save --tier "$C" --tier "$D" --name dr --step 3 --synthetic 20MiB --items 10 --change 0.1 \
  --chunk-size 1MiB --object-size 8MiB
expect_ok "a third step saved to both tiers"
check "its drain wrote only the changed item to tier 1 ($(data_bytes "$D" dr 3) bytes)" [ "$(data_bytes "$D" dr 3)" = $((2 << 20)) ]

# ------------------------------------------------------------ bad input
sl save --store "$W/x" --name x --step 1 --from "$W/r-inc" --change 0.5
expect_err "--change without --synthetic" 2
sl save --store "$W/x" --name x --step 1 --synthetic 1MiB --change 1.5
expect_err "--change 1.5" 2
sl save --store "$W/x" --name x --step 1 --synthetic 1MiB --change half
expect_err "--change half" 2

# ------------------------------------------------------------ kill -9 torture
K=$W/k
"$SLUICE" save --tier "$K" --name tor --step 1 --synthetic 48MiB --items 12 --chunk-size 1MiB --object-size 4MiB >/dev/null 2>&1
fails=0 killed=0 committed_total=0 raced=(0 0 0)
for t in $(seq 1 "$TRIALS"); do
  step=$((t + 1))
  # Half the items change, written at 80 MiB/s: the save runs ~0.3 s.
  "$SLUICE" save --tier "$K" --keep-last 0=3 --rate-limit 0=80MiB --name tor --step $step --synthetic 48MiB \
    --items 12 --change 0.5 --chunk-size 1MiB --object-size 4MiB >/dev/null 2>&1 &
  pid=$!
  BGPIDS+=("$pid")
  sleep "0.$((RANDOM % 20 / 10))$((RANDOM % 10))"
  race=$((RANDOM % 3))
  raced[$race]=$((raced[race] + 1))
  case $race in
    0) "$SLUICE" rm --store "$K" --name tor --step $((step - 1)) >/dev/null 2>&1 ;;  # its base
    1) "$SLUICE" gc --store "$K" --min-age 0s >/dev/null 2>&1 ;;
    2) "$SLUICE" rm --store "$K" --name tor --step $((step - 2)) >/dev/null 2>&1 ;;
  esac
  sleep "0.$((RANDOM % 7))$((RANDOM % 10))"
  kill -9 "$pid" 2>/dev/null && killed=$((killed + 1))
  wait "$pid" 2>/dev/null
  "$SLUICE" ls --store "$K" --name tor --json >"$W/tor.json" 2>/dev/null
  steps=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(str(c["step"]) for c in d if c["complete"])); sys.exit(1 if any(not c["complete"] for c in d) else 0)' "$W/tor.json") || {
    fails=$((fails + 1))
    echo "# trial $t: ls shows a damaged step: $(cat "$W/tor.json")"
  }
  for s in $steps; do
    committed_total=$((committed_total + 1))
    if ! "$SLUICE" verify --store "$K" --name tor --step "$s" >"$W/v.out" 2>&1; then
      fails=$((fails + 1))
      echo "# trial $t (race $race): committed step $s does not verify: $(tail -2 "$W/v.out")"
    fi
  done
done
"$SLUICE" gc --store "$K" --min-age 0s >/dev/null 2>&1
for s in $(python3 -c 'import json,sys; print(" ".join(str(c["step"]) for c in json.load(open(sys.argv[1])) if c["complete"]))' "$W/tor.json"); do
  "$SLUICE" verify --store "$K" --name tor --step "$s" >/dev/null 2>&1 || fails=$((fails + 1))
done
check "$TRIALS incremental saves killed at random moments ($killed killed while running) racing rm of their base (${raced[0]}), gc --min-age 0 (${raced[1]}) and rm of an older step (${raced[2]}): every committed step verified after each ($committed_total checks), and after a final gc" \
  [ "$fails" = 0 ]
sl save --tier "$K" --keep-last 0=3 --name tor --step $((TRIALS + 2)) --synthetic 48MiB --items 12 --change 0.5 \
  --chunk-size 1MiB --object-size 4MiB
expect_ok "the next save after the trials succeeds"

echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
