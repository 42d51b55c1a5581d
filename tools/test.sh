#!/usr/bin/env bash
# tools/test.sh [pytest args...] - THE test command (README, CI via .ci/run). On Debian 12 as root:
#   1. brings up the local Slurm cluster, two nodes each in its own network namespace (tools/slurm/up.sh
#      --nodes 2: apt-installs Slurm, munge, MariaDB + slurmdbd when missing; tests/test_slurm_nodes.py needs
#      both) and stops it again on exit (tools/slurm/down.sh), but only if it was not running before;
#   2. creates/refreshes the venv (tools/setup-env.sh) and installs chromium, bindfs, fuse3, faketime, tinyproxy and
#      openssl (apt) when they are missing;
#   3. installs the real agent CLIs the tests run (tools/agents/install.sh: the npm CLIs, OpenHands (Python 3.12)
#      and RD-Agent each in its own venv, into $A2RL_AGENT_CLIS, default ~/.cache/a2rl/agent-clis; a no-op once the pinned
#      versions are there);
#   4. builds the vLLM environment (tools/setup-vllm-env.sh, .venv-vllm) that real-vLLM tests run in;
#   5. runs pytest "$@" from the repo root with A2RL_SLURM=1 and A2RL_AGENT_CLIS exported, in two phases
#      (tools/test-phases.sh): the tests marked `sidebyside` (they mostly wait) in parallel pytest-xdist workers
#      with the fast tests one at a time beside them, then all the others one at a time; -m, -k and file arguments
#      select in each run.
# "No tests collected" (pytest exit 5, in every run) is a failure here.
#
# Knobs: A2RL_TEST_WORKERS (tools/test-phases.sh: default 4 workers in phase 1; 0 = one plain `pytest "$@"` run,
#        every test one at a time, no xdist: the fallback should the parallel phase misbehave);
#        A2RL_SLURM=0 skips the cluster (tests marked `slurm` must then skip themselves);
#        A2RL_VENV (default .venv in the repo root); SLURM_* are passed on to tools/slurm/up.sh (SLURM_NODES
#        defaults to 2 here).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV=${A2RL_VENV:-$ROOT/.venv}
t0=$(date +%s)
say() { echo "[test.sh +$(( $(date +%s) - t0 ))s] $*"; }

started_cluster=0
cleanup() {
  rc=$?
  if [ "$started_cluster" = 1 ]; then
    say "stopping the Slurm cluster this script started"
    bash tools/slurm/down.sh || true
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ "${A2RL_SLURM:-}" = 0 ]; then
  say "A2RL_SLURM=0: not using Slurm"
  unset A2RL_SLURM
else
  export SLURM_NODES=${SLURM_NODES:-2}
  st=0; bash tools/slurm/up.sh --status || st=$?
  # st: 0 = up with this config, 1 = not running, 2 = running with another config (up.sh restarts it; a
  # cluster that was running before is left running either way)
  [ "$st" = 1 ] && started_cluster=1
  say "bringing up the local Slurm cluster (tools/slurm/up.sh, $SLURM_NODES nodes)"
  bash tools/slurm/up.sh || {
    echo "test.sh: ERROR: tools/slurm/up.sh failed (needs root on Debian 12); A2RL_SLURM=0 runs without Slurm" >&2
    exit 1
  }
  export A2RL_SLURM=1
fi

# the tests need every task's engine, the textworld/alfworld ones (which compile from source) included, and the
# upstream scorers the parity tests run (parity: alpaca_eval)
A2RL_EXTRAS=${A2RL_EXTRAS:-train,test,tasks,parity,games} bash tools/setup-env.sh "$VENV"
# Debian packages the tests run for real: a FUSE view per node (bindfs, fuse3: tests/test_shared_fs.py,
# test_fscheck.py), clocks shifted per node and per process (libfaketime: test_shared_fs.py, test_fs_faults.py), the
# site proxy and the stand-in API's certificate (tinyproxy, openssl: tests/test_site_proxy.py), the HTML report's
# browser (chromium: tests/test_report_browser.py)
for pkg in bindfs fuse3 faketime tinyproxy openssl chromium; do
  if ! dpkg -s "$pkg" >/dev/null 2>&1; then
    say "installing $pkg (Debian's package)"
    bash tools/apt-install.sh "$pkg" || say "WARNING: no $pkg and cannot apt-get it; the tests that need it will fail"
  fi
done

# ---- the vLLM environment (vLLM's CPU build here): graders with backend vllm, the vllm local driver, and
# tests/test_vllm_real.py + the vllm driver test run in it; A2RL_VLLM_PYTHON tells the tests and sweeps where.
VLLM_VENV=${A2RL_VLLM_VENV:-$ROOT/.venv-vllm}
# the real-vLLM tests grade the textworld fixture too: its engine (games) as in .venv
A2RL_VLLM_EXTRAS=tasks,test,games bash tools/setup-vllm-env.sh "$VLLM_VENV"
export A2RL_VLLM_PYTHON=${A2RL_VLLM_PYTHON:-$VLLM_VENV/bin/python}
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}  # GiB of KV cache per CPU engine
# ---- end of the vLLM environment

export A2RL_AGENT_CLIS=${A2RL_AGENT_CLIS:-$HOME/.cache/a2rl/agent-clis}
say "real agent CLIs into $A2RL_AGENT_CLIS (tools/agents/install.sh)"
A2RL_PYTHON="$VENV/bin/python" bash tools/agents/install.sh claude codex gemini opencode openhands rdagent

say "pytest in two phases (tools/test-phases.sh): $VENV/bin/python -m pytest $*"
rc=0
A2RL_PYTEST="$VENV/bin/python -m pytest" bash tools/test-phases.sh "$@" || rc=$?
if [ "$rc" = 5 ]; then
  echo "test.sh: ERROR: pytest collected no tests (exit 5); treating that as a failure" >&2
  exit 1
fi
say "pytest exit code $rc"
exit "$rc"
