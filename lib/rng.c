/* rng: xoshiro256** (Blackman and Vigna) seeded through splitmix64. See rng.h. */
#include <math.h>

#include "rng.h"

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t rng_u64(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

uint32_t rng_u32(struct rng *r)
{
	return (uint32_t)(rng_u64(r) >> 32);
}

double rng_uniform(struct rng *r)
{
	return (double)(rng_u64(r) >> 11) * 0x1.0p-53;
}

float rng_uniformf(struct rng *r)
{
	return (float)(rng_u64(r) >> 40) * 0x1.0p-24f;
}

double rng_normal(struct rng *r)
{
	double u1 = 1.0 - rng_uniform(r);   /* (0, 1] */
	double u2 = rng_uniform(r);
	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t rng_below(struct rng *r, uint64_t n)
{
	uint64_t lim = -n % n, x;   /* reject the low 2^64 mod n values */

	do
		x = rng_u64(r);
	while (x < lim);
	return x % n;
}
