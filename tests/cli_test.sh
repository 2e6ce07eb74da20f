#!/usr/bin/env bash
# cli_test.sh: behaviour a user notices through the sluice command line.
#
#   tests/cli_test.sh path/to/sluice
#
# Runs against a real filesystem in a fresh temporary directory (removed on
# exit). Prints one "ok - ..." / "not ok - ..." line per check, skips as
# "ok - ... # SKIP reason", and last "N passed, M failed". Exits 1 if any
# check failed, 2 on bad usage.
TESTS_DIR=$(cd "$(dirname "$0")" && pwd)
set -u

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 path/to/sluice" >&2
  exit 2
fi
SLUICE=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
command -v python3 >/dev/null || { echo "cli_test.sh: python3 is required" >&2; exit 2; }

W=$(mktemp -d /tmp/sluice-cli-test.XXXXXX) || exit 2
trap 'rm -rf "$W"' EXIT
cd "$W" || exit 2
S=$W/store

. "$TESTS_DIR/lib.sh"
SKIP=0
skip() { echo "ok - $1 # SKIP $2"; SKIP=$((SKIP + 1)); }
stepdir() { printf '%s/ckpt/%s/%020d' "$S" "$1" "$2"; }
count_files() { find "$1" -type f -name "$2" 2>/dev/null | wc -l; }
# modes DIR: "relative-path<TAB>octal mode" of every regular file, sorted.
modes() { (cd "$1" && find . -type f -printf '%P\t%m\n' | LC_ALL=C sort); }
# The same with setuid/setgid/sticky cleared: restore drops them on purpose.
plain_modes() { (cd "$1" && find . -type f -printf '%P\t%m\n' | LC_ALL=C sort |
  awk -F'\t' '{ m = $2; if (length(m) > 3) m = substr(m, length(m) - 2); print $1 "\t" m }'); }
# flip FILE OFFSET: inverts one byte in place.
flip() {
  python3 - "$1" "$2" <<'EOF'
import sys
path, off = sys.argv[1], int(sys.argv[2])
with open(path, 'r+b') as f:
    f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0xFF]))
EOF
}

T0=$(date +%s)

# ---------------------------------------------------------------- round trip
make_tree "$W/tree" <<'EOF'
w('empty', b'')
w('sub/also-empty', b'', 0o600)
deep = '/'.join('d%02d' % i for i in range(1, 31))     # 30 levels
w(deep + '/leaf.bin', os.urandom(1000), 0o755)
w(deep + '/empty', b'')
w('ünïcødé/日本語のファイル.bin', os.urandom(5000), 0o600)
w('emoji 😀 and space.txt', b'hello\n', 0o755)
w('-leading-dash', b'dash\n')
w('Ελληνικά/кириллица/עברית.dat', os.urandom(70000), 0o640)
w('random-3MiB.bin', os.urandom(3 * 1024 * 1024 + 17), 0o640)
w('multi-chunk.bin', os.urandom(64 * 1024 * 5 + 123), 0o444)
w('exact-chunk.bin', os.urandom(64 * 1024), 0o700)
w('chunk-plus-one.bin', os.urandom(64 * 1024 + 1))
w('one-byte', b'x', 0o4755)
w('zeros-1MiB', bytes(1 << 20), 0o664)
EOF
NFILES=$(find "$W/tree" -type f | wc -l)
TREE_BYTES=$(find "$W/tree" -type f -printf '%s\n' | awk '{s+=$1} END {print s}')

sl save --store "$S" --name tree --step 1 --from "$W/tree" --chunk-size 64KiB --json
expect_ok "save --from a tree (empty files, 30-level tree, UTF-8 names, 3 MiB random, multi-chunk) with --chunk-size 64KiB"
check "save --json reports bytes=$TREE_BYTES items=$NFILES committed=true" \
  [ "$(pyj '(d["bytes"], d["items"], d["committed"])')" = "($TREE_BYTES, $NFILES, True)" ]
check "save --json reports more chunks than files (3 MiB / 64 KiB)" \
  [ "$(pyj 'd["chunks"] > 60')" = "True" ]

sl restore --store "$S" --name tree --step 1 --to "$W/r1" --json
expect_ok "restore of the tree into a new directory"
check "restored tree is bit-exact (diff -r)" diff -r "$W/tree" "$W/r1"
check "restored tree preserves every file's rwx permission bits (incl. 0444)" \
  [ "$(plain_modes "$W/tree")" = "$(modes "$W/r1")" ]
check "restore drops the setuid bit of a saved 04755 file (restores 0755)" \
  [ "$(stat -c %a "$W/r1/one-byte")" = 755 ]
check "restore --json reports items=$NFILES bytes=$TREE_BYTES" \
  [ "$(pyj '(d["items"], d["bytes"])')" = "($NFILES, $TREE_BYTES)" ]

