#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for
# SECONDS (default 30) from seeds made by fuzz_make_corpus.
# Usage: fuzz/run.sh [SECONDS] [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-30}
build=${2:-$here/build-fuzz}
CXX=clang++ cmake -S "$here" -B "$build" -DSLUICE_FUZZ=ON -DSLUICE_TESTS=OFF >/dev/null
cmake --build "$build" -j2 --target fuzz_manifest fuzz_commit_record fuzz_safetensors fuzz_make_corpus >/dev/null
seeds=$(mktemp -d)
trap 'rm -rf "$seeds"' EXIT
mkdir -p "$seeds/manifest" "$seeds/commit_record"
"$build/fuzz_make_corpus" "$seeds/manifest"
mv "$seeds/manifest"/commit* "$seeds/commit_record/"
# A valid two-tensor safetensors file and an index, for the header parser.
mkdir -p "$seeds/safetensors"
hdr='{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]}}'
python3 - "$seeds/safetensors/two" "$hdr" <<'PY'
import struct, sys
h = sys.argv[2].encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(12))
PY
printf '%s' '{"metadata":{"total_size":12},"weight_map":{"a":"model-00001-of-00001.safetensors"}}' \
  > "$seeds/safetensors/index"
status=0
for t in manifest commit_record safetensors; do
  if "$build/fuzz_$t" -max_total_time="$secs" -max_len=8192 -print_final_stats=0 "$seeds/$t" \
       >"$seeds/$t.log" 2>&1; then
    echo "ok - fuzz_$t: $(grep -o 'Done [0-9]* runs' "$seeds/$t.log") without a crash"
  else
    echo "not ok - fuzz_$t found a crash:"; tail -40 "$seeds/$t.log"; status=1
  fi
done
exit $status
