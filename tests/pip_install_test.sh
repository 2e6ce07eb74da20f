#!/usr/bin/env bash
# What a PyTorch user does: `pip wheel` of the checkout (scikit-build-core
# driving the project's CMake, in pip's isolated build environment), the
# wheel installed into a fresh venv that holds only torch, then the package,
# its CLI on the venv's PATH and a DCP save/load round trip. Also: a build
# whose dependencies are missing fails with one message naming them, and
# leaves nothing installed.
#
# Usage: tests/pip_install_test.sh PYTHON SOURCE_DIR
# PYTHON is an interpreter with pip and torch 2.x (the checkout's .venv);
# the fresh venvs are made from it. Without torch it skips (exit 77),
# except under CI=true, where a skip is a failure.
set -u
python=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")  # absolute, still the venv's
src=$2
pass=0 fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "not ok - $*"; fail=$((fail + 1)); }
skip() {
  if [ "${CI:-}" = true ]; then echo "not ok - cannot run under CI=true: $*"; echo "0 passed, 1 failed"; exit 1; fi
  echo "SKIP: $*"; exit 77
}
torch_version=$("$python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null) ||
  skip "no torch in $python (scripts/install-deps.sh installs it)"

work=$(mktemp -d /tmp/sluice-pip-XXXXXX)
trap 'rm -rf "$work"' EXIT
quiet() { grep -v "WARNING: Location" || true; }

# A wheel, built as pip builds it.
start=$(date +%s)
if "$python" -m pip wheel --no-deps -w "$work/wheels" "$src" >"$work/wheel.log" 2>&1; then
  ok "pip wheel builds ($(( $(date +%s) - start )) s)"
else
  bad "pip wheel builds"; tail -40 "$work/wheel.log"
fi
wheel=$(ls "$work"/wheels/sluice-*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] && echo "# wheel: $(basename "$wheel"), $(stat -c %s "$wheel") bytes"

# A fresh venv with torch alone, then the wheel.
"$python" -m venv "$work/venv"
venv_py=$work/venv/bin/python
"$venv_py" -m pip install -q "torch==$torch_version" 2>&1 | quiet
if [ -n "$wheel" ] && "$venv_py" -m pip install -q "$wheel" 2>&1 | quiet && "$venv_py" -m pip show sluice >/dev/null 2>&1; then
  ok "the wheel installs into a fresh venv with torch $torch_version"
else
  bad "the wheel installs into a fresh venv"
fi
if "$work/venv/bin/sluice" --help | grep -q "Usage: sluice"; then
  ok "the sluice CLI is on the venv's PATH"
else
  bad "the sluice CLI is on the venv's PATH"
fi
ext=$(ls "$work"/venv/lib/python*/site-packages/sluice/_sluice*.so 2>/dev/null | head -1)
if [ -n "$ext" ] && ! ldd "$ext" | grep -qi torch; then
  ok "the extension does not link libtorch"
else
  bad "the extension does not link libtorch ($ext)"
fi
if (cd "$work" && "$venv_py" - "$work/store" <<'PY' 2>"$work/roundtrip.err"
import sys, torch, sluice
import torch.distributed.checkpoint as dcp
from sluice.torch import StorageWriter, StorageReader
assert sluice.__file__.startswith(sys.prefix), sluice.__file__
sd = {"w": torch.randn(512, 256), "step": torch.tensor(7)}
dcp.save(sd, storage_writer=StorageWriter(sys.argv[1], "run", 1))
out = {"w": torch.zeros(512, 256), "step": torch.tensor(0)}
dcp.load(out, storage_reader=StorageReader(sys.argv[1], "run"))
assert torch.equal(out["w"], sd["w"]) and int(out["step"]) == 7
PY
); then ok "a DCP save and load round trip from the installed package"
else bad "a DCP save and load round trip"; tail -20 "$work/roundtrip.err"
fi

# Missing headers: one message naming each, and nothing installed. Hiding
# /usr/include from CMake's searches hides ISA-L's, xxHash's and civetweb's.
"$python" -m venv "$work/venv2" || bad "a second venv"
"$work/venv2/bin/python" -m pip install -q \
  --config-settings=cmake.define.CMAKE_IGNORE_PATH=/usr/include "$src" >"$work/missing.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "sluice cannot be built: missing" "$work/missing.log" &&
   grep -q "ISA-L's library and headers (libisal-dev)" "$work/missing.log" &&
   grep -q "libxxhash-dev" "$work/missing.log"; then
  ok "missing headers: the install fails naming each (and its Debian package)"
else
  bad "missing headers: the install fails naming each (rc $rc)"; tail -30 "$work/missing.log"
fi
if [ ! -x "$work/venv2/bin/python" ] || "$work/venv2/bin/python" -m pip show sluice >/dev/null 2>&1 ||
   (cd "$work" && "$work/venv2/bin/python" -c 'import sluice' 2>/dev/null); then
  bad "a failed install leaves no sluice package behind"
else
  ok "a failed install leaves no sluice package behind"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
