#!/usr/bin/env bash
# ceph_test.sh: sluice against a real single-node Ceph cluster (1 mon, 1 mgr,
# 3 OSDs, cephx) made by scripts/ceph-dev-cluster.
#
#   tests/ceph_test.sh path/to/sluice path/to/backend_conformance_test [path/to/rados_backend_test]
#
# Besides the backend on its own: a file tier 0 with a rados tier 1 (save,
# wipe tier 0, restore from Ceph), one OSD and then all OSDs stopped in the
# middle of a drain (the test restarts them), and a bad copy on either tier
# repaired from the other, scrub healing objects overwritten or deleted behind
# sluice's back on either tier, and rebuild of a wiped RADOS tier.
#
# Uses the cluster in $SLUICE_CEPH_DIR (default /tmp/sluice-ceph) if it is
# running; otherwise starts one and stops it on exit, pass or fail. Works
# under a random prefix of the pool and removes it at the end. Prints one
# "ok - ..." / "not ok - ..." line per check and last "N passed, M failed";
# exits 1 if any check failed, 77 (skip) when the Ceph packages or sluice's
# RADOS support are missing -- but 1 then when CI=true.
set -u

if [ $# -lt 2 ] || [ $# -gt 3 ] || [ ! -x "$1" ] || [ ! -x "$2" ] || { [ $# -eq 3 ] && [ ! -x "$3" ]; }; then
  echo "usage: $0 path/to/sluice path/to/backend_conformance_test [path/to/rados_backend_test]" >&2
  exit 2
fi
SLUICE=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
CONFORMANCE=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
RADOS_TEST=${3:+$(cd "$(dirname "$3")" && pwd)/$(basename "$3")}
HERE=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER=$HERE/scripts/ceph-dev-cluster

unavailable() {
  if [ "${CI:-}" = true ]; then
    echo "not ok - ceph_test.sh cannot run under CI=true: $*"
    exit 1
  fi
  echo "ok - ceph_test.sh # SKIP $*"
  exit 77
}
for p in ceph-mon ceph-osd ceph-mgr ceph rados ceph-authtool monmaptool uuidgen python3 timeout; do
  command -v "$p" >/dev/null || unavailable "$p not installed (scripts/install-deps.sh installs the Ceph packages)"
done
if "$SLUICE" ls --store 'rados://probe/x' 2>&1 | grep -q 'without RADOS support'; then
  unavailable "sluice was built without RADOS support (librados-dev, libradospp-dev)"
fi

W=$(mktemp -d /tmp/sluice-ceph-test.XXXXXX) || exit 2
STARTED=0
PREFIX=ceph-test-$$-$RANDOM
BGPIDS=()
STOPPED_OSDS=()
cleanup() {
  local p
  for p in "${BGPIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  # A cluster this test did not start gets back any OSD a fault case stopped.
  if [ "$STARTED" = 0 ]; then
    for p in "${STOPPED_OSDS[@]}"; do start_osd "$p"; done
  fi
  if [ -n "${POOL:-}" ]; then
    rados -p "$POOL" ls 2>/dev/null | grep "^$PREFIX/" | while read -r o; do rados -p "$POOL" rm "$o"; done
  fi
  [ "$STARTED" = 1 ] && "$CLUSTER" stop >/dev/null 2>&1
  rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

. "$HERE/tests/lib.sh"
T0=$(date +%s)

# ---------------------------------------------------------------- cluster
if "$CLUSTER" status >/dev/null 2>&1; then
  echo "# using the running cluster in ${SLUICE_CEPH_DIR:-/tmp/sluice-ceph}"
else
  STARTED=1
  t=$(date +%s)
  if ! "$CLUSTER" start >"$W/start.out" 2>&1; then
    nok "scripts/ceph-dev-cluster start: $(tail -5 "$W/start.out" | tr '\n' '|')"
    echo "$PASS passed, $FAIL failed"
    exit 1
  fi
  ok "scripts/ceph-dev-cluster start: cluster up, all PGs active+clean in $(($(date +%s) - t)) s"
  t=$(date +%s)
  "$CLUSTER" start >"$W/again.out" 2>&1
  check "a second start says it is already running and succeeds at once" \
    bash -c "grep -q 'already running' '$W/again.out' && [ $(($(date +%s) - t)) -lt 10 ]"
fi
eval "$("$CLUSTER" env)" || { nok "scripts/ceph-dev-cluster env"; exit 1; }
POOL=$SLUICE_CEPH_POOL
KEYRING=$SLUICE_CEPH_DIR/ceph.client.sluice.keyring
U="rados://$POOL/$PREFIX?conf=$CEPH_CONF&id=sluice"

# ---------------------------------------------------------------- conformance
if SLUICE_RADOS_URI="rados://$POOL/$PREFIX/conformance?conf=$CEPH_CONF&id=sluice" \
     "$CONFORMANCE" --gtest_filter='All/BackendConformance.*/rados*:OpenBackend.Rados*' \
     >"$W/conformance.out" 2>&1 &&
   grep -q 'PASSED' "$W/conformance.out" && ! grep -q 'SKIPPED' "$W/conformance.out"; then
  ok "backend conformance suite against RADOS ($(grep -c '^\[       OK' "$W/conformance.out") tests)"
else
  nok "backend conformance suite against RADOS: $(grep -E 'FAILED|Failure|error' "$W/conformance.out" | head -5 | tr '\n' '|')"
fi

if [ -n "$RADOS_TEST" ]; then
  if SLUICE_RADOS_URI="rados://$POOL/$PREFIX/rados-test?conf=$CEPH_CONF&id=sluice" "$RADOS_TEST" \
       >"$W/rados_test.out" 2>&1 &&
     grep -q 'PASSED' "$W/rados_test.out" && ! grep -q 'SKIPPED' "$W/rados_test.out"; then
    ok "RADOS backend tests ($(grep -c '^\[       OK' "$W/rados_test.out") tests; $(grep -m1 '^# crcs' "$W/rados_test.out" | cut -c3-))"
  else
    nok "RADOS backend tests: $(grep -E 'FAILED|Failure|error|Expected|Which' "$W/rados_test.out" | head -5 | tr '\n' '|')"
  fi
fi

# ---------------------------------------------------------------- round trip
make_tree "$W/tree" <<'EOF'
w('empty', b'')
w('small.txt', b'hello\n', 0o600)
w('deep/er/random-3MiB.bin', os.urandom(3 * 1024 * 1024 + 17))
w('zeros-2MiB', bytes(2 << 20), 0o640)
w('ünïcødé/日本語.bin', os.urandom(70000))
EOF
TREE_BYTES=$(find "$W/tree" -type f -printf '%s\n' | awk '{s+=$1} END {print s}')
# Small chunks and objects: several data objects per save.
sl save --store "$U" --name tree --step 1 --from "$W/tree" --chunk-size 256KiB --object-size 1MiB --json
expect_ok "save --from a tree to rados://"
check "save --json: bytes=$TREE_BYTES, committed, io_path is librados, several data objects" \
  [ "$(pyj '(d["bytes"], d["committed"], d["io_path"].startswith("librados"), d["tiers"][0]["state"] == "committed")')" = "($TREE_BYTES, True, True, True)" ]
sl ls --store "$U" --json
check "ls --json lists tree@1 as complete" [ "$(pyj '[(c["name"], c["step"], c["complete"]) for c in d]')" = "[('tree', 1, True)]" ]
sl verify --store "$U" --name tree --step 1 --json
check "verify: exit 0, ok" [ "$RC" -eq 0 -a "$(pyj 'd["ok"]')" = "True" ]
sl restore --store "$U" --name tree --step 1 --to "$W/restored"
expect_ok "restore from rados://"
check "restored tree is bit-exact (diff -r)" diff -r "$W/tree" "$W/restored"
check "the store's objects are RADOS objects $PREFIX/ckpt/tree/.../{COMMIT,manifest,data}" \
  bash -c "rados -p '$POOL' ls | grep -q '^$PREFIX/ckpt/tree/00000000000000000001/COMMIT$' &&
           rados -p '$POOL' ls | grep -q '^$PREFIX/ckpt/tree/00000000000000000001/data/.*\.dat$'"

# ---------------------------------------------------------------- concurrent commit
for i in 1 2; do
  "$SLUICE" save --store "$U" --name race --step 1 --synthetic 8MiB >"$W/race$i.out" 2>&1 &
done
wins=0
for job in $(jobs -p); do wait "$job" && wins=$((wins + 1)); done
sl verify --store "$U" --name race --step 1
check "two concurrent saves of race@1: exactly one commits, and it verifies" [ "$wins" -eq 1 -a "$RC" -eq 0 ]

# ---------------------------------------------------------------- bad input, each bounded in time
# expect_bounded DESC WANT_TEXT URI: ls exits 1 within 60 s with one "sluice:" line naming WANT_TEXT.
expect_bounded() {
  local t=$(date +%s)
  timeout 90 "$SLUICE" ls --store "$3" >"$W/out" 2>"$W/err"
  RC=$?
  local took=$(($(date +%s) - t))
  if [ "$RC" -eq 1 ] && one_sluice_line && grep -qF -- "$2" "$W/err" && [ "$took" -le 60 ]; then
    ok "$1: exit 1 in $took s: $(head -c 160 "$W/err")"
  else
    nok "$1: exit $RC in $took s (want 1 within 60 s, naming '$2'), stderr: $(errtext)"
  fi
}
printf '[client.sluice]\n\tkey = %s\n' "$(ceph-authtool --gen-print-key)" >"$W/wrong.keyring"
expect_bounded "wrong cephx key" "Permission denied" "rados://$POOL/$PREFIX?conf=$CEPH_CONF&id=sluice&keyring=$W/wrong.keyring"
expect_bounded "missing conf file" "$W/absent.conf" "rados://$POOL/$PREFIX?conf=$W/absent.conf&id=sluice"
printf '[global\nmon host = 127.0.0.1:3300\n' >"$W/garbage.conf"
expect_bounded "unparsable conf file" "$W/garbage.conf" "rados://$POOL/$PREFIX?conf=$W/garbage.conf&id=sluice"
expect_bounded "missing pool" "pool 'no-such-pool'" "rados://no-such-pool/$PREFIX?conf=$CEPH_CONF&id=sluice"
printf '[global]\nmon host = 127.0.0.1:1\n[client]\nlog file = /dev/null\n' >"$W/unreachable.conf"
expect_bounded "unreachable monitor (127.0.0.1:1)" "127.0.0.1:1" "rados://$POOL/$PREFIX?conf=$W/unreachable.conf&id=sluice&keyring=$KEYRING"
sl ls --store "rados://$POOL/$PREFIX?conf=$CEPH_CONF&colour=blue"
check "unknown URI option: usage error (exit 2) naming it" bash -c "[ $RC -eq 2 ] && grep -q \"'colour'\" '$W/err'"
sl bench --store "$U" --size 8MiB --ranks 2 --mode processes
check "bench --mode processes on rados://: usage error (exit 2) at once, not a hang in a forked librados" \
  bash -c "[ $RC -eq 2 ] && grep -q 'does not survive fork' '$W/err'"
if command -v gnuplot >/dev/null; then
  sl bench --store "$U" --size 32MiB --ranks 2 --checkpoints 1 --report "$W/rados-report" --json
  expect_ok "bench --report on rados://"
  check "bench --report on rados:// measures the pool's ceiling with rados bench, same run" \
    [ "$(pyj '"rados" in d["ceiling"]["tool"] and d["ceiling"]["write_bytes_per_second"] > 0 and d["ceiling"]["read_bytes_per_second"] > 0')" = True ]
  check "and removes rados bench's objects" bash -c "! rados -p '$POOL' ls | grep -q '^benchmark_data'"
  check "and draws the ceiling" grep -q "ceiling: write" "$W/rados-report/report.gp"
fi

# ---------------------------------------------------------------- corruption behind sluice's back
sl save --store "$U" --name flip --step 1 --from "$W/tree" --chunk-size 64KiB --json
obj=$(rados -p "$POOL" ls | grep "^$PREFIX/ckpt/flip/00000000000000000001/data/" | head -1)
if [ "$RC" -ne 0 ] || [ -z "$obj" ] || ! rados -p "$POOL" get "$obj" "$W/obj"; then
  nok "flip: save or fetch of the data object failed (exit $RC, object '$obj')"
else
  pos=$(($(stat -c %s "$W/obj") / 2 + 777))
  python3 - "$W/obj" "$pos" <<'EOF'
import sys
path, off = sys.argv[1], int(sys.argv[2])
with open(path, 'r+b') as f:
    f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0xFF]))
