#!/usr/bin/env bash
# tools/report-screenshot.sh [SWEEP_DIR] - regenerate docs/report.png, docs/analyses.md's picture of `a2rl report`,
# and docs/viewer.png, the README's picture of a run's trajectory viewer: writes SWEEP_DIR's HTML report (default
# a2rl-sweeps/demo; run `bash tools/demo.sh` first) and screenshots its top, and the viewer of its first
# `pipeline` run, in headless Chromium (Debian's `chromium` package: apt-get install chromium).
# Knobs: A2RL_VENV (default .venv).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV=${A2RL_VENV:-$ROOT/.venv}
SWEEP_DIR=$(realpath "${1:-a2rl-sweeps/demo}")
command -v chromium >/dev/null || { echo "report-screenshot: no chromium (apt-get install chromium)" >&2; exit 1; }
index=$("$VENV/bin/python" -m a2rl report "$SWEEP_DIR")
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
  --window-size=1100,1400 --screenshot="$ROOT/docs/report.png" "file://$index" 2>/dev/null
echo "docs/report.png from $index"
run=$(basename "$(ls -d "$SWEEP_DIR"/runs/*__pipeline__* | head -1)")
"$VENV/bin/python" -m a2rl runreport "$SWEEP_DIR" "$run" >/dev/null  # its viewer as this checkout draws it
viewer=$SWEEP_DIR/runs/$run/report/viewer/index.html
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" --virtual-time-budget=3000 \
  --window-size=1400,1500 --screenshot="$ROOT/docs/viewer.png" "file://$viewer" 2>/dev/null
echo "docs/viewer.png from $viewer"
