# testbed_s3_cases.sh: the S3 gateway on storage host s1 as the shared tier.
# Sourced by tests/testbed_test.sh once the testbed is up (its W, SLUICE,
# tb, on, nvme, digest, check, pyj); `testbed exec` gives each command
# SLUICE_TESTBED_S3_URI and the test keys as AWS_ACCESS_KEY_ID and
# AWS_SECRET_ACCESS_KEY.
#
# A job of 3 ranks on c1..c3, each rank's tier 0 its host's own NVMe
# directory, the shared tier S3 (--tier0-per-host): one commit on S3, and c4,
# which holds no part, restores the whole of it from S3 alone, bit-exact.
# Then c4's link is cut: its save to S3 fails at once with one line.
S3=$SLUICE_TESTBED_S3_URI
for r in 0 1 2; do
  mkdir -p "$W/srank$r/opt"
  head -c $((2 << 20)) /dev/urandom >"$W/srank$r/weights-$r.bin"
  head -c 70000 /dev/urandom >"$W/srank$r/opt/moments-$r.bin"
done
pids=()
for r in 0 1 2; do
  tb exec "c$((r + 1))" "$SLUICE" save --tier "$(nvme "c$((r + 1))")" --tier "$S3" --tier0-per-host \
    --name sjob --step 40 --from "$W/srank$r" --rank $r --world 3 --attempt "s-1" --timeout 60s \
    >"$W/srank$r.out" 2>&1 &
  pids+=($!)
done
fails=0
for p in "${pids[@]}"; do wait "$p" || fails=$((fails + 1)); done
check "3 ranks on c1..c3 save sjob@40 to [own NVMe, S3 on s1] with --tier0-per-host ($fails failed$(grep -h '^sluice:' "$W"/srank[012].out | head -1 | cut -c1-160 | sed 's/^/: /'))" \
  [ "$fails" -eq 0 ]
parts=""
for h in c1 c2 c3; do
  on "$h" ls --tier "$(nvme "$h")" --tier "$S3" --name sjob --json
  parts+="$(pyj '[(c["tiers"][0]["state"], c["tiers"][1]["state"]) for c in d]');"
done
check "ls on each host: its own rank as a part on tier 0, committed on S3 ($parts)" \
  [ "$parts" = "[('part', 'committed')];[('part', 'committed')];[('part', 'committed')];" ]
on c4 ls --store "$S3" --name sjob --all --json
check "ls on c4: one commit of sjob@40 on S3, with 3 ranks ($(pyj '[(c["step"], c["complete"], c["ranks"]) for c in d]'))" \
  [ "$RC" -eq 0 -a "$(pyj '[(c["step"], c["complete"], c["ranks"]) for c in d]')" = "[(40, True, 3)]" ]
mkdir -p "$W/sjob-all"
for r in 0 1 2; do cp -r "$W/srank$r/." "$W/sjob-all/"; done
on c4 restore --store "$S3" --name sjob --to "$W/restored-sjob"
check "c4 restores the whole of sjob@40 (3 ranks) from S3 alone, bit-exact" \
  [ "$RC" -eq 0 -a "$(digest "$W/restored-sjob")" = "$(digest "$W/sjob-all")" ]
on c4 verify --store "$S3" --name sjob --step 40
check "...and verify on c4 passes (exit $RC)" [ "$RC" -eq 0 ]
tb cut c4
t=$(date +%s.%N)
on c4 save --store "$S3&retries=1&timeout_s=3" --name scut --step 1 --from "$W/srank0"
cut_s=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t" "$(date +%s.%N)")
tb heal c4
cut_failed_fast() { [ "$RC" -ne 0 ] && python3 -c "import sys; sys.exit(float(sys.argv[1]) >= 20)" "$cut_s" && one_sluice_line; }
check "c4's link cut: its S3 save fails (exit $RC) in $cut_s s (want < 20 s) with one line ($(errtext | cut -c1-160))" \
  cut_failed_fast
