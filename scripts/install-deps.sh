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
  libgtest-dev                       # unit tests
  clang libclang-rt-14-dev           # libFuzzer targets for the decoders
  fio                                # the ceiling the benchmark compares against
  xfsprogs btrfs-progs               # loop-mounted XFS and btrfs in the filesystem tests
  python3                            # bench/run_bench.sh and tests parse JSON with it
  util-linux procps e2fsprogs        # losetup, mount, mkfs.ext4; ps
  librados-dev libradospp-dev        # the rados:// backend (C library, C++ header)
  ceph-mon ceph-osd ceph-mgr ceph-common uuid-runtime  # scripts/ceph-dev-cluster for tests/ceph_test.sh
  python3-dev python3-pybind11 python3-torch python3-numpy python3-pytest  # python/: the _sluice module, its tests, the DCP plugin
  libopenblas0-openmp                # without it Debian's torch uses reference BLAS (~9x slower steps)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
