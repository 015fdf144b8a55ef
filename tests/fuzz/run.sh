#!/bin/sh
# run.sh TARGET [SECONDS]: build tests/fuzz/fuzz_TARGET.c with clang's libFuzzer and
# AddressSanitizer against the library sources, replay the saved regression inputs in
# tests/fuzz/TARGET/ (crashes found earlier, kept), then fuzz for SECONDS (default 600;
# 0 = replay only). The working corpus lives in build/fuzz/TARGET (not committed).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
t=${1:?usage: run.sh TARGET [SECONDS]}
secs=${2:-600}
cd "$root"
mkdir -p build/fuzz/"$t" tests/fuzz/"$t"
bin=build/fuzz/fuzz_$t
clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined,float-cast-overflow -Ilib \
	-DDICE_VERSION='"fuzz"' -DDICE_SHAREDIR='"/nonexistent"' \
	-o "$bin" tests/fuzz/fuzz_"$t".c lib/*.c -ljansson -larchive -lpcre2-8 -lm
if [ -n "$(ls tests/fuzz/"$t")" ]; then
	"$bin" -runs=0 tests/fuzz/"$t"/*
fi
[ "$secs" -gt 0 ] || exit 0
"$bin" -max_total_time="$secs" -max_len=4096 -artifact_prefix=tests/fuzz/"$t"/ \
	build/fuzz/"$t" tests/fuzz/"$t"
