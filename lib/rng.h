/* rng: an explicit, seeded random number generator (xoshiro256**, seeded by splitmix64).
 * The caller owns the state; no global state, never rand(). The same seed gives the same
 * sequence on every machine. The state is 4 words so it can be saved with a checkpoint. */
#ifndef DICE_RNG_H
#define DICE_RNG_H

#include <stdint.h>

struct rng {
	uint64_t s[4];
};

void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_u64(struct rng *r);
uint32_t rng_u32(struct rng *r);
double rng_uniform(struct rng *r);            /* [0, 1) with 53 random bits */
float rng_uniformf(struct rng *r);            /* [0, 1) with 24 random bits */
double rng_normal(struct rng *r);             /* standard normal (Box-Muller, no caching) */
uint64_t rng_below(struct rng *r, uint64_t n);/* uniform in [0, n), unbiased; n > 0 */

#endif