sl save --store "file://$S" --name tree --step 2 --from "$W/tree"
expect_ok "save with a file:// store URI and the default chunk size"
sl restore --store "file://$S" --name tree --step 2 --to "$W/r2"
check "default-chunk-size round trip is bit-exact" bash -c "[ $RC -eq 0 ] && diff -r '$W/tree' '$W/r2'"
check "default-chunk-size round trip keeps the rwx modes" [ "$(plain_modes "$W/tree")" = "$(modes "$W/r2")" ]
sl verify --store "$S" --name tree --step 1 --json
check "verify of the tree checkpoint: exit 0, ok=true, no bad chunks" \
  [ "$RC" -eq 0 -a "$(pyj '(d["ok"], len(d["bad_chunks"]))')" = "(True, 0)" ]

sl save --store "$S" --name tree --step 1 --synthetic 1K
expect_err "save of an already committed name@step is refused" 1

# ------------------------------------------- refusals before any commit
refusal() {  # refusal DESC NAME: $W/bad-NAME holds a good file plus one bad entry
  sl save --store "$S" --name "$2" --step 1 --from "$W/bad-$2"
  expect_err "save refuses a tree with $1" 1
  if grep -q "$3" "$W/err"; then ok "the refusal names the offending entry ($1)"; else nok "refusal of $1 does not name $3: $(errtext)"; fi
  sl ls --store "$S" --all --json --name "$2"
  check "nothing committed or left behind after refusing $1" \
    [ "$RC" -eq 0 -a "$(pyj 'len(d)')" = "0" -a ! -e "$S/ckpt/$2" ]
}
for k in symlink fifo dev sock; do
  mkdir -p "$W/bad-$k/a/b"
  head -c 100000 /dev/urandom >"$W/bad-$k/a/good.bin"
done
ln -s good.bin "$W/bad-symlink/a/b/link"
refusal "a symlink" symlink "a/b/link"
mkfifo "$W/bad-fifo/a/b/fifo"
refusal "a FIFO" fifo "a/b/fifo"
if mknod "$W/bad-dev/a/b/null" c 1 3 2>/dev/null; then
  refusal "a character device" dev "a/b/null"
else
  skip "save refuses a tree with a device node" "mknod not permitted here"
fi
if python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$W/bad-sock/a/b/sock" 2>/dev/null; then
  refusal "a unix socket" sock "a/b/sock"
else
  skip "save refuses a tree with a socket" "cannot bind a unix socket here"
fi
sl save --store "$S" --name nodir --step 1 --from "$W/does-not-exist"
expect_err "save --from a missing directory" 1
sl save --store "$S" --name nodir --step 1 --from "$W/tree/empty"
expect_err "save --from a regular file (not a directory)" 1
: > "$W/a-plain-file"
sl ls --store "$W/a-plain-file"
expect_err "a store that is a regular file is an operational error, not a usage error" 1
sl save --store "$S" --name "$(printf 'run\xc2\x85x')" --step 1 --synthetic 1KiB
expect_err "a name with a C1 control character (U+0085) is refused" 2
sl save --store "$S" --name "$(printf 'run\xffx')" --step 1 --synthetic 1KiB
expect_err "a name that is not valid UTF-8 is refused" 2
check "...saying so" grep -q "not valid UTF-8" "$W/err"

# -------------------------------------------------------------- usage errors
U=$W/usage-store   # must never be created by a usage error
usage() {  # usage DESC ARGS...
  local d=$1; shift
  sl "$@"
  expect_err "usage error: $d" 2
}
LONG=$(printf 'n%.0s' $(seq 256))
usage "name with '/'" save --store "$U" --name a/b --step 1 --synthetic 1K
usage "name '..'" save --store "$U" --name .. --step 1 --synthetic 1K
usage "name '.'" save --store "$U" --name . --step 1 --synthetic 1K
usage "empty name" save --store "$U" --name "" --step 1 --synthetic 1K
usage "name of 256 bytes" save --store "$U" --name "$LONG" --step 1 --synthetic 1K
usage "name with a control character" save --store "$U" --name "$(printf 'a\tb')" --step 1 --synthetic 1K
usage "name containing the reserved '.tmp.'" save --store "$U" --name "x.tmp.y" --step 1 --synthetic 1K
skip "usage error: name with a NUL byte" "a NUL cannot be passed in argv"
for st in -1 1.5 abc "" 99999999999999999999999 18446744073709551616 " 1" 0x10; do
  usage "step '$st'" save --store "$U" --name ok --step "$st" --synthetic 1K
