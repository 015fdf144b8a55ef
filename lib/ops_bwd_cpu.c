/* ops_bwd_cpu: the CPU training ops (lib/ops.h, end of struct ops): the backward of every
 * forward op of lib/ops_cpu.c, the weighted cross-entropy of the SFT objective, and the
 * AdamW step. Plain fp32 loops (sums of many terms in double where it is free); this file
 * is the specification of the CUDA twins. Checked by finite differences in
 * tests/lib/test_grad.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_bwd_cpu.h"
#include "util.h"

static inline float wload(const void *w, enum dice_dtype dt, size_t i)
{
	if (dt == DICE_F32)
		return ((const float *)w)[i];
	if (dt == DICE_BF16)
		return dice_bf16_to_f32(((const uint16_t *)w)[i]);
	return dice_f16_to_f32(((const uint16_t *)w)[i]);
}

void cpu_matmul_backward(float *dx, float *dw, const float *dy, const float *x, const void *w,
                         enum dice_dtype wdt, int N, int in, int out)
{
	if (dx) {
		float *row = xmalloc((size_t)in * sizeof *row);
		memset(dx, 0, (size_t)N * in * sizeof *dx);
		for (int o = 0; o < out; o++) {
			for (int i = 0; i < in; i++)
				row[i] = wload(w, wdt, (size_t)o * in + i);
			for (int n = 0; n < N; n++) {
				float g = dy[(size_t)n * out + o];
				float *dxn = dx + (size_t)n * in;
				if (g == 0.0f)
					continue;
				for (int i = 0; i < in; i++)
					dxn[i] += g * row[i];
			}
		}
		free(row);
	}
	if (dw) {
		for (int o = 0; o < out; o++) {
			float *dwo = dw + (size_t)o * in;
			for (int n = 0; n < N; n++) {
				float g = dy[(size_t)n * out + o];
				const float *xn = x + (size_t)n * in;
				if (g == 0.0f)
					continue;
				for (int i = 0; i < in; i++)
					dwo[i] += g * xn[i];
			}
		}
	}
}

/* y = x r w with r = 1/sqrt(mean(x^2) + eps):
 * dx_c = r w_c dy_c - x_c r^3 / C * sum_j dy_j w_j x_j;  dw_c += dy_c x_c r */
void cpu_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const void *w,
                          enum dice_dtype wdt, int N, int C, float eps)
{
	for (int n = 0; n < N; n++) {
		const float *xn = x + (size_t)n * C, *dyn = dy + (size_t)n * C;
		float *dxn = dx + (size_t)n * C;
		float ss = 0.0f, dot = 0.0f;
		for (int c = 0; c < C; c++)
			ss += xn[c] * xn[c];
		float r = 1.0f / sqrtf(ss / (float)C + eps);
		for (int c = 0; c < C; c++)
			dot += dyn[c] * wload(w, wdt, (size_t)c) * xn[c];
		if (dw)
			for (int c = 0; c < C; c++)
				dw[c] += dyn[c] * xn[c] * r;
		float k = r * r * r * dot / (float)C;
		for (int c = 0; c < C; c++)
			dxn[c] = r * wload(w, wdt, (size_t)c) * dyn[c] - k * xn[c];
	}
}

void cpu_rope_backward(float *dx, const int *pos, int N, int NH, int HD, float theta)
{
	cpu_rope_turn(dx, pos, N, NH, HD, theta, 1);
}

/* y = g sigmoid(g) u:  dy/dg = sigmoid(g) (1 + g (1 - sigmoid(g))) u,  dy/du = g sigmoid(g) */
void cpu_swiglu_backward(float *dgate, float *dup, const float *dy, const float *gate,
                         const float *up, int N, int C)
{
	size_t n = (size_t)N * C;
	for (size_t i = 0; i < n; i++) {
		float g = gate[i], sg = 1.0f / (1.0f + expf(-g)), d = dy[i];
		dup[i] = d * g * sg;
		dgate[i] = d * up[i] * sg * (1.0f + g * (1.0f - sg));
	}
}

/* Recomputes the probabilities P of the forward; dP = dout v^T, dS = P (dP - sum P dP),
 * dq = scale dS k, dk = scale dS^T q, dv = P^T dout. out is not needed on the CPU. */
