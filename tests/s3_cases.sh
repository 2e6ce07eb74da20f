# The cases of tests/s3_test.sh, sourced by it once the gateway is up (it
# defines SLUICE, W, EP, BUCKET, PREFIX, suri, s3, s3_keys, s3_uploads and
# the helpers of tests/lib.sh).

# ---------------------------------------------------------------- round trip
make_tree "$W/tree" <<'EOF'
w('empty', b'')
w('small.txt', b'hello\n', 0o600)
w('deep/er/random-3MiB.bin', os.urandom(3 * 1024 * 1024 + 17))
w('zeros-2MiB', bytes(2 << 20), 0o640)
w('ünïcødé/日本語 file.bin', os.urandom(70000))
EOF
TREE_BYTES=$(find "$W/tree" -type f -printf '%s\n' | awk '{s+=$1} END {print s}')
U=$(suri rt)
sl save --store "$U" --name tree --step 1 --from "$W/tree" --chunk-size 256KiB --object-size 1MiB --json
expect_ok "save --from a tree to s3://"
check "save --json: bytes=$TREE_BYTES, committed, io_path names S3 at the gateway" \
  [ "$(pyj '(d["bytes"], d["committed"], d["io_path"].startswith("S3 at '"$EP"'"))')" = "($TREE_BYTES, True, True)" ]
sl ls --store "$U" --json
check "ls --json lists tree@1 as complete" [ "$(pyj '[(c["name"], c["step"], c["complete"]) for c in d]')" = "[('tree', 1, True)]" ]
sl verify --store "$U" --name tree --step 1
expect_ok "verify of tree@1 on s3://"
sl restore --store "$U" --name tree --step 1 --to "$W/restored"
check "restore from s3:// is bit-exact (exit $RC, $(errtext))" bash -c "[ $RC -eq 0 ] && diff -r '$W/tree' '$W/restored'"
keys=$(s3_keys "$PREFIX/rt/")
check "the objects are keys $PREFIX/rt/ckpt/tree/00000000000000000001/{COMMIT,data/*.dat}" \
  bash -c "grep -q '^$PREFIX/rt/ckpt/tree/00000000000000000001/COMMIT$' <<<'$keys' &&
           grep -q '^$PREFIX/rt/ckpt/tree/00000000000000000001/data/.*\.dat$' <<<'$keys'"
check "no multipart upload is left open after saves" [ "$(s3_uploads "$PREFIX/rt/")" -eq 0 ]

# Requests in a row do not wait on delayed ACKs: RGW's beast frontend
# (Nagle on) holds an answer's body until its headers are ACKed, which Linux
# delays up to 40 ms. A restore of one small file makes ~8 small requests in
# a row: 0.19 s here without the client's immediate ACK (s3_http.cc), 0.03 s
# with it.
mkdir -p "$W/one" && echo small >"$W/one/f"
sl save --store "$U" --name one --step 1 --from "$W/one"
expect_ok "save of one small file"
secs=()
for i in 1 2 3; do
  rm -rf "$W/one-out"
  sl restore --store "$U" --name one --step 1 --to "$W/one-out" --json
  secs+=("$(pyj 'd["seconds"]')")
done
median=$(printf '%s\n' "${secs[@]}" | sort -g | sed -n 2p)
check "a restore of one small file does not wait on delayed ACKs (median of 3: $median s, want < 0.12 s)" \
  python3 -c "import sys; sys.exit(not float(sys.argv[1]) < 0.12)" "$median"

# Large objects: multipart uploads of several 5 MiB parts, few writes in flight.
sl save --store "$(suri big "&part_mib=5&qd=3")" --name big --step 1 --synthetic 64MiB --object-size 40MiB --json
expect_ok "save of 64 MiB in 40 MiB objects with 5 MiB parts and qd 3"
sl verify --store "$(suri big)" --name big --step 1
expect_ok "and it verifies"

# ---------------------------------------------------------------- concurrent commit
for i in 1 2 3; do
  "$SLUICE" save --store "$U" --name race --step 1 --synthetic 8MiB >"$W/race$i.out" 2>&1 &
done
wins=0
for job in $(jobs -p); do wait "$job" && wins=$((wins + 1)); done
sl verify --store "$U" --name race --step 1
check "three concurrent saves of race@1: exactly one commits ($wins), and it verifies" [ "$wins" -eq 1 -a "$RC" -eq 0 ]

