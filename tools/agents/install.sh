#!/usr/bin/env bash
# tools/agents/install.sh [STACK...] - installs the real agent CLIs at the versions pinned in configs/agents/*.yaml
# (`install: {npm|pip: PACKAGE, version: V}`); no STACK: every stack that has an `install` entry.
#   npm stacks (claude, codex, gemini, opencode): into one npm prefix, $A2RL_AGENT_CLIS (default
#     ~/.cache/a2rl/agent-clis); their binaries land in PREFIX/node_modules/.bin, which the stacks' `path` searches.
#   pip stacks: each into its own venv, PREFIX/venvs/STACK (binaries in PREFIX/venvs/STACK/bin), made with the
#     Python its `install.python` names (python3.12 on PATH or under pyenv) or else python3.
# A package already present at its pinned version is not touched, so a second run costs nothing.
# Prints where each CLI landed. Needs node/npm for npm stacks (apt-installed as root on Debian when missing).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PREFIX=${A2RL_AGENT_CLIS:-$HOME/.cache/a2rl/agent-clis}
PY=${A2RL_PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3

# one line per stack: NAME KIND PACKAGE VERSION BINARY (from the stack YAMLs; unknown names are an error)
specs=$("$PY" - "$ROOT/configs/agents" "$@" <<'PYEOF'
import sys
from pathlib import Path
import yaml
folder, wanted = Path(sys.argv[1]), sys.argv[2:]
stacks = {p.stem: yaml.safe_load(p.read_text()) for p in sorted(folder.glob("*.yaml"))}
installable = {n: s for n, s in stacks.items() if s.get("install")}
unknown = [n for n in wanted if n not in installable]
if unknown:
    sys.exit(f"install.sh: no installable stack {', '.join(unknown)} (installable: {', '.join(installable)})")
for name in wanted or installable:
    inst = installable[name]["install"]
    kind = "npm" if inst.get("npm") else "pip"
    print(name, kind, inst[kind], inst["version"],
          installable[name].get("cli") or installable[name]["command"][0], inst.get("python") or "")
PYEOF
)

mkdir -p "$PREFIX"
npm_todo=()
while read -r name kind pkg version _ python; do
  [ -n "$name" ] || continue
  if [ "$kind" = npm ]; then
    have=$(node -e "console.log(require(process.argv[1]).version)" "$PREFIX/node_modules/$pkg/package.json" 2>/dev/null || true)
    if [ "$have" = "$version" ]; then echo "$name: $pkg@$version already installed"; else npm_todo+=("$pkg@$version"); fi
  else
    venv="$PREFIX/venvs/$name"
    have=$("$venv/bin/python" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$pkg" 2>/dev/null || true)
    if [ "$have" = "$version" ]; then
      echo "$name: $pkg==$version already installed"
    else
      interp=python3
      if [ -n "$python" ]; then
        # a pyenv shim is on PATH even where that version is not selected: take one that runs
        interp=""
        for c in "python$python" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$python"*/bin/python"$python"; do
          if "$c" -c "" 2>/dev/null; then interp=$c; break; fi
        done
        [ -n "$interp" ] || { echo "install.sh: ERROR: $name needs Python $python (python$python not found)" >&2; exit 1; }
      fi
      echo "$name: installing $pkg==$version into $venv (Python: $interp)"
      "$interp" -m venv "$venv"
      "$venv/bin/python" -m pip install -q "$pkg==$version"
    fi
  fi
done <<< "$specs"

if [ ${#npm_todo[@]} -gt 0 ]; then
  if ! command -v npm >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
    else
      echo "install.sh: ERROR: npm is needed for ${npm_todo[*]}; install Node.js 18+ first" >&2
      exit 1
    fi
  fi
  echo "installing ${npm_todo[*]} into $PREFIX (npm)"
  npm install --prefix "$PREFIX" --no-audit --no-fund --save-exact "${npm_todo[@]}"
fi

while read -r name kind pkg version binary _; do
  [ -n "$name" ] || continue
  if [ "$kind" = npm ]; then bin="$PREFIX/node_modules/.bin/$binary"; else bin="$PREFIX/venvs/$name/bin/$binary"; fi
  [ -x "$bin" ] || { echo "install.sh: ERROR: $name: $bin is missing after the install" >&2; exit 1; }
  echo "$name $version: $bin"
done <<< "$specs"
