/* test_ops: the CPU ops (the specification) against hand-computed values and invariants:
 * dtype conversions, the attention mask rule, rmsnorm, rope, swiglu, matmul, attention. */
#include <math.h>
#include <stdlib.h>

#include "ops.h"
#include "rng.h"
#include "test.h"

static void test_dtypes(void)
{
	int bad = 0;
	CHECK(dice_f32_to_bf16(1.0f) == 0x3f80 && dice_bf16_to_f32(0x3f80) == 1.0f, "bf16 1.0");
	CHECK(dice_f32_to_bf16(1.00390625f) == 0x3f80, "bf16 ties to even (down)");
	CHECK(dice_f32_to_bf16(1.01171875f) == 0x3f82, "bf16 ties to even (up)");
	CHECK(dice_f32_to_f16(1.0f) == 0x3c00 && dice_f16_to_f32(0x3c00) == 1.0f, "f16 1.0");
	CHECK(dice_f32_to_f16(65504.0f) == 0x7bff && dice_f32_to_f16(1e6f) == 0x7c00, "f16 max, overflow");
	CHECK(dice_f16_to_f32(0x0001) == ldexpf(1, -24), "f16 smallest subnormal");
	CHECK(dice_f32_to_f16(ldexpf(1, -25)) == 0 && dice_f32_to_f16(ldexpf(3, -26)) == 1,
	      "f16 subnormal rounding");
	for (uint32_t h = 0; h < 0x7c00; h++)  /* every finite positive half round-trips */
		bad += dice_f32_to_f16(dice_f16_to_f32((uint16_t)h)) != h;
	CHECK(bad == 0, "f16 round trip of every finite value");
	bad = 0;
	for (uint32_t h = 0; h < 0x7f80; h += 7)
		bad += dice_f32_to_bf16(dice_bf16_to_f32((uint16_t)h)) != h;
	CHECK(bad == 0, "bf16 round trip");
}

static void test_mask(void)
{
	int pos[12] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 };
	struct attn_mask m = { .block = 4, .qpos = pos, .kpos = pos };

	CHECK(attn_allowed(&m, 0, 3) && attn_allowed(&m, 5, 7) && !attn_allowed(&m, 3, 4),
	      "block-causal: own block both ways, no later block");
	CHECK(attn_allowed(&m, 9, 0), "block-causal: earlier blocks");
	/* SFT: [x_t (pos 0..7) | x_0 (pos 0..7)] */
	int p2[16] = { 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7 };
	uint8_t nz[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0 };
	struct attn_mask s = { .block = 4, .qpos = p2, .kpos = p2, .qnoisy = nz, .knoisy = nz };
	CHECK(attn_allowed(&s, 4, 7) && !attn_allowed(&s, 4, 0), "noisy->noisy same block only");
	CHECK(attn_allowed(&s, 4, 8) && !attn_allowed(&s, 4, 12), "noisy->clean strictly earlier");
	CHECK(attn_allowed(&s, 12, 15) && attn_allowed(&s, 12, 8) && !attn_allowed(&s, 8, 12),
	      "clean->clean block-causal");
	CHECK(!attn_allowed(&s, 12, 4) && !attn_allowed(&s, 8, 0), "clean->noisy never");
	int seg[12] = { 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1 };
	struct attn_mask p = { .block = 4, .qpos = pos, .kpos = pos, .qseg = seg, .kseg = seg };
	CHECK(!attn_allowed(&p, 8, 0) && attn_allowed(&p, 8, 6), "packed samples never cross");
}

static void test_ops(void)
{
	const struct ops *o = ops_get("cpu");
	struct rng r;
	float x[2 * 8], y[2 * 8], w[8];

	rng_seed(&r, 1);
	CHECK(o == &ops_cpu && ops_get("nope") == NULL, "ops_get");
	for (int i = 0; i < 16; i++)
		x[i] = (float)rng_normal(&r);
	for (int i = 0; i < 8; i++)
		w[i] = 1.0f;
	o->rmsnorm(y, x, w, DICE_F32, 2, 8, 0.0f);
	float ss = 0;
	for (int i = 0; i < 8; i++)
		ss += y[8 + i] * y[8 + i];
	CHECK_NEAR(ss / 8, 1.0, 1e-5, "rmsnorm gives unit rms");

	/* rope: norm-preserving per pair, identity at position 0, rotation by pos at HD=2 */
	float q[4] = { 1, 0, 1, 0 };
	int pos[2] = { 0, 1 };
	o->rope(q, pos, 2, 1, 2, 10000.0f);
	CHECK(q[0] == 1 && q[1] == 0, "rope at position 0 is the identity");
	CHECK_NEAR(q[2], cos(1.0), 1e-6, "rope rotates by pos*inv_freq (cos)");
	CHECK_NEAR(q[3], sin(1.0), 1e-6, "rope rotates by pos*inv_freq (sin)");

	float g[2] = { 0.0f, 2.0f }, u[2] = { 3.0f, 0.5f }, s[2];
	o->swiglu(s, g, u, 1, 2);
	CHECK(s[0] == 0.0f, "swiglu silu(0) = 0");
	CHECK_NEAR(s[1], 2.0 / (1 + exp(-2.0)) * 0.5, 1e-6, "swiglu value");

	/* matmul against a direct double sum, weights in bf16 */
	uint16_t wb[3 * 8];
	float wf[3 * 8], mm[2 * 3];
	for (int i = 0; i < 24; i++) {
		wb[i] = dice_f32_to_bf16((float)rng_normal(&r));
		wf[i] = dice_bf16_to_f32(wb[i]);
	}
	o->matmul(mm, x, wb, DICE_BF16, 2, 8, 3);
	double d = 0;
	for (int i = 0; i < 8; i++)
		d += (double)x[8 + i] * wf[16 + i];
	CHECK_NEAR(mm[5], d, 1e-5, "matmul bf16 weights (Linear layout)");

	/* attention: one visible key returns its value; GQA head mapping */
	int kp[8] = { 0, 1, 2, 3, 4, 5, 6, 7 }, qp[1] = { 1 };
	float kq[1 * 2 * 2] = { 1, 0, 0, 1 }, kk[8 * 1 * 2], vv[8 * 1 * 2], out[4];
	for (int i = 0; i < 16; i++) {
		kk[i] = (float)rng_normal(&r);
		vv[i] = (float)i;
	}
	struct attn_mask m = { .block = 1, .qpos = qp, .kpos = kp };
	o->attention(out, kq, kk, vv, 1, 8, 2, 1, 2, &m);
	/* block 1: query at pos 1 sees keys 0 and 1 */
	double s0 = (kk[0] * 1) / sqrt(2.0), s1 = (kk[2] * 1) / sqrt(2.0);
	double a0 = exp(s0) / (exp(s0) + exp(s1));
	CHECK_NEAR(out[0], a0 * vv[0] + (1 - a0) * vv[2], 1e-5, "attention softmax over visible keys");
	int qp0[1] = { 0 };
	m.qpos = qp0;
	o->attention(out, kq, kk, vv, 1, 8, 2, 1, 2, &m);
	CHECK(out[0] == vv[0] && out[3] == vv[1], "attention with one visible key returns its value");

	float cp[4] = { 0 };
	o->copy(cp, vv + 2, sizeof cp);
	CHECK(cp[0] == vv[2] && cp[3] == vv[5], "copy within backend memory");
}

int main(void)
{
	test_dtypes();
	test_mask();
	test_ops();
	return test_done();
}