EOF
  rados -p "$POOL" put "$obj" "$W/obj"
  sl verify --store "$U" --name flip --step 1 --json
  cp "$W/out" "$W/vjson"
  check "a byte flipped with rados put: verify exits 1 with exactly one bad chunk, in that object, covering offset $pos" \
    [ "$RC" -eq 1 -a "$(pyj "[(b['object'] == '${obj#"$PREFIX"/}', b['offset'] <= $pos < b['offset'] + b['length']) for b in d['bad_chunks']]" "$W/vjson")" = "[(True, True)]" ]
  sl verify --store "$U" --name flip --step 1
  check "plain verify names the bad chunk (item and chunk index) on one BAD line" \
    bash -c "[ $RC -eq 1 ] && [ \$(grep -c '^BAD' '$W/out') -eq 1 ] && grep '^BAD' '$W/out' | grep -q 'chunk'"
  sl restore --store "$U" --name flip --step 1 --to "$W/flip-restored"
  check "restore of the damaged checkpoint fails (exit 1) with one sluice: line" bash -c "[ $RC -eq 1 ] && [ \$(wc -l <'$W/err') -eq 1 ]"
fi

# ---------------------------------------------------------------- tiers and faults
# A file tier 0 ($W/tN) and a rados tier 1 (a prefix of its own per case).
cephq() { timeout 30 ceph -c "$CEPH_CONF" --connect-timeout 10 "$@" 2>/dev/null; }
osd_ids() { find "$SLUICE_CEPH_DIR/osd" -mindepth 1 -maxdepth 1 -name 'ceph-*' -printf '%f\n' | sed 's/^ceph-//' | sort -n; }
osd_pid() { cat "$SLUICE_CEPH_DIR/run/osd.$1.pid" 2>/dev/null; }
# stop_osd ID: SIGTERM to that ceph-osd (as `systemctl stop` would), waits for it to exit.
stop_osd() {
  local pid i
  pid=$(osd_pid "$1")
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || return 1
  STOPPED_OSDS+=("$1")
  for i in $(seq 200); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
  return 0
}
# start_osd ID: starts that OSD again as scripts/ceph-dev-cluster does (own
# session, no inherited descriptors, output to its log).
start_osd() {
  local keep=() i
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      [ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-" 2>/dev/null
    done
    exec setsid ceph-osd -c "$CEPH_CONF" -i "$1" </dev/null >>"$SLUICE_CEPH_DIR/log/daemon-osd.$1.out" 2>&1
  )
  for i in "${STOPPED_OSDS[@]}"; do [ "$i" = "$1" ] || keep+=("$i"); done
  STOPPED_OSDS=("${keep[@]}")
}
# wait_healthy SECONDS: every OSD up and every PG active+clean within SECONDS.
wait_healthy() {
  local deadline=$((SECONDS + $1)) n
  n=$(osd_ids | wc -l)
  while [ $SECONDS -lt $deadline ]; do
    if python3 - "$n" "$(cephq osd stat -f json)" "$(cephq osd pool ls detail -f json)" "$(cephq pg stat -f json)" <<'EOF' 2>/dev/null
import json, sys
n, osd, pools, stat = int(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
want = sum(p["pg_num"] for p in pools)
clean = sum(s["num"] for s in stat["pg_summary"]["num_pg_by_state"] if s["name"] == "active+clean")
sys.exit(0 if osd["num_up_osds"] == n and want > 0 and clean == want and stat["pg_summary"]["num_pgs"] == want else 1)
EOF
    then return 0; fi
    sleep 1
  done
  return 1
}
# wait_exit PID SECONDS: waits for background job PID; sets BGRC (124 if it ran past SECONDS).
wait_exit() {
  local i
  for i in $(seq $(($2 * 5))); do
    if ! kill -0 "$1" 2>/dev/null; then wait "$1"; BGRC=$?; return 0; fi
    sleep 0.2
  done
  kill -9 "$1" 2>/dev/null; wait "$1" 2>/dev/null; BGRC=124
}
# flip_file FILE OFFSET: inverts one byte in place.
flip_file() {
  python3 - "$1" "$2" <<'EOF'
import sys
path, off = sys.argv[1], int(sys.argv[2])
with open(path, 'r+b') as f:
    f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0xFF]))
