#!/usr/bin/env bash
# testbed_test.sh: sluice across hosts of scripts/testbed (network
# namespaces on one bridge, Ceph across the storage hosts).
#
#   tests/testbed_test.sh path/to/sluice
#
# Brings the testbed up from nothing (4 compute hosts, 3 storage hosts with 2
# OSDs each), timed, and checks: the hosts reach each other and nothing of the
# testbed is in this machine's own namespace; every PG has its replicas on
# three hosts; a job of 4 ranks on 4 hosts commits on RADOS; per-host jobs
# save to [the host's own NVMe directory, RADOS]; a job of 4 ranks on 4
# hosts saves to [each host's own NVMe directory, RADOS] (--tier0-per-host);
# the same with S3 (the testbed's radosgw on s1) as the shared tier, restored
# on another host from S3 alone, and an S3 save from a cut-off host failing
# fast (tests/testbed_s3_cases.sh);
# a compute host is lost and a replacement restores its checkpoints and the
# lost rank from Ceph bit-exact while survivors restore from their own tier
# 0; `ls` on any host tells the truth; a tc cap
# on a host's link holds its saves to the cap; a host's link cut mid-drain
# (the drain retries, tier 0 keeps the copy, ls says failed, the save ends
# once the link is back); a storage host lost mid-drain
# (two OSDs and a mon) costs neither the drain nor the save that follows.
# Then tears down and checks that no namespace, mount, process or file is
# left. Prints "ok"/"not ok" lines and "N passed, M failed"; exits 0 if all
# passed, 1 if not, 77 (skip) without root or the Ceph packages (1 under
# CI=true), 2 on bad usage.
set -u

if [ $# -ne 1 ]; then
  echo "usage: $0 path/to/sluice" >&2
  exit 2
fi
HERE=$(cd "$(dirname "$0")/.." && pwd)
TESTBED=$HERE/scripts/testbed
unavailable() {
  if [ "${CI:-}" = true ]; then
    echo "not ok - testbed_test.sh cannot run under CI=true: $*"
    exit 1
  fi
  echo "ok - testbed_test.sh # SKIP $*"
  exit 77
}
[ -x "$1" ] || unavailable "no sluice binary at $1"
SLUICE=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
[ "$(id -u)" = 0 ] || unavailable "needs root (network namespaces)"
for p in ip tc ceph-mon ceph-osd ceph-mgr ceph rados ceph-authtool monmaptool uuidgen python3 radosgw radosgw-admin curl; do
  command -v "$p" >/dev/null || unavailable "$p not installed (scripts/install-deps.sh)"
done
if "$SLUICE" ls --store 'rados://probe/x' 2>&1 | grep -q 'without RADOS support'; then
  unavailable "sluice was built without RADOS support"
fi
if "$SLUICE" ls --store 's3://probe/x?endpoint=http://127.0.0.1:1' 2>&1 | grep -q 'without S3 support'; then
  unavailable "sluice was built without S3 support"
fi

# Our own testbed, apart from any other one on the machine.
export SLUICE_TESTBED=sltbt$$
export SLUICE_TESTBED_DIR=/tmp/sluice-testbed-test.$$
W=$(mktemp -d /tmp/sluice-testbed-w.XXXXXX) || exit 2
cleanup() {
  "$TESTBED" down >/dev/null 2>&1
  rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
. "$HERE/tests/lib.sh"
T0=$(date +%s)

tb() { "$TESTBED" "$@"; }
# on HOST ARGS...: sluice on HOST; stdout in $W/out, stderr in $W/err, RC.
on() { local h=$1; shift; tb exec "$h" "$SLUICE" "$@" >"$W/out" 2>"$W/err"; RC=$?; }
nvme() { echo "$SLUICE_TESTBED_DIR/hosts/$1/nvme"; }
# wait_pid_s PID SECONDS: true once PID exited within SECONDS.
wait_pid_s() {
  local i
  for ((i = 0; i < $2 * 5; i++)); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.2; done
  return 1
}
digest() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -d' ' -f1; }

# ------------------------------------------------------------------- up
t=$(date +%s.%N)
tb up --compute 4 --storage 3 --osds-per-host 2 >"$W/up.out" 2>"$W/up.err"
rc=$?
up_s=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t" "$(date +%s.%N)")
if [ $rc -ne 0 ]; then
  nok "testbed up: exit $rc: $(tail -5 "$W/up.err" | tr '\n' '|')"
  echo "$PASS passed, $FAIL failed"
  exit 1
fi
check "testbed up with 4 compute and 3 storage hosts (6 OSDs) in ${up_s} s (want < 90 s)" \
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 90 else 1)" "$up_s"
eval "$(tb env)"
URI=$SLUICE_TESTBED_RADOS_URI
check "status lists 7 hosts and HEALTH_OK" \
  bash -c "'$TESTBED' status 2>&1 | grep -c '^[cs][0-9] ' | grep -qx 7 && '$TESTBED' status 2>&1 | grep -q HEALTH_OK"

