#!/usr/bin/env bash
# tools/test-phases.sh [pytest args...] - tools/test.sh's last step: pytest in three phases, each run given "$@" (so
# -m, -k and file arguments select in all; docs/development.md says why and what runs where; tests/conftest.py's
# phase_of says which test runs where):
#   1. two runs side by side: the tests marked `sidebyside` (they mostly wait on Slurm, a budget or a sleep, and
#      share no state) in $A2RL_TEST_WORKERS parallel pytest-xdist workers: --phase=sidebyside -n N --dist
#      loadscope, a scope being a group of tests/conftest.py's phase_group (a file's tests; the CPU-heavy files'
#      together), run in one worker; and beside them, in one plain pytest at idle priority (nice 19, its own
#      session's autogroup niced), the fast tests (not slow, no Slurm, none that must run apart) one at a time as
#      in the fast layer: --phase=fast, its output printed when it ends;
#   2. two lanes side by side, each one test at a time: the other tests on the Slurm cluster (--phase=slurm: those
#      that stop its daemons and nodes, fill it, or wait on it; its output printed when it ends) and the other
#      tests off it (--phase=local: the CPU-heavy ones, those that share an expensive session fixture);
#   3. the tests that must run with nothing beside them, one at a time: --phase=apart (they attack the machine's
#      processes, memory and /tmp, or set up a new user's environments).
# Exit: the first failing run's code (phase 1's sidebyside run, its fast run, phase 2's local lane, its Slurm lane,
# phase 3); "no tests collected" (pytest's 5) only when no run had a test of the selection (`bash tools/test.sh
# tests/test_x.py` whose tests are all in one run is not that); with -x/--maxfail a failing phase skips the later.
# Knobs: A2RL_TEST_WORKERS (default 4) workers of phase 1; 0 = one plain `pytest "$@"`, every test one at a time,
#        no xdist, nothing side by side (the fallback should the parallel phases misbehave);
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

codes=() # every run's exit code, in the order above
stop_first=0
for a in "$@"; do case "$a" in -x | --exitfirst | --maxfail*) stop_first=1 ;; esac; done
failed() { [ "$1" != 0 ] && [ "$1" != 5 ]; }
first_failure() {
  for rc in "${codes[@]}"; do
    if failed "$rc"; then
      echo "$rc"
      return 0
    fi
  done
  return 1
}
ends() { # after a phase: with -x/--maxfail a failure ends the run there
  local rc
  if [ "$stop_first" = 1 ] && rc=$(first_failure); then
    say "the later phases skipped: phase $1 failed under -x/--maxfail"
    exit "$rc"
  fi
}

# beside the phase's main run (in the foreground), one more pytest run in the background whose output is printed
# when it ends: $1 its name, $2 "idle" or "", then its arguments
side_run_pid= side_log=
side_start() {
  local name=$1 wrap=()
  # at idle priority, so that it takes only the cores the other run leaves (at full priority the fast tests made
  # phase 1's budget runs fail, 2026-11-28): nice 19, and in a session of its own whose autogroup is niced too
  # (with the kernel's autogroups, on by default in Debian, nice acts only inside a session)
  if [ "$2" = idle ]; then
    wrap=(setsid -w bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 "$@"' "$name-tests")
  fi
  shift 2
  side_log=$(mktemp "${TMPDIR:-/tmp}/a2rl-$name-tests.XXXXXX")
  "${wrap[@]}" "${PYTEST[@]}" "$@" >"$side_log" 2>&1 &
  side_run_pid=$!
  trap 'kill "$side_run_pid" 2>/dev/null; rm -f "$side_log"; exit 130' INT
  trap 'kill "$side_run_pid" 2>/dev/null; rm -f "$side_log"; exit 143' TERM
}
side_end() { # $1 its name: waits for it, prints its output, appends its exit code
  local rc=0
  wait "$side_run_pid" || rc=$?
  trap - INT TERM
  cat "$side_log"
  rm -f "$side_log"
  say "$1 exit code $rc"
  codes+=("$rc")
}
main_run() { # $1 its name, then its arguments: in the foreground, its exit code appended
  local name=$1 rc=0
  shift
  "${PYTEST[@]}" "$@" || rc=$?
  say "$name exit code $rc"
  codes+=("$rc")
}

say "phase 1 of 3, the fast tests one at a time (output when they end): ${PYTEST[*]} --phase=fast $*"
side_start fast idle --phase=fast "$@"
say "phase 1 of 3, beside them the sidebyside tests in $WORKERS workers: ${PYTEST[*]} --phase=sidebyside -n $WORKERS --dist loadscope $*"
main_run "phase 1's sidebyside tests" --phase=sidebyside -n "$WORKERS" --dist loadscope "$@"
side_end "phase 1's fast tests"
ends 1

say "phase 2 of 3, the Slurm lane one test at a time (output when it ends): ${PYTEST[*]} --phase=slurm $*"
side_start slurm "" --phase=slurm "$@"
say "phase 2 of 3, beside it the local lane one test at a time: ${PYTEST[*]} --phase=local $*"
main_run "phase 2's local lane" --phase=local "$@"
side_end "phase 2's Slurm lane"
ends 2

say "phase 3 of 3, the tests that run apart, one at a time: ${PYTEST[*]} --phase=apart $*"
main_run "phase 3" --phase=apart "$@"

if rc=$(first_failure); then exit "$rc"; fi
for rc in "${codes[@]}"; do [ "$rc" = 5 ] || exit 0; done
exit 5
