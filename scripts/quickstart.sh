#!/usr/bin/env bash
# Installs the dependencies, builds sluice, and runs the main job: the
# checkpoint benchmark on a local directory store, next to fio on the same
# filesystem. Usage: scripts/quickstart.sh [STORE_DIR] [sluice bench flags]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target sluice
exec bench/run_bench.sh "$@"