EOF
}
turi() { echo "rados://$POOL/$PREFIX/$1?conf=$CEPH_CONF&id=sluice${2:-}"; }
states() { pyj '[[t["state"] for t in c["tiers"]] for c in d]'; }

# a. save to both tiers, wipe tier 0, restore from Ceph
TA=$W/ta; UA=$(turi ta)
sl save --tier "$TA" --tier "$UA" --name tt --step 1 --from "$W/tree" --json
check "tiered save --tier DIR --tier rados:// of the tree: exit 0, both tiers committed ($(pyj '[t["state"] for t in d["tiers"]]'))" \
  [ "$RC" -eq 0 -a "$(pyj '[t["state"] for t in d["tiers"]]')" = "['committed', 'committed']" ]
sl ls --tier "$TA" --tier "$UA" --json
check "ls --tier DIR --tier rados:// --json: tt@1 committed on both ($(states))" \
  [ "$RC" -eq 0 -a "$(states)" = "[['committed', 'committed']]" ]
rm -rf "$TA"
sl restore --store "$UA" --name tt --step 1 --to "$W/ta-r2"
check "after rm -rf of tier 0, restore --store rados:// is byte-identical (exit $RC, $(errtext))" \
  bash -c "[ $RC -eq 0 ] && diff -r '$W/tree' '$W/ta-r2'"
