/* test_sft_torch: one dice-sft micro-batch (packed samples, random masks) against PyTorch
 * autograd: tests/gpu/sft-parity.py --native (a plain torch Qwen3) must agree on the loss and
 * on the gradient of every weight to 1e-4 relative. Skipped when /usr/bin/python3 has no
 * torch or bin/dice-sft is not built. Run from the repository root (as make check does). */
#include <stdio.h>
#include <stdlib.h>

#include "test.h"

#define PY "/usr/bin/python3"

int main(void)
{
	char cmd[1024];
	char dir[] = "/tmp/dice-test-sft-torch-XXXXXX";

	if (system(PY " -c 'import torch' >/dev/null 2>&1") != 0 ||
	    system("test -x bin/dice-sft") != 0) {
		printf("ok 1 # SKIP no torch in " PY ", or no bin/dice-sft\n");
		return 0;
	}
	if (!mkdtemp(dir))
		return 1;
	snprintf(cmd, sizeof cmd,
	         "bin/dice-sft --init tests/dice-sft/data/tiny.json -o %s/m -s 3 2>/dev/null && "
	         "bin/dice-sft -q -m %s/m -x %s/b.safetensors -b 40 -s 4 "
	         "tests/dice-sft/data/train.jsonl && "
	         PY " tests/gpu/sft-parity.py %s/m %s/b.safetensors --native --device cpu "
	         ">%s/o1; r=$?; sed 's/^/# /' %s/o1; exit $r", dir, dir, dir, dir, dir, dir, dir);
	CHECK(system(cmd) == 0, "loss and all gradients == PyTorch autograd (packed batch)");
	snprintf(cmd, sizeof cmd,
	         "bin/dice-sft --init tests/dice-sft/data/tiny-text.json -t tests/dice-sft/data/tok "
	         "-o %s/t 2>/dev/null && printf '%%s\\n' "
	         "'{\"prompt\": \"add a and b\", \"response\": \"out = a + b\"}' "
	         "'{\"prompt\": \"relu\", \"response\": \"max(x, 0)\"}' > %s/d.jsonl && "
	         "bin/dice-sft -q -m %s/t -x %s/c.safetensors %s/d.jsonl && "
	         PY " tests/gpu/sft-parity.py %s/t %s/c.safetensors --native --device cpu "
	         ">%s/o2; r=$?; sed 's/^/# /' %s/o2; exit $r", dir, dir, dir, dir, dir, dir, dir, dir,
	         dir);
	CHECK(system(cmd) == 0, "text records through the chat template: same as PyTorch");
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 1;
	return test_done();
}
