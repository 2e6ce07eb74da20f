# Shared by the war stories: checks, and the test bed they run on.
# Source it after setting HERE (the checkout) and ME (the script's name).
TB=$HERE/scripts/testbed
SLUICE=$HERE/build/sluice
PY=${PYTHON:-$HERE/.venv/bin/python}
[ -x "$SLUICE" ] || { echo "$ME: build sluice first (build/sluice)" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "$ME: gnuplot is required (apt-get install gnuplot-nox)" >&2; exit 2; }

# war_testbed_up UP-ARGS...: uses a test bed that is up, else brings one up
# (and war_testbed_done takes it down again); then exports its env.
WAR_STARTED=0
war_testbed_up() {
  if ! "$TB" status >/dev/null 2>&1; then
    "$TB" up "$@" >/dev/null
    WAR_STARTED=1
  fi
  eval "$("$TB" env)"
}
war_testbed_done() {
  [ "$WAR_STARTED" = 1 ] && "$TB" down >/dev/null 2>&1
  true
}