mkdir -p "$TA"  # (a tier-0 directory that is gone altogether fails to open)
sl restore --tier "$TA" --tier "$UA" --name tt --step 1 --to "$W/ta-r1"
check "and with tier 0 an empty directory, restore --tier DIR --tier rados:// is byte-identical (exit $RC, $(errtext))" \
  bash -c "[ $RC -eq 0 ] && diff -r '$W/tree' '$W/ta-r1'"
sl verify --store "$UA" --name tt --step 1
expect_ok "verify of tier 1 after tier 0 was wiped"

# b. one OSD stopped in the middle of a drain (size 3, min_size 2)
TB=$W/tb; UB=$(turi tb)
sl save --store "$TB" --name one --step 1 --synthetic 60MiB
expect_ok "save 60 MiB to tier 0 alone"
t=$SECONDS
"$SLUICE" drain --tier "$TB" --tier "$UB" --rate-limit 1=10MiB >"$W/db.out" 2>"$W/db.err" &
pb=$!; BGPIDS+=("$pb")
sleep 1
victim=$(osd_ids | tail -1)
vpid=$(osd_pid "$victim")
stop_osd "$victim"
check "osd.$victim (pid $vpid) stopped (SIGTERM) 1 s into a 10 MiB/s drain of 60 MiB, the drain still running" \
  bash -c "kill -0 $pb 2>/dev/null && [ -n '$vpid' ] && ! kill -0 '$vpid' 2>/dev/null"
