#!/usr/bin/env bash
# metrics_test.sh: sluice's Prometheus metrics, scraped by a real Prometheus.
#
#   tests/metrics_test.sh path/to/sluice
#
# Starts `sluice drain --watch --metrics-listen` over two file tiers holding
# 1,000 committed checkpoints, times scrapes of it, then starts Debian's
# `prometheus` on loopback scraping it every second, saves a checkpoint on
# tier 0 for the drain to copy, and checks through Prometheus's HTTP API that
# the drained bytes, the tier info and the in-flight gauges arrived. Also: a
# port in use and a bad address are clear errors at start. Everything listens
# on 127.0.0.1 only. Prints "ok"/"not ok" lines and "N passed, M failed";
# exits 0 if all passed, 1 if any failed, 77 (skip) without the binary or
# without prometheus/curl (a failure under CI=true).
TESTS_DIR=$(cd "$(dirname "$0")" && pwd)
set -u
if [ $# -ne 1 ]; then
  echo "usage: $0 path/to/sluice" >&2
  exit 2
fi
if [ ! -x "$1" ]; then
  echo "ok - metrics_test.sh # SKIP no sluice binary at $1"
  exit 77
fi
for tool in prometheus curl python3; do
  if ! command -v $tool >/dev/null; then
    if [ "${CI:-}" = true ]; then echo "not ok - $tool is missing (scripts/install-deps.sh installs it)"; echo "0 passed, 1 failed"; exit 1; fi
    echo "ok - metrics_test.sh # SKIP $tool is missing (scripts/install-deps.sh installs it)"
    exit 77
  fi
done
SLUICE=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
W=$(mktemp -d /tmp/sluice-metrics-test.XXXXXX) || exit 2
BGPIDS=()
cleanup() {
  for p in "${BGPIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${BGPIDS[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT
. "$TESTS_DIR/lib.sh"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
MP=$(free_port)
PP=$(free_port)
while [ "$PP" = "$MP" ]; do PP=$(free_port); done

# 1,000 committed checkpoints on both tiers (two saves at a time).
# METRICS_TEST_CHECKPOINTS makes fewer: the sanitizer stage, where a save
# costs 6x and the scrape time means nothing, uses 100.
N=${METRICS_TEST_CHECKPOINTS:-1000}
seq 1 "$N" | xargs -P 2 -I{} "$SLUICE" save --tier "$W/t0" --tier "$W/t1" --name many --step {} --synthetic 4KiB >/dev/null 2>"$W/saves.err"
count=$(find "$W/t1" -name COMMIT | wc -l)
check "$N checkpoints committed on tier 1 ($count)" [ "$count" -eq "$N" ]

"$SLUICE" drain --tier "$W/t0" --tier "$W/t1" --watch --interval 1s --metrics-listen "127.0.0.1:$MP" >"$W/drain.out" 2>"$W/drain.err" &
DRAIN=$!
BGPIDS+=("$DRAIN")
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$MP/metrics" >/dev/null && break; sleep 0.1; done
if grep -q "^sluice: serving metrics at http://127.0.0.1:$MP/metrics$" "$W/drain.err"; then
  ok "drain --watch says where it serves metrics"
else
  nok "drain --watch: stderr $(head -c 300 "$W/drain.err")"
fi

# Scrape time over the 1,000 checkpoints: median of 21 (curl's total time).
for _ in $(seq 21); do curl -s -o "$W/scrape" -w '%{time_total}\n' "http://127.0.0.1:$MP/metrics"; done >"$W/times"
median_ms=$(sort -n "$W/times" | sed -n 11p | awk '{printf "%.1f", $1 * 1000}')
check "a scrape over $N checkpoints on 2 tiers answers in under 50 ms (median $median_ms ms)" \
  awk -v m="$median_ms" 'BEGIN { exit !(m < 50) }'
check "the scrape is the Prometheus text format with sluice's series" \
  grep -q '^# TYPE sluice_tier_written_bytes_total counter$' "$W/scrape"
check "the tiers are named on sluice_tier_info" grep -q "^sluice_tier_info{tier=\"1\",uri=\"$W/t1\"} 1$" "$W/scrape"

# Bad input: each a clear error at start, never a silent run without metrics.
sl drain --tier "$W/t0" --tier "$W/t1" --metrics-listen "127.0.0.1:$MP"
expect_err "a port in use is refused" 1
if grep -q "127.0.0.1:$MP" "$W/err"; then ok "the error names the address"; else nok "error: $(errtext)"; fi
sl scrub --tier "$W/t0" --metrics-listen "127.0.0.1:$MP"
expect_err "scrub: a port in use is refused" 1
sl drain --tier "$W/t0" --tier "$W/t1" --metrics-listen 127.0.0.1:70000
expect_err "a port over 65535 is a usage error" 2
sl drain --tier "$W/t0" --tier "$W/t1" --metrics-listen example.com:80
expect_err "a host name other than localhost is a usage error" 2
sl save --tier "$W/t0" --name x --step 1 --synthetic 4KiB --metrics-listen 192.0.2.1:9100
expect_err "an address not of this host is refused" 1
sl drain --tier "$W/t0" --tier "$W/t1" --interval 1s
expect_err "--interval without --watch is a usage error" 2
sl bench --store "$W/b" --size 1MiB --mode processes --metrics-listen 127.0.0.1:0
expect_err "bench --mode processes refuses --metrics-listen" 2

# A real Prometheus scrapes the drain.
cat >"$W/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: sluice
    static_configs:
      - targets: ['127.0.0.1:$MP']
YML
prometheus --config.file="$W/prometheus.yml" --storage.tsdb.path="$W/prometheus" \
  --web.listen-address="127.0.0.1:$PP" >"$W/prometheus.log" 2>&1 &
BGPIDS+=("$!")
# query EXPR: the first result's value, or nothing.
query() {
  curl -sf --get "http://127.0.0.1:$PP/api/v1/query" --data-urlencode "query=$1" 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' 2>/dev/null
}
up=""
for _ in $(seq 60); do up=$(query 'up{job="sluice"}'); [ "$up" = 1 ] && break; sleep 0.5; done
check "prometheus scrapes sluice (up = ${up:-none})" [ "$up" = 1 ]

"$SLUICE" save --tier "$W/t0" --name fresh --step 1 --synthetic 8MiB >/dev/null
drained=""
for _ in $(seq 60); do
  drained=$(query 'sluice_tier_written_bytes_total{job="sluice",tier="1",flow="drain"}')
  [ -n "$drained" ] && [ "${drained%.*}" -ge 8388608 ] && break
  sleep 0.5
done
check "prometheus has the bytes drained to tier 1 (${drained:-none})" [ -n "$drained" ] && [ "${drained%.*}" -ge 8388608 ]
check "prometheus has the tier info" [ "$(query 'sluice_tier_info{job="sluice",tier="0"}')" = 1 ]
check "prometheus has the drain queue depth" [ -n "$(query 'sluice_drain_queue_depth{job="sluice"}')" ]
check "prometheus has checkpoints in flight per tier and state" \
  [ -n "$(query 'sluice_checkpoints_in_flight{job="sluice",tier="1",state="queued"}')" ]
# The drained bytes are counted as the writes complete, before the pass
# commits and reports: wait for its line (slow under ASan).
for _ in $(seq 1 120); do
  grep -q "drained 1 checkpoint" "$W/drain.out" && break
  sleep 0.5
done
check "drain --watch reported the pass that drained it" grep -q "drained 1 checkpoint" "$W/drain.out"

# A command that served metrics exits without waiting out the HTTP
# server's poll (2 s), and its first scrape has every family at zero.
start_ns=$(date +%s%N)
"$SLUICE" save --tier "$W/fast0" --tier "$W/fast1" --name quick --step 1 --synthetic 4KiB --metrics-listen 127.0.0.1:0 >/dev/null 2>&1
took_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
check "save --metrics-listen exits at once (${took_ms} ms)" [ "$took_ms" -lt 1500 ]

# SIGTERM: the watcher finishes its pass and exits 0.
kill -TERM "$DRAIN"
wait "$DRAIN"
rc=$?
check "drain --watch exits 0 on SIGTERM (exit $rc)" [ "$rc" -eq 0 ]

echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