# ------------------------------------------------- network and placement
reach=0
for h in c1 c2 c3 c4; do
  tb exec "$h" python3 -c 'import socket; socket.create_connection(("10.99.0.101", 3300), 3).close()' \
    2>/dev/null && reach=$((reach + 1))
done
check "every compute host reaches s1's mon over the bridge ($reach of 4)" [ "$reach" -eq 4 ]
check "nothing of the testbed is in this machine's namespace (no 10.99.0.x address, no bridge, no veth)" \
  bash -c "! ip -o addr | grep -q ' 10\.99\.0\.' && ! ip -o link | grep -qE ' v-[cs][0-9]+@'"
tb exec s1 ceph osd tree -f json >"$W/tree.json" 2>/dev/null
tb exec s1 ceph pg ls-by-pool "$SLUICE_TESTBED_POOL" -f json >"$W/pgs.json" 2>/dev/null
spread=$(python3 - "$W/tree.json" "$W/pgs.json" <<'EOF'
import json, sys
tree, pgs = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
host_of = {}
for n in tree["nodes"]:
    if n["type"] == "host":
        for c in n["children"]:
            host_of[c] = n["name"]
stats = pgs["pg_stats"] if isinstance(pgs, dict) else pgs
ok = sum(1 for p in stats if len({host_of.get(o) for o in p["acting"]}) == 3)
print(f"{ok}/{len(stats)}/{len(set(host_of.values()))}")
EOF
)
check "CRUSH failure domain is the host: each PG on 3 distinct storage hosts (ok/pgs/hosts: $spread)" \
  [ "$spread" = "64/64/3" ]

# ----------------------------------------- a job of 4 ranks on 4 hosts
for r in 0 1 2 3; do
  mkdir -p "$W/rank$r"
  head -c $((3 << 20)) /dev/urandom >"$W/rank$r/shard-$r.bin"
done
pids=()
for r in 0 1 2 3; do
  tb exec "c$((r + 1))" "$SLUICE" save --store "$URI" --name job --step 10 --from "$W/rank$r" \
    --rank $r --world 4 --attempt "launch-1" --timeout 60s >"$W/rank$r.out" 2>&1 &
  pids+=($!)
done
fails=0
for p in "${pids[@]}"; do wait "$p" || fails=$((fails + 1)); done
check "4 ranks on c1..c4 save job@10 to RADOS together ($fails failed)" [ "$fails" -eq 0 ]
on c3 ls --store "$URI" --name job --json
check "ls on c3: job@10 committed with 4 ranks" [ "$RC" -eq 0 -a "$(pyj '[(c["step"], c["complete"], c["ranks"]) for c in d]')" = "[(10, True, 4)]" ]

