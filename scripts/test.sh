#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test: the CTest suite in
# a normal build and again under AddressSanitizer + UndefinedBehaviorSanitizer,
# then the decoder fuzzers. .ci/run calls exactly this.
#
# Usage: scripts/test.sh          (FUZZ_SECONDS=N to change the fuzzing time)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
scripts/install-deps.sh

jobs=$(nproc)
echo "== build (RelWithDebInfo)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
echo "== tests"
# Tests run $jobs at a time (most wait on disks, sleeps and servers); those
# that start the Ceph cluster, time a path against its ceiling, or fill
# every core run alone (RUN_SERIAL in CMakeLists.txt).
(cd build && ctest -j"$jobs" --output-on-failure --timeout 900)

echo "== build (ASan + UBSan)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs"
echo "== tests under ASan + UBSan"
# The kill -9 trials are about the on-disk protocol, already run above; under
# the sanitizers they would only be slower. ceph_test and testbed_test (real
# Ceph clusters, ~2 and ~1 min) ran above too; here they would exercise
# librados and Ceph more than sluice.
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
   CRASH_TRIALS=5 CRASH_QUICK_TRIALS=10 CRASH_DRAIN_TRIALS=10 CRASH_GC_KILLS=10 INCREMENTAL_KILL_TRIALS=5 METRICS_TEST_CHECKPOINTS=100 ctest -j"$jobs" --output-on-failure --timeout 900 -E '^(ceph_test|testbed_test)$')

echo "== fuzzers"
fuzz/run.sh "${FUZZ_SECONDS:-30}"
echo "all test stages passed"
