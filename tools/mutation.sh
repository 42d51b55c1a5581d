#!/usr/bin/env bash
# Mutation testing of the modules that guard the record (issue 36), with mutmut (the `test` extra):
#   tools/mutation.sh [MODULE...]        e.g. tools/mutation.sh a2rl/tasklib/leaks.py
# No MODULE: every module of DEFAULT below. Each module is mutated on its own, in a scratch copy of this tree
# ($MUTATION_DIR, default /tmp/a2rl-mutation-$USER; mutmut works in its mutants/ there), against the fast layer
# (-m "not slow") of the test files mapped to it in TESTS below (else the test files that import it); mutmut's
# own coverage run then gives each mutant only the tests that reach its function. Nothing in this tree is
# written. Prints per module mutants, killed, survived (with "no tests": none reaches it), timed out, the
# survivors' diffs, and ends with `MODULE: killed K/M (P%)` lines (a mutant that makes a test run past its time
# counts as killed: it was caught). Mutants listed in tools/mutation-equivalent.txt
# (`mutant-name  reason`: they cannot change behaviour) are shown apart and left out of M.
# Knobs: MUTATION_JOBS (parallel mutants, default 1: the machine is shared), MUTATION_NICE (default 10),
# MUTATION_TEST_WALL_S (a test's wall-clock limit in a mutant's run, default 300: past it, a timeout),
# MUTATION_TESTS (test files to run instead of the mapped ones: a module's figure before new tests, say).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${MUTATION_DIR:-/tmp/a2rl-mutation-${USER:-$(id -un)}}
JOBS=${MUTATION_JOBS:-1}
NICE=${MUTATION_NICE:-10}
EQUIVALENT=$REPO/tools/mutation-equivalent.txt
PYTHON=${PYTHON:-python}
# mutants run in processes forked from one that ran torch: its OpenMP pool, forked busy, deadlocks them (each
# would then "time out", counted as killed); one thread makes no pool
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1} TOKENIZERS_PARALLELISM=false
# the agents' interpreter is not copied (a venv): the tests take this tree's
[ -x "$REPO/.venv-agent/bin/python" ] && export A2RL_AGENT_PYTHON=${A2RL_AGENT_PYTHON:-$REPO/.venv-agent/bin/python}
"$PYTHON" -c "import mutmut" 2>/dev/null || { echo "mutation.sh: no mutmut in $PYTHON: pip install -e '.[test]'" >&2; exit 2; }
mutmut() {  # mutmut's command line, without the editable install's import hook (it would import this tree's a2rl)
  "$PYTHON" -c '
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "_EditableFinder" not in repr(f)]
sys.path_hooks[:] = [h for h in sys.path_hooks if "Editable" not in repr(h)]
sys.path[:] = [p for p in sys.path if "__editable__" not in p]
sys.path_importer_cache.clear()
sys.argv[0] = "mutmut"
from mutmut.__main__ import cli
cli()' "$@"
}

