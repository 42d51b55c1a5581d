#!/usr/bin/env bash
# tools/gpu-check.sh [--fetch] - the one GPU command: every test marked `gpu` (pytest -m gpu), then the grading
# bench (transformers on the GPU) and the pipeline bench, on one GPU, printing each figure; about 5 minutes on an
# H100. Exit 0 only when every step passed; otherwise the last lines name the failed steps.
#
# Where it runs: a GPU machine with python3 (3.12), torch (CUDA), transformers, peft and accelerate, and no
# internet. What else it needs comes with the checkout as wheels in .whl/ (git-ignored), installed into a
# temporary folder on PYTHONPATH, before a2rl itself, which runs from this checkout (PYTHONPATH too):
#   tools/gpu-check.sh --fetch   here, with the package index: downloads those wheels for CPython 3.12 manylinux
#                                x86-64 into .whl/ (~7 MiB), at the versions in .venv (tools/setup-env.sh)
#   tools/gpu-check.sh           there. Without CUDA it checks that the gpu tests are collected, says so, and
#                                exits 3 (nothing ran on a GPU).
# Knobs: PYTHON (default python3), GPU_CHECK_SITE (default /tmp/a2rl-gpu-site), A2RL_VENV (for --fetch, default .venv).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
WHL=$ROOT/.whl
PY=${PYTHON:-python3}
# Not in the GPU image (pytest, torch, transformers, peft, accelerate, numpy, pandas, pyarrow, yaml, ... are): TRL and
# what it and a2rl import. deepspeed has no wheel on the index: --fetch builds one (pure Python, ~2 MiB; its ops build at first use).
PKGS=(trl datasets dill multiprocess pydantic pydantic-core annotated-types typing-inspection typing-extensions
      submitit hjson)
say() { echo "[gpu-check +$SECONDS s] $*"; }

if [ "${1:-}" = --fetch ]; then
  VPY=${A2RL_VENV:-$ROOT/.venv}/bin/python
  [ -x "$VPY" ] || { echo "gpu-check: no $VPY (run tools/setup-env.sh first)" >&2; exit 1; }
  pins=$("$VPY" - "${PKGS[@]}" deepspeed <<'EOF'
import importlib.metadata as m, sys
for name in sys.argv[1:]:  # the venv's version; the index's newest where the venv has none
    try:
        print(f"{name}=={m.version(name)}")
    except m.PackageNotFoundError:
        print(name)
EOF
) || exit 1
  rm -rf "$WHL" && mkdir -p "$WHL"
  # shellcheck disable=SC2086
  "$VPY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$WHL" $(grep -v '^deepspeed' <<<"$pins") \
    || { echo "gpu-check: pip download failed" >&2; exit 1; }
  "$VPY" -m pip wheel -q --no-deps -w "$WHL" "$(grep '^deepspeed' <<<"$pins")" \
    || { echo "gpu-check: building the deepspeed wheel failed" >&2; exit 1; }
  ls "$WHL"
  echo "gpu-check: $(ls "$WHL" | wc -l) wheels, $(du -sh "$WHL" | cut -f1) in $WHL"
  exit 0
fi

failed=()
step() {  # step NAME TIMEOUT_S CMD...: runs CMD, prints its output, records a failure
  local name=$1 limit=$2; shift 2
  say "== $name"
  timeout -k 10 "$limit" "$@"
  local rc=$?
  [ $rc = 124 ] && say "$name: timed out after ${limit}s"
  [ $rc = 0 ] || failed+=("$name (exit $rc)")
}

say "python: $(command -v "$PY") ($("$PY" -c 'import platform; print(platform.python_version())'))"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if ! "$PY" -c 'import trl, datasets, pydantic, submitit' 2>/dev/null; then
  [ -d "$WHL" ] || { echo "gpu-check: trl and a2rl's needs do not import and there is no .whl/ (tools/gpu-check.sh --fetch)" >&2; exit 1; }
  SITE=${GPU_CHECK_SITE:-/tmp/a2rl-gpu-site}
  say "installing $(ls "$WHL" | wc -l) wheels from .whl/ into $SITE"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHL"/*.whl \
    || { echo "gpu-check: installing the wheels from .whl/ failed" >&2; exit 1; }
  export PYTHONPATH=$SITE
fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
"$PY" -c 'import a2rl, sys; sys.exit(0 if a2rl.__file__.startswith(sys.argv[1]) else f"a2rl imports from {a2rl.__file__}, not this checkout")' "$ROOT" || exit 1
"$PY" -c 'import torch, transformers, trl, peft, accelerate, datasets, pyarrow
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, trl {trl.__version__}, "
      f"peft {peft.__version__}, accelerate {accelerate.__version__}, datasets {datasets.__version__}, pyarrow {pyarrow.__version__}")
try:
    import deepspeed; print(f"deepspeed {deepspeed.__version__}")
except Exception as e:
    print(f"deepspeed: does not import ({type(e).__name__}: {e})")'

# the files that hold gpu tests: collecting them alone keeps other test modules' imports (task engines, ...) out
mapfile -t files < <(grep -l 'pytest.mark.gpu' tests/test_*.py)
if ! "$PY" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
  step "collect the gpu tests" 120 "$PY" -m pytest -q -m gpu --collect-only -p no:cacheprovider "${files[@]}"
  echo "gpu-check: no CUDA: torch sees no GPU here, so no gpu test or GPU bench ran${failed:+ (and collecting them failed)}"
  exit 3
fi
step "pytest -m gpu" 300 "$PY" -m pytest -m gpu -v -rA -p no:cacheprovider "${files[@]}"
step "grading bench (transformers, GPU)" 110 "$PY" tools/bench/grading.py --backend transformers --submissions 10 --prompts 200
step "pipeline bench (GPU)" 110 "$PY" tools/bench/pipeline.py --sft-steps 100 --grpo-steps 20
if [ ${#failed[@]} -gt 0 ]; then
  say "GPU CHECK FAILED: ${failed[*]}"
  exit 1
fi
say "GPU CHECK PASSED: every gpu test and both benches"