done
usage "unknown flag" save --store "$U" --name ok --step 1 --synthetic 1K --bogus
usage "missing --store" save --name ok --step 1 --synthetic 1K
usage "missing --name" save --store "$U" --step 1 --synthetic 1K
usage "missing --step" save --store "$U" --name ok --synthetic 1K
usage "both --from and --synthetic" save --store "$U" --name ok --step 1 --synthetic 1K --from "$W/tree"
usage "neither --from nor --synthetic" save --store "$U" --name ok --step 1
usage "flag given twice" save --store "$U" --name ok --step 1 --step 2 --synthetic 1K
usage "flag missing its value" save --store "$U" --name ok --synthetic 1K --step
usage "positional argument" save --store "$U" --name ok --step 1 --synthetic 1K extra
usage "--rank not below --world" save --store "$U" --name ok --step 1 --synthetic 1K --world 2 --rank 2
usage "--chunk-size 0" save --store "$U" --name ok --step 1 --synthetic 1K --chunk-size 0
usage "--io-size not a multiple of 4KiB" save --store "$U" --name ok --step 1 --synthetic 1K --io-size 5000
usage "--timeout nonsense" save --store "$U" --name ok --step 1 --synthetic 1K --timeout soon
usage "restore step 'abc'" restore --store "$U" --name ok --step abc --to "$W/never"
usage "restore name with '/'" restore --store "$U" --name a/b --to "$W/never"
usage "restore without --to" restore --store "$U" --name ok
usage "verify name '..'" verify --store "$U" --name ..
usage "ls unknown flag" ls --store "$U" --bogus
usage "rm without --step or --all-steps" rm --store "$U" --name ok
usage "gc --min-age nonsense" gc --store "$U" --min-age forever
usage "unknown command" frobnicate --store "$U"
check "no usage error created the store directory" [ ! -e "$U" ]

for c in save restore ls verify rm gc bench; do
  sl "$c" --help
  if [ "$RC" -eq 0 ] && grep -q "Usage: sluice" "$W/out"; then
    ok "sluice $c --help exits 0 and prints Usage: sluice"
  else
    nok "sluice $c --help: exit $RC, stdout: $(head -c 200 "$W/out" | tr '\n' '|') stderr: $(errtext)"
  fi
done
sl --help
rc_and_grep() { [ "$RC" -eq "$1" ] && grep -q "$2" "$W/out"; }
check "sluice --help exits 0 and prints Usage: sluice" rc_and_grep 0 "Usage: sluice"
"$SLUICE" >/dev/null 2>&1; RC=$?
check "sluice with no arguments exits 2" [ "$RC" -eq 2 ]