wait_exit "$pb" 150
check "with osd.$victim down the drain completes: exit $BGRC in $((SECONDS - t)) s (stderr: $(head -c 300 "$W/db.err" | tr '\n' '|'))" \
  [ "$BGRC" -eq 0 ]
sl verify --store "$UB" --name one --step 1
expect_ok "verify of tier 1 after that drain"
sl ls --tier "$TB" --tier "$UB" --json
check "ls: one@1 committed on both tiers ($(states))" [ "$(states)" = "[['committed', 'committed']]" ]
t=$SECONDS
start_osd "$victim"
check "osd.$victim restarted: all OSDs up, all PGs active+clean ($((SECONDS - t)) s)" wait_healthy 120

# c. every OSD stopped in the middle of a drain: retries with backoff until they return
TC=$W/tc; UC=$(turi tc '&op_timeout_s=10')
sl save --store "$TC" --name all --step 1 --synthetic 60MiB
expect_ok "save 60 MiB to tier 0 alone"
t=$SECONDS
"$SLUICE" drain --tier "$TC" --tier "$UC" --rate-limit 1=10MiB --retry-for 3m >"$W/dc.out" 2>"$W/dc.err" &
pc=$!; BGPIDS+=("$pc")
sleep 1
stops=()
for id in $(osd_ids); do stop_osd "$id" & stops+=($!); done
for j in "${stops[@]}"; do wait "$j"; done
for id in $(osd_ids); do STOPPED_OSDS+=("$id"); done  # (the stops ran in subshells)
tstop=$SECONDS
for i in $(seq 90); do grep -q 'retrying in' "$W/dc.err" && break; kill -0 "$pc" 2>/dev/null || break; sleep 1; done
check "with every OSD down sluice says it retries with backoff within $((SECONDS - tstop)) s (op_timeout_s=10): $(grep -m1 'retrying in' "$W/dc.err" | head -c 200)" \
  grep -q 'retrying in' "$W/dc.err"
