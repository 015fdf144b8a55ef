/* choose.h: the commit rule of block-diffusion decoding (SPEC §2), written once for the host
 * (lib/sampler.c: sampler_choose, the CPU backend's .denoise) and the GPU (lib/cuda/sample.cu:
 * the .denoise kernel), so that both pick the same positions from the same confidences.
 * Plain C that nvcc also compiles as device code; decoding is enum sampler_decoding's value
 * (0 static, 1 dynamic, 2 sequential). */
#ifndef DICE_CHOOSE_H
#define DICE_CHOOSE_H

#include <stdint.h>

#ifdef __CUDACC__
#define DICE_HD __host__ __device__
#else
#define DICE_HD
#endif

/* Which of the n positions of a block to commit. masked[i]: position i is still masked;
 * conf[i]: its confidence. Sets commit[i] = 1 for the chosen ones (0 elsewhere); returns
 * how many: `sequential` the quota leftmost, `dynamic` every masked position above the
 * threshold when there are at least the quota of them, else (and `static`) the quota most
 * confident, ties to the lowest position; the quota is capped by the masks left. */
static inline DICE_HD int dice_choose(int decoding, int n, const uint8_t *masked,
                                      const float *conf, int quota, float threshold,
                                      uint8_t *commit)
{
	int nm = 0, got = 0;

	for (int i = 0; i < n; i++) {
		commit[i] = 0;
		nm += masked[i];
	}
	if (quota > nm)
		quota = nm;
	if (decoding == 2) {
		for (int i = 0; i < n && got < quota; i++)
			if (masked[i])
				commit[i] = 1, got++;
		return got;
	}
	if (decoding == 1) {
		int above = 0;
		for (int i = 0; i < n; i++)
			above += masked[i] && conf[i] > threshold;
		if (above >= quota) {
			for (int i = 0; i < n; i++)
				if (masked[i] && conf[i] > threshold)
					commit[i] = 1;
			return above;
		}
	}
	while (got < quota) {
		int best = -1;
		for (int i = 0; i < n; i++)
			if (masked[i] && !commit[i] && (best < 0 || conf[i] > conf[best]))
				best = i;
		commit[best] = 1;
		got++;
	}
	return got;
}

/* A block's step once its masked positions are drawn (tok, conf: the draws; conf 0 where not
 * masked): dice_choose's positions committed into the block's arrays (x = the draw, msk = 0,
 * step = gstep, cf = its probability), and out (if not NULL) = the block's ids after. */
static inline DICE_HD void dice_commit(int decoding, int n, int *x, uint8_t *msk, int *step,
                                       float *cf, int gstep, int quota, float threshold,
                                       const int *tok, const float *conf, int *out)
{
	uint8_t commit[32];

	dice_choose(decoding, n, msk, conf, quota, threshold, commit);
	for (int i = 0; i < n; i++) {
		if (commit[i]) {
			x[i] = tok[i];
			msk[i] = 0;
			step[i] = gstep;
			cf[i] = conf[i];
		}
		if (out)
			out[i] = x[i];
	}
}

#endif
