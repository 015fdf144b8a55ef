#!/bin/sh
# bench/sft-cpu.sh [STEPS]: SFT training throughput of dice-sft on the CPU backend (the fp32
# specification loops, one thread) against PyTorch on the CPU (tests/gpu/sft-parity.py
# --native: the same micro-batch, forward + backward, no optimizer) in the same run.
# Geometry: C=128, 2 layers, 4 heads (2 KV) x 32, I=384, V=2048; 8 samples of 128 tokens
# (prompt 32) in one 1024-token micro-batch, so 2048 positions with the noisy copy.
# dice-sft: median tokens/s of STEPS optimizer steps (default 3; the step includes AdamW);
# PyTorch: median of 3 passes. Needs /usr/bin/python3 with torch for the reference column.
# Note: Debian's python3-torch is built with BLAS_INFO=generic (reference BLAS, about
# 2 GFLOP/s here) and the plain-torch model computes full N x N masked attention, so the
# reference column says little about an optimised PyTorch; the GPU bench is the real one.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
steps=${1:-3}
make -s bin/dice-sft
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
cat > "$t/config.json" <<'J'
{"model_type": "sdar", "vocab_size": 2048, "hidden_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 384,
 "rope_theta": 10000.0, "block_size": 4, "mask_token_id": 2047, "eos_token_id": 2046,
 "pad_token_id": 2046, "torch_dtype": "float32"}
J
awk 'BEGIN { srand(3); for (s = 0; s < 8; s++) { p = "["; r = "[";
	for (i = 0; i < 32; i++) p = p (i ? "," : "") int(rand() * 2000);
	for (i = 0; i < 96; i++) r = r (i ? "," : "") int(rand() * 2000);
	print "{\"prompt_ids\": " p "], \"response_ids\": " r "]}" } }' > "$t/data.jsonl"
bin/dice-sft --init "$t/config.json" -o "$t/m" 2>/dev/null
bin/dice-sft -q -m "$t/m" -o "$t/o" -n "$steps" -e 100 -b 1024 -g "$t/log.jsonl" "$t/data.jsonl"
dice=$(sed 's/.*"tokens_per_s":\([0-9.e+-]*\).*/\1/' "$t/log.jsonl" | sort -g |
	awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
ref=-
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	bin/dice-sft -q -m "$t/m" -x "$t/batch.safetensors" -b 1024 "$t/data.jsonl"
	ref=$(/usr/bin/python3 tests/gpu/sft-parity.py "$t/m" "$t/batch.safetensors" --native \
		--device cpu --time 3 | sed -n 's/^time: .*, \([0-9.]*\) tokens\/s.*/\1/p')
fi
printf '%-40s %12s\n' "implementation (CPU, fp32)" "tokens/s"
printf '%-40s %12.1f\n' "dice-sft (ops_cpu, 1 thread, +AdamW)" "$dice"
printf '%-40s %12s\n' "PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo -) fwd+bwd" "$ref"
[ "$ref" = - ] || awk -v a="$dice" -v b="$ref" 'BEGIN { printf "%-40s %12.3f\n", "ratio dice/PyTorch", a / b }'