check "and the drain is still running" kill -0 "$pc"
sl verify --store "$TC" --name all --step 1
expect_ok "tier 0 keeps its copy meanwhile (verify --store DIR)"
sleep 4  # stay down a little longer before the OSDs return
t=$SECONDS
for id in $(osd_ids); do start_osd "$id"; done
STOPPED_OSDS=()
wait_exit "$pc" 90
check "OSDs restarted: the drain completes, exit $BGRC, $((SECONDS - t)) s after the restart (retries: $(grep -c 'retrying in' "$W/dc.err"): $(grep -o 'retrying in [0-9]* s' "$W/dc.err" | tr '\n' ','))" \
  [ "$BGRC" -eq 0 ]
# How many attempts fail depends on when the OSDs come back: at least one
# retry, and the delays never shrink (they double up to a cap).
check "it retried, with delays that never shrink (backoff): $(grep -o 'retrying in [0-9]* s' "$W/dc.err" | awk '{print $3}' | tr '\n' ' ')" \
  bash -c "grep -o 'retrying in [0-9]* s' '$W/dc.err' | awk '{print \$3}' | awk 'NR>1 && \$1<p {bad=1} {p=\$1; n++} END {exit !(n>=1 && !bad)}'"
check "all OSDs up and all PGs active+clean again" wait_healthy 120
if [ "$BGRC" -ne 0 ]; then
  sl drain --tier "$TC" --tier "$UC"
  check "(diagnosis) a fresh sluice drain then completes: exit $RC ($(errtext))" [ "$RC" -eq 0 ]
fi
sl verify --store "$UC" --name all --step 1
expect_ok "verify of tier 1 after the OSDs returned"
sl verify --store "$TC" --name all --step 1
expect_ok "verify of tier 0 (still kept)"

# d. a bad copy on either tier: restore falls back to the other and repairs it
TD=$W/td; UD=$(turi td)
sl save --tier "$TD" --tier "$UD" --name bad --step 1 --from "$W/tree" --chunk-size 256KiB
expect_ok "tiered save of the tree for the corruption cases"
dat=$(find "$TD" -name '*.dat' | head -1)
if [ -z "$dat" ]; then
  nok "no data object in tier 0 ($TD)"
else
  flip_file "$dat" $(($(stat -c %s "$dat") / 2 + 999))
  sl verify --store "$TD" --name bad --step 1
  check "a byte flipped in tier 0's file copy: verify --store DIR exits 1 naming a chunk" bash -c "[ $RC -eq 1 ] && grep -q chunk '$W/out'"
  sl restore --tier "$TD" --tier "$UD" --name bad --step 1 --to "$W/td-r1"
  check "restore --tier DIR --tier rados:// is byte-identical (exit $RC)" bash -c "[ $RC -eq 0 ] && diff -r '$W/tree' '$W/td-r1'"
  check "and says fallback and repair on stderr ($(errtext))" bash -c "grep -q '^sluice: fallback:' '$W/err' && grep -q '^sluice: repair:' '$W/err'"
  sl verify --store "$TD" --name bad --step 1
  expect_ok "verify --store DIR after that restore (repaired from Ceph)"
fi
obj=$(rados -p "$POOL" ls | grep "^$PREFIX/td/ckpt/bad/00000000000000000001/data/" | head -1)
if [ -z "$obj" ] || ! rados -p "$POOL" get "$obj" "$W/tdobj"; then
  nok "no data object of bad@1 on tier 1 ('$obj')"
