#!/bin/sh
# dk2-pack.sh DIR: the binaries bench/dk2-run.sh runs (built here: make tests, model-logits,
# bench-attention-kv), stripped, as DIR/bins.tar.xz, and the script as DIR/run.sh
set -e
dir=${1:?usage: dk2-pack.sh DIR}
tmp=$(mktemp -d)
for b in tests/bin/gpu_decode tests/bin/gpu_model_batch tests/bin/gpu_model_graph \
         tests/bin/model-logits tests/bin/bench-attention-kv; do
	strip -o "$tmp/$(basename "$b")" "$b"
done
mkdir -p "$dir"
tar cJf "$dir/bins.tar.xz" -C "$tmp" .
cp bench/dk2-run.sh "$dir/run.sh"
rm -rf "$tmp"
ls -l "$dir"
