#!/usr/bin/env bash
# s3_test.sh: sluice against a real S3 server, Ceph's own gateway (radosgw)
# on the single-node cluster scripts/ceph-dev-cluster makes.
#
#   tests/s3_test.sh path/to/sluice path/to/backend_conformance_test
#
# The backend conformance suite; a save/restore round trip; two racing saves
# of one step; a save killed (-9) in the middle of its multipart uploads and
# gc aborting what it left; a file tier 0 draining to an s3 tier 1 under a
# rate cap, restored after tier 0 is wiped; corruption of the s3 copy found
# by verify and healed by scrub; retention, rm, incremental saves and the
# latest-step hint on s3://; bad input (wrong keys, a missing bucket, a
# refused endpoint, a server answering 503 SlowDown, a truncated answer),
# each one line, in bounded time, never showing a secret.
#
# Uses the cluster in $SLUICE_CEPH_DIR (default /tmp/sluice-ceph) if it is
# running; otherwise starts one and stops it on exit, pass or fail. Works
# under a random prefix of the test bucket and removes it at the end. Prints
# "ok - ..." / "not ok - ..." per check and last "N passed, M failed"; exits
# 1 if any check failed, 77 (skip) when radosgw, Ceph or sluice's S3 support
# is missing -- but 1 then when CI=true.
set -u