# ------------------- a crashed launch, and a rank with the wrong --attempt
# Launch A of job2@20 crashes: rank 0 never starts, ranks 1 and 2 publish
# their manifests and give up. Launch B relaunches every rank but c3's
# launcher still passes A: rank 0 (B) must never commit rank 2's manifest
# of the crashed launch. It waits and fails; nothing is committed. Launch C,
# with one id everywhere, commits, and rank 2 holds launch C's bytes.
launch() {  # launch TIMEOUT R:ATTEMPT...: ranks of job2@20 with fresh data; waits; sets FAILS
  local timeout=$1 pids=() r a
  shift
  for ra in "$@"; do
    r=${ra%%:*}
    a=${ra#*:}
    head -c $((1 << 20)) /dev/urandom >"$W/job2-rank$r/shard-$r.bin"
    tb exec "c$((r + 1))" "$SLUICE" save --store "$URI" --name job2 --step 20 --from "$W/job2-rank$r" \
      --rank "$r" --world 3 --attempt "$a" --timeout "$timeout" >"$W/job2-$r.out" 2>&1 &
    pids+=($!)
  done
  FAILS=0
  for p in "${pids[@]}"; do wait "$p" || FAILS=$((FAILS + 1)); done
}
for r in 0 1 2; do mkdir -p "$W/job2-rank$r"; done
launch 4s 1:launch-A 2:launch-A
check "launch A without its rank 0: both ranks give up ($FAILS of 2 failed)" [ "$FAILS" -eq 2 ]
cp "$W/job2-rank2/shard-2.bin" "$W/job2-stale.bin"
launch 6s 0:launch-B 1:launch-B 2:launch-A
on c1 ls --store "$URI" --name job2 --all --json
check "launch B with rank 2 still on --attempt launch-A: no rank commits ($FAILS of 3 failed), job2@20 not committed ($(pyj '[(c["step"], c["complete"]) for c in d]'))" \
  [ "$FAILS" -eq 3 -a "$(pyj '[(c["step"], c["complete"]) for c in d]')" = "[(20, False)]" ]
launch 30s 0:launch-C 1:launch-C 2:launch-C
check "launch C, one id on every rank: committed ($FAILS failed)" [ "$FAILS" -eq 0 ]
on c4 restore --store "$URI" --name job2 --step 20 --rank 2 --to "$W/restored-job2-r2"
check "rank 2 of job2@20 holds launch C's bytes, not the crashed launch's" \
  [ "$RC" -eq 0 -a "$(digest "$W/restored-job2-r2")" = "$(digest "$W/job2-rank2")" \
    -a "$(sha256sum <"$W/job2-stale.bin")" != "$(sha256sum <"$W/job2-rank2/shard-2.bin")" ]

# ---------------------------- per-host jobs on [own NVMe directory, RADOS]
for h in c1 c2 c3; do
  mkdir -p "$W/state-$h"
  head -c $((4 << 20)) /dev/urandom >"$W/state-$h/model.bin"
  head -c 100000 /dev/urandom >"$W/state-$h/optim.bin"
  on "$h" save --tier "$(nvme "$h")" --tier "$URI" --name "run-$h" --step 1 --from "$W/state-$h"
  expect_ok "$h saves run-$h@1 to [its NVMe directory, RADOS]"
done

# ------------- a job of 4 ranks on 4 hosts, each rank's tier 0 its host's own
# --tier0-per-host: each rank writes its part to its host's NVMe directory
# and copies it to RADOS, where rank 0 commits; each host records its part.
for r in 0 1 2 3; do
  mkdir -p "$W/prank$r/opt"
  head -c $((2 << 20)) /dev/urandom >"$W/prank$r/weights-$r.bin"
  head -c 70000 /dev/urandom >"$W/prank$r/opt/moments-$r.bin"
done
pids=()
for r in 0 1 2 3; do
  tb exec "c$((r + 1))" "$SLUICE" save --tier "$(nvme "c$((r + 1))")" --tier "$URI" --tier0-per-host \
    --name pjob --step 30 --from "$W/prank$r" --rank $r --world 4 --attempt "p-1" --timeout 60s \
    >"$W/prank$r.out" 2>&1 &
  pids+=($!)
done
fails=0
for p in "${pids[@]}"; do wait "$p" || fails=$((fails + 1)); done
check "4 ranks on c1..c4 save pjob@30 to [own NVMe, RADOS] with --tier0-per-host ($fails failed)" [ "$fails" -eq 0 ]
parts=""
for h in c1 c2 c3 c4; do
  on "$h" ls --tier "$(nvme "$h")" --tier "$URI" --name pjob --json
  parts+="$(pyj '[(c["tiers"][0]["state"], c["tiers"][0].get("reason",""), c["tiers"][1]["state"]) for c in d]');"
done
check "ls on each host: its own rank as a part on tier 0, committed on RADOS ($parts)" \
  [ "$parts" = "[('part', 'rank 0 of 4 held here', 'committed')];[('part', 'rank 1 of 4 held here', 'committed')];[('part', 'rank 2 of 4 held here', 'committed')];[('part', 'rank 3 of 4 held here', 'committed')];" ]

# ----------------------------------------------------- a compute host lost
tb lose c2 >/dev/null 2>&1
check "c2 lost: its namespace and its directory are gone" \
  bash -c "! ip netns list | awk '{print \$1}' | grep -qx '$SLUICE_TESTBED-c2' && [ ! -e '$(nvme c2)' ]"
on c3 ls --tier "$(nvme c3)" --tier "$URI" --name run-c2 --json
check "ls on c3 tells the truth about c2's job: absent on c3's tier 0, committed on RADOS ($(pyj '[c["tiers"] for c in d]'))" \
  [ "$RC" -eq 0 -a "$(pyj '[(c["step"], c["tiers"][0]["state"], c["tiers"][1]["state"]) for c in d]')" = "[(1, 'absent', 'committed')]" ]
tb replace c2 >/dev/null 2>&1
on c2 restore --tier "$(nvme c2)" --tier "$URI" --name run-c2 --to "$W/restored-c2"
expect_ok "the replacement c2 restores run-c2@1 (its tier 0 is empty: from Ceph)"
check "...bit-exact" [ "$(digest "$W/restored-c2")" = "$(digest "$W/state-c2")" ]
on c2 restore --store "$URI" --name job --step 10 --rank 1 --to "$W/restored-rank1"
expect_ok "the replacement c2 restores the lost host's rank 1 of job@10 from Ceph"
check "...bit-exact" [ "$(digest "$W/restored-rank1")" = "$(digest "$W/rank1")" ]
on c3 ls --tier "$(nvme c3)" --tier "$URI" --name pjob --json
check "ls on c3 after c2's loss: pjob@30 still its part on tier 0, committed on RADOS" \
  [ "$RC" -eq 0 -a "$(pyj '[(c["tiers"][0]["state"], c["tiers"][1]["state"], c["ranks"]) for c in d]')" = "[('part', 'committed', 4)]" ]
on c2 ls --tier "$(nvme c2)" --tier "$URI" --name pjob --json
check "ls on the replacement c2: pjob@30 absent on its empty tier 0, committed on RADOS" \
  [ "$RC" -eq 0 -a "$(pyj '[(c["tiers"][0]["state"], c["tiers"][1]["state"]) for c in d]')" = "[('absent', 'committed')]" ]
on c2 restore --tier "$(nvme c2)" --tier "$URI" --name pjob --step 30 --rank 1 --to "$W/restored-prank1"
check "the replacement c2 restores the lost rank 1 of pjob@30 from Ceph, bit-exact" \
  [ "$RC" -eq 0 -a "$(digest "$W/restored-prank1")" = "$(digest "$W/prank1")" ]
mkdir -p "$W/pjob-all"
for r in 0 1 2 3; do cp -r "$W/prank$r/." "$W/pjob-all/"; done
on c2 restore --tier "$(nvme c2)" --tier "$URI" --name pjob --to "$W/restored-pjob"
check "...and the whole of pjob@30 (4 ranks), bit-exact" \
  [ "$RC" -eq 0 -a "$(digest "$W/restored-pjob")" = "$(digest "$W/pjob-all")" ]
for r in 0 2; do
  h=c$((r + 1))
  on "$h" restore --tier "$(nvme "$h")" --tier "$URI" --name pjob --step 30 --rank $r --to "$W/restored-prank$r"
  # A read from Ceph instead would be said on stderr as a fallback.
  fb=$(grep -c fallback "$W/err")
  check "survivor $h restores its rank $r of pjob@30 from its own part, bit-exact, no fallback ($fb)" \
    [ "$RC" -eq 0 -a "$(digest "$W/restored-prank$r")" = "$(digest "$W/prank$r")" -a "$fb" = 0 ]
done
for h in c1 c3; do
  on "$h" ls --tier "$(nvme "$h")" --tier "$URI" --name "run-$h" --json
  local_state=$(pyj 'd[0]["tiers"][0]["state"]')
  on "$h" restore --tier "$(nvme "$h")" --tier "$URI" --name "run-$h" --to "$W/restored-$h"
  check "survivor $h restores run-$h@1 from its own tier 0 (there: $local_state), bit-exact" \
    [ "$RC" -eq 0 -a "$local_state" = committed -a "$(digest "$W/restored-$h")" = "$(digest "$W/state-$h")" ]
done

# ------------------------------------------------------- a capped link
mkdir -p "$W/big"
head -c $((16 << 20)) /dev/urandom >"$W/big/x.bin"
timed_save() {  # timed_save HOST STEP: seconds a full save of $W/big to RADOS took
  local t
  t=$(date +%s.%N)
  tb exec "$1" "$SLUICE" save --store "$URI" --name capped --step "$2" --from "$W/big" --full >/dev/null 2>&1 || echo fail
  python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t" "$(date +%s.%N)"
}
free_s=$(timed_save c4 1)
tb cap c4 64mbit
capped_s=$(timed_save c4 2)
tb uncap c4
# 16 MiB at 64 Mbit/s (8 MB/s) takes at least 2.1 s.
check "tc caps c4's link: a 16 MiB save took $capped_s s capped at 64mbit, $free_s s uncapped (want >= 1.9 s capped)" \
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 1.9 and float(sys.argv[2]) < float(sys.argv[1]) else 1)" "$capped_s" "$free_s"