# ---------------------------------------------------------------- kill -9 mid-upload, then gc
K=$(suri crash "&part_mib=5")
"$SLUICE" save --store "$K" --name crash --step 1 --synthetic 1GiB --object-size 256MiB >"$W/crash.out" 2>&1 &
cpid=$!
BGPIDS+=("$cpid")
for i in $(seq 150); do [ "$(s3_uploads "$PREFIX/crash/")" -gt 0 ] && break; sleep 0.1; done
sleep 0.5
kill -9 "$cpid" 2>/dev/null
wait "$cpid" 2>/dev/null
open_uploads=$(s3_uploads "$PREFIX/crash/")
check "kill -9 in the middle of a 1 GiB save leaves open multipart uploads ($open_uploads)" [ "$open_uploads" -gt 0 ]
sl ls --store "$K" --all --json
check "and no committed checkpoint" [ "$(pyj '[c["complete"] for c in d]')" != "[True]" ]
sl gc --store "$K" --json
expect_ok "gc after the kill"
check "gc aborted every multipart upload the killed save left (ListMultipartUploads: $(s3_uploads "$PREFIX/crash/"))" \
  [ "$(s3_uploads "$PREFIX/crash/")" -eq 0 ]
check "and removed its objects ($(s3_keys "$PREFIX/crash/" | wc -l) left)" [ "$(s3_keys "$PREFIX/crash/" | wc -l)" -eq 0 ]
sl save --store "$K" --name crash --step 1 --synthetic 16MiB
expect_ok "the step saves again after gc"

# ---------------------------------------------------------------- tiers: file -> s3
TA=$W/ta
mkdir -p "$TA"
UA=$(suri tiers)
sl save --tier "$TA" --tier "$UA" --name tt --step 1 --from "$W/tree" --json
check "tiered save --tier DIR --tier s3://: both tiers committed ($(pyj '[t["state"] for t in d["tiers"]]'))" \
  [ "$RC" -eq 0 -a "$(pyj '[t["state"] for t in d["tiers"]]')" = "['committed', 'committed']" ]
rm -rf "$TA"
mkdir -p "$TA"
sl restore --tier "$TA" --tier "$UA" --name tt --step 1 --to "$W/ta-r1"
check "after tier 0 is wiped, restore --tier DIR --tier s3:// is bit-exact (exit $RC, $(errtext))" \
  bash -c "[ $RC -eq 0 ] && diff -r '$W/tree' '$W/ta-r1'"
# A drain under a cap: 48 MiB at 16 MiB/s takes about 3 s.
sl save --store "$TA" --name capped --step 1 --synthetic 48MiB
t0=$(date +%s.%N)
sl drain --tier "$TA" --tier "$UA" --rate-limit 1=16MiB --json
t1=$(date +%s.%N)
rate=$(python3 -c "print(round(48 / ($t1 - $t0), 1))")
check "drain file -> s3 at --rate-limit 16MiB: exit $RC, ${rate} MiB/s over the whole process (at most 16 + 10%)" \
  python3 -c "import sys; sys.exit(0 if $RC == 0 and $rate <= 17.6 and $rate >= 8 else 1)"
sl verify --store "$UA" --name capped --step 1
expect_ok "the drained copy verifies on s3://"

# ---------------------------------------------------------------- corruption and scrub
# capped@1, drained above, is on both tiers.
obj=$(s3_keys "$PREFIX/tiers/ckpt/capped/00000000000000000001/data/" | head -1)
if [ -z "$obj" ] || ! s3 GET "$obj" -o "$W/obj"; then
  nok "no data object of capped@1 on the s3 tier ('$obj')"
else
  flip_at=$(($(stat -c %s "$W/obj") / 2 + 333))
  python3 - "$W/obj" "$flip_at" <<'EOF'
import sys
path, off = sys.argv[1], int(sys.argv[2])
with open(path, 'r+b') as f:
    f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0xFF]))
EOF
  s3 PUT "$obj" -T "$W/obj" >/dev/null
  sl verify --store "$UA" --name capped --step 1
  check "a byte flipped in the s3 copy behind sluice's back: verify exits 1 naming a chunk" \
    bash -c "[ $RC -eq 1 ] && grep -q chunk '$W/out'"
  sl scrub --tier "$TA" --tier "$UA" --name capped --json
  check "scrub repairs the s3 copy from tier 0 (exit $RC, $(pyj '[(c["tier"], c["state"], c.get("reason")) for c in d["copies"]]'))" \
    [ "$RC" -eq 0 -a "$(pyj '[c["state"] for c in d["copies"]]')" = "['ok', 'repaired']" ]
  sl verify --store "$UA" --name capped --step 1
  expect_ok "and the s3 copy verifies again"
fi

