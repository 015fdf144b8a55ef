#!/bin/sh
# run.sh TARGET [SECONDS]: build tests/fuzz/fuzz_TARGET.c with clang's libFuzzer and
# AddressSanitizer against the library sources, replay the saved regression inputs in
# tests/fuzz/TARGET/ (crashes found earlier, kept), then fuzz for SECONDS (default 600;
# 0 = replay only). The working corpus lives in build/fuzz/TARGET (not committed; started
# from the fixtures by tests/fuzz/seed.py when empty); a
# tests/fuzz/TARGET.dict, where there is one, is the fuzzer's dictionary (-dict). Undefined
# behaviour stops the run as a crash does (-fno-sanitize-recover), not a line in the log.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
t=${1:?usage: run.sh TARGET [SECONDS]}
secs=${2:-600}
cd "$root"
mkdir -p build/fuzz/"$t" tests/fuzz/"$t"
if [ -z "$(ls build/fuzz/"$t")" ]; then   # a fresh corpus: the fixtures' seeds
	python3 tests/fuzz/seed.py "$t" || echo "run.sh: no seeds for $t" >&2
fi
bin=build/fuzz/fuzz_$t
clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined,float-cast-overflow \
	-fno-sanitize-recover=all -Ilib \
	-DDICE_VERSION='"fuzz"' -DDICE_SHAREDIR='"/nonexistent"' \
	-o "$bin" tests/fuzz/fuzz_"$t".c lib/*.c -ljansson -larchive -lpcre2-8 -lm
if [ -n "$(ls tests/fuzz/"$t")" ]; then
	"$bin" -runs=0 tests/fuzz/"$t"/*
fi
[ "$secs" -gt 0 ] || exit 0
dict=
[ -f tests/fuzz/"$t".dict ] && dict=-dict=tests/fuzz/"$t".dict
"$bin" -max_total_time="$secs" -max_len=4096 $dict -artifact_prefix=tests/fuzz/"$t"/ \
	build/fuzz/"$t" tests/fuzz/"$t"