# ------------------------------- the storage network cut mid-drain
# c3's link goes down while its save drains to RADOS: the drain fails and
# is retried with backoff, tier 0 keeps the committed copy, ls says failed
# with the reason; once the link is back the same save finishes.
URI_SHORT="$URI&op_timeout_s=4&connect_timeout_s=4"
mkdir -p "$W/cut"
head -c $((16 << 20)) /dev/urandom >"$W/cut/c.bin"
tb exec c3 "$SLUICE" save --tier "$(nvme c3)" --tier "$URI_SHORT" --name cut --step 1 --from "$W/cut" \
  --rate-limit 1=4MiB >"$W/cut.out" 2>"$W/cut.err" &
pc=$!
sleep 1
tb cut c3
sleep 9
on c3 ls --tier "$(nvme c3)" --tier "$URI_SHORT" --name cut --json
check "link cut: ls on c3 shows cut@1 committed on tier 0 and failed on RADOS with a reason ($(pyj '[c["tiers"] for c in d]' | cut -c1-200))" \
  [ "$RC" -eq 0 -a "$(pyj '(d[0]["tiers"][0]["state"], d[0]["tiers"][1]["state"], bool(d[0]["tiers"][1].get("reason")))')" = "('committed', 'failed', True)" ]
check "the save said each failed attempt and that it retries ($(grep -c retrying "$W/cut.err") lines)" grep -q "retrying in" "$W/cut.err"
running=no
kill -0 "$pc" 2>/dev/null && running=yes
check "the save is still waiting for RADOS, not given up (running=$running)" [ "$running" = yes ]
tb heal c3
if wait_pid_s "$pc" 60; then wait "$pc"; rc=$?; else rc=timeout; kill -9 "$pc" 2>/dev/null; fi
check "link back: the same save finishes its drain (exit $rc)" [ "$rc" = 0 ]
on c1 restore --store "$URI" --name cut --to "$W/restored-cut"
check "another host restores cut@1 from RADOS, bit-exact" [ "$RC" -eq 0 -a "$(digest "$W/restored-cut")" = "$(digest "$W/cut")" ]