else
  flip_file "$W/tdobj" $(($(stat -c %s "$W/tdobj") / 3 + 555))
  rados -p "$POOL" put "$obj" "$W/tdobj"
  sl verify --store "$UD" --name bad --step 1
  check "a byte flipped in Ceph's copy with rados put: verify --store rados:// exits 1 naming a chunk" bash -c "[ $RC -eq 1 ] && grep -q chunk '$W/out'"
  sl restore --tier "$UD" --tier "$TD" --name bad --step 1 --to "$W/td-r2"
  check "restore --tier rados:// --tier DIR is byte-identical (exit $RC)" bash -c "[ $RC -eq 0 ] && diff -r '$W/tree' '$W/td-r2'"
  check "and says fallback and repair on stderr ($(errtext))" bash -c "grep -q '^sluice: fallback:' '$W/err' && grep -q '^sluice: repair:' '$W/err'"
  sl verify --store "$UD" --name bad --step 1
  expect_ok "verify --store rados:// after that restore (the RADOS object was rewritten from tier 0)"
fi

# e. scrub: objects overwritten or deleted behind sluice's back on every
# replica (rados put / rados rm) are found and healed from the other tier,
# both ways; a RADOS tier wiped altogether is rebuilt from tier 0.
TE=$W/te; UE=$(turi te)
for st in 1 2; do
  sl save --tier "$TE" --tier "$UE" --name sc --step $st --from "$W/tree" --chunk-size 256KiB --object-size 1MiB --full
done
expect_ok "tiered saves of the tree for the scrub cases"
robjs() { rados -p "$POOL" ls | grep "^$PREFIX/te/ckpt/sc/$(printf %020d "$1")/$2" | sort; }
o1=$(robjs 1 data/ | head -1) o2=$(robjs 2 data/ | head -1) m2=$(robjs 2 manifest/ | head -1)
if [ -z "$o1" ] || [ -z "$o2" ] || [ -z "$m2" ] || ! rados -p "$POOL" get "$o1" "$W/te1"; then
  nok "no data objects or manifest of sc@1,2 on RADOS ('$o1' '$o2' '$m2')"
