#!/bin/sh
# sample-mem.sh: dice-sample on cuda when the GPU's memory is short, for make check-gpu. A
# helper process (python3 with torch) holds all but HOLD_FREE (2 GiB) of the device memory;
# a tiny random checkpoint whose KV cache takes 32 KB a position (8 layers, 8 KV heads of
# 128) decodes 4 records of 8 prompt ids and -n 12000 new tokens (about 384 MB of cache
# each), 4 tokens a forward (--steps 1, greedy).
#   1. Without DICE_MEM_LIMIT the limit is the free device memory (dice-sample(1),
#      ENVIRONMENT): -b 4 does not fit, so fewer run at once (the warning) and the tokens
#      are those of -b 1 run with the memory free.
#   2. With the check taken off (DICE_MEM_LIMIT far above the device's memory) the KV
#      caches that cannot be allocated are a clear error (the sampler names the cache;
#      status 1), not a fault on a null cache.
# TAP lines; needs bin/dice-sft, bin/dice-sample and python3 with torch (else SKIP).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
echo "1..2"
skip() { echo "ok 1 # SKIP $1"; echo "ok 2 # SKIP $1"; exit 0; }
[ -x bin/dice-sample ] && [ -x bin/dice-sft ] || skip "no bin/dice-sample (make)"
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
	skip "no torch with a GPU"
t=$(mktemp -d)
hog=
trap '[ -n "$hog" ] && kill $hog 2>/dev/null; rm -rf "$t"' EXIT
sed -e 's/"num_hidden_layers": 2/"num_hidden_layers": 8/' \
    -e 's/"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32/"num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 128/' \
    tests/fixtures/tiny-sdar.json >"$t/cfg.json"
grep -q '"head_dim": 128' "$t/cfg.json" || { echo "not ok 1 - config"; exit 1; }
bin/dice-sft --init "$t/cfg.json" -o "$t/m" -t tests/dice-sample/data 2>/dev/null ||
	{ echo "not ok 1 - init"; exit 1; }
awk 'BEGIN { for (r = 0; r < 4; r++) { printf "{\"id\":\"r%d\",\"prompt_ids\":[", r
	for (i = 0; i < 8; i++) printf "%s%d", i ? "," : "", (r * 31 + i * 7) % 250
	print "]}" } }' >"$t/in.jsonl"
run() { # NAME ARGS...: the records' ids, a line each
	name=$1; shift
	bin/dice-sample -m "$t/m" -d cuda -t bf16 -p eval -s 1 -n 12000 -S none "$@" "$t/in.jsonl" \
		2>"$t/$name.err" >"$t/$name.out"
	echo $? >"$t/$name.st"
	grep -o '"ids":\[[^]]*\]' "$t/$name.out" >"$t/$name"
}
run free -b 1
# the helper holds the memory until killed; it says "held" once it does
python3 -c '
import sys, time, torch
free, total = torch.cuda.mem_get_info()
keep = int(sys.argv[1])
x = torch.empty(max(free - keep, 0), dtype=torch.uint8, device="cuda")
print("held", free - keep, "of", total, flush=True)
time.sleep(600)' "${HOLD_FREE:-2147483648}" >"$t/hog" 2>&1 &
hog=$!
i=0
while ! grep -q held "$t/hog" && kill -0 $hog 2>/dev/null && [ $i -lt 600 ]; do
	sleep 0.1; i=$((i + 1))
done
grep -q held "$t/hog" || { cat "$t/hog"; echo "not ok 1 - the memory helper"; exit 1; }
run short -b 4
ok=1
[ "$(cat "$t/short.st")" = 0 ] && grep -q "fewer sequences run at once" "$t/short.err" &&
	[ "$(wc -l <"$t/free")" -eq 4 ] && cmp -s "$t/free" "$t/short" || ok=0
[ $ok -eq 1 ] || { cat "$t/short.err" "$t/hog"; }
echo "$([ $ok -eq 1 ] || echo 'not ')ok 1 - with the device memory short, -b 4 runs fewer at once" \
	"and gives -b 1's tokens"
DICE_MEM_LIMIT=1000000000000000 run nocheck -b 4 -n 60000
ok=1
[ "$(cat "$t/nocheck.st")" = 1 ] && grep -q "no memory for the KV cache" "$t/nocheck.err" &&
	! grep -qi "illegal\|CUDA error\|misaligned" "$t/nocheck.err" || ok=0
[ $ok -eq 1 ] || cat "$t/nocheck.err"
echo "$([ $ok -eq 1 ] || echo 'not ')ok 2 - a KV cache the device cannot hold is a clear error" \
	"(status $(cat "$t/nocheck.st"))"