# ------------------------------------------- a slow OSD: hedged writes
# osd.0 (host s1) delays half its messages by 200 ms. A save straight to
# RADOS hedges the objects whose placement groups are late and places new
# ones away from the OSD those share; what it commits is whole, holds
# exactly one copy of each object, and stays within the extra-byte budget.
slow_osd() {
  tb exec s1 ceph tell osd.0 config set osd_debug_inject_dispatch_delay_duration 0.2 >/dev/null 2>&1
  tb exec s1 ceph tell osd.0 config set osd_debug_inject_dispatch_delay_probability "$1" >/dev/null 2>&1
}
# kill9_once PID CONDITION...: kill -9 PID once CONDITION holds (at most 60 s
# on); $running says whether it was still running then.
kill9_once() {
  local pid=$1 t_end=$(($(date +%s) + 60))
  shift
  while [ "$(date +%s)" -lt "$t_end" ]; do
    "$@" && break
    sleep 0.2
  done
  running=no
  kill -0 "$pid" 2>/dev/null && running=yes
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}
data_objects() {  # data_objects NAME: RADOS objects under NAME's data/ prefixes
  tb exec c1 rados -p "$SLUICE_TESTBED_POOL" ls 2>/dev/null | grep -c "ckpt/$1/[0-9]*/data/"
}
mkdir -p "$W/hedge"
for i in $(seq 1 16); do head -c $((8 << 20)) /dev/urandom >"$W/hedge/p$i.bin"; done
slow_osd 0.5
on c2 save --store "$URI" --name hedged --step 1 --from "$W/hedge" --object-size 8MiB --json
hedge=$(pyj 'd["tiers"][0]["hedging"]' 2>/dev/null)
check "a save past a slow OSD commits: $(echo "$hedge" | cut -c1-260)" \
  [ "$RC" -eq 0 -a "$(pyj '(lambda h: h["objects_hedged"] + h["slow_placements_avoided"] > 0)(d["tiers"][0]["hedging"])')" = True ]
