#!/bin/sh
# bench/sft.sh [STEPS] [TOKENS]: SFT training throughput of dice-sft on one GPU, bf16
# (--device cuda --dtype bf16), against a PyTorch reference step (bench/sft-ref.py) on the
# same GPU in the same run.
# Geometry: SFT_GEOM (default 1.7b; 4b, 8b: bench/sdar-config.sh), random init
# (dice-sft --init). Data: STEPS+1 samples (default 5+1) of
# TOKENS token ids (default 4096: prompt 512, response 3584), one sample per micro-batch and
# step (-b TOKENS), so 2 x TOKENS rows with the noisy copy. dice-sft runs twice, with and
# without --recompute; the first step (allocations) is dropped, the figures are medians of
# the other STEPS steps from the --log JSONL: tokens/s (sample tokens, not doubled), MFU
# (model FLOPs / 989e12, man dice-sft), device memory in use (cudaMemGetInfo, so the largest
# geometry that trains is the largest whose run gets through its steps). A run is killed once
# its last step is logged: its final save (weights and AdamW moments, 32 GB at 1.7b) is not
# part of the benchmark. The model goes to /dev/shm when it is there.
# Environment: SFT_MODES (default "plain recompute") picks the dice-sft runs among plain,
# recompute (-R), cublas (plain with DICE_ATTN_CUBLAS=1: the chunked cuBLAS attention instead
# of the fused kernels, for comparison) and profile (plain with DICE_SFT_PROFILE=1: a backend
# sync after each phase, the seconds per phase printed; its step times include the syncs) and
# opprofile (DICE_SFT_PROFILE=2: also a sync after each group of ops, their seconds printed);
# SFT_NO_REF=1 skips the reference (built for the same geometry); SFT_MODEL=dir takes a
# model made before by `dice-sft --init` from this script's config (with the same seed)
# instead of making one;
# SFT_ACCUM=K (default 1): K samples (micro-batches) per optimizer step, in dice-sft (-a K)
# and in the reference alike, as SFT runs with a batch of several samples do;
# SFT_MAKE=dir only makes that model in dir and exits (start it early, e.g. in the background
# while other GPU work runs: the random init runs on the CPU).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
steps=${1:-5}
n=${2:-4096}
k=${SFT_ACCUM:-1}
[ -x bin/dice-sft ] || make -s bin/dice-sft
base=/tmp
[ -d /dev/shm ] && base=/dev/shm
t=$(mktemp -d "$base/sftbench.XXXXXX")
trap 'rm -rf "$t"' EXIT
geom=${SFT_GEOM:-1.7b}
sh bench/sdar-config.sh "$geom" > "$t/config.json"
awk -v ns=$(((steps + 1) * k)) -v n="$n" 'BEGIN { srand(7); for (s = 0; s < ns; s++) {
	p = "["; r = "[";
	for (i = 0; i < 512; i++) p = p (i ? "," : "") int(rand() * 151000);
	for (i = 0; i < n - 512; i++) r = r (i ? "," : "") int(rand() * 151000);
	print "{\"prompt_ids\": " p "], \"response_ids\": " r "]}" } }' > "$t/data.jsonl"
if [ -n "${SFT_MAKE:-}" ]; then
	bin/dice-sft --init "$t/config.json" -o "$SFT_MAKE" 2>&1 | tail -1
	exit 0
fi
m=${SFT_MODEL:-$t/m}
[ -n "${SFT_MODEL:-}" ] || bin/dice-sft --init "$t/config.json" -o "$m" 2>&1 | tail -1