# ---------------------------------------------------------- bash completion
sl completion bash
expect_ok "completion bash"
cp "$W/out" "$W/completion.bash"
check "the completion script is valid bash" bash -n "$W/completion.bash"
# complete WORDS...: what _sluice offers for the last word.
complete_words() {
  (cd "$W" && bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _sluice; echo "${COMPREPLY[*]}"' \
    _ "$W/completion.bash" "$@")
}
check "completion offers commands (sa -> save)" [ "$(complete_words sluice sa)" = save ]
check "completion offers a command's flags (bench --mo -> --mode)" [ "$(complete_words sluice bench --mo)" = --mode ]
check "completion offers a flag's choices (--mode -> threads processes)" \
  [ "$(complete_words sluice bench --mode '')" = "threads processes" ]
mkdir -p "$W/compdir-only"
check "completion offers file names for a store (--store compdir -> compdir-only)" \
  [ "$(complete_words sluice save --store compdir)" = compdir-only ]
check "completion offers nothing for a number (--step)" [ -z "$(complete_words sluice save --step '')" ]
# Every flag each command's --help lists is offered, and nothing else.
for c in save restore ls status verify scrub rebuild rm gc drain bench export import; do
  help_flags=$("$SLUICE" "$c" --help | grep -oE '^  --[a-z0-9-]+' | tr -d ' ' | sort | tr '\n' ' ')
  comp_flags=$(complete_words sluice "$c" -- | tr ' ' '\n' | sort | tr '\n' ' ')
  check "completion of '$c' offers exactly its --help flags" [ "$help_flags" = "$comp_flags" ]
done
sl completion fish
expect_err "completion of another shell is a usage error" 2
sl completion
expect_err "completion without a shell is a usage error" 2

# --------------------------------------------------------------------- sizes
i=0
for sz in 3MiB 3145728 3M 3072K 3072KiB; do
  i=$((i + 1))
  sl save --store "$S" --name sizes --step $i --synthetic "$sz" --json
  check "--synthetic $sz saves 3145728 bytes" [ "$RC" -eq 0 -a "$(pyj 'd["bytes"]')" = "3145728" ]
done
sl save --store "$S" --name sizes --step 10 --synthetic 1.5M --json
check "--synthetic 1.5M saves 1572864 bytes" [ "$RC" -eq 0 -a "$(pyj 'd["bytes"]')" = "1572864" ]
sl save --store "$S" --name sizes --step 11 --synthetic 0 --json
check "--synthetic 0 saves an empty checkpoint that verifies" \
  bash -c "[ $RC -eq 0 ] && '$SLUICE' verify --store '$S' --name sizes --step 11 >/dev/null 2>&1"
for sz in 12XB 1.5 .5M -1M 1MiBx ""; do
  sl save --store "$S" --name sizes --step 20 --synthetic "$sz"
  expect_err "--synthetic '$sz' is a usage error" 2
done
sl save --store "$S" --name maxstep --step 18446744073709551615 --synthetic 4K
expect_ok "save at the largest step 18446744073709551615"
sl ls --store "$S" --name maxstep --json
check "ls shows step 18446744073709551615" [ "$(pyj 'd[0]["step"]')" = "18446744073709551615" ]

# ------------------------------------------------------------------- restore
mkdir -p "$W/full" && echo keep >"$W/full/existing"
sl restore --store "$S" --name tree --step 1 --to "$W/full"
expect_err "restore into a non-empty --to without --force is refused" 1
check "the refused restore left the directory alone" [ "$(ls -A "$W/full")" = "existing" ]
sl restore --store "$S" --name tree --step 1 --to "$W/full" --force
check "restore --force into a non-empty directory works and is bit-exact" \
  bash -c "[ $RC -eq 0 ] && rm '$W/full/existing' && diff -r '$W/tree' '$W/full'"
mkdir -p "$W/over/sub"
echo "not empty" >"$W/over/empty"
echo "not empty either" >"$W/over/sub/also-empty"
head -c 2000000 /dev/urandom >"$W/over/one-byte"
echo short >"$W/over/random-3MiB.bin"
sl restore --store "$S" --name tree --step 1 --to "$W/over" --force
check "restore --force over same-named files (longer, shorter, non-empty where the item is empty) is bit-exact" \
  bash -c "[ $RC -eq 0 ] && diff -r '$W/tree' '$W/over'"
# A sparse file keeps its holes: all-zero 4 KiB blocks are not written.
mkdir -p "$W/sparse"
truncate -s 64M "$W/sparse/holes.bin"
printf 'head' | dd of="$W/sparse/holes.bin" conv=notrunc status=none
printf 'middle' | dd of="$W/sparse/holes.bin" bs=1 seek=$((33 * 1048576 + 7)) conv=notrunc status=none
head -c 100000 /dev/urandom >"$W/sparse/dense.bin"
sl save --store "$S" --name sparse --step 1 --from "$W/sparse"
expect_ok "save of a sparse 64 MiB file"
sl restore --store "$S" --name sparse --step 1 --to "$W/sparse-out" --json
expect_ok "restore of a sparse 64 MiB file"
check "the restored sparse file is bit-exact" cmp "$W/sparse/holes.bin" "$W/sparse-out/holes.bin"
# Two 4 MiB chunks hold data (and begin with it: written whole); the other 14 are holes.
check "the restored sparse file keeps its holes (at most 8 MiB allocated of 64 MiB)" \
  [ "$(stat -c %b "$W/sparse-out/holes.bin")" -le 16384 ]
check "restore --json counts the holes (hole_bytes >= 56 MiB)" \
  [ "$(pyj 'd["hole_bytes"]')" -ge 58720256 ]
check "a dense file next to it is restored bit-exact" cmp "$W/sparse/dense.bin" "$W/sparse-out/dense.bin"
sl restore --store "$S" --name no-such-name --to "$W/never1"
expect_err "restore of a missing name" 1
sl restore --store "$S" --name tree --step 77 --to "$W/never2"
expect_err "restore of a missing step" 1
sl restore --store "$W/no-such-store" --name tree --to "$W/never3"
expect_err "restore from a store that does not exist" 1
check "a failed open does not create the store" [ ! -e "$W/no-such-store" ]

for st in 1 5 3; do
  "$SLUICE" save --store "$S" --name lat --step $st --synthetic "${st}MiB" >/dev/null 2>&1
done
"$SLUICE" save --store "$S" --name lat --step 9 --synthetic 1MiB --world 2 --rank 0 --timeout 1s >/dev/null 2>&1
sl restore --store "$S" --name lat --step latest --to "$W/lat" --json
check "restore --step latest picks step 5, the highest committed (not incomplete step 9)" \
  [ "$RC" -eq 0 -a "$(pyj '(d["step"], d["bytes"])')" = "(5, 5242880)" ]
sl restore --store "$S" --name lat --to "$W/lat2" --json
check "restore without --step means latest" [ "$RC" -eq 0 -a "$(pyj 'd["step"]')" = "5" ]
sl verify --store "$S" --name lat --step latest --json
check "verify --step latest checks step 5" [ "$RC" -eq 0 -a "$(pyj 'd["step"]')" = "5" ]

# ----------------------------------------------- ls, incomplete checkpoints, gc
sl ls --store "$S" --json
check "ls --json is an array of objects with name, step, bytes, ranks, items, complete" \
  [ "$RC" -eq 0 -a "$(pyj 'isinstance(d, list) and len(d) > 0 and all(isinstance(c, dict) and {"name","step","bytes","ranks","items","complete"} <= set(c) for c in d)')" = "True" ]
check "ls --json lists only complete checkpoints" [ "$(pyj 'all(c["complete"] is True for c in d)')" = "True" ]
check "ls --json shows the tree checkpoint's bytes, items and ranks" \
  [ "$(pyj '[(c["bytes"], c["items"], c["ranks"]) for c in d if c["name"] == "tree" and c["step"] == 1]')" = "[($TREE_BYTES, $NFILES, 1)]" ]
sl ls --store "$S"
check "plain ls exits 0 and prints a table" rc_and_grep 0 "^NAME .*STATE"

t=$(date +%s%N)
sl save --store "$S" --name inc --step 1 --synthetic 2MiB --world 2 --rank 0 --timeout 2s
el=$(( ($(date +%s%N) - t) / 1000000 ))
expect_err "a world-2 save whose rank 1 never comes fails after --timeout" 1
if grep -Eq 'rank[^0-9]*1([^0-9]|$)' "$W/err"; then ok "the timeout message names the missing rank 1"; else nok "timeout message does not name rank 1: $(errtext)"; fi
check "it waited about the 2 s timeout (${el} ms)" [ "$el" -ge 1800 -a "$el" -lt 15000 ]
sl ls --store "$S" --json --name inc
check "ls without --all does not show the incomplete checkpoint" [ "$RC" -eq 0 -a "$(pyj 'len(d)')" = "0" ]
sl ls --store "$S" --all --json --name inc
check "ls --all shows it with complete=false and a problem" \
  [ "$RC" -eq 0 -a "$(pyj '[(c["step"], c["complete"], bool(c.get("problem"))) for c in d]')" = "[(1, False, True)]" ]
sl ls --store "$S" --all
check "plain ls --all marks it INCOMPLETE" grep -q "INCOMPLETE" "$W/out"
sl verify --store "$S" --name inc --step 1
expect_err "verify of an incomplete checkpoint" 1
sl restore --store "$S" --name inc --step 1 --to "$W/inc"
expect_err "restore of an incomplete checkpoint" 1
before_dat=$(count_files "$S/ckpt/inc" '*.dat')
sl gc --store "$S" --min-age 0s --json
check "gc --json exits 0 and removed objects" [ "$RC" -eq 0 -a "$(pyj 'd["objects_removed"] > 0')" = "True" ]
sl ls --store "$S" --all --json --name inc
check "after gc, ls --all no longer shows the incomplete checkpoint" [ "$RC" -eq 0 -a "$(pyj 'len(d)')" = "0" ]
check "after gc, no data files of it remain (had $before_dat)" \
  [ "$before_dat" -ge 1 -a "$(find "$S/ckpt/inc" -type f 2>/dev/null | wc -l)" -eq 0 ]
sl verify --store "$S" --name tree --step 1
check "gc left committed checkpoints intact (tree@1 verifies)" [ "$RC" -eq 0 ]
sl ls --store "$S" --all --json
check "after gc, ls --all shows only complete checkpoints" [ "$(pyj 'all(c["complete"] for c in d)')" = "True" ]

# ---------------------------------------------------------------- multi-rank
pids=()
for r in 0 1 2; do
  "$SLUICE" save --store "$S" --name mr --step 7 --synthetic 4MiB --world 3 --rank $r \
    --timeout 60s --chunk-size 256KiB >"$W/mr$r.out" 2>"$W/mr$r.err" &
  pids+=($!)
done
mrc=""
for p in "${pids[@]}"; do wait "$p"; mrc="$mrc $?"; done
check "three ranks saving together all exit 0 (exit codes:$mrc)" [ "$mrc" = " 0 0 0" ]
sl ls --store "$S" --json --name mr
check "ls shows mr@7 with ranks=3, items=24, bytes=3*4MiB" \
  [ "$(pyj '[(c["ranks"], c["items"], c["bytes"], c["complete"]) for c in d]')" = "[(3, 24, 12582912, True)]" ]
sl restore --store "$S" --name mr --step 7 --rank 1 --to "$W/mr1"
check "restore --rank 1 restores exactly rank 1's 8 items" \
  [ "$RC" -eq 0 -a "$(find "$W/mr1" -type f | wc -l)" -eq 8 -a "$(find "$W/mr1" -type f -path '*rank1*' | wc -l)" -eq 8 ]
sl restore --store "$S" --name mr --step 7 --to "$W/mrall"
check "restore of all ranks gives 24 items, 8 per rank" \
  [ "$RC" -eq 0 -a "$(find "$W/mrall" -type f | wc -l)" -eq 24 -a "$(find "$W/mrall" -type f -path '*rank2*' | wc -l)" -eq 8 ]
check "rank 1's files restored alone equal those restored with all ranks" diff -r "$W/mr1/synthetic/rank1" "$W/mrall/synthetic/rank1"
sl restore --store "$S" --name mr --step 7 --rank 3 --to "$W/mr3"
expect_err "restore --rank 3 of a 3-rank checkpoint (operational: the checkpoint has fewer ranks)" 1
sl verify --store "$S" --name mr --step 7 --json
check "verify of the 3-rank checkpoint is OK" [ "$RC" -eq 0 -a "$(pyj '(d["ok"], d["items"])')" = "(True, 24)" ]

# ------------------------------------------- two writers of one name@step
race_ok=0
for i in 1 2 3 4 5; do
  "$SLUICE" save --store "$S" --name race --step $i --synthetic 64MiB --full >"$W/ra.out" 2>"$W/ra.err" &
  pa=$!
  "$SLUICE" save --store "$S" --name race --step $i --synthetic 64MiB --full >"$W/rb.out" 2>"$W/rb.err" &
  pb=$!
  wait $pa; ra=$?
  wait $pb; rb=$?
  if [ "$ra" -eq 0 -a "$rb" -eq 1 ]; then loser=rb; elif [ "$ra" -eq 1 -a "$rb" -eq 0 ]; then loser=ra; else loser=""; fi
  if [ -n "$loser" ] && [ "$(wc -l <"$W/$loser.err")" -eq 1 ] && grep -q '^sluice: ' "$W/$loser.err"; then
    race_ok=$((race_ok + 1))
  else
    nok "race $i: exit codes $ra and $rb (want one 0, one 1 with a sluice: line): $(cat "$W/ra.err" "$W/rb.err" | head -c 300)"
  fi
done
check "two concurrent saves of one name@step: exactly one wins, 5 of 5 trials" [ "$race_ok" -eq 5 ]
sl ls --store "$S" --json --name race
check "ls shows exactly one committed checkpoint per raced step" \
  [ "$(pyj 'sorted((c["step"], c["complete"], c["bytes"]) for c in d)')" = "[(1, True, 67108864), (2, True, 67108864), (3, True, 67108864), (4, True, 67108864), (5, True, 67108864)]" ]
vbad=0
for i in 1 2 3 4 5; do "$SLUICE" verify --store "$S" --name race --step $i >/dev/null 2>&1 || vbad=$((vbad + 1)); done
check "every raced step verifies clean" [ "$vbad" -eq 0 ]
"$SLUICE" gc --store "$S" --min-age 0s >/dev/null 2>&1
orph=""
for i in 1 2 3 4 5; do
  d=$(stepdir race $i)
  nd=$(count_files "$d" '*.dat'); nm=$(count_files "$d" '*.man')
  sz=$(find "$d/data" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')
  [ "$nd" -eq 1 -a "$nm" -eq 1 -a "$sz" -eq 67108864 ] || orph="$orph step$i:${nd}dat/${nm}man/${sz}B"
done
check "after gc each raced step holds one data object of 64 MiB and one manifest$orph" [ -z "$orph" ]
check "after gc no *.tmp.* files remain in the store" [ "$(find "$S" -name '*.tmp.*' | wc -l)" -eq 0 ]
vbad=0
for i in 1 2 3 4 5; do "$SLUICE" verify --store "$S" --name race --step $i >/dev/null 2>&1 || vbad=$((vbad + 1)); done
check "every raced step still verifies after gc" [ "$vbad" -eq 0 ]

# --------------------------------------------------------------- flipped byte
mkdir -p "$W/ftree/sub"
head -c 200000 /dev/urandom >"$W/ftree/a.bin"
head -c 300000 /dev/urandom >"$W/ftree/b.bin"
head -c 250001 /dev/urandom >"$W/ftree/sub/c.bin"
# Items are stored in key order, back to back, in one data object.
python3 - "$W/ftree" >"$W/flayout" <<'EOF'
import os, sys
root = sys.argv[1]
keys = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
pos = 0
for k in keys:
    n = os.path.getsize(os.path.join(root, k))
    print(k, pos, n)
    pos += n
EOF
FTOTAL=$(awk '{s+=$3} END {print s}' "$W/flayout")
CH=65536
for where in middle first last; do
  name=flip-$where
  sl save --store "$S" --name "$name" --step 1 --from "$W/ftree" --chunk-size 64KiB
  dats=$(find "$(stepdir "$name" 1)/data" -name '*.dat' 2>/dev/null)
  if [ "$RC" -ne 0 ] || [ "$(echo "$dats" | wc -l)" -ne 1 ] || [ "$(stat -c %s "$dats")" -ne "$FTOTAL" ]; then
    nok "flip ($where): expected one data object of $FTOTAL bytes after save (exit $RC): $dats"
    continue
  fi
  case $where in middle) pos=$((FTOTAL / 2 + 12345)) ;; first) pos=0 ;; last) pos=$((FTOTAL - 1)) ;; esac
  read -r ekey echunk <<<"$(awk -v p=$pos -v ch=$CH '$2 <= p && p < $2 + $3 {print $1, int((p - $2) / ch)}' "$W/flayout")"
  flip "$dats" "$pos"
  sl verify --store "$S" --name "$name" --step 1 --json
  cp "$W/out" "$W/vjson"
  if [ "$RC" -eq 1 ] && [ "$(pyj '(d["ok"], len(d["bad_chunks"]))')" = "(False, 1)" ]; then
    ok "flipped $where byte (offset $pos): verify exits 1 and reports exactly one bad chunk"
  else
    nok "flipped $where byte (offset $pos): verify exit $RC, report: $(head -c 400 "$W/out")"
  fi
  check "flipped $where byte: the bad chunk names item '$ekey' chunk $echunk, the data object and an offset covering $pos" \
    [ "$(pyj "[(b['item'], b['chunk'], b['object'].endswith('$(basename "$dats")'), b['offset'] <= $pos < b['offset'] + b['length']) for b in d['bad_chunks']]" "$W/vjson")" = "[('$ekey', $echunk, True, True)]" ]
  sl verify --store "$S" --name "$name" --step 1
  if [ "$RC" -eq 1 ] && [ "$(grep -c '^BAD' "$W/out")" -eq 1 ] && one_sluice_line; then
    ok "flipped $where byte: plain verify prints one BAD line and exits 1"
  else
    nok "flipped $where byte: plain verify exit $RC, stdout: $(head -c 300 "$W/out" | tr '\n' '|') stderr: $(errtext)"
  fi
  sl restore --store "$S" --name "$name" --step 1 --to "$W/flip-$where"
  if [ "$RC" -eq 1 ] && one_sluice_line && grep -qF "$ekey" "$W/err" && grep -q "chunk $echunk" "$W/err"; then
    ok "flipped $where byte: restore exits 1 naming item $ekey and chunk $echunk"
  else
    nok "flipped $where byte: restore exit $RC, stderr: $(errtext)"
  fi