check "its hedges stayed within the budget (extra bytes <= 0.25 x (bytes written + 256 MiB))" \
  [ "$(pyj '(lambda h: h["extra_bytes"] <= h["budget"] * (h["bytes_written"] + (256 << 20)))(d["tiers"][0]["hedging"])')" = True ]
n=$(data_objects hedged)
check "one copy of each object is left in RADOS: $n data objects for 16 written (losers removed)" [ "$n" = 16 ]
on c3 restore --store "$URI" --name hedged --to "$W/restored-hedged"
check "another host restores hedged@1 bit-exact" [ "$RC" -eq 0 -a "$(digest "$W/restored-hedged")" = "$(digest "$W/hedge")" ]
# A process that starts under the slow OSD finds it before it writes
# anything: the store reads from each OSD's placement groups when it opens
# and suspects the one that does not answer (hedge_probe, doc/ceph.md). A
# cache of its own each time, so that only the probe can have found it; up
# to five opens, as each probe of osd.0 may be answered quickly by luck
# (its delay hits half the messages).
probed=no
for i in 1 2 3 4 5; do
  rm -rf "$W/probe-cache"
  "$TESTBED" exec c2 env XDG_CACHE_HOME="$W/probe-cache" "$SLUICE" verify --store "$URI" --name probe-none --step 1 \
    >/dev/null 2>&1
  if grep -qs '^osd 0 ' "$W/probe-cache/sluice/"slow-osds-*; then probed=yes; break; fi
done
check "a store opened under the slow OSD suspects osd.0 before it writes anything (open $i)" [ "$probed" = yes ]
rm -rf "$W/probe-cache"
"$TESTBED" exec c2 env XDG_CACHE_HOME="$W/probe-cache" "$SLUICE" verify --store "$URI&hedge_probe=off" --name probe-none \
  --step 1 >/dev/null 2>&1
check "with hedge_probe=off it suspects nothing before writing" [ "$(ls "$W/probe-cache/sluice" 2>/dev/null | grep -c slow-osds)" = 0 ]
# kill -9 between a commit claim and its seal (doc/format.md, "Commit
# claims"): a save whose COMMIT falls in one of osd.0's placement groups
# claims it as it begins; killed while writing, it leaves the claim, and the
# step is not committed. The next save of the step, from another host,
# publishes its record at the dead claim's seal and commits; gc takes the
# killed save's data and keeps the step.
claim_obj() { printf 'sluice/ckpt/claim-killed/%020d/COMMIT' "$1"; }
cs=0
for s in $(seq 1 64); do
  if tb exec s1 ceph osd map "$SLUICE_TESTBED_POOL" "$(claim_obj "$s")" 2>/dev/null |
    grep -Eq 'acting \(\[(0|[0-9]+,0)(,|\])'; then cs=$s; break; fi
