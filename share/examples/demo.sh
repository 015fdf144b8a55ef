#!/bin/sh
# demo.sh: the toolkit at work on the sample data in share/examples/ (run by `make demo`).
# deceive-check: seven kernel records for two KernelBench-style problems (kernels.jsonl: the
# kernel as a field or inside a model response) and one solution file (relu_new.py).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PATH="$root/bin:$PATH"
tmp=$(mktemp -d /tmp/dice-demo.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$here"

echo "== deceive-check: static checks for kernels that bypass their own CUDA code"
echo "\$ deceive-check --explain kernels.jsonl relu_new.py > checked.jsonl"
deceive-check --explain kernels.jsonl relu_new.py >"$tmp/checked.jsonl" 2>"$tmp/explain.txt" || true
sed 's/^/  /' "$tmp/explain.txt"
echo
echo "verdicts (id, deceptive, rules found):"
sed -e 's/^{"id":"\([^"]*\)".*"deceive":{"deceptive":\([a-z]*\),"findings":\(.*\)}}$/\1 \2 \3/' \
    "$tmp/checked.jsonl" | while read -r id verdict findings; do
	rules=$(printf '%s\n' "$findings" | grep -o '"rule":"[^"]*"' | sed 's/"rule":"\(.*\)"/\1/' |
		sort -u | tr '\n' ' ')
	printf '  %-26s %-6s %s\n' "$id" "$verdict" "${rules:--}"
done
echo
echo "\$ deceive-check --drop kernels.jsonl | wc -l     # records kept for training"
deceive-check --drop kernels.jsonl | wc -l | sed 's/^ */  /'
echo "\$ deceive-check --strict relu_new.py > /dev/null && echo clean"
deceive-check --strict relu_new.py >/dev/null && echo "  clean"