void cpu_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                            const float *k, const float *v, const float *out, int T, int S,
                            int NH, int NKV, int HD, const struct attn_mask *m)
{
	float *p = xmalloc((size_t)(S ? S : 1) * sizeof *p);
	float *dp = xmalloc((size_t)(S ? S : 1) * sizeof *dp);
	float scale = 1.0f / sqrtf((float)HD);
	int group = NH / NKV;

	memset(dq, 0, (size_t)T * NH * HD * sizeof *dq);
	memset(dk, 0, (size_t)S * NKV * HD * sizeof *dk);
	memset(dv, 0, (size_t)S * NKV * HD * sizeof *dv);
	for (int t = 0; t < T; t++) {
		for (int h = 0; h < NH; h++) {
			const float *qh = q + ((size_t)t * NH + h) * HD;
			const float *doh = dout + ((size_t)t * NH + h) * HD;
			float *dqh = dq + ((size_t)t * NH + h) * HD;
			int kh = h / group;
			float dsum = 0.0f;

			if (cpu_attn_probs(p, qh, k, t, S, NKV, kh, HD, m) < 0)
				continue;
			for (int s = 0; s < S; s++) {
				dp[s] = 0.0f;
				if (p[s] == 0.0f)
					continue;
				const float *vs = v + ((size_t)s * NKV + kh) * HD;
				float *dvs = dv + ((size_t)s * NKV + kh) * HD;
				float d = 0.0f;
				for (int c = 0; c < HD; c++) {
					d += doh[c] * vs[c];
					dvs[c] += p[s] * doh[c];
				}
				dp[s] = d;
				dsum += p[s] * d;
			}
			for (int s = 0; s < S; s++) {
				if (p[s] == 0.0f)
					continue;
				float ds = p[s] * (dp[s] - dsum) * scale;
				const float *ks = k + ((size_t)s * NKV + kh) * HD;
				float *dks = dk + ((size_t)s * NKV + kh) * HD;
				for (int c = 0; c < HD; c++) {
					dqh[c] += ds * ks[c];
					dks[c] += ds * qh[c];
				}
			}
		}
	}
	(void)out;
	free(p);
	free(dp);
}

void cpu_embed_backward(float *dw, const int *ids, const float *dy, int N, int C)
{
	for (int n = 0; n < N; n++) {
		float *row = dw + (size_t)ids[n] * C;
		const float *d = dy + (size_t)n * C;
		for (int c = 0; c < C; c++)
			row[c] += d[c];
	}
}

void cpu_cross_entropy(float *loss, float *dlogits, const float *logits, const int *target,
                       const float *weight, int N, int V)
{
	for (int n = 0; n < N; n++) {
		const float *l = logits + (size_t)n * V;
		float *d = dlogits + (size_t)n * V;
		float mx = -INFINITY, w = weight[n];
		double sum = 0.0;

		if (target[n] < 0) {
			loss[n] = 0.0f;
			memset(d, 0, (size_t)V * sizeof *d);
			continue;
		}
		for (int i = 0; i < V; i++)
			if (l[i] > mx)
				mx = l[i];
		for (int i = 0; i < V; i++)
			sum += exp((double)(l[i] - mx));
		float lse = mx + (float)log(sum);
		loss[n] = w * (lse - l[target[n]]);
		for (int i = 0; i < V; i++)
			d[i] = w * expf(l[i] - lse);
		d[target[n]] -= w;
	}
}

void cpu_zero(void *p, size_t bytes)
{
	memset(p, 0, bytes);
}

double cpu_sumsq(const float *x, size_t n)
{
	double s = 0.0;
	for (size_t i = 0; i < n; i++)
		s += (double)x[i] * x[i];
	return s;
}

void cpu_adamw(float *p, float *m, float *v, const float *g, size_t n, const struct adamw_step *s)
{
	float b1 = s->beta1, b2 = s->beta2;
	float bc1 = 1.0f - powf(b1, (float)s->step), bc2 = 1.0f - powf(b2, (float)s->step);
	float step_size = s->lr / bc1, bc2_sqrt = sqrtf(bc2), decay = 1.0f - s->lr * s->weight_decay;

	for (size_t i = 0; i < n; i++) {
		float gi = g[i] * s->gscale;
		p[i] *= decay;
		m[i] = b1 * m[i] + (1.0f - b1) * gi;
		v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
		p[i] -= step_size * m[i] / (sqrtf(v[i]) / bc2_sqrt + s->eps);
	}
}