done
sl verify --store "$S" --name tree --step 1
check "the damaged checkpoints did not affect another (tree@1 verifies)" [ "$RC" -eq 0 ]

# ------------------------------------- damaged manifests and commit records
damage() {  # damage FILE MODE
  local f=$1 n
  n=$(stat -c %s "$f")
  case $2 in
    half) truncate -s $((n / 2)) "$f" ;;
    zero) truncate -s 0 "$f" ;;
    random) head -c "$n" /dev/urandom >"$f" ;;
    flipbyte) flip "$f" $((n / 2)) ;;
    huge) truncate -s 2G "$f" ;;   # sparse: takes no space
    minus1) truncate -s $((n - 1)) "$f" ;;
  esac
}
for target in manifest commit; do
  modes_list="half zero random flipbyte minus1"
  [ $target = commit ] && modes_list="$modes_list huge"
  for m in $modes_list; do
    name=dmg-$target-$m
    "$SLUICE" save --store "$S" --name "$name" --step 1 --synthetic 1MiB --chunk-size 64KiB >/dev/null 2>&1
    "$SLUICE" save --store "$S" --name "$name" --step 2 --synthetic 1MiB --chunk-size 64KiB >/dev/null 2>&1
    d=$(stepdir "$name" 2)
    if [ $target = commit ]; then f=$d/COMMIT; else f=$(find "$d/manifest" -name '*.man' | head -n1); fi
    if [ ! -f "$f" ]; then nok "$target $m: no $target file found in $d"; continue; fi
    damage "$f" "$m"
    sl verify --store "$S" --name "$name" --step 2
    expect_err "$target $m: verify fails cleanly" 1
    sl restore --store "$S" --name "$name" --step 2 --to "$W/$name"
    expect_err "$target $m: restore fails cleanly" 1
    sl ls --store "$S" --all --json --name "$name"
    check "$target $m: ls --all shows step 2 incomplete with a problem" \
      [ "$RC" -eq 0 -a "$(pyj '[(c["step"], c["complete"], bool(c.get("problem"))) for c in d if c["step"] == 2]')" = "[(2, False, True)]" ]
    sl ls --store "$S" --json --name "$name"
    check "$target $m: plain ls shows step 2 as damaged, step 1 intact" \
      [ "$RC" -eq 0 -a "$(pyj '[(c["step"], c["complete"], c.get("damaged", False)) for c in d]')" = "[(1, True, False), (2, False, True)]" ]
    sl ls --store "$S" --name "$name"
    check "$target $m: the ls table says DAMAGED" grep -q "DAMAGED" "$W/out"
    sl restore --store "$S" --name "$name" --to "$W/$name-latest" --json
    expect_err "$target $m: restore of latest fails, it does not quietly use step 1" 1
    check "$target $m: ...naming step 2 and --step latest-good" grep -q "@2.*damaged.*latest-good" "$W/err"
    sl verify --store "$S" --name "$name"
    check "$target $m: verify of latest (a health check) fails" [ "$RC" -eq 1 ]
    sl restore --store "$S" --name "$name" --step latest-good --to "$W/$name-good" --json
    check "$target $m: restore --step latest-good uses intact step 1" [ "$RC" -eq 0 -a "$(pyj 'd["step"]')" = "1" ]
    check "$target $m: ...and says so on stderr" grep -q "latest-good: using .*@1" "$W/err"
    nfiles=$(find "$d" -type f | wc -l)
    "$SLUICE" gc --store "$S" --min-age 0s >/dev/null 2>&1
    check "$target $m: gc leaves the damaged step's $nfiles files untouched" [ "$(find "$d" -type f | wc -l)" -eq "$nfiles" ]
    sl verify --store "$S" --name "$name" --step 1
    check "$target $m: step 1 of the same name still verifies" [ "$RC" -eq 0 ]
  done
