#!/usr/bin/env bash
# report_test.sh: `sluice bench --report DIR`, rendered by a real browser.
#
#   tests/report_test.sh path/to/sluice
#
# Runs the write/read bench (2 ranks) and the --async bench (two tiers, the
# second capped) with --report, checks the files (data, gnuplot script, SVGs
# that parse, a page with nothing outside it), then loads each page in
# headless Chromium and checks that every plot loaded (the page counts its
# loaded images into <body data-plots-loaded>). Also: bad --report uses are
# usage errors, and a machine without gnuplot is told so before any work.
# Prints "ok"/"not ok" lines and "N passed, M failed"; exits 0 if all passed,
# 1 if any failed, 77 (skip) without the binary or without gnuplot/chromium/
# fio (a failure under CI=true).
TESTS_DIR=$(cd "$(dirname "$0")" && pwd)
set -u
if [ $# -ne 1 ]; then
  echo "usage: $0 path/to/sluice" >&2
  exit 2
fi
if [ ! -x "$1" ]; then
  echo "ok - report_test.sh # SKIP no sluice binary at $1"
  exit 77
fi
for tool in gnuplot chromium fio python3; do
  if ! command -v $tool >/dev/null; then
    if [ "${CI:-}" = true ]; then echo "not ok - $tool is missing (scripts/install-deps.sh installs it)"; echo "0 passed, 1 failed"; exit 1; fi
    echo "ok - report_test.sh # SKIP $tool is missing (scripts/install-deps.sh installs it)"
    exit 77
  fi
done
SLUICE=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
W=$(mktemp -d /tmp/sluice-report-XXXXXX)
trap 'rm -rf "$W"' EXIT
. "$TESTS_DIR/lib.sh"

# The plots a page holds, as headless Chromium counts them once it loaded.
rendered() {
  timeout 120 chromium --headless --no-sandbox --disable-gpu --user-data-dir="$W/chromium" \
    --virtual-time-budget=5000 --dump-dom "file://$1/index.html" 2>/dev/null |
    grep -o '<body[^>]*>' | sed -n 's/.*data-plots="\([0-9]*\)" data-plots-loaded="\([0-9]*\)".*/\1 \2/p'
}
# Every SVG parses as XML and draws something (paths or polylines).
svgs_parse() {
  python3 - "$@" <<'PY'
import sys, xml.etree.ElementTree as ET
for path in sys.argv[1:]:
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg"), path
    drawn = [e for e in root.iter() if e.tag.split("}")[-1] in ("path", "polyline", "polygon")]
    assert len(drawn) > 5, f"{path}: nothing drawn"
PY
}
# The page holds everything it shows: no src/href to anything but data: or #.
self_contained() {
  ! grep -Eo '(src|href)="[^"#d][^"]*"' "$1/index.html" | grep -q . &&
    [ "$(grep -o 'src="data:image/svg+xml;base64,' "$1/index.html" | wc -l)" -eq "$2" ]
}

# ----------------------------------------------------- write/read bench
sl bench --store "$W/store" --size 128MiB --ranks 2 --checkpoints 2 --items 4 --report "$W/rep"
expect_ok "bench --report runs"
check "bench --report names the page on stderr" grep -q "report in $W/rep/index.html" "$W/err"
for f in index.html report.gp report.json write_over_time.dat write_over_time.svg per_checkpoint.dat per_checkpoint.svg; do
  check "bench --report wrote $f" [ -s "$W/rep/$f" ]
done
check "the SVG plots parse and draw" svgs_parse "$W/rep/write_over_time.svg" "$W/rep/per_checkpoint.svg"
check "the page is self-contained (2 inlined SVGs, no outside links)" self_contained "$W/rep" 2
check "the throughput samples have a column per rank and one for all" \
  awk '!/^#/ { if (NF != 4) exit 1; n++ } END { exit n < 2 }' "$W/rep/write_over_time.dat"
check "report.json holds the ceiling fio measured in the same run" \
  [ "$(pyj 'd["ceiling"]["write_bytes_per_second"] > 0 and "fio" in d["ceiling"]["tool"]' "$W/rep/report.json")" = True ]
check "the plot draws the ceiling" grep -q "ceiling: write" "$W/rep/report.gp"
check "headless Chromium loads both plots of the page" [ "$(rendered "$W/rep")" = "2 2" ]

# --------------------------------------------------------- --async bench
sl bench --async --tier "$W/t0" --tier "$W/t1" --rate-limit 1=64MiB --size 64MiB --checkpoints 2 --report "$W/rep2" --json
expect_ok "bench --async --report runs"
check "bench --async --json still prints one JSON object" [ "$(pyj 'd["mode"]')" = async ]
for f in stall.dat stall.svg tiers_over_time.dat tiers_over_time.svg; do
  check "bench --async --report wrote $f" [ -s "$W/rep2/$f" ]
done
check "the stall plot has a stall and a memcpy per checkpoint" \
  awk '!/^#/ { if (NF != 3 || $2 <= 0 || $3 <= 0) exit 1; n++ } END { exit n != 2 }' "$W/rep2/stall.dat"
check "the drain into the capped tier is drawn against its cap" grep -q "cap of tier 1" "$W/rep2/report.gp"
check "tier 1 drained at about its cap (peak sample <= 1.5x 64 MiB/s)" \
  awk '!/^#/ { if ($3 > m) m = $3 } END { exit !(m > 0 && m <= 96) }' "$W/rep2/tiers_over_time.dat"
check "headless Chromium loads both plots of the --async page" [ "$(rendered "$W/rep2")" = "2 2" ]

# ------------------------------------------------------------- bad input
sl bench --store "$W/store" --size 16MiB --report ""
expect_err "an empty --report is a usage error" 2
sl bench --store "$W/store" --size 16MiB --mode processes --report "$W/never"
expect_err "--report with --mode processes is a usage error" 2
touch "$W/a-file"
sl bench --store "$W/store" --size 16MiB --checkpoints 1 --report "$W/a-file/sub"
expect_err "a --report path under a regular file fails cleanly" 1
# No gnuplot on PATH: refused before the bench runs (nothing written).
mkdir -p "$W/bin"
for t in fio; do ln -sf "$(command -v $t)" "$W/bin/$t"; done
PATH="$W/bin" "$SLUICE" bench --store "$W/store2" --size 16MiB --report "$W/rep3" >"$W/out" 2>"$W/err"
RC=$?
expect_err "without gnuplot, --report is refused at once" 1
check "the refusal says to install gnuplot" grep -q "gnuplot" "$W/err"
check "and nothing was benchmarked" [ ! -e "$W/store2" ] && [ ! -e "$W/rep3" ]

echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