DEFAULT=(
  a2rl/recording/nofollow.py a2rl/scheduling/graders.py a2rl/grading/lineage.py a2rl/tasklib/leaks.py
  a2rl/run/artifacts.py a2rl/store/integrity.py a2rl/store/queue.py a2rl/store/ledger.py a2rl/store/results.py
  a2rl/records.py a2rl/grading/final.py a2rl/inspector/inspection.py
  a2rl/grading/retention.py a2rl/grading/frozenscan.py a2rl/run/onecopy.py a2rl/upgrades.py a2rl/scheduling/migrate.py
  a2rl/recording/diskuse.py a2rl/api.py a2rl/reporting/tables.py
)
declare -A TESTS=(  # the tests that exercise a module (beyond those that import it by name)
  [a2rl/recording/nofollow.py]="tests/test_nofollow.py tests/test_freeze_race.py tests/test_hostile_files.py tests/test_recording.py"
  [a2rl/run/artifacts.py]="tests/test_artifacts.py tests/test_onecopy.py tests/test_freeze_race.py tests/test_hostile_files.py"  # not the grader's: minutes a mutant
  [a2rl/tasklib/leaks.py]="tests/test_leak_encodings.py tests/test_canary.py"
  [a2rl/grading/lineage.py]="tests/test_lineage.py tests/test_lineage_verdict.py"
  [a2rl/scheduling/graders.py]="tests/test_grader_pool.py tests/test_grader_replace.py tests/test_grader_idle.py"
  [a2rl/grading/daemon.py]="tests/test_final_split.py tests/test_lineage.py tests/test_grader_idle.py tests/test_grading_cache.py tests/test_disk_full.py tests/test_integrity.py"
  [a2rl/grading/final.py]="tests/test_final_part.py tests/test_final_split.py"
  [a2rl/store/integrity.py]="tests/test_signing.py tests/test_integrity.py"
  [a2rl/records.py]="tests/test_records.py tests/test_disk_full.py tests/test_fs_faults.py"
  [a2rl/inspector/inspection.py]="tests/test_inspection_rules.py tests/test_inspector.py"
  [a2rl/store/results.py]="tests/test_results.py tests/test_final_split.py tests/test_run_lifecycle.py tests/test_fs_faults.py"
  [a2rl/store/queue.py]="tests/test_queue.py tests/test_queue_latency.py"  # the grader's tests: minutes a mutant here
  [a2rl/store/ledger.py]="tests/test_ledger.py"
  [a2rl/grading/retention.py]="tests/test_storage.py"  # not test_final_split.py's: its sweeps cost seconds a mutant
  [a2rl/recording/diskuse.py]="tests/test_storage.py"
  [a2rl/grading/frozenscan.py]="tests/test_onecopy.py tests/test_onepass.py"
  [a2rl/run/onecopy.py]="tests/test_onecopy.py"
  [a2rl/upgrades.py]="tests/test_records.py tests/test_fixture_sweeps.py"  # every record read reaches it: these are its own
  [a2rl/scheduling/migrate.py]="tests/test_fixture_sweeps.py"
  [a2rl/api.py]="tests/test_api.py"  # `import a2rl`: found by no import of its name
  [a2rl/reporting/tables.py]="tests/test_tables.py tests/test_exports.py tests/test_final_tables.py tests/test_long_table.py"  # through aggregate.py's names
)

