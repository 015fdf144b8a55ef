/* gt_model.h: the small random SDAR-shaped model of the engine-forward tests
 * (tests/gpu/test_model_*.cu): vocabulary 1000, C 512, 8 query heads and 2 kv heads of 128,
 * I 1536, 2 layers, untied lm_head, random weights of the given seed, on the CUDA backend in
 * dt, its 16-bit products packed (model_pack). Include after gpu_test.h. */
#ifndef DICE_GT_MODEL_H
#define DICE_GT_MODEL_H

extern "C" {
#include "checkpoint.h"
#include "model.h"
}

static void gt_model(struct model *m, enum dice_dtype dt, uint64_t seed)
{
	struct model_config c;
	struct model_weights w;

	config_tiny(&c, 1000);
	c.hidden_size = 512, c.num_heads = 8, c.num_kv_heads = 2, c.head_dim = 128;
	c.intermediate_size = 1536, c.num_layers = 2, c.rope_theta = 1e6f;
	c.tie_word_embeddings = 0, c.dtype = DICE_F32;
	float *mem = model_weights_random(&w, &c, seed);
	CHECK(model_init(m, &c, &w, G, dt) == 0, "model_init");
	/* the products' packed copies, which forwards of up to 32 rows read (DICE_PACK=0: none) */
	const char *e = getenv("DICE_PACK");
	if (dt != DICE_F32 && !(e && !strcmp(e, "0")))
		CHECK(model_pack(m) == 4 * c.num_layers + 1, "model_pack");
	free(mem);
	free(w.layers);
}

#endif
