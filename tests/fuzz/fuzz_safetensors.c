/* fuzz_safetensors: libFuzzer target for the safetensors header validator
 * (lib/safetensors.c). Any input must give a clean open or a clean error; every tensor of a
 * clean open must lie inside the input. Build and run: sh tests/fuzz/run.sh safetensors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct safetensors st;
	char err[512];

	if (safetensors_open_buffer(&st, "fuzz", data, size, err, sizeof err) < 0)
		return 0;
	for (size_t i = 0; i < st.ntensors; i++) {
		const struct st_tensor *t = &st.tensors[i];
		const uint8_t *p = t->data;
		volatile uint8_t sink = 0;

		if (!t->owned && (p < data || p + t->nbytes > data + size))
			abort();
		for (size_t j = 0; j < t->nbytes; j++)
			sink ^= p[j];
		(void)sink;
	}
	safetensors_close(&st);
	return 0;
}
