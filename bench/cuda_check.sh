#!/usr/bin/env bash
# On a machine with a CUDA GPU: builds the _sluice module for the python3 that
# has CUDA torch, runs the CUDA tests and the DCP tests (the GPU machine may
# have another torch than CI), then
# bench/cuda_stall.py, in about 4 minutes on an H200 with 16 cores. CI has no
# GPU; this is how the GPU path gets tested.
#
#   bench/cuda_check.sh OUT_DIR [DEPS_ROOT] [STALL_ARGS...]
#
# DEPS_ROOT: where the engine's build dependencies were unpacked (`dpkg -x` of
# liburing-dev liburing2 libisal-dev libisal2 nlohmann-json3-dev and pkgconf)
# on a machine that lacks them and cannot install them; omit it otherwise.
set -uo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd)
root=${2:-}
shift $(( $# >= 2 ? 2 : 1 ))
repo=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
build=${BUILD_DIR:-/tmp/sluice-cuda-build}
log() { echo "[cuda_check $(date +%T)] $*"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$py" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'

cmake_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_TESTS=OFF "-DSLUICE_PYTHON_EXECUTABLE=$(command -v "$py")")
if [ -n "$root" ]; then
  lib=$root/usr/lib/x86_64-linux-gnu
  export PATH=$root/usr/bin:$PATH
  export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$root/usr/share/pkgconfig PKG_CONFIG_SYSROOT_DIR=$root
  export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  command -v pkg-config >/dev/null || ln -sf pkgconf "$root/usr/bin/pkg-config"
  # Only the module is built: the CLI's civetweb is not needed.
  cmake_args+=("-DISAL_LIB=$lib/libisal.so" "-DISAL_INCLUDE=$root/usr/include"
               "-Dnlohmann_json_DIR=$root/usr/share/cmake/nlohmann_json"
               -DCIVETWEB_LIB=not-needed-for-the-module -DCIVETWEB_INCLUDE=/nonexistent)
fi
log "configure and build the module"
cmake -S "$repo" -B "$build" "${cmake_args[@]}" >"$out/cmake.log" 2>&1 || { tail -30 "$out/cmake.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target _sluice >>"$out/cmake.log" 2>&1 || { tail -40 "$out/cmake.log"; exit 1; }
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
"$py" -c 'import sluice._sluice as s; print("cuda_available:", repr(s.cuda_available()) or "yes")'

log "tests"
(cd "$repo/python/tests" && SLUICE_STAGING_BYTES=$((32 << 20)) timeout 400 "$py" -m pytest -q -rs -p no:cacheprovider \
  -p no:logging test_cuda.py test_dcp.py 2>&1 | tee "$out/pytest.log" | tail -25)
tests_rc=${PIPESTATUS[0]}

log "stall benchmark"
timeout 300 "$py" "$repo/bench/cuda_stall.py" "${STORE_DIR:-/tmp/sluice-cuda-store}" --json "$out/cuda_stall.json" "$@" 2>&1 |
  tee "$out/cuda_stall.log"
bench_rc=${PIPESTATUS[0]}
log "tests rc=$tests_rc bench rc=$bench_rc"
[ "$tests_rc" = 0 ] && [ "$bench_rc" = 0 ]
