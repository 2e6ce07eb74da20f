# Helpers shared by the CLI shell tests. Source it after setting SLUICE (the
# binary) and W (the scratch directory); it defines PASS/FAIL counters and
# check helpers that print TAP-like "ok"/"not ok" lines.
PASS=0
FAIL=0
ok() { echo "ok - $*"; PASS=$((PASS + 1)); }
nok() { echo "not ok - $*"; FAIL=$((FAIL + 1)); }
# check DESC CMD...: passes when CMD succeeds.
check() { local d=$1; shift; if "$@"; then ok "$d"; else nok "$d"; fi; }

# sl ARGS...: runs sluice; sets RC; stdout in $W/out, stderr in $W/err.
sl() { "$SLUICE" "$@" >"$W/out" 2>"$W/err"; RC=$?; }
errtext() { head -c 400 "$W/err" | tr '\n' '|'; }
# True when stderr is exactly one line starting with "sluice: ".
one_sluice_line() {
  [ "$(wc -l <"$W/err")" -eq 1 ] && [ "$(head -c 8 "$W/err")" = "sluice: " ]
}
# expect_err DESC WANT_RC: the last sl exited WANT_RC with one "sluice:" line.
expect_err() {
  if [ "$RC" -eq "$2" ] && one_sluice_line; then
    ok "$1 (exit $RC)"
  else
    nok "$1: exit $RC (want $2), stderr: $(errtext)"
  fi
}
# expect_ok DESC: the last sl exited 0.
expect_ok() {
  if [ "$RC" -eq 0 ]; then ok "$1"; else nok "$1: exit $RC, stderr: $(errtext)"; fi
}
# pyj EXPR [FILE]: evaluates EXPR with d = the JSON in FILE (default $W/out).
pyj() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' \
    "${2:-$W/out}" "$1" 2>/dev/null
}
# make_tree DIR <<'EOF' ... EOF: makes DIR and runs the Python on stdin with
# os, sys and w(rel, data, mode=0o644) defined, w writing DIR/rel.
make_tree() {
  mkdir -p "$1"
  python3 -c "$(cat <<'PY'
import os, sys
root = sys.argv[1]
def w(rel, data, mode=0o644):
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, 'wb') as f:
        f.write(data)
    os.chmod(p, mode)
PY
)
$(cat)" "$1"
}
