#!/usr/bin/env bash
# tools/apt-install.sh PKG - install a Debian/Ubuntu package quietly, as root with apt-get only (updating the
# package lists once if the first try fails). Exit 1 where that is not possible (not root, no apt-get).
set -euo pipefail
[ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || exit 1
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$1" </dev/null >/dev/null \
  || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$1" </dev/null >/dev/null; }
