#!/usr/bin/env bash
# tools/test-phases.sh [pytest args...] - tools/test.sh's last step: pytest in two phases, each run given "$@" (so
# -m, -k and file arguments select in all; docs/development.md says why and what runs where; tests/conftest.py's
# phase_of says which test runs where):
#   1. two runs side by side: the tests marked `sidebyside` (they mostly wait on Slurm, a budget or a sleep, and
#      share no state) in $A2RL_TEST_WORKERS parallel pytest-xdist workers: --phase=sidebyside -n N --dist
#      loadscope, a scope being a group of tests/conftest.py's phase_group (a file's tests; the CPU-heavy files'
#      together), run in one worker; and beside them, in one plain pytest at idle priority (nice 19, its own
#      session's autogroup niced), the fast tests (not slow, no Slurm, none that must run alone) one at a time as in
#      the fast layer: --phase=fast, its output printed when it ends;
#   2. all the others, one at a time: --phase=alone (the slow tests not marked sidebyside: the CPU-heavy ones,
#      those that stop Slurm daemons or nodes, fill the cluster, measure load, change the machine, or share an
#      expensive session fixture; the fast tests on Slurm or in the must-run-alone files).
# Exit: the first failing run's code (the sidebyside run's, the fast run's, phase 2's); "no tests collected"
# (pytest's 5) only when no run had a test of the selection (`bash tools/test.sh tests/test_x.py` whose tests are
# all in one run is not that); with -x/--maxfail a failing phase 1 skips phase 2.
# Knobs: A2RL_TEST_WORKERS (default 4) workers of phase 1; 0 = one plain `pytest "$@"`, every test one at a time,
#        no xdist, nothing side by side (the fallback should the parallel phase misbehave);
#        A2RL_PYTEST the pytest command (default `python -m pytest`; tools/test.sh passes its venv's).
set -uo pipefail
read -r -a PYTEST <<<"${A2RL_PYTEST:-python -m pytest}"
WORKERS=${A2RL_TEST_WORKERS:-4}
t0=$(date +%s)
say() { echo "[test-phases.sh +$(($(date +%s) - t0))s] $*"; }

if [ "$WORKERS" = 0 ]; then
  say "A2RL_TEST_WORKERS=0: one run, one test at a time: ${PYTEST[*]} $*"
  rc=0
  "${PYTEST[@]}" "$@" || rc=$?
  exit "$rc"
fi
say "phase 1 of 2, the fast tests one at a time (output when they end): ${PYTEST[*]} --phase=fast $*"
fastlog=$(mktemp "${TMPDIR:-/tmp}/a2rl-fast-tests.XXXXXX")
# at idle priority, so that it takes only the cores phase 1 leaves (at full priority it made phase 1's budget runs
# fail, 2026-11-28): nice 19, and in a session of its own whose autogroup is niced too (with the kernel's
# autogroups, on by default in Debian, nice acts only inside a session; an unprivileged user may raise it)
setsid -w bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 "$@"' fast-tests \
  "${PYTEST[@]}" --phase=fast "$@" >"$fastlog" 2>&1 &
fastpid=$!
trap 'kill "$fastpid" 2>/dev/null; rm -f "$fastlog"; exit 130' INT
trap 'kill "$fastpid" 2>/dev/null; rm -f "$fastlog"; exit 143' TERM
say "phase 1 of 2, beside them the sidebyside tests in $WORKERS workers: ${PYTEST[*]} --phase=sidebyside -n $WORKERS --dist loadscope $*"
rc1=0
"${PYTEST[@]}" --phase=sidebyside -n "$WORKERS" --dist loadscope "$@" || rc1=$?
say "phase 1's sidebyside tests exit code $rc1; the fast tests':"
rcf=0
wait "$fastpid" || rcf=$?
trap - INT TERM
cat "$fastlog"
rm -f "$fastlog"
say "phase 1's fast tests exit code $rcf"
failed() { [ "$1" != 0 ] && [ "$1" != 5 ]; }
stop_first=0
for a in "$@"; do case "$a" in -x | --exitfirst | --maxfail*) stop_first=1 ;; esac; done
if { failed "$rc1" || failed "$rcf"; } && [ "$stop_first" = 1 ]; then
  say "phase 2 skipped: phase 1 failed under -x/--maxfail"
  if failed "$rc1"; then exit "$rc1"; fi
  exit "$rcf"
fi
say "phase 2 of 2, the other tests one at a time: ${PYTEST[*]} --phase=alone $*"
rc2=0
"${PYTEST[@]}" --phase=alone "$@" || rc2=$?
say "phase 2 exit code $rc2"
for rc in "$rc1" "$rcf" "$rc2"; do
  if failed "$rc"; then exit "$rc"; fi
done
if [ "$rc1" = 5 ] && [ "$rcf" = 5 ] && [ "$rc2" = 5 ]; then exit 5; fi
exit 0
