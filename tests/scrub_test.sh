#!/usr/bin/env bash
# scrub_test.sh: sluice scrub (find and heal bad copies across tiers),
# sluice rebuild (repopulate a lost tier), and a damaged newest step never
# skipped silently, through the command line.
#
#   tests/scrub_test.sh path/to/sluice [KILL_TRIALS]
#
# Faults are injected by hand into file stores: flipped bytes, truncated and
# deleted data objects, a deleted manifest, an emptied commit record, a
# commit record swapped with another step's. Then: repair in both
# directions, idempotence, a copy no other tier holds good (named, never
# deleted), a tier that cannot be opened, two scrubs at once, kill -9 of
# scrub and of rebuild at random moments (KILL_TRIALS of each, default 10)
# followed by a run that finishes the job, restores during a rebuild, and the
# rate cap. Prints "ok - ..." / "not ok - ..." per check and "N passed, M
# failed"; exit 0 if all passed, 1 if any failed, 77 without the binary.
TESTS_DIR=$(cd "$(dirname "$0")" && pwd)
set -u
if [ $# -lt 1 ]; then
  echo "usage: $0 path/to/sluice [KILL_TRIALS]" >&2
  exit 2
fi
if [ ! -x "$1" ]; then
  echo "ok - scrub_test.sh # SKIP no sluice binary at $1"
  exit 77
fi
SLUICE=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
TRIALS=${2:-10}
W=$(mktemp -d /tmp/sluice-scrub-test.XXXXXX) || exit 2
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
T0=$(date +%s.%N)

stepdir() { printf '%s/ckpt/%s/%020d' "$1" "$2" "$3"; }
flip() {
  local b
  b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' \n')
  # shellcheck disable=SC2059
  printf "\\$(printf '%03o' $((b ^ 255)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
first_data() { find "$(stepdir "$1" "$2" "$3")/data" -name '*.dat' | sort | head -1; }
# states: "tier:step:state" of every copy in the scrub --json in $W/out.
states() { pyj '",".join("%d:%d:%s" % (c["tier"], c["step"], c["state"]) for c in d["copies"])'; }
# tree_sum STORE: a checksum of every file under the store (what a scrub
# that changes nothing leaves identical), scrub's own records excluded.
# A tier's bytes: every file, except that each commit is taken by its record
# (what its seal holds, format/commit_record.h), not by the names of its
# claim and seal: each copy of a step claims and seals it under a name of
# its own.
# saves_sum STORE: what each step restores to from STORE alone: the same
# for any copy of the same saves, whatever names the copy gives its objects
# and records (a drain or a rebuild writes its copy under its own).
saves_sum() {
  local s out=""
  for s in 1 2 3; do
    rm -rf "$W/sum"
    if "$SLUICE" restore --tier "$1" --name sc --step "$s" --to "$W/sum" >/dev/null 2>&1; then
      out+="$s:$(cd "$W/sum" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum | sha256sum | cut -c1-16) "
    else
      out+="$s:none "
    fi
  done
  echo "$out"
}
tree_sum() {
  (cd "$1" && {
    find ckpt -type f ! -name COMMIT ! -path '*/seal/*' -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum
    find ckpt -type f -path '*/seal/*' | while read -r f; do echo "${f%%/seal/*} $(sha256sum <"$f" | cut -c1-64)"; done |
      LC_ALL=C sort -u
  } | sha256sum | cut -c1-16)
}

A=$W/a B=$W/b
for st in 1 2 3; do
  "$SLUICE" save --tier "$A" --tier "$B" --name sc --step $st --synthetic 24MiB --items 3 --chunk-size 1MiB --full \
    --object-size 8MiB >/dev/null 2>&1
done

# ------------------------------------------------------------ good tiers
sl scrub --tier "$A" --tier "$B" --json
expect_ok "scrub of two good tiers"
check "scrub --json: 6 copies, all ok, newest step first" \
  [ "$(states)" = "0:3:ok,1:3:ok,0:2:ok,1:2:ok,0:1:ok,1:1:ok" ]
sum_a=$(tree_sum "$A") sum_b=$(tree_sum "$B")
saves_a=$(saves_sum "$A")
check "both tiers hold the same saves ($saves_a)" [ "$(saves_sum "$B")" = "$saves_a" -a "${saves_a/none/}" = "$saves_a" ]

# ------------------------------------------------------------ --no-repair
flip "$(first_data "$A" sc 1)" $((3 * 1024 * 1024 + 5))
sl scrub --tier "$A" --tier "$B" --no-repair --json
check "scrub --no-repair after a flipped byte on tier 0: exit 1, one sluice: line" eval '[ "$RC" = 1 ] && one_sluice_line'
check "it names the bad copy (tier 0, step 1, the chunk at 3 MiB) and the rest ok" \
  [ "$(pyj '",".join("%d:%d:%s:%s" % (c["tier"], c["step"], c["state"], [b["offset"] for b in c["bad_chunks"]]) for c in d["copies"])')" = "0:3:ok:[],1:3:ok:[],0:2:ok:[],1:2:ok:[],0:1:bad:[3145728],1:1:ok:[]" ]
check "--no-repair changed nothing on tier 1" [ "$(tree_sum "$B")" = "$sum_b" ]

# ------------------------------------------------------------ repair, both ways
sl scrub --tier "$A" --tier "$B" --json
expect_ok "scrub repairs the flipped byte (exit 0)"
check "tier 0 step 1 repaired from tier 1, one object rewritten" \
  [ "$(pyj '[(c["state"], c.get("repaired_from"), len(c["rewritten"])) for c in d["copies"] if c["tier"] == 0 and c["step"] == 1]')" = "[('repaired', 1, 1)]" ]
check "tier 0 is back to its original bytes" [ "$(tree_sum "$A")" = "$sum_a" ]
sl verify --store "$A" --name sc --step 1
expect_ok "the repaired copy verifies on its own"
sl scrub --tier "$A" --tier "$B" --json
check "a second scrub finds everything ok and rewrites nothing" \
  [ "$RC" = 0 -a "$(pyj 'sum(len(c["rewritten"]) for c in d["copies"])')" = 0 -a "$(pyj 'd["resumed"]')" = False ]
check "...and changes no byte of either tier" [ "$(tree_sum "$A")" = "$sum_a" -a "$(tree_sum "$B")" = "$sum_b" ]

truncate -s 5000000 "$(first_data "$B" sc 2)"
sl scrub --tier "$A" --tier "$B" --json
check "a truncated object on tier 1 is repaired from tier 0" \
  [ "$RC" = 0 -a "$(pyj '[(c["tier"], c["step"], c["state"]) for c in d["copies"] if c["state"] != "ok"]')" = "[(1, 2, 'repaired')]" ]
check "tier 1 is back to its original bytes" [ "$(tree_sum "$B")" = "$sum_b" ]

rm "$(first_data "$A" sc 3)"
sl ls --tier "$A" --tier "$B" --json
check "ls shows a copy with a deleted data object as damaged" \
  [ "$(pyj '[t["state"] for c in d if c["step"] == 3 for t in c["tiers"]]')" = "['damaged', 'committed']" ]
rm "$(stepdir "$B" sc 1)"/manifest/*.man
cp "$(stepdir "$A" sc 1)/COMMIT" "$(stepdir "$A" sc 2)/COMMIT"   # step 1's record in step 2
: > "$(stepdir "$B" sc 3)/COMMIT.x"; rm "$(stepdir "$B" sc 3)/COMMIT.x"
sl scrub --tier "$A" --tier "$B" --json
check "a deleted object, a deleted manifest and a swapped commit record: all repaired (exit 0)" \
  [ "$RC" = 0 -a "$(pyj '",".join("%d:%d" % (c["tier"], c["step"]) for c in d["copies"] if c["state"] == "repaired")')" = "0:3,0:2,1:1" ]
check "both tiers hold the original saves again" [ "$(saves_sum "$A")" = "$saves_a" -a "$(saves_sum "$B")" = "$saves_a" ]
# The repaired copies' old objects (a copy repaired from another's records
# takes its names) are garbage: gc leaves each copy exactly what it names.
"$SLUICE" gc --store "$A" --min-age 0s >/dev/null 2>&1
"$SLUICE" gc --store "$B" --min-age 0s >/dev/null 2>&1
check "...and after gc each copy of a step holds as many data objects as the other" \
  [ "$(find "$(stepdir "$A" sc 1)/data" -name '*.dat' | wc -l)" = "$(find "$(stepdir "$B" sc 1)/data" -name '*.dat' | wc -l)" ]
check "...and the same saves" [ "$(saves_sum "$A")" = "$saves_a" -a "$(saves_sum "$B")" = "$saves_a" ]
sl ls --tier "$A" --tier "$B" --json
check "ls --json shows each copy's last scrub time and result" \
  [ "$(pyj 'sorted(set((t.get("last_scrub_result"), bool(t.get("last_scrub_unix_ms"))) for c in d for t in c["tiers"]))')" = "[('ok', True), ('repaired', True)]" ]

# ------------------------------------------------------------ a damaged newest step
: > "$(stepdir "$A" sc 3)/COMMIT"
rm -rf "$(stepdir "$B" sc 3)"
sl verify --store "$A" --name sc
check "verify of latest fails when the newest committed step is damaged" [ "$RC" = 1 ]
check "...naming step 3" grep -q "sc@3" "$W/err"
sl restore --tier "$A" --tier "$B" --name sc --to "$W/r1"
expect_err "restore of latest fails instead of using step 2" 1
sl restore --tier "$A" --tier "$B" --name sc --step latest-good --to "$W/r2" --json
check "restore --step latest-good restores step 2" [ "$RC" = 0 -a "$(pyj 'd["step"]')" = 2 ]
check "...and says so on stderr" grep -q "latest-good: using checkpoint sc@2" "$W/err"
sl scrub --tier "$A" --tier "$B" --json
check "a step no other tier holds, with a damaged commit record: unrepairable, exit 1" \
  [ "$RC" = 1 -a "$(pyj '[(c["tier"], c["step"], c["state"]) for c in d["copies"] if c["state"] != "ok"]')" = "[(0, 3, 'unrepairable')]" ]
check "...the reason says no other tier holds a good copy" \
  [ "$(pyj '[c["reason"] for c in d["copies"] if c["state"] != "ok"][0]' | grep -c 'no other tier')" = 1 ]
n3=$(find "$(stepdir "$A" sc 3)" -type f | wc -l)
"$SLUICE" gc --store "$A" --min-age 0s >/dev/null 2>&1
check "...and neither scrub nor gc deletes any of its $n3 files" [ "$(find "$(stepdir "$A" sc 3)" -type f | wc -l)" = "$n3" ]
"$SLUICE" rm --store "$A" --name sc --step 3 >/dev/null 2>&1

# Both copies bad at the same chunk: nothing to repair from.
for t in "$A" "$B"; do flip "$(first_data "$t" sc 1)" 100; done
sl scrub --tier "$A" --tier "$B" --name sc --json
check "the same chunk bad on both tiers: both unrepairable, exit 1" \
  [ "$RC" = 1 -a "$(pyj '[(c["tier"], c["state"]) for c in d["copies"] if c["step"] == 1]')" = "[(0, 'unrepairable'), (1, 'unrepairable')]" ]
for t in "$A" "$B"; do flip "$(first_data "$t" sc 1)" 100; done

# ------------------------------------------------------------ a tier that fails
sl scrub --tier "$A" --tier "$W/no-such-tier" --json
check "a tier that cannot be opened: the other is scrubbed, exit 1" \
  [ "$RC" = 1 -a "$(pyj 'len(d["copies"])')" = 2 -a "$(pyj 'len(d["tier_errors"])')" = 1 ]

# ------------------------------------------------------------ two at once, kill and resume
C=$W/c D=$W/d
for st in 1 2 3 4 5 6; do
  "$SLUICE" save --tier "$C" --tier "$D" --name big --step $st --synthetic 8MiB --items 2 --full >/dev/null 2>&1
done
"$SLUICE" scrub --tier "$C" --tier "$D" --rate-limit 8MiB >/dev/null 2>&1 &
first=$!
BGPIDS+=("$first")
sleep 1
sl scrub --tier "$C" --tier "$D"
expect_err "a second scrub of the same tiers is refused while one runs" 1
check "...saying another scrub is running" grep -q "another scrub" "$W/err"
# Killed once it has recorded a finished checkpoint (under a sanitizer too).
for _ in $(seq 100); do [ -s "$C/scrub/progress" ] && break; sleep 0.1; done
kill -9 "$first"; wait "$first" 2>/dev/null
sl scrub --tier "$C" --tier "$D" --json
check "after kill -9, the next scrub takes over the lock, resumes and finishes" \
  [ "$RC" = 0 -a "$(pyj 'd["resumed"]')" = True -a "$(pyj 'd["skipped"] > 0')" = True ]
check "...scrubbing only what the killed one had not finished" [ "$(pyj 'len(d["copies"]) + 2 * d["skipped"]')" = 12 ]
sl scrub --tier "$C" --tier "$D" --json
check "the scrub after a finished pass starts a new one" [ "$RC" = 0 -a "$(pyj 'd["resumed"]')" = False -a "$(pyj 'len(d["copies"])')" = 12 ]

# kill -9 at random moments, with faults to repair on both tiers.
bad_runs=0
for i in $(seq 1 "$TRIALS"); do
  flip "$(first_data "$C" big $(( (i % 6) + 1 )))" $(( (i * 7919) % 1000000 ))
  rm -f "$(stepdir "$D" big $(( ((i + 3) % 6) + 1 )))"/manifest/*.man
  "$SLUICE" scrub --tier "$C" --tier "$D" --rate-limit 32MiB >/dev/null 2>&1 &
  p=$!
  sleep "0.$(( RANDOM % 9 + 1 ))"
  kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null
  for st in 1 2 3 4 5 6; do
    # Whatever the moment, no copy is torn: each loads, or is the one the
    # fault made bad (and the other tier's copy is intact).
    "$SLUICE" restore --tier "$C" --tier "$D" --name big --step $st --to "$W/k" --force >/dev/null 2>&1 || bad_runs=$((bad_runs + 1))
  done
  "$SLUICE" scrub --tier "$C" --tier "$D" >/dev/null 2>&1 || bad_runs=$((bad_runs + 1))
  "$SLUICE" scrub --tier "$C" --tier "$D" --json >"$W/out" 2>/dev/null || bad_runs=$((bad_runs + 1))
  [ "$(pyj 'all(c["state"] == "ok" for c in d["copies"])')" = True ] || bad_runs=$((bad_runs + 1))
done
check "kill -9 of scrub x$TRIALS: every step restores meanwhile, the next scrub heals all, the one after finds all ok" [ "$bad_runs" = 0 ]

# ------------------------------------------------------------ rebuild
sl rebuild --tier "$A" --tier "$B" --keep-last 2
expect_ok "rebuild of a tier that lacks nothing"
check "...copies nothing" grep -q "rebuilt 0 step" "$W/out"
saves_before=$(saves_sum "$A")
rm -rf "$A"
mkdir "$A"
sl ls --tier "$A" --tier "$B" --json
check "after tier 0 is lost, ls shows steps 1-2 only on tier 1" [ "$(pyj '[[t["state"] for t in c["tiers"]] for c in d]')" = "[['absent', 'committed'], ['absent', 'committed']]" ]
sl rebuild --tier "$A" --tier "$B" --keep-last 1 --json
check "rebuild --keep-last 1 restores the newest step only" \
  [ "$RC" = 0 -a "$(pyj '[(s["step"], s["state"], s.get("source")) for s in d["steps"]]')" = "[(2, 'rebuilt', 1)]" ]
sl rebuild --tier "$A" --tier "$B" --keep-last 0 --rate-limit 16MiB --json
check "rebuild --keep-last 0 adds step 1, newest first, leaving step 2 as present" \
  [ "$RC" = 0 -a "$(pyj '[(s["step"], s["state"]) for s in d["steps"]]')" = "[(2, 'present'), (1, 'rebuilt')]" ]
check "at --rate-limit 16MiB, 24 MiB took at least 1.2 s ($(pyj 'round(d["seconds"], 2)') s)" [ "$(pyj 'd["seconds"] >= 1.2')" = True ]
saves_after=$(saves_sum "$A")
check "the rebuilt tier holds the same saves as before the loss ($saves_after)" [ "$saves_after" = "$saves_before" ]
for st in 1 2; do
  sl verify --store "$A" --name sc --step $st
  expect_ok "rebuilt step $st verifies on tier 0 alone"
done

rm -rf "$C"
mkdir "$C"
"$SLUICE" rebuild --tier "$C" --tier "$D" --keep-last 0 --rate-limit 4MiB >/dev/null 2>&1 &
rb=$!
BGPIDS+=("$rb")
sleep 1
restored=0
for st in 6 1; do
  "$SLUICE" restore --tier "$C" --tier "$D" --name big --step $st --to "$W/during-$st" >/dev/null 2>&1 && restored=$((restored + 1))
done
check "restores during a rebuild work (from whichever tier holds a committed copy)" [ "$restored" = 2 ]
kill -9 "$rb" 2>/dev/null; wait "$rb" 2>/dev/null
bad_runs=0
for i in $(seq 1 "$TRIALS"); do
  "$SLUICE" rebuild --tier "$C" --tier "$D" --keep-last 0 --rate-limit 48MiB >/dev/null 2>&1 &
  p=$!
  sleep "0.$(( RANDOM % 9 + 1 ))"
  kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null
  # Committed steps on the rebuilt tier are whole, whatever the moment.
  for st in $("$SLUICE" ls --store "$C" --json 2>/dev/null | python3 -c 'import json,sys; print(" ".join(str(c["step"]) for c in json.load(sys.stdin) if c["complete"]))'); do
    "$SLUICE" verify --store "$C" --name big --step "$st" >/dev/null 2>&1 || bad_runs=$((bad_runs + 1))
  done
  rm -rf "$C"; mkdir "$C"
done
check "kill -9 of rebuild x$TRIALS: every step committed on the rebuilt tier verifies" [ "$bad_runs" = 0 ]
sl rebuild --tier "$C" --tier "$D" --keep-last 0
expect_ok "a rebuild after the kills finishes"
sl scrub --tier "$C" --tier "$D" --json
check "...and a scrub of both tiers finds all 12 copies ok" [ "$RC" = 0 -a "$(pyj 'len(d["copies"])')" = 12 ]

sl rebuild --tier "$C"
expect_err "rebuild with one tier is a usage error" 2
sl rebuild --tier "$C" --tier "$D" --target 2
expect_err "rebuild --target outside the tiers is a usage error" 2
sl scrub --tier "$C" --rate-limit fast
expect_err "scrub --rate-limit fast is a usage error" 2

echo "# scrub_test.sh took $(python3 -c "import time; print(round(time.time() - $T0, 1))") s"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
