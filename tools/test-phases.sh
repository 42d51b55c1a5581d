#!/usr/bin/env bash
# tools/test-phases.sh [pytest args...] - tools/test.sh's last step: pytest in two phases, each given "$@" (so -m,
# -k and file arguments select in both; docs/development.md says why and what runs where):
#   1. the tests marked `sidebyside` (they mostly wait on Slurm, a budget or a sleep, and share no state) in
#      $A2RL_TEST_WORKERS parallel pytest-xdist workers: --phase=sidebyside -n N --dist loadscope, a scope being a
#      group of tests/conftest.py's phase_group (a file's tests; the CPU-heavy files' together), run in one worker;
#   2. all the others, one at a time: --phase=alone (the CPU-heavy tests, those that stop Slurm daemons or nodes,
#      fill the cluster, measure load, change the machine, or share an expensive session fixture).
# Exit: the first failing phase's code; "no tests collected" (pytest's 5) only when neither phase had a test of
# the selection (`bash tools/test.sh tests/test_x.py` whose tests are all on one side is not that).
# Knobs: A2RL_TEST_WORKERS (default 4) workers of phase 1; 0 = one plain `pytest "$@"`, every test one at a time,
#        no xdist (the fallback should the parallel phase misbehave);
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
say "phase 1 of 2, the sidebyside tests in $WORKERS workers: ${PYTEST[*]} --phase=sidebyside -n $WORKERS --dist loadscope $*"
rc1=0
"${PYTEST[@]}" --phase=sidebyside -n "$WORKERS" --dist loadscope "$@" || rc1=$?
say "phase 1 exit code $rc1"
stop_first=0
for a in "$@"; do case "$a" in -x | --exitfirst | --maxfail*) stop_first=1 ;; esac; done
if [ "$rc1" != 0 ] && [ "$rc1" != 5 ] && [ "$stop_first" = 1 ]; then
  say "phase 2 skipped: phase 1 failed under -x/--maxfail"
  exit "$rc1"
fi
say "phase 2 of 2, the other tests one at a time: ${PYTEST[*]} --phase=alone $*"
rc2=0
"${PYTEST[@]}" --phase=alone "$@" || rc2=$?
say "phase 2 exit code $rc2"
if [ "$rc1" != 0 ] && [ "$rc1" != 5 ]; then exit "$rc1"; fi
if [ "$rc2" = 5 ] && [ "$rc1" = 0 ]; then exit 0; fi
exit "$rc2"