done
check "a step whose COMMIT is in one of osd.0's placement groups ($cs)" [ "$cs" -gt 0 ]
# c2's cache holds osd.0 as a suspect (the hedged save above shared it).
# Held to 1 MiB/s (128 s in all): each look for its objects lists the pool
# past the slow OSD, and at 4 MiB/s (32 s) one run found the save already
# committed by the time a look saw its objects.
"$TESTBED" exec c2 "$SLUICE" save --store "$URI" --name claim-killed --step "$cs" --from "$W/hedge" \
  --object-size 8MiB --rate-limit 0=1MiB >/dev/null 2>"$W/claim-killed.err" &
claimed_and_writing() {
  tb exec c1 rados -p "$SLUICE_TESTBED_POOL" stat "$(claim_obj "$cs")" >/dev/null 2>&1 &&
    [ "$(data_objects claim-killed)" -ge 2 ]
}
kill9_once $! claimed_and_writing
claimed=no
claimed_and_writing && claimed=yes
tb exec c1 rados -p "$SLUICE_TESTBED_POOL" get "$(claim_obj "$cs")" "$W/claim" >/dev/null 2>&1
seal=$(grep -ao "ckpt/claim-killed/[0-9]*/seal/[0-9a-f]*-[0-9a-f]*" "$W/claim" 2>/dev/null | head -1)
check "killed mid-save (running=$running, claimed=$claimed): COMMIT holds a claim naming a seal ($seal)" \
  [ "$running" = yes -a "$(head -c 8 "$W/claim" 2>/dev/null)" = SLUICECL -a -n "$seal" ]
on c2 ls --store "$URI" --name claim-killed --all --json
check "the claimed, unsealed step is not committed (ls: $(pyj '[(c["step"], c["complete"], c["problem"]) for c in d]' | cut -c1-160))" \
  [ "$RC" -eq 0 -a "$(pyj 'len([c for c in d if c["complete"]])')" = 0 ]
on c3 save --store "$URI" --name claim-killed --step "$cs" --from "$W/rank0"
expect_ok "another host saves the step again and commits it at the dead claim's seal"
rados_has() { tb exec c1 rados -p "$SLUICE_TESTBED_POOL" stat "$1" >/dev/null 2>&1; }
check "its record is at the dead claim's seal" rados_has "sluice/$seal"
on c2 gc --store "$URI" --min-age 0
on c1 restore --store "$URI" --name claim-killed --to "$W/restored-claim"
check "after gc, claim-killed@$cs restores bit-exact from c1 ($(data_objects claim-killed) data objects left)" \
  [ "$RC" -eq 0 -a "$(digest "$W/restored-claim")" = "$(digest "$W/rank0")" ]

# kill -9 while hedges are in flight (the save is held to 4 MiB/s, and
# killed once a few of its objects exist, so that it is still writing; a
# listing of the pool takes seconds past the slow OSD, so the save is held
# long enough for it): nothing is committed, and gc
# takes every copy, winner or loser, once the slow OSD has caught up.
mkdir -p "$W/hedge-big"
for i in $(seq 1 48); do head -c $((8 << 20)) /dev/urandom >"$W/hedge-big/p$i.bin"; done
# Not through tb(): a function run in the background is a subshell, and $!
# would be that shell, not the save (testbed exec execs the command).
# A cache of its own and no probe: it learns the slow OSD afresh, with
# hedges, instead of avoiding it from the start as the save above shared it
# (HedgeState::ShareSuspects) and as its own probe would find it.
"$TESTBED" exec c2 env XDG_CACHE_HOME="$W/fresh-cache" "$SLUICE" save --store "$URI&hedge_probe=off" --name hedge-killed --step 1 --from "$W/hedge-big" \
  --object-size 8MiB --rate-limit 0=4MiB >/dev/null 2>"$W/killed.err" &
wrote_a_few() { [ "$(data_objects hedge-killed)" -ge 6 ]; }
kill9_once $! wrote_a_few
slow_osd 0
# What the killed process sent before it died is still being applied for a
# moment: wait until the count of its objects holds still.
before=$(data_objects hedge-killed)
for i in $(seq 1 20); do
  sleep 2
  now=$(data_objects hedge-killed)
  [ "$now" = "$before" ] && break
  before=$now
