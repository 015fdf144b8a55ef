#!/bin/sh
# deps.sh PKG...: install the Debian packages the build and the tests need, skipping those
# already installed, and say what it runs. Called by `make deps` (and so by check and demo).
# Extra needs that are not plain packages are checked by command: node/npm (nodejs npm) and
# Debian's python3-torch (kbench-eval's CPU-mode tests).
set -u
missing=
for p in "$@"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
/usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || missing="$missing python3-torch"
[ -z "$missing" ] && exit 0
sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo
echo "deps: $sudo apt-get install -y$missing" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null 2>&1 || true
$sudo apt-get install -y -qq $missing >/dev/null || {
	echo "deps: apt-get install failed; install by hand:$missing" >&2
	exit 1
}