# ---------------------------------------------------------------- retention, rm, incremental, latest
R=$(suri ret)
for st in 1 2 3; do
  sl save --store "$R" --name inc --step $st --synthetic 24MiB --keep-last 0=2
done
expect_ok "three saves with --keep-last 0=2"
sl ls --store "$R" --json
check "retention keeps the newest two steps on s3:// ($(pyj '[c["step"] for c in d]'))" \
  [ "$(pyj 'sorted(c["step"] for c in d)')" = "[2, 3]" ]
sl save --store "$R" --name inc --step 4 --synthetic 24MiB --json
check "an incremental save on s3:// references its base's unchanged chunks ($(pyj '(d["referenced_bytes"], d["base_step"])'))" \
  [ "$RC" -eq 0 -a "$(pyj 'd["referenced_bytes"] > 0 and d["base_step"] == 3')" = True ]
sl restore --store "$R" --name inc --to "$W/latest" --json
check "restore without --step takes the latest step (4) on s3://" bash -c "[ $RC -eq 0 ] && grep -q '\"step\": *4' '$W/out'"
sl rm --store "$R" --name inc --step 4
expect_ok "rm inc@4"
sl ls --store "$R" --json
check "ls after rm ($(pyj '[c["step"] for c in d]'))" [ "$(pyj 'sorted(c["step"] for c in d)')" = "[2, 3]" ]

# ---------------------------------------------------------------- bad input, each bounded, one line, no secret
# expect_bad DESC WANT_TEXT URI [ENV...]: ls exits 1 within 60 s with one
# "sluice:" line naming WANT_TEXT and not the secret key.
expect_bad() {
  local desc=$1 want=$2 uri=$3 t=$SECONDS
  shift 3
  env "$@" timeout 90 "$SLUICE" ls --store "$uri" >"$W/out" 2>"$W/err"
  RC=$?
  local took=$((SECONDS - t))
  if [ "$RC" -eq 1 ] && one_sluice_line && grep -qF -- "$want" "$W/err" && [ "$took" -le 60 ] &&
     ! grep -qF -- "$AWS_SECRET_ACCESS_KEY" "$W/err" && ! grep -qF -- "TOPSECRET" "$W/err"; then
    ok "$desc: exit 1 in $took s: $(head -c 200 "$W/err")"
  else
    nok "$desc: exit $RC in $took s (want 1 within 60 s, naming '$want'), stderr: $(errtext)"
  fi
}
expect_bad "wrong secret key" "check the credentials" "$U" AWS_SECRET_ACCESS_KEY=TOPSECRETwrong
expect_bad "unknown access key" "InvalidAccessKeyId" "$U" AWS_ACCESS_KEY_ID=NOSUCHKEY AWS_SECRET_ACCESS_KEY=TOPSECRETx
expect_bad "missing bucket" "bucket 'no-such-bucket-$$' does not exist" \
  "s3://no-such-bucket-$$/p?endpoint=$EP&addressing=path"
expect_bad "refused endpoint" "127.0.0.1:9" "s3://$BUCKET/p?endpoint=http://127.0.0.1:9&retries=2"
# Servers that misbehave: one always answers 503 SlowDown, one cuts every answer short.
python3 "$HERE/tests/s3_bad_server.py" "$W/bad.port" >"$W/bad.log" 2>&1 &
BGPIDS+=("$!")
disown "$!"
for i in $(seq 50); do [ -s "$W/bad.port" ] && break; sleep 0.1; done
BAD=http://127.0.0.1:$(cat "$W/bad.port")
expect_bad "503 SlowDown: retried with backoff, then one line stating the tries" "SlowDown" \
  "s3://slowdown/p?endpoint=$BAD&retries=3"
check "and the tries were 4 (retries=3): $(grep -c slowdown "$W/bad.log") requests, $(grep -o '[0-9]* tries over [0-9.]* s' "$W/err")" \
  grep -q "4 tries over" "$W/err"
expect_bad "a truncated answer" "truncated" "s3://truncated/p?endpoint=$BAD&retries=1"
sl ls --store "s3://$BUCKET/p?endpoint=$EP&secret_key=TOPSECRET1"
check "a credential in the URI: usage error (exit 2), not echoed" \
  bash -c "[ $RC -eq 2 ] && ! grep -q TOPSECRET1 '$W/err'"
sl ls --store "s3://$BUCKET/p?endpoint=$EP&colour=blue"
check "an unknown URI option: usage error (exit 2) naming it" bash -c "[ $RC -eq 2 ] && grep -q \"'colour'\" '$W/err'"