else
  flip_file "$W/te1" 1000
  rados -p "$POOL" put "$o1" "$W/te1"
  rados -p "$POOL" rm "$o2"
  rados -p "$POOL" rm "$m2"
  sl ls --tier "$TE" --tier "$UE" --json
  check "ls shows step 2 damaged on RADOS (manifest gone) ($(states))" [ "$(states)" = "[['committed', 'committed'], ['committed', 'damaged']]" ]
  sl scrub --tier "$TE" --tier "$UE" --json
  check "scrub heals the overwritten object, the deleted object and the deleted manifest on RADOS from tier 0 (exit $RC, $(errtext))" \
    [ "$RC" -eq 0 -a "$(pyj '",".join("%d:%d:%s" % (c["tier"], c["step"], c["state"]) for c in d["copies"])')" = "0:2:ok,1:2:repaired,0:1:ok,1:1:repaired" ]
  for st in 1 2; do
    sl verify --store "$UE" --name sc --step $st
    expect_ok "verify --store rados:// of sc@$st after the scrub"
  done
  sl scrub --tier "$TE" --tier "$UE" --json
  check "a second scrub rewrites nothing" [ "$RC" -eq 0 -a "$(pyj 'sum(len(c["rewritten"]) for c in d["copies"])')" = 0 ]
  f=$(find "$TE/ckpt/sc/$(printf %020d 2)/data" -name '*.dat' | sort | head -1)
  flip_file "$f" 777
  rm -f "$TE/ckpt/sc/$(printf %020d 1)"/manifest/*.man
  sl scrub --tier "$TE" --tier "$UE" --json
  check "the reverse: tier 0's flipped byte and deleted manifest healed from RADOS (exit $RC)" \
    [ "$RC" -eq 0 -a "$(pyj '",".join("%d:%d" % (c["tier"], c["step"]) for c in d["copies"] if c["state"] == "repaired")')" = "0:2,0:1" ]
  sl restore --store "$TE" --name sc --step 2 --to "$W/te-r"
  check "tier 0 alone restores sc@2 byte-identical" bash -c "[ $RC -eq 0 ] && diff -r '$W/tree' '$W/te-r'"
  rados -p "$POOL" ls | grep "^$PREFIX/te/" | while read -r o; do rados -p "$POOL" rm "$o"; done
  sl rebuild --tier "$UE" --tier "$TE" --keep-last 0 --rate-limit 64MiB --json
  check "rebuild of the wiped RADOS tier from tier 0: both steps rebuilt (exit $RC, $(errtext))" \
    [ "$RC" -eq 0 -a "$(pyj '[(s["step"], s["state"]) for s in d["steps"]]')" = "[(2, 'rebuilt'), (1, 'rebuilt')]" ]
  sl verify --store "$UE" --name sc --step 1
  expect_ok "the rebuilt RADOS copy verifies"
fi

# f. incremental saves drained to RADOS: only the changed item travels, a
# step whose base is removed from both tiers still restores from RADOS.
TI=$W/ti; UI=$(turi ti)
for st in 1 2; do
  sl save --tier "$TI" --tier "$UI" --name inc --step $st --synthetic 24MiB --items 12 --change 0.08 \
    --chunk-size 1MiB --object-size 8MiB --json
done
check "incremental save to [dir, RADOS]: 22 of 24 MiB referenced (exit $RC)" \
  [ "$RC" -eq 0 -a "$(pyj 'd["referenced_bytes"]')" = $((22 << 20)) ]
rbytes=$(rados -p "$POOL" ls | grep "^$PREFIX/ti/ckpt/inc/$(printf %020d 2)/data/" | while read -r o; do
  rados -p "$POOL" stat "$o" | sed 's/.*size //'; done | awk '{s+=$1} END {print s+0}')
check "its drain wrote only the changed item's 2 MiB to RADOS ($rbytes bytes)" [ "$rbytes" = $((2 << 20)) ]
"$SLUICE" rm --store "$TI" --name inc --step 1 >/dev/null 2>&1
sl rm --store "$UI" --name inc --step 1
sl restore --store "$UI" --name inc --step 2 --to "$W/ti-r"
expect_ok "after rm of the base from both tiers, step 2 restores from RADOS alone"
sl verify --store "$UI" --name inc --step 2
expect_ok "...and verifies there"
# RADOS as tier 0: the incremental writer looks its base up there.
UR=$(turi tr)
for st in 1 2; do
  sl save --store "$UR" --name inc --step $st --synthetic 24MiB --items 12 --change 0.08 \
    --chunk-size 1MiB --object-size 8MiB --json
done
check "incremental save with RADOS as tier 0: 22 of 24 MiB referenced in step 1 (exit $RC)" \
  [ "$RC" -eq 0 -a "$(pyj '(d["referenced_bytes"], d["base_step"])')" = "($((22 << 20)), 1)" ]
sl rm --store "$UR" --name inc --step 1
sl verify --store "$UR" --name inc --step 2
expect_ok "after rm of its base, step 2 verifies on RADOS"

# ---------------------------------------------------------------- rm
sl rm --store "$U" --name tree --step 1
check "rm tree@1 removes its every object" \
  bash -c "[ $RC -eq 0 ] && ! rados -p '$POOL' ls | grep -q '^$PREFIX/ckpt/tree/'"

# ---------------------------------------------------------------- plan calibrate
t=$(date +%s)
sl plan calibrate --tier "$W/plan-nvme" --tier "rados://$POOL/$PREFIX/plan?conf=$CEPH_CONF&id=sluice" \
  --bytes 256MiB --nic 1GiB --out "$W/plan.json"
secs=$(($(date +%s) - t))
osds=$(ceph --conf "$CEPH_CONF" osd ls --format json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
size=$(ceph --conf "$CEPH_CONF" osd pool get "$POOL" size --format json | python3 -c 'import json,sys; print(float(json.load(sys.stdin)["size"]))')
check "plan calibrate of a file tier and this cluster (exit $RC, ${secs} s) finds its $osds OSDs and pool size $size" \
  [ "$RC" -eq 0 -a "$(pyj '(d["tiers"]["ceph"]["osds"], d["tiers"]["ceph"]["write_amplification"])' "$W/plan.json")" = "($osds, $size)" ]
check "...in under 2 minutes" [ "$secs" -lt 120 ]
check "...with a rate per OSD" [ "$(pyj 'd["tiers"]["ceph"]["osd_write_bytes_per_s"] > 0 and d["tiers"]["ceph"]["osd_read_bytes_per_s"] > 0' "$W/plan.json")" = True ]

echo "# $(($(date +%s) - T0)) s"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
