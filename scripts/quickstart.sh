#!/usr/bin/env bash
# Installs the dependencies, builds sluice (the CLI and the Python module),
# and runs the main job: the
# checkpoint benchmark on a local directory store, next to fio on the same
# filesystem. Usage: scripts/quickstart.sh [STORE_DIR] [sluice bench flags]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# The CLI, and the Python module where the build has one (.venv with torch:
# install-deps makes it), so that PYTHONPATH=build/python imports sluice.
targets=(sluice)
if cmake --build build --target help | grep -q '_sluice'; then targets+=(_sluice); fi
cmake --build build -j"$(nproc)" --target "${targets[@]}"
exec bench/run_bench.sh "$@"