tests_for() {  # MUTATION_TESTS, else the mapped test files, else those that import the module
  local mod=$1 dotted=${1%.py}
  dotted=${dotted//\//.}
  if [ -n "${MUTATION_TESTS:-}" ]; then echo "$MUTATION_TESTS"; return; fi
  if [ -n "${TESTS[$mod]:-}" ]; then echo "${TESTS[$mod]}"; return; fi
  (cd "$REPO" && grep -lE "(from|import) ${dotted//./\\.}( |$)|from ${dotted%.*} import .*\b${dotted##*.}\b" tests/test_*.py | tr '\n' ' ')
}

copy_tree() {  # this tree's files (tracked and untracked, not .git, venvs or caches) into $WORK/tree
  mkdir -p "$WORK/tree"
  rsync -a --delete --exclude .git --exclude '.venv*' --exclude __pycache__ --exclude /mutants \
    --exclude .pytest_cache --exclude .ruff_cache "$REPO/" "$WORK/tree/"
}

configure() {  # [tool.mutmut] for one module, appended to the scratch copy's pyproject.toml
  local mod=$1; shift
  cp "$REPO/pyproject.toml" "$WORK/tree/pyproject.toml"
  # a wall-clock limit per test: mutmut limits CPU time only, which a mutant that deadlocks (a thread waiting on a
  # lock for ever) never uses up; past the limit the mutant's test process exits 36, mutmut's code for a timeout
  cat >"$WORK/tree/mutation_watchdog.py" <<'EOF'
import os
import sys
import threading

import pytest

LIMIT_S = float(os.environ.get("MUTATION_TEST_WALL_S", "300"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    def expire():
        sys.stderr.write(f"mutation.sh: {item.nodeid} ran past {LIMIT_S:g} s of wall time: a timeout\n")
        os._exit(36)

    timer = threading.Timer(LIMIT_S, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
EOF
  {
    echo
    echo "[tool.mutmut]"
    echo 'source_paths = ["a2rl"]'
    # the rest of the tree (configs/, tasks/, ...) beside mutants/a2rl, where the code finds it
    printf 'also_copy = [%s]\n' "$(cd "$WORK/tree" && ls -A | grep -vxE 'a2rl|tests|mutants|pyproject.toml' |
      sed 's/.*/"&", /' | tr -d '\n')"
    echo "only_mutate = [\"$mod\"]"
    printf 'pytest_add_cli_args_test_selection = [%s]\n' "$(printf '"%s", ' "$@")"
    echo 'pytest_add_cli_args = ["-m", "not slow", "-p", "no:cacheprovider", "-p", "mutation_watchdog", "-q", "-o", "addopts="]'
    echo 'process_isolation = "fork"'  # workers forked after the coverage run: imports and the session's cache warm
    echo 'use_git_change_detection = false'
    echo 'timeout_multiplier = 5.0'
    echo 'timeout_constant = 30.0'  # a mutant's own pytest session: its set-up (fixtures) on a shared machine
  } >>"$WORK/tree/pyproject.toml"
}

summary=()
run_module() {
  local mod=$1 t0 tests
  t0=$(date +%s)
  read -r -a tests <<<"$(tests_for "$mod")"
  [ ${#tests[@]} -gt 0 ] || { echo "mutation.sh: no test file for $mod: add it to TESTS" >&2; exit 2; }
  echo "=== $mod against ${tests[*]} (-m 'not slow')"
  copy_tree
  configure "$mod" "${tests[@]}"
  rm -rf "$WORK/tree/mutants" && mkdir "$WORK/tree/mutants"  # there before python starts: on its path, not cached absent
  # mutants import a2rl from mutants/ (mutmut puts it first on sys.path; a test's subprocess through PYTHONPATH),
  # never from an editable install (its finder is taken out, so a module missing from mutants/ fails loudly)
  (cd "$WORK/tree" && PYTHONPATH="$WORK/tree/mutants" nice -n "$NICE" mutmut run --max-children "$JOBS" \
    >"$WORK/run.log" 2>&1) || { tr '\r' '\n' <"$WORK/run.log" | tail -30; echo "mutation.sh: mutmut run failed for $mod" >&2; exit 1; }
  (cd "$WORK/tree" && mutmut results --all true) >"$WORK/results.txt"
  rm -rf "$WORK/diffs" && mkdir "$WORK/diffs"
  { grep -v ': killed$' "$WORK/results.txt" || true; } | sed -n 's/^ *\([^ ]*\): .*/\1/p' | while read -r name; do
    (cd "$WORK/tree" && mutmut show "$name") >"$WORK/diffs/$name" 2>&1 || true
  done
  python3 - "$mod" "$WORK/results.txt" "$EQUIVALENT" "$(($(date +%s) - t0))" "$WORK/diffs" <<'EOF' | tee "$WORK/module.txt"
import re, sys
from collections import Counter
from pathlib import Path
mod, results, equivalent, seconds, diffs = sys.argv[1:]
status = dict(re.findall(r"^\s*(\S+): (.+)$", Path(results).read_text(), re.M))
equiv = {}
for line in Path(equivalent).read_text().splitlines() if Path(equivalent).exists() else []:
    if line.strip() and not line.startswith("#"):
        name, _, why = line.strip().partition(" ")
        equiv[name] = why.strip()
counted = {k: v for k, v in status.items() if k not in equiv}
n = Counter(counted.values())
killed = n["killed"] + n["timeout"]  # a mutant that makes a test hang past its time is caught too
bad = sorted(k for k, v in counted.items() if v not in ("killed", "timeout"))
other = len(counted) - killed - n["survived"] - n["no tests"]
print(f"{mod}: {len(status)} mutants in {seconds} s: killed {killed} ({n['timeout']} of them timed out), "
      f"survived {n['survived']}, no tests {n['no tests']}, other {other}, equivalent {len(status) - len(counted)}")
for k in sorted(equiv.keys() & status.keys()):
    print(f"  equivalent {k}: {equiv[k]}")
for k in bad:
    diff = (Path(diffs) / k).read_text() if (Path(diffs) / k).exists() else "(no diff)"
    print(f"--- {counted[k]}: {k}\n{diff.strip()}")
total = len(counted)
print(f"RESULT {mod}: killed {killed}/{total} ({100 * killed / max(total, 1):.0f}%)")
EOF
  summary+=("$(grep '^RESULT ' "$WORK/module.txt" | sed 's/^RESULT //')")
}

mods=("$@")
[ ${#mods[@]} -gt 0 ] || mods=("${DEFAULT[@]}")
for mod in "${mods[@]}"; do
  [ -f "$REPO/$mod" ] || { echo "mutation.sh: no module $mod in $REPO" >&2; exit 2; }
done
for mod in "${mods[@]}"; do run_module "$mod"; done
echo "=== summary (a mutant that timed out counts as killed; see each module's lines above)"
printf '%s\n' "${summary[@]}"