done
# A commit record that is intact but sits in another checkpoint's directory.
"$SLUICE" save --store "$S" --name moved --step 1 --synthetic 64K >/dev/null 2>&1
"$SLUICE" save --store "$S" --name moved --step 2 --synthetic 64K >/dev/null 2>&1
cp "$(stepdir moved 1)/COMMIT" "$(stepdir moved 2)/COMMIT"
sl verify --store "$S" --name moved --step 2
expect_err "a commit record copied from another step is rejected by verify" 1
sl ls --store "$S" --all --json --name moved
check "ls --all shows the step with a foreign commit record as incomplete" \
  [ "$(pyj '[c["complete"] for c in d if c["step"] == 2]')" = "[False]" ]

# ------------------------------------------------------------------------ rm
sl rm --store "$S" --name lat --step 3
expect_ok "rm --step 3 exits 0"
sl ls --store "$S" --all --json --name lat
check "after rm, ls --all no longer shows lat@3" [ "$(pyj 'sorted(c["step"] for c in d)')" = "[1, 5]" ]
check "after rm, the step directory is gone" [ ! -e "$(stepdir lat 3)" ]
sl verify --store "$S" --name lat --step 5
check "rm left the other steps intact" [ "$RC" -eq 0 ]
sl rm --store "$S" --name lat --step 3
expect_err "rm of a step that is not there" 1
sl rm --store "$S" --name lat --all-steps
sl ls --store "$S" --all --json --name lat
check "rm --all-steps removes every step" [ "$RC" -eq 0 -a "$(pyj 'len(d)')" = "0" -a ! -e "$S/ckpt/lat" ]
sl rm --store "$S" --name dmg-commit-random --step 2
check "rm removes a step with a damaged commit record" [ "$RC" -eq 0 -a ! -e "$(stepdir dmg-commit-random 2)" ]


