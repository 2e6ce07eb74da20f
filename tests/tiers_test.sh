#!/usr/bin/env bash
# tiers_test.sh: tiered checkpoints through the sluice command line.
#
#   tests/tiers_test.sh path/to/sluice
#
# Saves commit on tier 0 and drain to each later tier (--tier URI, repeated,
# fastest first). Covers: two-tier save and ls states, --async / --detach and
# `sluice drain`, restore falling back to a later tier and repairing tier 0,
# a durable tier going away (retention must not drop steps it lacks), kill -9
# during a drain, --rate-limit, bad input, a durable tier that is full, one that falls
# behind (--backlog-policy, ls --backlog, save --max-backlog), and a rank with a
# per-host tier 0 killed while it copies its part (--tier0-per-host). File stores in a fresh
# temporary directory (removed on exit). Prints one "ok - ..." / "not ok - ..."
# line per check and last "N passed, M failed". Exits 0 if every check passed,
# 1 if any failed, 77 (skip) if the binary is missing, 2 on bad usage.
TESTS_DIR=$(cd "$(dirname "$0")" && pwd)
set -u

if [ $# -ne 1 ]; then
  echo "usage: $0 path/to/sluice" >&2
  exit 2
fi
if [ ! -x "$1" ]; then
  echo "ok - tiers_test.sh # SKIP no sluice binary at $1"
  exit 77
fi
SLUICE=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
command -v python3 >/dev/null || { echo "tiers_test.sh: python3 is required" >&2; exit 2; }

W=$(mktemp -d /tmp/sluice-tiers-test.XXXXXX) || exit 2
BGPIDS=()
cleanup() {
  local p
  for p in "${BGPIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  umount "$W/full-b" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
cd "$W" || exit 2

. "$TESTS_DIR/lib.sh"
outtext() { head -c 400 "$W/out" | tr '\n' '|'; }
# stepdir STORE NAME STEP
stepdir() { printf '%s/ckpt/%s/%020d' "$1" "$2" "$3"; }
# steps_on STORE NAME: the step numbers with a directory on STORE, e.g. "1 2".
steps_on() {
  find "$1/ckpt/$2" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' 2>/dev/null |
    sed 's/^0*\([0-9]\)/\1/' | LC_ALL=C sort -n | tr '\n' ' ' | sed 's/ $//'
}
# tier_states: "state,state;state,state" per checkpoint of the ls --json in $W/out.
tier_states() { pyj '";".join(",".join(t["state"] for t in c["tiers"]) for c in d)'; }
now() { date +%s.%N; }
# elapsed START: seconds since START (a `now`), as a decimal.
elapsed() { python3 -c 'import sys; print("%.3f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$1" "$(now)"; }
# ge A B: A >= B (decimals).
ge() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)' "$1" "$2"; }
# flip FILE OFFSET: inverts one byte in place (printf + dd conv=notrunc).
flip() {
  local b
  b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' \n')
  # shellcheck disable=SC2059
  printf "\\$(printf '%03o' $((b ^ 255)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
# wait_gone PID SECONDS: true when PID exited within SECONDS.
wait_gone() {
  local _
  for _ in $(seq $(($2 * 10))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  return 1
}

T0=$(now)

# -------------------------------------------------- 1. two-tier save of a tree
A1=$W/t1/A
B1=$W/t1/B
make_tree "$W/tree" <<'EOF'
w('big.bin', os.urandom(3 * 1024 * 1024 + 17))
w('empty', b'')
w('sub/mid.bin', os.urandom(1024 * 1024 + 5))
w('sub/small.txt', b'hello tiers\n')
w('sub/deeper/zeros', bytes(300000))
EOF
# Items are stored in key order, back to back, in one data object.
python3 - "$W/tree" >"$W/layout" <<'EOF'
import os, sys
root = sys.argv[1]
keys = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
pos = 0
for k in keys:
    n = os.path.getsize(os.path.join(root, k))
    if n:
        print(k, pos, n)
    pos += n
EOF
TREE_BYTES=$(awk '{s+=$3} END {print s}' "$W/layout")
CH=262144

sl save --tier "$A1" --tier "$B1" --name tree --step 1 --from "$W/tree" --chunk-size 256KiB --json
expect_ok "two-tier save --from a tree --json exits 0"
cp "$W/out" "$W/save1.json"
check "save --json: committed, both tiers committed" \
  [ "$(pyj '(d["committed"], [t["state"] for t in d["tiers"]])')" = "(True, ['committed', 'committed'])" ]
check "save --json: tiers named by their URIs, fastest first" \
  [ "$(pyj '[t["uri"] for t in d["tiers"]]')" = "['$A1', '$B1']" ]
check "save --json: durable_seconds on both tiers, tier 1 >= tier 0 > 0 ($(pyj '[t.get("durable_seconds") for t in d["tiers"]]'))" \
  [ "$(pyj 'all(isinstance(t.get("durable_seconds"), (int, float)) for t in d["tiers"]) and d["tiers"][1]["durable_seconds"] >= d["tiers"][0]["durable_seconds"] > 0')" = "True" ]
check "save --json: stall_seconds > 0 ($(pyj 'd.get("stall_seconds")'))" \
  [ "$(pyj 'd["stall_seconds"] > 0')" = "True" ]
sl ls --tier "$A1" --tier "$B1" --json
check "ls --tier A --tier B --json: tree@1 committed/committed" \
  [ "$RC" -eq 0 -a "$(pyj '[(c["name"], c["step"], c["bytes"]) for c in d]')" = "[('tree', 1, $TREE_BYTES)]" -a "$(tier_states)" = "committed,committed" ]
sl restore --store "$B1" --name tree --step 1 --to "$W/r1"
expect_ok "restore from tier B alone (--store B) exits 0"
check "the tree restored from tier B is byte-for-byte the saved tree" diff -r "$W/tree" "$W/r1"

# ---------------------------------------------------- 2. --async and --detach
A2=$W/t2/A
B2=$W/t2/B
"$SLUICE" save --tier "$A2" --tier "$B2" --name as --step 1 --synthetic 30MiB --async \
  --rate-limit 1=10MiB >"$W/as.out" 2>"$W/as.err" &
p=$!
BGPIDS+=("$p")
early=""
for _ in $(seq 30); do
  if grep -q stall "$W/as.out" 2>/dev/null; then early=yes; break; fi
  kill -0 $p 2>/dev/null || break
  sleep 0.1
done
alive=no
kill -0 $p 2>/dev/null && alive=yes
check "save --async prints its stall line while tier 1 is still being written (early=$early, save still running=$alive)" \
  [ "$early" = yes -a "$alive" = yes ]
wait $p
RC=$?
check "save --async exits 0 after the background write" [ "$RC" -eq 0 ]
stall_line=$(grep -n stall "$W/as.out" | head -n1 | cut -d: -f1)
summary_line=$(grep -n '^saved ' "$W/as.out" | head -n1 | cut -d: -f1)
check "save --async: the stall line (line ${stall_line:-none}) comes before the final summary (line ${summary_line:-none})" \
  [ -n "$stall_line" -a -n "$summary_line" ] && [ "${stall_line:-0}" -lt "${summary_line:-0}" ]

sl save --tier "$A2" --tier "$B2" --name as --step 2 --synthetic 20MiB --async --detach --json
expect_ok "save --async --detach exits 0"
check "save --async --detach --json: tier 0 committed, tier 1 not ($(pyj '[t["state"] for t in d["tiers"]]'))" \
  [ "$(pyj '(d["tiers"][0]["state"], d["tiers"][1]["state"] != "committed")')" = "('committed', True)" ]
sl ls --tier "$A2" --tier "$B2" --name as --json
check "after --detach, ls shows as@2 committed on tier 0 and pending on tier 1 ($(tier_states))" \
  [ "$RC" -eq 0 -a "$(pyj '[",".join(t["state"] for t in c["tiers"]) for c in d if c["step"] == 2]')" = "['committed,pending']" ]
sl drain --tier "$A2" --tier "$B2"
expect_ok "sluice drain --tier A --tier B exits 0"
sl ls --tier "$A2" --tier "$B2" --name as --json
check "after drain, ls shows both steps committed on both tiers ($(tier_states))" \
  [ "$RC" -eq 0 -a "$(tier_states)" = "committed,committed;committed,committed" ]
sl verify --tier "$A2" --tier "$B2" --name as --step 2
expect_ok "verify --tier A --tier B of the drained step exits 0"

# --------------------------------------------- 3. fallback to a later tier
DAT=$(find "$(stepdir "$A1" tree 1)/data" -name '*.dat' 2>/dev/null | head -n1)
if [ -z "$DAT" ] || [ "$(stat -c %s "$DAT")" -ne "$TREE_BYTES" ]; then
  nok "expected one data object of $TREE_BYTES bytes on tier A: '$DAT'"
fi
pos=$((TREE_BYTES / 2 + 4321))
read -r ekey echunk <<<"$(awk -v p=$pos -v ch=$CH '$2 <= p && p < $2 + $3 {print $1, int((p - $2) / ch)}' "$W/layout")"
[ -n "$DAT" ] && flip "$DAT" "$pos"
sl verify --store "$A1" --name tree --step 1
if [ "$RC" -eq 1 ] && grep -F "item '$ekey'" "$W/out" "$W/err" | grep -q "chunk $echunk"; then
  ok "verify --store A after a flipped byte exits 1 naming item '$ekey' chunk $echunk"
else
  nok "verify --store A after a flipped byte at $pos: exit $RC (want 1 naming '$ekey' chunk $echunk), stdout: $(outtext) stderr: $(errtext)"
fi
sl restore --tier "$A1" --tier "$B1" --name tree --step 1 --to "$W/r3"
expect_ok "restore --tier A --tier B with a bad chunk on A exits 0"
check "that restore is byte-for-byte the tree" diff -r "$W/tree" "$W/r3"
check "restore says 'fallback' and 'repair' on stderr" grep -q fallback "$W/err"
check "restore's stderr has a 'sluice: repair:' line" grep -q '^sluice: repair:' "$W/err"
check "restore's stderr has a 'sluice: fallback:' line naming item '$ekey'" \
  bash -c "grep '^sluice: fallback:' '$W/err' | grep -qF \"'$ekey'\""
sl verify --store "$A1" --name tree --step 1
expect_ok "verify --store A after the restore exits 0 (the bad object was rewritten)"
[ -n "$DAT" ] && rm -f "$DAT"
sl restore --tier "$A1" --tier "$B1" --name tree --step 1 --to "$W/r3b"
expect_ok "restore --tier A --tier B with a data object deleted on A exits 0"
check "that restore is byte-for-byte the tree" diff -r "$W/tree" "$W/r3b"
check "and says fallback on stderr" grep -q '^sluice: fallback:' "$W/err"
sl verify --store "$A1" --name tree --step 1
expect_ok "verify --store A after that restore exits 0 (the deleted object was rewritten)"

# ------------------------------------------- 4. the durable tier goes away
A4=$W/t4/A
P4=$W/t4/p      # tier B's parent: removed, later a regular file, then recreated
B4=$P4/B
mkdir -p "$B4"
"$SLUICE" save --tier "$A4" --tier "$B4" --backlog-policy drain-every --name w --step 1 --synthetic 40MiB --async \
  --rate-limit 1=5MiB --keep-last 0=1 >"$W/bg4.out" 2>"$W/bg4.err" &
p4=$!
BGPIDS+=("$p4")
sleep 1
rm -rf "$P4"
sleep 1.5
sl ls --tier "$A4" --tier "$B4" --backlog-policy drain-every --name w --json
cp "$W/out" "$W/ls4.json"
running=no
kill -0 $p4 2>/dev/null && running=yes
check "the background save is still at work on tier 1 after tier B was removed (running=$running)" [ "$running" = yes ]
check "ls while it retries: w@1 committed on tier 0 ($(tier_states))" \
  [ "$RC" -eq 0 -a "$(pyj '[c["tiers"][0]["state"] for c in d if c["step"] == 1]')" = "['committed']" ]
check "ls while it retries: tier 1 failed with a reason, or pending ($(pyj '[c["tiers"][1] for c in d]'))" \
  [ "$(pyj '[(t["state"] == "pending" or (t["state"] == "failed" and bool(t.get("reason")))) for t in (c["tiers"][1] for c in d)]')" = "[True]" ]
kill $p4 2>/dev/null
wait_gone $p4 10 || kill -9 $p4 2>/dev/null
wait $p4 2>/dev/null
sl verify --store "$A4" --name w --step 1
expect_ok "tier 0 keeps the checkpoint: verify --store A exits 0"
# A tier that cannot be a store (its path is a regular file) is no outage:
# a save fails at open, exit 1, with one line naming it, and retries nothing.
rm -rf "$P4"
mkdir -p "$P4"
: >"$B4"
sl save --tier "$A4" --tier "$B4" --name w --step 9 --synthetic 1MiB --async --detach
if [ "$RC" -eq 1 ] && one_sluice_line && grep -q "tier 1.*$B4 is not a directory" "$W/err"; then
  ok "save with tier B a regular file exits 1 with one line naming it"
else
  nok "save with tier B a regular file: exit $RC (want 1, one line naming it), stderr: $(errtext)"
fi
check "...and wrote nothing on A (A holds: $(steps_on "$A4" w))" [ "$(steps_on "$A4" w)" = "1" ]
rm -f "$B4"
# Keep tier B unavailable: a store over two directories whose second one
# (a device) is not mounted, which can pass.
B4DEV=$W/t4/b-dev
"$SLUICE" save --store "file://$B4?dirs=$B4DEV" --name seed --step 1 --synthetic 4KiB >/dev/null 2>&1
mv "$B4DEV" "$B4DEV.unmounted"
sl save --tier "$A4" --tier "$B4" --backlog-policy drain-every --name w --step 2 --synthetic 5MiB --async --detach --keep-last 0=1
expect_ok "save --async --detach --keep-last 0=1 of w@2 with tier B unavailable exits 0"
check "--keep-last 0=1 did not remove w@1 from A while B lacks it (A holds: $(steps_on "$A4" w))" \
  [ "$(steps_on "$A4" w)" = "1 2" ]
sl drain --tier "$A4" --tier "$B4" --backlog-policy drain-every --keep-last 0=1
if [ "$RC" -eq 1 ] && grep -q 'w@1' "$W/err" && grep -q 'w@2' "$W/err"; then
  ok "drain with tier B unavailable exits 1 naming w@1 and w@2"
else
  nok "drain with tier B unavailable: exit $RC (want 1 naming w@1 and w@2), stderr: $(errtext)"
fi
check "that drain's --keep-last 0=1 left both steps on A (A holds: $(steps_on "$A4" w))" \
  [ "$(steps_on "$A4" w)" = "1 2" ]
sl ls --tier "$A4" --tier "$B4" --backlog-policy drain-every --name w --json
check "ls: tier 1 failed (with a reason) or pending for both steps ($(tier_states))" \
  [ "$RC" -eq 0 -a "$(pyj '[(c["step"], c["tiers"][1]["state"] == "pending" or (c["tiers"][1]["state"] == "failed" and bool(c["tiers"][1].get("reason")))) for c in d]')" = "[(1, True), (2, True)]" ]
mv "$B4DEV.unmounted" "$B4DEV"
sl drain --tier "$A4" --tier "$B4" --backlog-policy drain-every --keep-last 0=1
expect_ok "after recreating B, drain --keep-last 0=1 exits 0"
sl ls --tier "$A4" --tier "$B4" --backlog-policy drain-every --name w --json
check "ls: both steps committed on B ($(tier_states))" \
  [ "$RC" -eq 0 -a "$(pyj '[(c["step"], c["tiers"][1]["state"]) for c in d]')" = "[(1, 'committed'), (2, 'committed')]" ]
check "A now holds only the newest step (A holds: $(steps_on "$A4" w))" [ "$(steps_on "$A4" w)" = "2" ]
vb=0
for s in 1 2; do "$SLUICE" verify --store "$B4" --name w --step $s >/dev/null 2>&1 || vb=$((vb + 1)); done
check "both steps verify on B" [ "$vb" -eq 0 ]

# --------------------------------------------------- 5. kill -9 during a drain
A5=$W/t5/A
B5=$W/t5/B
sok=0
for s in 1 2 3; do
  "$SLUICE" save --store "$A5" --name k --step $s --synthetic 20MiB --full >/dev/null 2>&1 && sok=$((sok + 1))
done
check "three 20 MiB steps saved to A alone" [ "$sok" -eq 3 ]
"$SLUICE" drain --tier "$A5" --tier "$B5" --backlog-policy drain-every --rate-limit 1=10MiB >"$W/d5.out" 2>"$W/d5.err" &
p5=$!
BGPIDS+=("$p5")
sleep 1.5
running=no
kill -0 $p5 2>/dev/null && running=yes
kill -9 $p5 2>/dev/null
wait $p5 2>/dev/null
check "the rate-limited drain was still running after 1.5 s when killed (running=$running)" [ "$running" = yes ]
sl ls --store "$B5" --all --json
cp "$W/out" "$W/ls5.json"
ncommitted=$(pyj 'sum(1 for c in d if c["complete"])')
check "after kill -9, B does not hold all three steps committed (committed: ${ncommitted:-?}, listing: $(pyj '[(c["step"], c["complete"]) for c in d]'))" \
  [ "$RC" -eq 0 -a "${ncommitted:-3}" -lt 3 ]
vb=0
for s in $(pyj '" ".join(str(c["step"]) for c in d if c["complete"])' "$W/ls5.json"); do
  "$SLUICE" verify --store "$B5" --name k --step "$s" >/dev/null 2>&1 || vb=$((vb + 1))
done
check "every step B lists as committed after the kill verifies" [ "$vb" -eq 0 ]
sl drain --tier "$A5" --tier "$B5" --backlog-policy drain-every
expect_ok "drain again after the kill exits 0"
vb=0
for s in 1 2 3; do "$SLUICE" verify --store "$B5" --name k --step $s >/dev/null 2>&1 || vb=$((vb + 1)); done
check "verify --store B of every step exits 0" [ "$vb" -eq 0 ]
sl gc --store "$B5"
expect_ok "gc --store B exits 0"
sl ls --store "$B5" --all --json
check "after gc, ls --store B --all shows steps 1-3, all complete, nothing incomplete" \
  [ "$RC" -eq 0 -a "$(pyj 'sorted((c["step"], c["complete"]) for c in d)')" = "[(1, True), (2, True), (3, True)]" ]
leftover=$(find "$B5" \( -name '*.lock' -o -name '*.tmp.*' \) 2>/dev/null | head -n3 | tr '\n' ' ')
check "after gc, no *.lock or *.tmp.* files remain on B ($leftover)" [ -z "$leftover" ]
stray=""
while IFS= read -r f; do
  rel=${f#"$B5"/ckpt/k/}
  step=${rel%%/*}
  [ -f "$B5/ckpt/k/$step/COMMIT" ] || { stray="$stray $rel"; continue; }
  case ${rel#*/} in COMMIT | seal/* | manifest/*.man | data/*.dat) ;; *) stray="$stray $rel" ;; esac
done < <(find "$B5" -type f)
check "after gc, B holds only the files of committed steps (claim, seal, manifests, data)$stray" [ -z "$stray" ]
ndat=$(find "$B5" -name '*.dat' -printf '%s\n' | awk '{n++; s+=$1} END {print n+0 "/" s+0}')
check "after gc, B holds three data objects of 20 MiB each (count/bytes: $ndat)" [ "$ndat" = "3/62914560" ]

# ------------------------------------------------------------- 6. rate limit
A6=$W/t6/A
sl save --store "$A6" --name big --step 1 --synthetic 100MiB
expect_ok "save of 100 MiB to A alone"
t=$(now)
sl drain --tier "$A6" --tier "$W/t6/B" --rate-limit 1=20MiB
capped=$(elapsed "$t")
expect_ok "drain --rate-limit 1=20MiB of 100 MiB exits 0"
check "drain --rate-limit 1=20MiB of 100 MiB took >= 4.5 s (${capped} s)" ge "$capped" 4.5
t=$(now)
sl drain --tier "$A6" --tier "$W/t6/C"
uncapped=$(elapsed "$t")
expect_ok "drain of the same 100 MiB to another tier without a cap exits 0"
check "the uncapped drain is faster (${uncapped} s vs ${capped} s)" ge "$capped" "$uncapped"
sl verify --store "$W/t6/B" --name big --step 1
expect_ok "the rate-limited copy verifies"

# -------------------------------------------------------------- 7. bad input
U=$W/usage       # no usage error may create these
UA=$U/A
UB=$U/B
CREATED=""
# created_by DESC: notes (and undoes) a usage error that created the tier directories.
created_by() { if [ -e "$U" ]; then CREATED="$CREATED [$1]"; rm -rf "$U"; fi; }
usage() {  # usage DESC ARGS...
  local d=$1; shift
  sl "$@"
  expect_err "usage error: $d" 2
  created_by "$d"
}
SV=(--name b --step 1 --synthetic 1MiB)
usage "--rate-limit 7=1MiB (no tier 7)" save --tier "$UA" --tier "$UB" "${SV[@]}" --rate-limit 7=1MiB
usage "--rate-limit 1=abc" save --tier "$UA" --tier "$UB" "${SV[@]}" --rate-limit 1=abc
usage "--keep-last 0=0" save --tier "$UA" --tier "$UB" "${SV[@]}" --keep-last 0=0
usage "--staging 0" save --tier "$UA" --tier "$UB" "${SV[@]}" --staging 0
usage "--store and --tier together" save --store "$UA" --tier "$UB" "${SV[@]}"
usage "drain with a single --tier" drain --tier "$UA"
usage "drain --rate-limit 7=1MiB (no tier 7)" drain --tier "$UA" --tier "$UB" --rate-limit 7=1MiB
usage "drain --keep-last 0=0" drain --tier "$UA" --tier "$UB" --keep-last 0=0
usage "save --detach without --async" save --tier "$UA" --tier "$UB" "${SV[@]}" --detach
usage "--backlog-policy sometimes" save --tier "$UA" --tier "$UB" "${SV[@]}" --backlog-policy sometimes
usage "--backlog-policy 5=coalesce (no tier 5)" drain --tier "$UA" --tier "$UB" --backlog-policy 5=coalesce
usage "--when-backlogged without a limit" save --tier "$UA" --tier "$UB" "${SV[@]}" --when-backlogged wait
usage "--when-backlogged later" save --tier "$UA" --tier "$UB" "${SV[@]}" --max-backlog 1 --when-backlogged later
usage "--max-backlog with one tier" save --store "$UA" "${SV[@]}" --max-backlog 1
for st in 1PiB 1024TiB; do
  sl save --tier "$UA" --tier "$UB" "${SV[@]}" --async --staging $st
  if { [ "$RC" -eq 1 ] || [ "$RC" -eq 2 ]; } && one_sluice_line && grep -q staging "$W/err"; then
    ok "--staging $st is refused with one clear line about staging (exit $RC)"
  else
    nok "--staging $st: exit $RC (want 1 or 2 and one sluice: line mentioning staging), stderr: $(errtext)"
  fi
  created_by "--staging $st"
done
check "no refused save or drain created a tier directory${CREATED:+ (created by:$CREATED)}" [ -z "$CREATED" ]

# ------------------------------------------------------ 8. the durable tier is full
# A 16 MiB tmpfs as tier B (needs root: mount); a 40 MiB checkpoint cannot fit.
FA=$W/full-a FB=$W/full-b
mkdir -p "$FA" "$FB"
if mount -t tmpfs -o size=16m sluice-tiers-test "$FB" 2>/dev/null; then
  sl save --tier "$FA" --tier "$FB" --backlog-policy drain-every --name full --step 1 --synthetic 40MiB --async --detach
  expect_ok "a save whose later tier is too small still commits on tier 0"
  sl drain --tier "$FA" --tier "$FB" --backlog-policy drain-every --keep-last 0=1
  if [ "$RC" -eq 1 ] && grep -qi "space" "$W/err"; then ok "drain into a full tier exits 1 and says the tier is out of space"
  else nok "drain into a full tier: exit $RC (want 1 naming no space), stderr: $(errtext)"; fi
  sl save --tier "$FA" --tier "$FB" --backlog-policy drain-every --name full --step 2 --synthetic 1MiB --async --detach --keep-last 0=1
  sl ls --tier "$FA" --tier "$FB" --backlog-policy drain-every --keep-last 0=1 --json
  check "ls shows the full tier as failed with a reason naming the lack of space" \
    [ "$(pyj '[c["tiers"][1]["state"] + ":" + str("space" in c["tiers"][1].get("reason", "").lower()) for c in d if c["step"] == 1][0]')" = "failed:True" ]
  sl verify --store "$FA" --name full --step 1
  expect_ok "tier 0 keeps the checkpoint the full tier could not take (retention removed nothing)"
  # (Committed means sealed: a failed drain may leave its claim, for the next to seal.)
  check "no partial copy is committed on the full tier" [ -z "$(ls "$(stepdir "$FB" full 1)/seal" 2>/dev/null)" ]
  umount "$FB"
  sl drain --tier "$FA" --tier "$FB" --backlog-policy drain-every --keep-last 0=1
  expect_ok "once the tier has room, drain finishes"
  sl verify --store "$FB" --name full --step 1
  expect_ok "the drained copy verifies"
elif [ "${CI:-}" = true ]; then
  nok "cannot mount a tmpfs for the full-tier case (needs root)"
else
  echo "ok - full durable tier # SKIP cannot mount a tmpfs (needs root)"
fi

# ------------------------------------------ 9. a durable tier that falls behind
# Tier B is unavailable (a store over two directories whose second one, a
# device, is not mounted) while four saves land on A: the default backlog
# policy (coalesce) drains only the newest to B.
LA=$W/lag-a LB=$W/lag-b LBDEV=$W/lag-b-dev
"$SLUICE" save --store "file://$LB?dirs=$LBDEV" --name seed --step 1 --synthetic 4KiB >/dev/null 2>&1
mv "$LBDEV" "$LBDEV.unmounted"
lag_ok=0
for s in 1 2 3 4; do
  "$SLUICE" save --tier "$LA" --tier "$LB" --name lag --step $s --synthetic 2MiB --full --async --detach \
    >/dev/null 2>&1 && lag_ok=$((lag_ok + 1))
done
check "four saves --async --detach with tier B unavailable exit 0 ($lag_ok of 4)" [ "$lag_ok" -eq 4 ]
sl ls --tier "$LA" --tier "$LB" --json
check "ls: steps 1-3 superseded on tier 1, step 4 pending or failed ($(tier_states))" \
  [ "$RC" -eq 0 -a "$(pyj '[(c["step"], c["tiers"][1]["state"]) for c in d]' | sed 's/failed/pending/')" = \
    "[(1, 'superseded'), (2, 'superseded'), (3, 'superseded'), (4, 'pending')]" ]
sl ls --tier "$LA" --tier "$LB" --backlog --json
check "ls --backlog --json: tier 1 has 1 step (2 MiB) due and 3 superseded ($(outtext))" \
  [ "$RC" -eq 0 -a "$(pyj '[(t["tier"], t["steps"], t["bytes"], t["superseded"]) for t in d]')" = "[(0, 0, 0, 0), (1, 1, 2097152, 3)]" ]
sl ls --tier "$LA" --tier "$LB" --backlog-policy drain-every --backlog --json
check "ls --backlog-policy drain-every --backlog: all 4 steps (8 MiB) due on tier 1 ($(outtext))" \
  [ "$RC" -eq 0 -a "$(pyj '[(t["steps"], t["bytes"], t["superseded"]) for t in d][1]')" = "(4, 8388608, 0)" ]
sl ls --tier "$LA" --tier "$LB"
check "plain ls ends with tier 1's backlog line" grep -q "^tier 1 backlog: 1 step(s), 2.00 MiB not yet drained there; 3 superseded" "$W/out"
sl save --tier "$LA" --tier "$LB" --name lag --step 5 --synthetic 2MiB --full --async --detach --max-backlog 1
if [ "$RC" -eq 1 ] && one_sluice_line && grep -q "tier 1 (.*) has a backlog of 1 step(s) of lag" "$W/err"; then
  ok "save --max-backlog 1 with one step due on tier 1 exits 1 with one line naming the tier"
else
  nok "save --max-backlog 1: exit $RC (want 1 naming tier 1's backlog), stderr: $(errtext)"
fi
check "...and wrote nothing (A holds: $(steps_on "$LA" lag))" [ "$(steps_on "$LA" lag)" = "1 2 3 4" ]
sl save --tier "$LA" --tier "$LB" --name lag --step 5 --synthetic 2MiB --full --async --detach --max-backlog 2
expect_ok "save --max-backlog 2 (one step due) exits 0"
"$SLUICE" save --tier "$LA" --tier "$LB" --name lag --step 6 --synthetic 2MiB --full --async --detach \
  --max-backlog-bytes 2MiB --when-backlogged wait >"$W/lag6.out" 2>"$W/lag6.err" &
p6=$!
BGPIDS+=("$p6")
sleep 1.5
running=no
kill -0 $p6 2>/dev/null && running=yes
check "save --max-backlog-bytes 2MiB --when-backlogged wait waits while tier B is down (running=$running)" \
  [ "$running" = yes ] && grep -q "waiting for drains" "$W/lag6.err"
mv "$LBDEV.unmounted" "$LBDEV"
sl drain --tier "$LA" --tier "$LB" --json
check "drain copies only the newest due step and counts the superseded ones ($(outtext))" \
  [ "$RC" -eq 0 -a "$(pyj '(d["drained"], d["superseded"])')" = "(1, 4)" ]
if wait_gone $p6 15; then wait $p6; rc6=$?; else rc6=timeout; fi
check "the waiting save goes on once the drain brought the backlog under its limit (exit $rc6)" [ "$rc6" = 0 ]
sl drain --tier "$LA" --tier "$LB" --keep-last 0=1
expect_ok "drain --keep-last 0=1 then exits 0"
check "tier A keeps only the newest step, superseded ones went (A holds: $(steps_on "$LA" lag))" \
  [ "$(steps_on "$LA" lag)" = "6" ]
vb=0
for s in $(steps_on "$LB" lag); do "$SLUICE" verify --store "$LB" --name lag --step $s >/dev/null 2>&1 || vb=$((vb + 1)); done
check "tier B holds step 6 (and 5 if drained before it), each verifies (B holds: $(steps_on "$LB" lag))" \
  [ "$vb" -eq 0 ] && steps_on "$LB" lag | grep -qE '^(5 )?6$'
sl ls --tier "$LA" --tier "$LB" --backlog --json
check "ls --backlog: nothing due on tier 1 any more" [ "$RC" -eq 0 -a "$(pyj 'd[1]["steps"]')" = 0 ]

# ----------------- 10. a per-host tier 0: a rank killed while copying its part
# Two ranks, each with its own tier 0 (host0, host1), share tier 1. Rank 1
# is killed -9 while it copies its part to tier 1 (held to 4 MiB/s): rank 0
# gives up at its --timeout, nothing is committed anywhere, no host records
# a part, and gc takes every leftover. A relaunch commits.
SH=$W/t10/shared
ph_save() {  # ph_save RANK ATTEMPT [FLAGS...]: rank RANK of ph@1 in the background; sets PH_PID
  local r=$1 a=$2
  shift 2
  "$SLUICE" save --tier "$W/t10/host$r" --tier "$SH" --tier0-per-host --name ph --step 1 --rank "$r" --world 2 \
    --attempt "$a" --synthetic 16MiB --timeout 8s "$@" >"$W/ph$r.out" 2>"$W/ph$r.err" &
  PH_PID=$!
  BGPIDS+=("$PH_PID")
}
ph_save 0 A
p0=$PH_PID
ph_save 1 A --rate-limit 1=4MiB
p1=$PH_PID
for _ in $(seq 50); do
  [ -n "$(find "$SH" -name 'r000001-*.dat' 2>/dev/null)" ] && break
  sleep 0.1
done
running=no
kill -0 "$p1" 2>/dev/null && running=yes
kill -9 "$p1" 2>/dev/null
wait "$p1" 2>/dev/null
wait "$p0"
rc0=$?
said=no
grep -q "rank(s) 1 of 2 published no manifest" "$W/ph0.err" && said=yes
check "rank 1 killed -9 while copying its part to tier 1 (running=$running): rank 0 gives up (exit $rc0) naming rank 1 ($said)" \
  [ "$running" = yes -a "$rc0" -ne 0 -a "$said" = yes ]
sl ls --store "$SH" --all --json
check "nothing committed on tier 1 ($(pyj '[(c["step"], c["complete"]) for c in d]'))" \
  [ "$RC" -eq 0 -a "$(pyj '[c["complete"] for c in d]')" = "[False]" ]
parts=$(find "$W/t10" -path '*/parts/*' | wc -l)
check "no host records a part ($parts part records)" [ "$parts" -eq 0 ]
for t in host0 host1 shared; do "$SLUICE" gc --store "$W/t10/$t" --min-age 0 >/dev/null 2>&1; done
left=$(find "$W/t10" -type f | sed "s|$W/t10/||" | tr '\n' ' ')
check "gc --min-age 0 on both hosts and tier 1 leaves no file of the killed save ($left)" [ -z "$left" ]
ph_save 0 B
p0=$PH_PID
ph_save 1 B
p1=$PH_PID
wait "$p0"
rc0=$?
wait "$p1"
rc1=$?
check "a relaunch (--attempt B) commits (exit $rc0, $rc1)" [ "$rc0" -eq 0 -a "$rc1" -eq 0 ]
sl restore --tier "$W/t10/host1" --tier "$SH" --name ph --rank 1 --to "$W/t10-r1-local"
rc_local=$RC
sl restore --store "$SH" --name ph --rank 1 --to "$W/t10-r1-shared"
same=no
diff -r "$W/t10-r1-local" "$W/t10-r1-shared" >/dev/null 2>&1 && same=yes
check "rank 1 restores from host 1's part and from tier 1 alike (exit $rc_local, $RC; same bytes: $same)" \
  [ "$rc_local" -eq 0 -a "$RC" -eq 0 -a "$same" = yes ]
sl scrub --tier "$W/t10/host1" --tier "$SH"
expect_ok "scrub over host 1's tier 0 (a part) and tier 1 passes"
sl save --tier "$W/t10/host0" --tier0-per-host --name ph --step 2 --synthetic 1MiB
expect_err "--tier0-per-host with one tier is refused" 2
sl save --tier "$W/t10/host0" --tier "$SH" --tier0-per-host --backlog-policy 1=coalesce --name ph --step 2 --rank 0 --world 2 --synthetic 1MiB
expect_err "--tier0-per-host with tier 1 coalescing is refused" 2

# ---------------------------------------------------------------- status
QA=$W/status-a QB=$W/status-b
"$SLUICE" save --tier "$QA" --tier "$QB" --name st --step 1 --synthetic 4MiB >/dev/null 2>&1
"$SLUICE" save --store "$QA" --name st --step 2 --synthetic 32MiB --object-size 4MiB >/dev/null 2>&1
sl status --tier "$QA" --tier "$QB" --json
check "status --json: newest step per tier (2 on tier 0, 1 on tier 1), nothing in flight" \
  [ "$RC" = 0 -a "$(pyj '[(n["name"], [t["newest_step"] for t in n["tiers"]]) for n in d["names"]]')" = "[('st', [2, 1])]" -a "$(pyj 'len(d["in_flight"])')" = 0 ]
"$SLUICE" drain --tier "$QA" --tier "$QB" --rate-limit 1=4MiB >/dev/null 2>&1 &
qd=$!
BGPIDS+=("$qd")
sleep 2
sl status --tier "$QA" --tier "$QB" --json --interval 1s
check "status during a capped drain (another process) shows it in flight with bytes, total, rate and ETA" \
  [ "$RC" = 0 -a "$(pyj '[(f["kind"], f["step"], f["tier"], f["bytes"] > 0, f.get("total_bytes"), f["bytes_per_sec"] > 0, "eta_seconds" in f) for f in d["in_flight"]]')" = "[('drain', 2, 1, True, 33554432, True, True)]" ]
sl status --tier "$QA" --tier "$QB"
check "plain status prints the drain with an ETA" grep -q "st@2  drain to tier 1 .* ETA" "$W/out"
kill "$qd" 2>/dev/null; wait "$qd" 2>/dev/null
# A drain capped far below its I/O size writes small pieces: what it wrote
# so far shows, not 0 until a whole object lands at once.
"$SLUICE" save --tier "$QA" --tier "$QB" --name slow --step 1 --synthetic 1MiB --async --rate-limit 1=128KiB >/dev/null 2>&1 &
qs=$!
BGPIDS+=("$qs")
sleep 3
sl status --tier "$QA" --tier "$QB" --json --interval 1s
check "status of a drain capped at 128 KiB/s: part of its 1 MiB so far, a rate and an ETA" \
  [ "$RC" = 0 -a "$(pyj '[(f["bytes"] > 0, f["bytes"] < f["total_bytes"], f["bytes_per_sec"] > 0, "eta_seconds" in f) for f in d["in_flight"] if f["name"] == "slow"]')" = "[(True, True, True, True)]" ]
kill "$qs" 2>/dev/null; wait "$qs" 2>/dev/null
timeout 3 "$SLUICE" status --store "$QA" --watch --interval 500ms > "$W/watch.out" 2>&1
check "status --watch keeps refreshing until interrupted (timeout: exit 124)" \
  [ "$?" = 124 -a "$(grep -c '^sluice status' "$W/watch.out")" -ge 3 ]
( sleep 1.2; mv "$QA" "$QA.gone" ) &
timeout 3 "$SLUICE" status --store "$QA" --watch --interval 500ms > "$W/watch.out" 2>&1
check "a store that goes away mid-watch is shown as an error and watched on" \
  [ "$?" = 124 -a "$(grep -c '^ERROR' "$W/watch.out")" -ge 1 ]
mv "$QA.gone" "$QA"
sl status --store "$W/no-such-store"
expect_err "status of a store that does not exist (exit 1)" 1

echo "# tiers_test.sh took $(elapsed "$T0") s"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