med() {   # med FIELD LOG: median of FIELD over the steps after the first
	sed -n '2,$p' "$2" | sed "s/.*\"$1\":\([0-9.e+-]*\).*/\1/" | sort -g |
		awk '{ a[NR] = $1 } END { print NR ? a[int((NR + 1) / 2)] : "-" }'
}
for mode in ${SFT_MODES:-plain recompute}; do
	r=""
	e=""
	case $mode in
	recompute) r=-R ;;
	cublas) e=DICE_ATTN_CUBLAS=1 ;;
	profile) e=DICE_SFT_PROFILE=1 ;;
	opprofile) e=DICE_SFT_PROFILE=2 ;;
	esac
	: > "$t/$mode.jsonl"
	env $e bin/dice-sft -d cuda -D bf16 $r -m "$m" -o "$t/o" -n $((steps + 1)) -e 100 -b "$n" -a "$k" \
		-L "$n" -w 0 -g "$t/$mode.jsonl" "$t/data.jsonl" 2> "$t/$mode.err" &
	pid=$!
	while kill -0 $pid 2>/dev/null && [ "$(wc -l < "$t/$mode.jsonl")" -le "$steps" ]; do
		sleep 1
	done
	kill -9 $pid 2>/dev/null || true
	wait $pid 2>/dev/null || true
	if [ "$(wc -l < "$t/$mode.jsonl")" -gt "$steps" ]; then
		grep -E 'step' "$t/$mode.err" | sed 's/^/# /'
		# the profile's sums after the last step less those after the first (the warm-up):
		# seconds and shares of the measured steps
		awk '/^profile: forward \(not/ { blk++ }
		     /^profile:/ { k = $0; sub(/ +[0-9.]+ s +[0-9.]+%$/, "", k); sub(/^profile: /, "", k)
		                   v = $(NF - 2); if (blk == 1) first[k] = v; last[k] = v
		                   if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
		     END { for (i = 0; i < n; i++) if (order[i] !~ /^op /) sum += last[order[i]] - first[order[i]]
		           for (i = 0; i < n; i++) { k = order[i]; d = last[k] - first[k]
		                   printf "# profile: %-28s %8.4f s %5.1f%%\n", k, d, (sum > 0 ? 100 * d / sum : 0) } }' \
			"$t/$mode.err"
		echo "$mode $(med tokens_per_s "$t/$mode.jsonl") $(med mfu "$t/$mode.jsonl") $(med peak_mem_mb "$t/$mode.jsonl") $(med step_s "$t/$mode.jsonl")" >> "$t/rows"
	else
		tail -3 "$t/$mode.err" | sed 's/^/# /'
		echo "$mode failed - - -" >> "$t/rows"
	fi
	rm -rf "$t/o"
done
ref=
[ -n "${SFT_NO_REF:-}" ] ||   # SFT_NO_REF=1: dice-sft only
ref=$(python3 bench/sft-ref.py "$t/config.json" --tokens "$n" --steps "$steps" --accum "$k" 2>&1 | tee "$t/ref.out" | grep '^ref:' || true)
[ -n "$ref" ] || [ -n "${SFT_NO_REF:-}" ] || tail -5 "$t/ref.out" | sed 's/^/# /'
echo "# $ref"
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sed 's/^/# GPU: /' || true
printf '%-34s %10s %8s %8s %10s\n' "SDAR-$geom, $n-token samples x $k, bf16" "tokens/s" "MFU %" "step s" "mem MiB"
while read -r mode tps mfu mem st; do
	printf '%-34s %10s %8s %8s %10s\n' "dice-sft ($mode)" "$tps" \
		"$(awk -v m="$mfu" 'BEGIN { if (m == "-") print "-"; else printf "%.1f", 100 * m }')" \
		"$st" "$mem"
done < "$t/rows"
rt=$(echo "$ref" | sed -n 's/.*median step \([0-9.]*\) s.*/\1/p')
rtok=$(echo "$ref" | sed -n 's/.* \([0-9.]*\) tokens\/s.*/\1/p')
rmfu=$(echo "$ref" | sed -n 's/.*mfu \([0-9.]*\)%.*/\1/p')
rmem=$(echo "$ref" | sed -n 's/.*peak mem \([0-9]*\) MiB.*/\1/p')
printf '%-34s %10s %8s %8s %10s\n' "PyTorch reference (sdpa, 4D mask)" "${rtok:--}" "${rmfu:--}" "${rt:--}" "${rmem:--}"
plain=$(awk '$1 == "plain" { print $2 }' "$t/rows")
[ -n "$rtok" ] && [ "$plain" != - ] &&
	awk -v a="$plain" -v b="$rtok" 'BEGIN { printf "ratio dice-sft (plain) / PyTorch: %.2f\n", a / b }'
exit 0
