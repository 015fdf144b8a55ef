# kbench-env.sh: the set-up kbench-eval.sh and kbench-pch.sh share (sourced): root, n ($1,
# default $N_DEFAULT), jobs ($2, default every CPU), dev (DICE_DEVICE, default cpu), bin/ on
# PATH with bin/kbench-eval built, and tmp, a temporary directory named after $TMP_NAME
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-$N_DEFAULT}
jobs=${2:-$(nproc)}
dev=${DICE_DEVICE:-cpu}
PATH="$root/bin:$PATH"
DICE_SHARE="$root/share"
export PATH DICE_SHARE
[ -x "$root/bin/kbench-eval" ] || make -C "$root" bin/kbench-eval >/dev/null || exit 1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/$TMP_NAME.XXXXXX") || exit 1