# --- regressions from the code review ---------------------------------------
sl save --store "$S" --name 'run..2' --step 1 --synthetic 64K
expect_ok "a name containing '..' (but not equal to it) saves"
sl restore --store "$S" --name 'run..2' --to "$W/dotdot"
expect_ok "and restores"
LATIN=$(printf 'caf\xe9')
sl save --store "$S" --name "$LATIN" --step 1 --synthetic 4K
expect_err "a name with a non-UTF-8 byte (Latin-1) is refused: ls could not show it in a form that names it again" 2
sl save --store "$S" --name "$(printf 'caf\xc3\xa9')" --step 1 --synthetic 4K
expect_ok "the same name in UTF-8 saves"
sl ls --store "$S" --json
check "ls --json shows it as text that names it again" [ "$(pyj 'any(c["name"] == "caf\u00e9" for c in d)')" = True ]
sl gc --store "$S" --min-age 999999999999d
expect_err "gc --min-age beyond 3650d is a usage error, not an overflow" 2
sl ls --store "file://$S?qd=0"
expect_err "a malformed store URI is a usage error" 2
sl ls --store "gopher://bucket/x"
expect_err "an unknown store scheme is a usage error" 2
# restore --force into a directory holding a symlink must not write through it
mkdir -p "$W/elsewhere" "$W/trap"
ln -s "$W/elsewhere" "$W/trap/sub"
sl restore --store "$S" --name tree --step 1 --to "$W/trap" --force
expect_err "restore --force refuses to write through a symlinked directory" 1
check "nothing was written through the symlink" [ -z "$(ls -A "$W/elsewhere")" ]
# a restore stopped by a bad chunk leaves no half-written file under a real name
mkdir -p "$W/two"
head -c 1048576 /dev/urandom > "$W/two/a"
head -c 1048576 /dev/urandom > "$W/two/b"
sl save --store "$S" --name halfway --step 1 --from "$W/two" --chunk-size 64KiB
flip "$(ls "$(stepdir halfway 1)"/data/*.dat)" 1600000
sl restore --store "$S" --name halfway --to "$W/halfway"
expect_err "restore with a bad chunk in the second file fails" 1
check "the first, complete file was restored bit-exact" cmp -s "$W/two/a" "$W/halfway/a"
check "the file with the bad chunk was not left half-written" [ ! -e "$W/halfway/b" ]
check "no temporary files are left behind" [ -z "$(find "$W/halfway" -name '.sluice-restore.*')" ]

