/* fuzz_config: libFuzzer target for config.json parsing and validation (lib/config.c).
 * Build and run: sh tests/fuzz/run.sh config. */
#include <stdint.h>
#include <stdlib.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct model_config c;
	char err[512];

	if (config_parse(&c, (const char *)data, size, "fuzz", err, sizeof err) == 0 &&
	    config_validate(&c, "fuzz", err, sizeof err) != 0)
		abort();   /* parse promised a valid config */
	return 0;
}
