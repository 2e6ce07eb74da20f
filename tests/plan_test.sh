#!/usr/bin/env bash
# plan_test.sh: `sluice plan`, `plan compare` and `plan calibrate` from the
# command line: the worked example's figures (doc/planning.md), JSON, the
# report's files, a calibration of two file tiers, and a one-line error naming
# the field for each kind of bad input.
#
#   tests/plan_test.sh path/to/sluice
#
# Prints "ok"/"not ok" lines and "N passed, M failed"; exits 0 if all passed.
TESTS_DIR=$(cd "$(dirname "$0")" && pwd)
set -u
if [ $# -ne 1 ]; then
  echo "usage: $0 path/to/sluice" >&2
  exit 2
fi
SLUICE=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
W=$(mktemp -d /tmp/sluice-plan-XXXXXX)
trap 'rm -rf "$W"' EXIT
. "$TESTS_DIR/lib.sh"

cat >"$W/job.json" <<'EOF'
{"format": "sluice.plan.job", "version": 1, "state_bytes_per_rank": "10GiB", "ranks_per_host": 8,
 "hosts": 4, "interval_s": 600, "step_s": 2, "gpu": true}
EOF
cat >"$W/profile.json" <<'EOF'
{"format": "sluice.plan.profile", "version": 1, "sluice_version": "0.1.0",
 "host": {"memcpy_bytes_per_s": "20GiB/s", "d2h_bytes_per_s": "10GiB/s", "staging_bytes": "128GiB",
          "nvme_write_bytes_per_s": "4GiB/s", "nvme_read_bytes_per_s": "6GiB/s",
          "nic_bytes_per_s": "10GiB/s", "storage_link_share": 0.5},
 "tiers": {"ceph": {"osds": 12, "osd_write_bytes_per_s": "1GiB/s", "osd_read_bytes_per_s": "2GiB/s",
                    "write_amplification": 3},
           "s3": {"write_bytes_per_s": "8GiB/s", "read_bytes_per_s": "16GiB/s"}},
 "failures": {"host_mtbf_hours": 1000, "restart_s": 60}}
EOF

# ------------------------------------------------------------ the example
sl plan --profile "$W/profile.json" --job "$W/job.json"
check "plan prints the stall and what bounds it (exit $RC)" \
  grep -q "stall per checkpoint *4 s *bound by memcpy, 20.00 GiB/s per host" "$W/out"
check "...the time to durable on Ceph, bound by its OSDs" \
  grep -q "durable on the shared tier after *104 s *bound by 12 OSDs x 1.00 GiB/s / 3 copies" "$W/out"
sl plan --profile "$W/profile.json" --job "$W/job.json" --json
check "--json: stall 4 s, durable 104 s, drain 80 s, backlog bounded" \
  [ "$(pyj '(d["stall"]["seconds"], d["durable"]["seconds"], d["drain"]["seconds"], d["backlog_bounded"])')" = "(4.0, 104.0, 80.0, True)" ]
start=$(date +%s%N)
sl plan --profile "$W/profile.json" --job "$W/job.json" --layout nvme+s3 --json
ms=$(( ($(date +%s%N) - start) / 1000000 ))
check "an S3 layout: its measured rate bounds the drain (40 s)" \
  [ "$(pyj '(d["drain"]["seconds"], d["drain"]["bound"])')" = "(40.0, 'S3, measured 8.00 GiB/s')" ]
check "plan answers in under a second (${ms} ms)" [ "$ms" -lt 1000 ]
sl plan compare --profile "$W/profile.json" --job "$W/job.json" --json
check "compare plans the six layouts the profile has (three with peers) and says why shared-fs is not one" \
  [ "$(pyj '(len(d["layouts"]), "tiers.shared-fs" in d["skipped"]["shared-fs"], d["recommended"] in ("nvme+ceph", "ceph", "nvme+s3", "nvme+peer+ceph", "nvme+peer+s3", "nvme+peer"))')" = "(6, True, True)" ]
check "...a peer layout is safe before its durable tier has the step" \
  [ "$(pyj '[l["safe"]["seconds"] < l["durable"]["seconds"] for l in d["layouts"] if l["layout"] == "nvme+peer+ceph"]')" = "[True]" ]
check "...and names what separates the best two" [ "$(pyj '"differ most in" in d["reason"]')" = True ]
if command -v gnuplot >/dev/null; then
  sl plan --profile "$W/profile.json" --job "$W/job.json" --report "$W/report"
  check "--report writes a page with plots against interval, hosts and OSDs (exit $RC)" \
    bash -c "[ $RC -eq 0 ] && grep -q 'data:image/svg+xml' '$W/report/index.html' && ls '$W/report/interval.svg' '$W/report/hosts.svg' '$W/report/osds.svg' >/dev/null"
else
  echo "ok - --report # SKIP gnuplot is missing"
fi

# ------------------------------------------------------------ bad input
bad_job() {  # DESC JSON WANT_IN_ERROR
  echo "$2" >"$W/bad.json"
  sl plan --profile "$W/profile.json" --job "$W/bad.json"
  # A job file's contents are not the command line: operational, exit 1 (doc/cli.md).
  if [ "$RC" -eq 1 ] && one_sluice_line && grep -qF -- "$3" "$W/err"; then ok "$1"; else nok "$1: exit $RC, stderr: $(errtext)"; fi
}
bad_job "a negative size names the field" \
  '{"format":"sluice.plan.job","version":1,"state_bytes_per_rank":-5,"hosts":4,"interval_s":600,"step_s":2}' \
  "job.state_bytes_per_rank must be a positive number"
bad_job "an interval shorter than the save names it and the copy" \
  '{"format":"sluice.plan.job","version":1,"state_bytes_per_rank":"10GiB","ranks_per_host":8,"hosts":4,"interval_s":1,"step_s":2}' \
  "job.interval_s (1 s) is shorter than the save's copy (4 s"
bad_job "a missing field is named" '{"format":"sluice.plan.job","version":1,"state_bytes_per_rank":"1GiB","interval_s":60,"step_s":1}' \
  "job.hosts is missing"
bad_job "a size that is not one is named" \
  '{"format":"sluice.plan.job","version":1,"state_bytes_per_rank":"lots","hosts":1,"interval_s":60,"step_s":1}' \
  "job.state_bytes_per_rank is not a number or a size"
bad_job "a job file of another format version" '{"format":"sluice.plan.job","version":2}' "version is 2; this sluice reads version 1"
bad_job "a file that is not JSON" 'hosts: 4' "not valid JSON"
sed 's/"sluice_version": "0.1.0"/"sluice_version": "0.0.9"/' "$W/profile.json" >"$W/old.json"
sl plan --profile "$W/old.json" --job "$W/job.json"
expect_err "a profile from another sluice version" 1
check "...names sluice_version" grep -q 'sluice_version is "0.0.9"' "$W/err"
sl plan --profile "$W/profile.json" --job "$W/job.json" --layout shared-fs
expect_err "a layout whose tier the profile lacks" 2
check "...names tiers.shared-fs" grep -q "no tiers.shared-fs" "$W/err"
sl plan --profile "$W/profile.json" --job "$W/job.json" --layout zfs
expect_err "an unknown layout" 2
sl plan --profile "$W/profile.json" --job "$W/job.json" --nic 1GiB
expect_err "a calibrate flag without calibrate" 2

# ------------------------------------------------------------ calibrate
start=$(date +%s)
sl plan calibrate --tier "$W/nvme" --tier "$W/shared" --bytes 128MiB --nic 1GiB --share 0.5 --out "$W/cal.json"
secs=$(( $(date +%s) - start ))
expect_ok "calibrate two file tiers (${secs} s)"
check "...in under 2 minutes" [ "$secs" -lt 120 ]
check "...the profile holds the host's rates and a shared filesystem" \
  [ "$(pyj '(d["host"]["memcpy_bytes_per_s"] > 0, d["host"]["nvme_write_bytes_per_s"] > 0, d["host"]["nic_bytes_per_s"], d["tiers"]["shared-fs"]["write_bytes_per_s"] > 0)' "$W/cal.json")" = "(True, True, 1073741824.0, True)" ]
sl ls --store "$W/nvme" --json
check "...and leaves no checkpoint behind" [ "$(pyj 'len(d)')" = 0 ]
sl plan --profile "$W/cal.json" --job "$W/job.json" --layout shared-fs
expect_err "a GPU job on a profile with no device-to-host rate" 1
check "...names host.d2h_bytes_per_s" grep -q "host.d2h_bytes_per_s (a GPU job)" "$W/err"
sed 's/"gpu": true/"gpu": false/' "$W/job.json" >"$W/job-cpu.json"
sl plan --profile "$W/cal.json" --job "$W/job-cpu.json" --layout shared-fs --json
check "the calibrated profile plans a CPU job" [ "$RC" -eq 0 -a "$(pyj 'd["layout"]')" = shared-fs ]
sl plan --profile "$W/cal.json" --profile "$W/profile.json" --job "$W/job-cpu.json" --layout shared-fs --json
check "two profiles: the slower host's memcpy counts" \
  [ "$(pyj 'round(d["copy"]["seconds"], 6) >= 4.0')" = True ]
sl plan calibrate --out "$W/x.json"
expect_err "calibrate without --tier" 2
sl plan calibrate --tier "$W/nvme" --share 2 --nic 1GiB --out "$W/x.json"
expect_err "calibrate with a share over 1" 2
sl plan calibrate --tier "$W/nvme" --bytes 1MiB --nic 1GiB --out "$W/x.json"
expect_err "calibrate with too few bytes to time" 2

echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
