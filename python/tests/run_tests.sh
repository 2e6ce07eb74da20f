#!/usr/bin/env bash
# Runs the Python tests (pytest) against the _sluice module of a build tree.
#   run_tests.sh PYTHON BUILD_PYTHON_DIR TESTS_DIR [pytest args...]
# Exit 77 (skipped) when PyTorch, pytest or the module is missing, unless
# CI=true, where that is a failure.
set -u
python=$1 build_python=$(cd "$2" 2>/dev/null && pwd) tests=$(cd "$3" && pwd)
shift 3
missing=""
"$python" -c "import torch" 2>/dev/null || missing="$missing python3-torch"
"$python" -c "import pytest" 2>/dev/null || missing="$missing pytest"
"$python" -c "import safetensors, lightning" 2>/dev/null || missing="$missing safetensors/lightning"
ls "$build_python"/sluice/_sluice*.so >/dev/null 2>&1 || missing="$missing _sluice-module(pybind11)"
if [ -n "$missing" ]; then
  echo "python_test: missing:$missing (scripts/install-deps.sh installs them)" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
  exit 77
fi
export PYTHONPATH="$build_python${PYTHONPATH:+:$PYTHONPATH}"
# The CLI beside the module, for the export/import tests.
export SLUICE_BIN=${SLUICE_BIN:-$build_python/../sluice}
# Small staging arenas: tests run several processes side by side.
export SLUICE_STAGING_BYTES=${SLUICE_STAGING_BYTES:-$((32 << 20))}
# -rs: why anything skipped (the CUDA tests, on a machine without a GPU).
cd "$tests" && exec "$python" -m pytest -q -rs -p no:cacheprovider "$@" "$tests"
