#!/usr/bin/env bash
# Installs everything sluice needs to build, test and benchmark, from
# Debian 12 packages. Run as root (or with sudo available).
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
packages=(
  build-essential cmake pkg-config make g++   # toolchain
  liburing-dev                       # io_uring
  libisal-dev                        # hardware crc32c (crc32_iscsi)
  libxxhash-dev                      # xxh3-128 chunk hashes (header only, inlined with AVX2)
  libgtest-dev                       # unit tests
  nlohmann-json3-dev                 # JSON: safetensors headers, the CLI's output
  libcli11-dev                       # the CLI's flag parsing
  libcivetweb-dev                    # the embedded HTTP server behind --metrics-listen
  prometheus curl                    # tests/metrics_test.sh: a real Prometheus scrapes sluice
  gnuplot-nox                        # sluice bench --report draws its plots with it
  chromium                           # tests/report_test.sh renders the report headless
  clang libclang-rt-14-dev           # libFuzzer targets for the decoders
  fio                                # the ceiling the benchmark compares against
  xfsprogs btrfs-progs               # loop-mounted XFS and btrfs in the filesystem tests
  zfs-fuse                           # a ZFS pool on a file in the filesystem tests
  python3                            # bench/run_bench.sh and tests parse JSON with it
  util-linux procps e2fsprogs        # losetup, mount, mkfs.ext4; ps
  faketime                           # tests/clock_skew_test.sh: hosts whose clocks disagree
  librados-dev libradospp-dev        # the rados:// backend (C library, C++ header)
  libcurl4-openssl-dev libexpat1-dev # the s3:// backend: libcurl (HTTP, SigV4 signing), expat (S3's XML answers)
  radosgw                            # scripts/ceph-dev-cluster: Ceph's S3 gateway, for the s3:// tests
  ceph-mon ceph-osd ceph-mgr ceph-common uuid-runtime  # scripts/ceph-dev-cluster for tests/ceph_test.sh
  python3 python3-venv               # python/: a virtual environment with torch 2.x (below)
  python3-dev                        # python/: Python's headers, for the _sluice extension
  iproute2                           # ip and tc: the test bed's network namespaces (scripts/testbed)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# python/: the _sluice module is built for a virtual environment, .venv in
# the checkout, made from the `python3` on PATH (or $SLUICE_PYTHON), holding
# torch 2.13 (CPU) from PyPI, pybind11, numpy and pytest; safetensors,
# lightning and torch-checkpointing for the interop tests; boto3, s3fs and
# s3torchconnector, the S3 peers bench/s3_bench.py and bench/dcp_s3_bench.py
# time sluice against.
# `.venv/bin/python` is then the interpreter that has torch and sluice.
here=$(cd "$(dirname "$0")/.." && pwd)
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then
  "${SLUICE_PYTHON:-python3}" -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import torch, pybind11, numpy, pytest, safetensors, lightning, prometheus_client, torch_checkpointing, boto3, s3fs, s3torchconnector, tenacity; assert torch.__version__.startswith("2.")' 2>/dev/null; then
  "$venv/bin/python" -m pip install -q "torch==2.13.0" pybind11 numpy pytest safetensors lightning prometheus_client "torch-checkpointing==0.1.1" \
    boto3 "s3fs>=2024.1" "s3torchconnector==1.5.0" tenacity
fi