done
on c2 ls --store "$URI" --name hedge-killed --all --json
check "kill -9 mid-save (running=$running): hedge-killed@1 is not committed (ls: $(pyj '[(c["step"], c["complete"]) for c in d]'))" \
  [ "$(pyj 'len([c for c in d if c["complete"]])')" = 0 ]
on c2 gc --store "$URI" --min-age 0
after=$(data_objects hedge-killed)
check "gc reclaims every copy the killed save left ($before data objects before, $after after)" \
  [ "$RC" -eq 0 -a "$after" = 0 ]

# ------------------------------------- a storage host lost mid-drain
mkdir -p "$W/drain"
head -c $((24 << 20)) /dev/urandom >"$W/drain/w.bin"
tb exec c3 "$SLUICE" save --tier "$(nvme c3)" --tier "$URI" --name lossy --step 1 --from "$W/drain" \
  --rate-limit 1=8MiB >"$W/lossy.out" 2>"$W/lossy.err" &
ps=$!
sleep 1.5
tb lose s3 >/dev/null 2>&1
wait "$ps"
rc=$?
check "a drain to RADOS survives losing storage host s3 (2 OSDs, 1 mon) midway (exit $rc: $(tail -2 "$W/lossy.err" | tr '\n' '|'))" [ "$rc" -eq 0 ]
on c1 ls --tier "$(nvme c1)" --tier "$URI" --name lossy --json
check "ls on c1: lossy@1 committed on RADOS ($(pyj '[c["tiers"][1]["state"] for c in d]'))" \
  [ "$RC" -eq 0 -a "$(pyj 'd[0]["tiers"][1]["state"]')" = committed ]
on c1 restore --store "$URI" --name lossy --to "$W/restored-lossy"
check "c1 restores it from the degraded cluster, bit-exact" [ "$RC" -eq 0 -a "$(digest "$W/restored-lossy")" = "$(digest "$W/drain")" ]
on c4 save --store "$URI" --name after-loss --step 1 --from "$W/rank0"
expect_ok "a save to RADOS with one mon and two OSDs gone completes (quorum kept)"

# ------------------------------------------------------------ teardown
t=$(date +%s)
tb down >/dev/null 2>&1
rc=$?
left_ns=$(ip netns list | awk '{print $1}' | grep "^$SLUICE_TESTBED-" | tr '\n' ' ')
left_mounts=$(grep -c "$SLUICE_TESTBED_DIR" /proc/mounts)
left_procs=$(python3 - "$SLUICE_TESTBED_DIR" <<'EOF'
import glob, os, sys
me = {os.getpid(), os.getppid()}
n = 0
for f in glob.glob("/proc/[0-9]*/cmdline"):
    try:
        pid = int(f.split("/")[2])
        if pid not in me and sys.argv[1].encode() in open(f, "rb").read():
            n += 1
    except OSError:
        pass
print(n)
EOF
)
check "down (exit $rc, $(($(date +%s) - t)) s) leaves no namespace ($left_ns), mount ($left_mounts), process ($left_procs) or directory" \
  [ "$rc" -eq 0 -a -z "$left_ns" -a "$left_mounts" = 0 -a "$left_procs" = 0 -a ! -e "$SLUICE_TESTBED_DIR" ]

# ------------- [own NVMe, S3] on a bed of its own with the S3 gateway (up --s3)
t=$(date +%s)
tb up --compute 4 --storage 3 --osds-per-host 1 --s3 >"$W/up-s3.out" 2>"$W/up-s3.err"
rc=$?
if [ $rc -ne 0 ]; then
  nok "testbed up --s3: exit $rc: $(tail -5 "$W/up-s3.err" | tr '\n' '|')"
else
  ok "testbed up --s3 (4 compute hosts, 3 storage hosts with an OSD each, radosgw on s1) in $(($(date +%s) - t)) s"
  eval "$(tb env)"
  . "$HERE/tests/testbed_s3_cases.sh"
fi
tb down >/dev/null 2>&1

echo "# testbed_test.sh took $(($(date +%s) - T0)) s"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
