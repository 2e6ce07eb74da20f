#!/usr/bin/env bash
# cli_errors_test.sh: every command's errors in the one form doc/cli.md
# gives: exactly one line on stderr, "sluice: <what failed on which
# object>: <why>", no status code name in it, and the exit code the rule
# says (2: the command line alone is wrong; 1: what stores, files and
# checkpoints hold). For each command: a mistyped flag (named with the
# nearest one), a bad flag value (shown with one that would do), a store
# that does not exist, and an operational failure.
#
#   tests/cli_errors_test.sh path/to/sluice
#
# Prints "ok"/"not ok" lines and "N passed, M failed"; exits 0 if all passed.
TESTS_DIR=$(cd "$(dirname "$0")" && pwd)
set -u
if [ $# -ne 1 ]; then
  echo "usage: $0 path/to/sluice" >&2
  exit 2
fi
SLUICE=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
W=$(mktemp -d /tmp/sluice-cli-errors-XXXXXX)
trap 'rm -rf "$W"' EXIT
. "$TESTS_DIR/lib.sh"

S=$W/store
NOSTORE=$W/no/such/store
mkdir -p "$W/state" && echo hello >"$W/state/a"
"$SLUICE" save --store "$S" --name m --step 1 --from "$W/state" >/dev/null || { echo "not ok - setup save"; exit 1; }
"$SLUICE" save --tier "$S" --tier "$W/t1" --name m --step 2 --from "$W/state" >/dev/null || { echo "not ok - setup save 2"; exit 1; }

# expect DESC WANT_RC [GREP]: the last sl exited WANT_RC with one "sluice: "
# line naming no status code, containing GREP if given.
expect() {
  local code_named=""
  grep -qE '^sluice: (NotFound|Corruption|InvalidArgument|IOError|Unavailable|NotSupported|AlreadyExists):' "$W/err" &&
    code_named=yes
  if [ "$RC" -eq "$2" ] && one_sluice_line && [ -z "$code_named" ] && { [ $# -lt 3 ] || grep -qF -- "$3" "$W/err"; }; then
    ok "$1 (exit $RC)"
  else
    nok "$1: exit $RC (want $2${3:+, text '$3'}), stderr: $(errtext)"
  fi
}

# ------------------------------------------------------------ mistyped flags
for cmd in save restore ls status verify scrub rebuild rm gc drain export import bench; do
  sl "$cmd" --stroe "$S"
  expect "$cmd --stroe: names --store" 2 "did you mean --store?"
done
sl plan --profil p.json
expect "plan --profil: names --profile" 2 "did you mean --profile?"
sl completion bash --jsn
expect "completion --jsn: unknown flag" 2 "unknown flag --jsn"

# ------------------------------------------------------------ bad values, each with an example
sl save --store "$S" --name m --step abc --from "$W/state"
expect "save --step abc" 2 "e.g. --step 1000"
sl restore --store "$S" --name m --step abc --to "$W/r"
expect "restore --step abc names latest and latest-good" 2 "latest or latest-good"
sl verify --store "$S" --name m --step x1
expect "verify --step x1" 2 "latest or latest-good"
sl ls --store "$S" --name m --step x
expect "ls --step x" 2 "e.g. --step 1000"
sl rm --store "$S" --name m --step -3
expect "rm --step -3" 2 "e.g. --step 1000"
sl save --store "$S" --name m --step 3 --synthetic 1MiB --rate-limit 200MiB
expect "save --rate-limit without TIER=" 2 "e.g. --rate-limit 1=200MiB"
sl save --store "$S" --name m --step 3 --synthetic lots
expect "save --synthetic lots" 2 "512MiB"
sl scrub --store "$S" --rate-limit 1=200MiB
expect "scrub --rate-limit 1=200MiB" 2 "e.g. --rate-limit 200MiB"
sl rebuild --tier "$S" --tier "$W/t1" --rate-limit fast
expect "rebuild --rate-limit fast" 2 "e.g. --rate-limit 200MiB"
sl gc --store "$S" --min-age soon
expect "gc --min-age soon" 2 "30s"
sl status --store "$S" --interval 0
expect "status --interval 0" 2 "e.g. 2s"
sl drain --tier "$S" --tier "$W/t1" --interval forever --watch
expect "drain --interval forever" 2 "30s"
sl export --store "$S" --name m --format safetensors --to "$W/x" --max-shard-size huge
expect "export --max-shard-size huge" 2 "e.g. 2GiB"
sl import --store "$S" --name i --step abc --from "$W/state/a"
expect "import --step abc" 2 "e.g. --step 1000"
sl bench --store "$W/b" --size big
expect "bench --size big" 2 "512MiB"
sl save --store "file://tmp/x" --name m --step 1 --from "$W/state"
expect "a file:// URI with a host part" 2 "file:///tmp/x"

# ------------------------------------------------------------ a store that is not there
sl restore --store "$NOSTORE" --name m --to "$W/out-restore"
expect "restore from a missing store" 1 "No such file or directory"
sl verify --store "$NOSTORE" --name m
expect "verify in a missing store" 1 "No such file or directory"
sl export --store "$NOSTORE" --name m --format safetensors --to "$W/out-export"
expect "export from a missing store" 1 "No such file or directory"
for cmd in ls status gc scrub; do
  sl "$cmd" --store "$NOSTORE"
  expect "$cmd of a missing store" 1 "No such file or directory"
done
sl rm --store "$NOSTORE" --name m --step 1
expect "rm in a missing store" 1 "No such file or directory"
sl drain --tier "$NOSTORE" --tier "$W/t1"
expect "drain from a missing store" 1
check "...and none of them created it" [ ! -e "$W/no" ]
# (rebuild makes the tier it refills, tier 0, as its purpose is; its sources must exist.)
sl rebuild --tier "$W/lost0" --tier "$W/no/such/source"
expect "rebuild from a missing source" 1

# ------------------------------------------------------------ operational failures
sl save --store "$S" --name m --step 1 --from "$W/state"
expect "save of a committed step" 1 "m@1"
sl save --store "$S" --name m --step 9 --from "$W/nosuchdir"
expect "save --from a missing directory" 1 "nosuchdir"
sl restore --store "$S" --name nosuch --to "$W/r2"
expect "restore of a name the store lacks" 1 "nosuch"
sl verify --store "$S" --name m --step 77
expect "verify of a step the store lacks" 1 "m@77"
sl ls --store "$S" --name m --step 77
expect "ls --step of a step no tier holds" 1 "m@77"
sl rm --store "$S" --name m --step 77
expect "rm of a step the store lacks" 1 "m@77"
sl export --store "$S" --name m --step 1 --format safetensors --to "$W/exp"
expect "export of files that are not tensors" 1
sl import --store "$S" --name i --step 1 --from "$W/state/a"
expect "import of a file that is not safetensors" 1
sl plan --profile "$W/nope.json" --job "$W/nope.json"
expect "plan with a missing profile" 1 "nope.json"
sl restore --store "$S" --name m --step 1 --rank 5 --to "$W/r3"
expect "restore --rank past the checkpoint's ranks" 1 "m@1 has 1 rank(s)"
echo garbage >"$W/store-file"
sl gc --store "$W/store-file"
expect "gc of a path that is a file" 1
sl bench --store /proc/sluice-cannot --size 1MiB
expect "bench into a store that cannot be made" 1

echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