# A tree of 100,000 files saves and restores under an open-file limit of
# 256: a save holds a file open only while it reads it (a regression: every
# source used to be opened up front, "Too many open files" at ~1,000).
make_tree "$W/many" <<'EOF'
for d in range(100):
    for f in range(1000):
        w("d%03d/f%04d" % (d, f), bytes([d, f % 256]) * (1 + (d * 1000 + f) % 97))
EOF
(ulimit -n 256
 sl save --store "$S" --name many --step 1 --from "$W/many" --json
 echo "$RC" > "$W/many.rc"; cp "$W/out" "$W/many.save.json"; cp "$W/err" "$W/many.err"
 sl restore --store "$S" --name many --to "$W/many-out" --json
 echo "$RC" >> "$W/many.rc"; cp "$W/out" "$W/many.restore.json"; cat "$W/err" >> "$W/many.err")
check "100,000 files save and restore under ulimit -n 256 (exit codes $(tr '\n' ' ' < "$W/many.rc")$(head -c 200 "$W/many.err"))" \
  [ "$(tr -d '\n' < "$W/many.rc")" = "00" ]
check "the save committed all 100,000 items" [ "$(pyj 'd["items"]' "$W/many.save.json")" = "100000" ]
check "the 100,000-file tree restores bit-exact" diff -r "$W/many" "$W/many-out"
echo "# 100,000 files: save $(pyj 'round(d["items"] / d["seconds"])' "$W/many.save.json") files/s, restore $(pyj 'round(d["items"] / d["seconds"])' "$W/many.restore.json") files/s"
rm -rf "$W/many" "$W/many-out"

echo "# cli_test.sh took $(($(date +%s) - T0)) s, $SKIP skipped"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
