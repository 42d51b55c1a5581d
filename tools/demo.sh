#!/usr/bin/env bash
# tools/demo.sh [launcher args...] - THE main command of the README: set up .venv, run the offline demo sweep
# (configs/sweeps/demo.yaml: arith × {pipeline, baseline} × 2 seeds on the local executor, no Slurm and no
# internet needed) to completion (the follower prints progress, each run as it ends, then the results table), then
# write its HTML report (a2rl report).
# Knobs: A2RL_SWEEP_DIR (default a2rl-sweeps/demo), A2RL_VENV (default .venv).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV=${A2RL_VENV:-$ROOT/.venv}
SWEEP_DIR=${A2RL_SWEEP_DIR:-a2rl-sweeps/demo}
t0=$(date +%s)
say() { echo "[demo.sh +$(( $(date +%s) - t0 ))s] $*"; }

bash tools/setup-env.sh "$VENV"
say "launching configs/sweeps/demo.yaml into $SWEEP_DIR"
# the held-out draw of arith the README's table was measured on (demo.yaml's own data root): the same table on
# every machine; never set it for a benchmark (an agent knowing it could rebuild the held-out split)
export A2RL_HELDOUT_SEED=${A2RL_HELDOUT_SEED:-17510801283441839991}
"$VENV/bin/python" -m a2rl.launch configs/sweeps/demo.yaml --sweep-dir "$SWEEP_DIR" --wait "$@"
report=$("$VENV/bin/python" -m a2rl report "$SWEEP_DIR")
say "the HTML report: $(realpath --relative-to="$ROOT" "$report")"  # relative: the same on every machine
say "the tables again: $VENV/bin/python -m a2rl.aggregate $SWEEP_DIR [--layout paper --scaling ...] [--format github|latex] [--format csv --out DIR]"