if [ $# -ne 2 ] || [ ! -x "$1" ] || [ ! -x "$2" ]; then
  echo "usage: $0 path/to/sluice path/to/backend_conformance_test" >&2
  exit 2
fi
SLUICE=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
CONFORMANCE=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
HERE=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER=$HERE/scripts/ceph-dev-cluster

unavailable() {
  if [ "${CI:-}" = true ]; then
    echo "not ok - s3_test.sh cannot run under CI=true: $*"
    exit 1
  fi
  echo "ok - s3_test.sh # SKIP $*"
  exit 77
}
for p in ceph-mon ceph-osd ceph-mgr ceph radosgw radosgw-admin curl python3 timeout; do
  command -v "$p" >/dev/null || unavailable "$p not installed (scripts/install-deps.sh installs it)"
done
if AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=y "$SLUICE" ls --store 's3://probe/x?endpoint=http://127.0.0.1:9&retries=0' 2>&1 |
   grep -q 'without S3 support'; then
  unavailable "sluice was built without S3 support (libcurl4-openssl-dev, libexpat1-dev)"
fi

W=$(mktemp -d /tmp/sluice-s3-test.XXXXXX) || exit 2
STARTED=0
PREFIX=s3-test-$$-$RANDOM
BGPIDS=()
cleanup() {
  local p
  for p in "${BGPIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  if [ -n "${SLUICE_S3_URI:-}" ]; then
    # What the test left in the bucket: objects, then unfinished uploads.
    "$SLUICE" gc --store "$(suri "")" >/dev/null 2>&1
    s3_keys "$PREFIX/" | while read -r k; do s3 DELETE "$k" >/dev/null; done
  fi
  [ "$STARTED" = 1 ] && "$CLUSTER" stop >/dev/null 2>&1
  rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

. "$HERE/tests/lib.sh"

# ---------------------------------------------------------------- cluster and gateway
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
  ok "scripts/ceph-dev-cluster start: cluster and S3 gateway up in $(($(date +%s) - t)) s"
fi
eval "$("$CLUSTER" env)" || { nok "scripts/ceph-dev-cluster env"; exit 1; }
[ -n "${SLUICE_S3_URI:-}" ] || { nok "scripts/ceph-dev-cluster env prints no SLUICE_S3_URI"; exit 1; }
export AWS_ACCESS_KEY_ID=$SLUICE_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$SLUICE_S3_SECRET_KEY
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3
EP=$SLUICE_S3_ENDPOINT
BUCKET=$SLUICE_S3_BUCKET
# suri SUB [OPTIONS]: a store under this test's prefix.
suri() { echo "s3://$BUCKET/$PREFIX${1:+/$1}?endpoint=$EP&addressing=path&region=us-east-1${2:-}"; }
# s3 METHOD KEY [CURL ARGS...]: a raw signed request to the gateway; prints the body.
s3() {
  local m=$1 k=$2; shift 2
  curl -sS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X "$m" "$@" "$EP/$BUCKET/$k"
}
# enc S: S URI-encoded, '/' too, as SigV4 wants a query value.
enc() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
# s3_keys PREFIX: the keys under PREFIX, one per line (one page: the test's prefixes hold fewer than 1000).
s3_keys() {
  s3 GET "?list-type=2&prefix=$(enc "$1")" | python3 -c '
import sys, re
print("\n".join(re.findall(r"<Key>([^<]*)</Key>", sys.stdin.read())))' | grep -v '^$'
}
# s3_uploads PREFIX: how many multipart uploads are open under PREFIX.
s3_uploads() { s3 GET "?prefix=$(enc "$1")&uploads=" | grep -o '<UploadId>' | wc -l; }

# ---------------------------------------------------------------- conformance
if SLUICE_S3_URI="$(suri conformance)" "$CONFORMANCE" --gtest_filter='All/BackendConformance.*/s3*-*APlacementNamesSiblings*' \
     >"$W/conformance.out" 2>&1 &&
   grep -q 'PASSED' "$W/conformance.out" && ! grep -q 'SKIPPED' "$W/conformance.out"; then
  ok "backend conformance suite against radosgw ($(grep -c '^\[       OK' "$W/conformance.out") tests)"
else
  nok "backend conformance suite against radosgw: $(grep -E 'FAILED|Failure|error|Expected|Which' "$W/conformance.out" | head -6 | tr '\n' '|')"
fi

. "$HERE/tests/s3_cases.sh"

# ---------------------------------------------------------------- DCP and sluice.save on s3://
PY_TESTS=(
  test_save_and_load_without_process_group
  test_a_second_save_of_the_same_step_fails_and_keeps_the_first
  test_gloo_group_each_rank_writes_its_shards_and_one_commit
  test_gloo_load_with_another_world_size_reshards
  test_gloo_lazy_async_staging_commits_the_state_at_the_save_on_every_rank
  test_async_save_stages_once_and_training_may_change_the_state_at_once
  test_async_staging_returns_dcps_response_with_staging_completion
  test_loading_a_missing_step_or_name_says_which
)
PYBUILD=$(dirname "$SLUICE")/python
if [ -x "$HERE/.venv/bin/python" ] && ls "$PYBUILD"/sluice/_sluice*.so >/dev/null 2>&1; then
  filter=$(printf ' or %s' "${PY_TESTS[@]}")
  SLUICE_TEST_STORE_ROOT=$(suri python) "$HERE/python/tests/run_tests.sh" "$HERE/.venv/bin/python" "$PYBUILD" \
    "$HERE/python/tests" -k "${filter# or }" >"$W/pytest.out" 2>&1
  prc=$?
  check "DCP on s3:// (one process, gloo ranks, async and lazy staging, resharding): $(tail -1 "$W/pytest.out")" \
    bash -c "[ $prc -eq 0 ] && grep -q ' passed' '$W/pytest.out' && ! grep -q ' failed' '$W/pytest.out'"
elif grep -q '^SLUICE_SANITIZE:BOOL=ON' "$(dirname "$SLUICE")/CMakeCache.txt" 2>/dev/null; then
  echo "ok - DCP on s3:// # SKIP a sanitizer build has no Python module (the normal build's run covers it)"
elif [ "${CI:-}" = true ]; then
  nok "DCP on s3://: no .venv or no _sluice module beside $SLUICE"
else
  echo "ok - DCP on s3:// # SKIP no .venv or no _sluice module beside $SLUICE"
fi

echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
