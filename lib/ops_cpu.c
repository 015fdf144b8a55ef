/* ops_cpu: the CPU backend of lib/ops.h in plain fp32 loops. This file is the specification
 * of every op: the CUDA backend (lib/cuda/) is tested against it. Clarity over speed; the
 * only concession is converting a weight row once per output feature in matmul.
 * Also: dtype conversions, the attention mask rule, and backend lookup (ops_get). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choose.h"
#include "ops.h"
#include "ops_bwd_cpu.h"
#include "util.h"

/* ---------------------------------------------------------------- dtypes */

size_t dice_dtype_size(enum dice_dtype dt)
{
	return dt == DICE_F32 ? 4 : 2;
}

float dice_bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

uint16_t dice_f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffff) > 0x7f800000)      /* NaN: keep it a quiet NaN */
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fff + ((u >> 16) & 1);          /* round to nearest even */
	return (uint16_t)(u >> 16);
}

float dice_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	int exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff, u;
	float f;

	if (exp == 0) {
		f = ldexpf((float)man, -24);
		return sign ? -f : f;
	}
	if (exp == 31)
		u = sign | 0x7f800000 | (man << 13);
	else
		u = sign | ((uint32_t)(exp - 15 + 127) << 23) | (man << 13);
	memcpy(&f, &u, 4);
	return f;
}

uint16_t dice_f32_to_f16(float f)
{
	uint32_t u, sign, man;
	int exp;

	memcpy(&u, &f, 4);
	sign = (u >> 16) & 0x8000;
	exp = (int)((u >> 23) & 0xff) - 127 + 15;
	man = u & 0x7fffff;
	if (((u >> 23) & 0xff) == 0xff)                 /* inf or NaN */
		return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
	if (exp >= 31)
		return (uint16_t)(sign | 0x7c00);
	if (exp <= 0) {                                  /* subnormal or zero */
		if (exp < -10)
			return (uint16_t)sign;
		man |= 0x800000;
		int shift = 14 - exp;
		uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
		if (rem > mid || (rem == mid && (half & 1)))
			half++;
		return (uint16_t)(sign | half);
	}
	uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13);
	uint32_t rem = man & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
		h++;                                     /* may carry into the exponent: correct */
	return (uint16_t)h;
}

static inline float load_w(const void *w, enum dice_dtype dt, size_t i)
{
	switch (dt) {
	case DICE_F32: return ((const float *)w)[i];
	case DICE_BF16: return dice_bf16_to_f32(((const uint16_t *)w)[i]);
	case DICE_F16: return dice_f16_to_f32(((const uint16_t *)w)[i]);
	}
	return 0;
}

/* ---------------------------------------------------------------- mask rule */

int attn_allowed(const struct attn_mask *m, int i, int j)
{
	int qb = m->qpos[i] / m->block, kb = m->kpos[j] / m->block;

	if (m->qseg && m->kseg && m->qseg[i] != m->kseg[j])
		return 0;
	if (!m->qnoisy || !m->knoisy)
		return kb <= qb;
	if (m->qnoisy[i])
		return m->knoisy[j] ? kb == qb : kb < qb;
	return m->knoisy[j] ? 0 : kb <= qb;
}

/* ---------------------------------------------------------------- ops */

static void cpu_matmul(float *y, const float *x, const void *w, enum dice_dtype wdt,
                       int N, int in, int out)
{
	float *row = xmalloc((size_t)in * sizeof *row);

	for (int o = 0; o < out; o++) {
		for (int i = 0; i < in; i++)
			row[i] = load_w(w, wdt, (size_t)o * in + i);
		for (int n = 0; n < N; n++) {
			const float *xn = x + (size_t)n * in;
			float acc = 0.0f;
			for (int i = 0; i < in; i++)
				acc += xn[i] * row[i];
			y[(size_t)n * out + o] = acc;
		}
	}
	free(row);
}

static void cpu_rmsnorm(float *y, const float *x, const void *w, enum dice_dtype wdt,
                        int N, int C, float eps)
{
	for (int n = 0; n < N; n++) {
		const float *xn = x + (size_t)n * C;
		float *yn = y + (size_t)n * C;
		float ss = 0.0f;
		for (int c = 0; c < C; c++)
			ss += xn[c] * xn[c];
		float r = 1.0f / sqrtf(ss / (float)C + eps);
		for (int c = 0; c < C; c++)
			yn[c] = xn[c] * r * load_w(w, wdt, (size_t)c);
	}
}

/* Each head's halves of x turned by the angle of its position (back: the opposite way,
 * RoPE's backward: the same angles, sin negated, so the same bits as before). */
void cpu_rope_turn(float *x, const int *pos, int N, int NH, int HD, float theta, int back)
{
	int half = HD / 2;

	for (int n = 0; n < N; n++) {
		for (int j = 0; j < half; j++) {
			/* as transformers: inv_freq and the angle in fp32 */
			float inv_freq = 1.0f / powf(theta, (float)(2 * j) / (float)HD);
			float ang = (float)pos[n] * inv_freq;
			float c = cosf(ang), s = back ? -sinf(ang) : sinf(ang);
			for (int h = 0; h < NH; h++) {
				float *xh = x + ((size_t)n * NH + h) * HD;
				float x1 = xh[j], x2 = xh[j + half];
				xh[j] = x1 * c - x2 * s;
				xh[j + half] = x2 * c + x1 * s;
			}
		}
	}
}

static void cpu_rope(float *x, const int *pos, int N, int NH, int HD, float theta)
{
	cpu_rope_turn(x, pos, N, NH, HD, theta, 0);
}

static void cpu_swiglu(float *y, const float *gate, const float *up, int N, int C)
{
	size_t n = (size_t)N * C;
	for (size_t i = 0; i < n; i++) {
		float g = gate[i];
		y[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

static void cpu_add(float *y, const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] += x[i];
}

/* Attention probabilities of query t (row qh, kv head kh) over the S keys into p(S):
 * softmax of the scaled scores over the visible keys, 0 for the masked ones. Returns 0, or
 * -1 when the query sees no key (p then undefined). Shared with the backward. */
int cpu_attn_probs(float *p, const float *qh, const float *k, int t, int S, int NKV, int kh,
                   int HD, const struct attn_mask *m)
{
	float scale = 1.0f / sqrtf((float)HD), mx = -INFINITY, sum = 0.0f;

	for (int s = 0; s < S; s++) {
		if (!attn_allowed(m, t, s)) {
			p[s] = -INFINITY;
			continue;
		}
		const float *ks = k + ((size_t)s * NKV + kh) * HD;
		float d = 0.0f;
		for (int c = 0; c < HD; c++)
			d += qh[c] * ks[c];
		p[s] = d * scale;
		if (p[s] > mx)
			mx = p[s];
	}
	if (mx == -INFINITY)
		return -1;
	for (int s = 0; s < S; s++) {
		p[s] = p[s] == -INFINITY ? 0.0f : expf(p[s] - mx);
		sum += p[s];
	}
	for (int s = 0; s < S; s++)
		if (p[s] != 0.0f)
			p[s] /= sum;
	return 0;
}

static void cpu_attention(float *out, const float *q, const float *k, const float *v,
                          int T, int S, int NH, int NKV, int HD, const struct attn_mask *m)
{
	float *p = xmalloc((size_t)(S ? S : 1) * sizeof *p);
	int group = NH / NKV;

	for (int t = 0; t < T; t++) {
		for (int h = 0; h < NH; h++) {
			const float *qh = q + ((size_t)t * NH + h) * HD;
			float *oh = out + ((size_t)t * NH + h) * HD;
			int kh = h / group;

			memset(oh, 0, (size_t)HD * sizeof *oh);
			if (cpu_attn_probs(p, qh, k, t, S, NKV, kh, HD, m) < 0)
				continue;
			for (int s = 0; s < S; s++) {
				if (p[s] == 0.0f)
					continue;
				const float *vs = v + ((size_t)s * NKV + kh) * HD;
				for (int c = 0; c < HD; c++)
					oh[c] += p[s] * vs[c];
			}
		}
	}
	free(p);
}

static void cpu_embed(float *y, const int *ids, const void *w, enum dice_dtype wdt, int N, int C)
{
	for (int n = 0; n < N; n++)
		for (int c = 0; c < C; c++)
			y[(size_t)n * C + c] = load_w(w, wdt, (size_t)ids[n] * C + c);
}

/* ---------------------------------------------------------------- sampling */

struct ranked {
	float e;
	int i;
};

/* k-th largest (0-based k) of a[0..n), reordering a */
static float kth_largest(float *a, int n, int k)
{
	int lo = 0, hi = n - 1;

	while (lo < hi) {
		float piv = a[lo + (hi - lo) / 2];
		int i = lo, j = hi;
		while (i <= j) {
			while (a[i] > piv)
				i++;
			while (a[j] < piv)
				j--;
			if (i <= j) {
				float t = a[i];
				a[i++] = a[j];
				a[j--] = t;
			}
		}
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			return a[k];
	}
	return a[k];
}

static int ranked_cmp(const void *pa, const void *pb)
{
	const struct ranked *a = pa, *b = pb;
	if (a->e != b->e)
		return a->e > b->e ? -1 : 1;
	return a->i - b->i;
}

int sample_draw(const float *logits, int V, float temperature, int top_k, float top_p, double u,
                float *prob, float *work)
{
	float *e = work;
	struct ranked *rk = (struct ranked *)(work + V);
	float thr = -INFINITY, mx = -INFINITY;
	double sum = 0, target, acc = 0;
	int tok = -1;

	for (int i = 0; i < V; i++) {
		e[i] = temperature == 1.0f ? logits[i] : logits[i] / temperature;
		if (e[i] > mx)
			mx = e[i];
	}
	if (top_k == 1) {
		thr = mx;
	} else if (top_k > 0 && top_k < V) {
		float *tmp = (float *)rk;
		memcpy(tmp, e, (size_t)V * sizeof *tmp);
		thr = kth_largest(tmp, V, top_k - 1);
	}
	for (int i = 0; i < V; i++) {
		e[i] = e[i] >= thr ? expf(e[i] - mx) : 0.0f;
		sum += e[i];
	}
	if (top_p < 1.0f) {
		int n = 0;
		double cum = 0;
		for (int i = 0; i < V; i++)
			if (e[i] > 0.0f)
				rk[n++] = (struct ranked){ e[i], i };
		qsort(rk, (size_t)n, sizeof *rk, ranked_cmp);
		/* drop the sorted tail once the cumulative probability before it exceeds top_p */
		for (int j = 0; j < n; j++) {
			if (j > 0 && cum / sum > top_p)
				e[rk[j].i] = 0.0f;
			cum += rk[j].e;
		}
		sum = 0;
		for (int i = 0; i < V; i++)
			sum += e[i];
	}
	target = u * sum;
	for (int i = 0; i < V; i++) {
		if (e[i] <= 0.0f)
			continue;
		tok = i;
		acc += e[i];
		if (acc > target)
			break;
	}
	*prob = (float)(e[tok] / sum);
	return tok;
}

static void cpu_sample(int *tok, float *prob, const float *logits, const int *rows,
                       const double *u, int R, int V, float temperature, int top_k, float top_p)
{
	float *work = xmalloc((size_t)V * 3 * sizeof *work);

	for (int r = 0; r < R; r++)
		tok[r] = sample_draw(logits + (size_t)(rows ? rows[r] : r) * V, V, temperature, top_k,
		                     top_p, u[r], &prob[r], work);
	free(work);
}

/* the specification of .denoise: each block's masked positions drawn in position order
 * (sample_draw), then lib/choose.h's rule */
static int cpu_denoise(const float *logits, int V, const struct denoise_seq *ds, int n, int B,
                       const double *u, int nu, int *out, int decoding, float threshold,
                       float temperature, int top_k, float top_p)
{
	float *work;

	if (n <= 0 || B < 1 || B > 32)
		return n == 0 ? 0 : -1;
	work = xmalloc((size_t)V * 3 * sizeof *work);
	for (int s = 0; s < n; s++) {
		const struct denoise_seq *d = &ds[s];
		int tok[32], k = d->u0;
		float conf[32];
		for (int j = 0; j < B; j++) {
			tok[j] = d->x[j];
			conf[j] = 0.0f;
			if (d->msk[j] && k < nu)
				tok[j] = sample_draw(logits + (size_t)(d->row + j) * V, V, temperature,
				                     top_k, top_p, u[k++], &conf[j], work);
		}
		dice_commit(decoding, B, d->x, d->msk, d->step, d->conf, d->gstep, d->quota,
		            threshold, tok, conf, out + s * B);
	}
	free(work);
	return 0;
}

/* copied at once: every ticket is done */
static long cpu_fetch(void *dst, const void *src, size_t bytes)
{
	memcpy(dst, src, bytes);
	return 1;
}

static void cpu_fetch_wait(long ticket) { (void)ticket; }

/* ---------------------------------------------------------------- cache and fused ops */

static void store_elems(void *dst, enum dice_dtype dt, const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (dt == DICE_F32)
			((float *)dst)[i] = x[i];
		else if (dt == DICE_BF16)
			((uint16_t *)dst)[i] = dice_f32_to_bf16(x[i]);
		else
			((uint16_t *)dst)[i] = dice_f32_to_f16(x[i]);
	}
}

/* element offset of position p of layer l in sequence s's cache */
static size_t kv_at(const struct kv_batch *b, int s, int l, int p, int KVD)
{
	return ((size_t)l * b->cap[s] + (size_t)p) * KVD;
}

static void cpu_kv_append(const struct kv_batch *b, int l, const float *k, const float *v,
                          int NKV, int HD)
{
	size_t es = dice_dtype_size(b->dt);
	int KVD = NKV * HD;

	for (int s = 0; s < b->nseq; s++) {
		int r0 = b->row0[s], T = b->row0[s + 1] - r0;
		size_t at = kv_at(b, s, l, b->len[s], KVD) * es, n = (size_t)T * KVD;
		store_elems((char *)b->k[s] + at, b->dt, k + (size_t)r0 * KVD, n);
		store_elems((char *)b->v[s] + at, b->dt, v + (size_t)r0 * KVD, n);
	}
}

/* the attention of each sequence as its own .attention call (what the engine did before the
 * batched op: bitwise the same on an fp32 cache) */
static void cpu_attention_kv(float *out, const float *q, const struct kv_batch *b, int l,
                             int NH, int NKV, int HD, int block)
{
	int KVD = NKV * HD, *pos = xmalloc((size_t)(b->maxS > 0 ? b->maxS : 1) * sizeof *pos);
	float *kf = NULL, *vf = NULL;

	for (int i = 0; i < b->maxS; i++)
		pos[i] = i;
	if (b->dt != DICE_F32) {
		kf = xmalloc((size_t)b->maxS * KVD * sizeof *kf + 1);
		vf = xmalloc((size_t)b->maxS * KVD * sizeof *vf + 1);
	}
	for (int s = 0; s < b->nseq; s++) {
		int r0 = b->row0[s], T = b->row0[s + 1] - r0, S = b->len[s] + T;
		size_t at = kv_at(b, s, l, 0, KVD);
		const float *kl = (const float *)b->k[s] + at, *vl = (const float *)b->v[s] + at;
		struct attn_mask m = { .block = block, .qpos = pos + b->len[s], .kpos = pos };
		if (T == 0)
			continue;
		if (b->dt != DICE_F32) {
			for (size_t i = 0; i < (size_t)S * KVD; i++) {
				kf[i] = load_w(b->k[s], b->dt, at + i);
				vf[i] = load_w(b->v[s], b->dt, at + i);
			}
			kl = kf;
			vl = vf;
		}
		cpu_attention(out + (size_t)r0 * NH * HD, q + (size_t)r0 * NH * HD, kl, vl, T, S, NH,
		              NKV, HD, &m);
	}
	free(pos);
	free(kf);
	free(vf);
}

static void cpu_qkv_prep(float *q, const float *qkv, const float *qw, const float *kw, const int *pos,
                         const struct kv_batch *b, int l, int NH, int NKV, int HD, float eps,
                         float theta)
{
	int N = b->N, QD = NH * HD, KVD = NKV * HD, W = QD + 2 * KVD;
	float *k = xmalloc((size_t)N * KVD * sizeof *k + 1), *v = xmalloc((size_t)N * KVD * sizeof *v + 1);

	for (int n = 0; n < N; n++) {
		const float *row = qkv + (size_t)n * W;
		memcpy(q + (size_t)n * QD, row, (size_t)QD * sizeof *q);
		memcpy(k + (size_t)n * KVD, row + QD, (size_t)KVD * sizeof *k);
		memcpy(v + (size_t)n * KVD, row + QD + KVD, (size_t)KVD * sizeof *v);
	}
	cpu_rmsnorm(q, q, qw, DICE_F32, N * NH, HD, eps);
	cpu_rmsnorm(k, k, kw, DICE_F32, N * NKV, HD, eps);
	cpu_rope(q, pos, N, NH, HD, theta);
	cpu_rope(k, pos, N, NKV, HD, theta);
	cpu_kv_append(b, l, k, v, NKV, HD);
	free(k);
	free(v);
}

static void cpu_swiglu_cat(float *y, const float *gu, int N, int C)
{
	for (int n = 0; n < N; n++) {
		const float *g = gu + (size_t)n * 2 * C;
		cpu_swiglu(y + (size_t)n * C, g, g + C, 1, C);
	}
}

static void cpu_matmul_fixed_glu(float *y, float *h, const float *gu, const void *w,
                                 enum dice_dtype wdt, int N, int I, int out)
{
	cpu_swiglu_cat(h, gu, N, I);
	cpu_matmul(y, h, w, wdt, N, I, out);
}

static int cpu_matmul_fixed_gu(float *gu, float *h, const float *x, const void *w,
                               enum dice_dtype wdt, int N, int in, int I)
{
	cpu_matmul(gu, x, w, wdt, N, in, 2 * I);
	cpu_swiglu_cat(h, gu, N, I);
	return 1;
}

static void cpu_add_rmsnorm(float *y, float *x, const float *r, const float *w, int N, int C,
                            float eps)
{
	cpu_add(x, r, (size_t)N * C);
	cpu_rmsnorm(y, x, w, DICE_F32, N, C, eps);
}

static void cpu_cast_bf16(void *dst, const float *src, size_t n)
{
	uint16_t *d = dst;
	for (size_t i = 0; i < n; i++)
		d[i] = dice_f32_to_bf16(src[i]);
}

static void cpu_adamw_multi(const struct adamw_tensor *t, int nt, const struct adamw_step *s)
{
	struct adamw_step st = *s;

	for (int i = 0; i < nt; i++) {
		st.weight_decay = t[i].weight_decay;
		cpu_adamw(t[i].p, t[i].m, t[i].v, t[i].g, t[i].n, &st);
		if (t[i].lp)
			cpu_cast_bf16(t[i].lp, t[i].p, t[i].n);
	}
}

/* xb(n) bf16 widened to a new fp32 array */
static float *widen_bf16(const void *xb, size_t n)
{
	float *x = xmalloc((n ? n : 1) * sizeof *x);
	for (size_t i = 0; i < n; i++)
		x[i] = dice_bf16_to_f32(((const uint16_t *)xb)[i]);
	return x;
}

static void cpu_matmul_xb(float *y, const void *xb, const void *w, int N, int in, int out,
                          int acc)
{
	size_t ny = (size_t)N * out;
	float *x = widen_bf16(xb, (size_t)N * in), *d = acc ? xmalloc((ny ? ny : 1) * sizeof *d) : y;

	cpu_matmul(d, x, w, DICE_BF16, N, in, out);
	if (d != y) {
		cpu_add(y, d, ny);
		free(d);
	}
	free(x);
}

static void cpu_matmul_backward_xb(float *dx, float *dw, const float *dy, const void *xb,
                                   const void *w, int N, int in, int out, int dx_acc)
{
	size_t nx = (size_t)N * in;
	float *x = widen_bf16(xb, nx), *d = dx && dx_acc ? xmalloc((nx ? nx : 1) * sizeof *d) : dx;

	cpu_matmul_backward(d, dw, dy, x, w, DICE_BF16, N, in, out);
	if (d != dx) {
		cpu_add(dx, d, nx);
		free(d);
	}
	free(x);
}

static void cpu_matmul_backward_xbb(float *dx, float *dw, const void *dyb, const void *xb,
                                    const void *w, int N, int in, int out, int dx_acc)
{
	float *dy = widen_bf16(dyb, (size_t)N * out);

	cpu_matmul_backward_xb(dx, dw, dy, xb, w, N, in, out, dx_acc);
	free(dy);
}

static void cpu_swiglu_backward_xb(void *dgate, void *dup, const float *dy, const float *gate,
                                   const float *up, int N, int C)
{
	size_t n = (size_t)N * C;
	float *dg = xmalloc((n ? n : 1) * 2 * sizeof *dg), *du = dg + n;

	cpu_swiglu_backward(dg, du, dy, gate, up, N, C);
	cpu_cast_bf16(dgate, dg, n);
	cpu_cast_bf16(dup, du, n);
	free(dg);
}

/* a row at a time through a row of scratch, then added */
static void cpu_rmsnorm_backward_add(float *dres, void *dresb, float *dw, const float *dy,
                                     const float *x, const void *w, enum dice_dtype wdt, int N,
                                     int C, float eps)
{
	float *row = xmalloc((size_t)C * sizeof *row);

	for (int n = 0; n < N; n++) {
		size_t o = (size_t)n * C;
		cpu_rmsnorm_backward(row, dw, dy + o, x + o, w, wdt, 1, C, eps);
		cpu_add(dres + o, row, (size_t)C);
	}
	if (dresb)
		cpu_cast_bf16(dresb, dres, (size_t)N * C);
	free(row);
}

static void cpu_rmsnorm_rope(float *y, const float *x, const void *w, enum dice_dtype wdt,
                             const int *pos, int N, int NH, int HD, float theta, float eps)
{
	cpu_rmsnorm(y, x, w, wdt, N * NH, HD, eps);
	cpu_rope(y, pos, N, NH, HD, theta);
}

static void cpu_cast_bf16_rows(void *dst, int ld, const float *src, int N, int C)
{
	for (int n = 0; n < N; n++)
		cpu_cast_bf16((uint16_t *)dst + (size_t)n * ld, src + (size_t)n * C, (size_t)C);
}

static void cpu_rope_rmsnorm_backward(float *dx, void *dxb, int ldb, float *dw, const float *dy,
                                      const float *x, const void *w, enum dice_dtype wdt,
                                      const int *pos, int N, int NH, int HD, float theta,
                                      float eps)
{
	size_t n = (size_t)N * NH * HD;
	float *d = dxb ? xmalloc((n ? n : 1) * sizeof *d) : dx;

	if (d != dy)
		memcpy(d, dy, n * sizeof *d);
	cpu_rope_backward(d, pos, N, NH, HD, theta);
	cpu_rmsnorm_backward(d, dw, d, x, w, wdt, N * NH, HD, eps);
	if (dxb) {
		cpu_cast_bf16_rows(dxb, ldb, d, N, NH * HD);
		free(d);
	}
}

/* the CPU keeps no statistics: stat is left as it is */
static void cpu_attention_tc_stat(float *out, float *stat, const float *q, const float *k,
                                  const float *v, int T, int S, int NH, int NKV, int HD,
                                  const struct attn_mask *m)
{
	cpu_attention(out, q, k, v, T, S, NH, NKV, HD, m);
}

static void cpu_attention_tc_backward_stat(float *dq, float *dk, float *dv, const float *dout,
                                           const float *q, const float *k, const float *v,
                                           const float *out, const float *stat, int T, int S,
                                           int NH, int NKV, int HD, const struct attn_mask *m)
{
	cpu_attention_backward(dq, dk, dv, dout, q, k, v, out, T, S, NH, NKV, HD, m);
}

/* n bf16 values widened into a new fp32 array (freed by the caller) */
static float *cpu_widen_bf16(const void *xb, size_t n)
{
	const uint16_t *h = xb;
	float *x = xmalloc((n ? n : 1) * sizeof *x);

	for (size_t i = 0; i < n; i++)
		x[i] = dice_bf16_to_f32(h[i]);
	return x;
}

static void cpu_attention_tc_stat_bf(float *out, float *stat, const void *qb, const void *kb,
                                     const void *vb, int T, int S, int NH, int NKV, int HD,
                                     const struct attn_mask *m)
{
	size_t nq = (size_t)T * NH * HD, nk = (size_t)S * NKV * HD;
	float *q = cpu_widen_bf16(qb, nq), *k = cpu_widen_bf16(kb, nk), *v = cpu_widen_bf16(vb, nk);

	cpu_attention_tc_stat(out, stat, q, k, v, T, S, NH, NKV, HD, m);
	free(q);
	free(k);
	free(v);
}

static void cpu_attention_tc_backward_stat_bf(float *dq, float *dk, float *dv, const float *dout,
                                              const void *qb, const void *kb, const void *vb,
                                              const float *out, const float *stat, int T, int S,
                                              int NH, int NKV, int HD,
                                              const struct attn_mask *m)
{
	size_t nq = (size_t)T * NH * HD, nk = (size_t)S * NKV * HD;
	float *q = cpu_widen_bf16(qb, nq), *k = cpu_widen_bf16(kb, nk), *v = cpu_widen_bf16(vb, nk);

	cpu_attention_tc_backward_stat(dq, dk, dv, dout, q, k, v, out, stat, T, S, NH, NKV, HD, m);
	free(q);
	free(k);
	free(v);
}

static void cpu_rmsnorm_xb(void *yb, const float *x, const void *w, enum dice_dtype wdt, int N,
                           int C, float eps)
{
	size_t n = (size_t)N * C;
	float *y = xmalloc((n ? n : 1) * sizeof *y);

	cpu_rmsnorm(y, x, w, wdt, N, C, eps);
	cpu_cast_bf16(yb, y, n);
	free(y);
}

static void cpu_swiglu_xb(void *yb, const float *gate, const float *up, int N, int C)
{
	size_t n = (size_t)N * C;
	float *y = xmalloc((n ? n : 1) * sizeof *y);

	cpu_swiglu(y, gate, up, N, C);
	cpu_cast_bf16(yb, y, n);
	free(y);
}

static void cpu_matmul_xbb(void *yb, const void *xb, const void *w, int N, int in, int out)
{
	size_t n = (size_t)N * out;
	float *y = xmalloc((n ? n : 1) * sizeof *y);

	cpu_matmul_xb(y, xb, w, N, in, out, 0);
	cpu_cast_bf16(yb, y, n);
	free(y);
}

static void cpu_swiglu_cat_bb(void *hb, const void *gub, int N, int I)
{
	size_t n = (size_t)N * I;
	float *gu = widen_bf16(gub, 2 * n), *h = xmalloc((n ? n : 1) * sizeof *h);

	cpu_swiglu_cat(h, gu, N, I);
	cpu_cast_bf16(hb, h, n);
	free(h);
	free(gu);
}

/* a row at a time: the gate and up halves of row n are contiguous in gu and dgu */
static void cpu_swiglu_cat_backward_bb(void *dgub, const float *dy, const void *gub, int N, int I)
{
	size_t n = (size_t)N * I;
	float *gu = widen_bf16(gub, 2 * n), *d = xmalloc((n ? 2 * n : 1) * sizeof *d);

	for (int r = 0; r < N; r++) {
		float *g = gu + (size_t)r * 2 * I, *dr = d + (size_t)r * 2 * I;
		cpu_swiglu_backward(dr, dr + I, dy + (size_t)r * I, g, g + I, 1, I);
	}
	cpu_cast_bf16(dgub, d, 2 * n);
	free(d);
	free(gu);
}

static void cpu_cross_entropy_xb(float *loss, void *dlb, const float *logits, const int *target,
                                 const float *weight, int N, int V)
{
	size_t n = (size_t)N * V;
	float *d = xmalloc((n ? n : 1) * sizeof *d);

	cpu_cross_entropy(loss, d, logits, target, weight, N, V);
	cpu_cast_bf16(dlb, d, n);
	free(d);
}

static void cpu_matmul_xb_add(float *y, const void *xb, const void *w, const float *c, int N,
                              int in, int out)
{
	if (y != c)
		memcpy(y, c, (size_t)N * out * sizeof *y);
	cpu_matmul_xb(y, xb, w, N, in, out, 1);
}

static void cpu_rmsnorm_rope_xb(void *yb, const float *x, const void *w, enum dice_dtype wdt,
                                const int *pos, int N, int NH, int HD, float theta, float eps)
{
	size_t n = (size_t)N * NH * HD;
	float *y = xmalloc((n ? n : 1) * sizeof *y);

	cpu_rmsnorm_rope(y, x, w, wdt, pos, N, NH, HD, theta, eps);
	cpu_cast_bf16(yb, y, n);
	free(y);
}

static void *cpu_alloc(size_t bytes) { return xcalloc(1, bytes); }
static void cpu_free(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_sync(void) {}

const struct ops ops_cpu = {
	.name = "cpu",
	.matmul = cpu_matmul,
	.rmsnorm = cpu_rmsnorm,
	.rope = cpu_rope,
	.swiglu = cpu_swiglu,
	.add = cpu_add,
	.attention = cpu_attention,
	.embed = cpu_embed,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.to_host = cpu_copy,
	.to_device = cpu_copy,
	.copy = cpu_copy,
	.sync = cpu_sync,
	.matmul_backward = cpu_matmul_backward,
	.rmsnorm_backward = cpu_rmsnorm_backward,
	.rope_backward = cpu_rope_backward,
	.swiglu_backward = cpu_swiglu_backward,
	.attention_backward = cpu_attention_backward,
	.embed_backward = cpu_embed_backward,
	.cross_entropy = cpu_cross_entropy,
	.zero = cpu_zero,
	.sumsq = cpu_sumsq,
	.adamw = cpu_adamw,
	.sample = cpu_sample,
	.kv_append = cpu_kv_append,
	.attention_kv = cpu_attention_kv,
	.qkv_prep = cpu_qkv_prep,
	.swiglu_cat = cpu_swiglu_cat,
	.add_rmsnorm = cpu_add_rmsnorm,
	.cast_bf16 = cpu_cast_bf16,
	.attention_tc = cpu_attention,
	.attention_tc_backward = cpu_attention_backward,
	.matmul_fixed = cpu_matmul,
	.adamw_multi = cpu_adamw_multi,
	.matmul_xb = cpu_matmul_xb,
	.matmul_backward_xb = cpu_matmul_backward_xb,
	.attention_tc_stat = cpu_attention_tc_stat,
	.attention_tc_backward_stat = cpu_attention_tc_backward_stat,
	.rmsnorm_xb = cpu_rmsnorm_xb,
	.swiglu_xb = cpu_swiglu_xb,
	.matmul_fixed_glu = cpu_matmul_fixed_glu,
	.swiglu_backward_xb = cpu_swiglu_backward_xb,
	.matmul_backward_xbb = cpu_matmul_backward_xbb,
	.rmsnorm_backward_add = cpu_rmsnorm_backward_add,
	.rope_rmsnorm_backward = cpu_rope_rmsnorm_backward,
	.rmsnorm_rope = cpu_rmsnorm_rope,
	.cast_bf16_rows = cpu_cast_bf16_rows,
	.matmul_xbb = cpu_matmul_xbb,
	.swiglu_cat_bb = cpu_swiglu_cat_bb,
	.swiglu_cat_backward_bb = cpu_swiglu_cat_backward_bb,
	.cross_entropy_xb = cpu_cross_entropy_xb,
	.matmul_xb_add = cpu_matmul_xb_add,
	.attention_tc_stat_bf = cpu_attention_tc_stat_bf,
	.attention_tc_backward_stat_bf = cpu_attention_tc_backward_stat_bf,
	.rmsnorm_rope_xb = cpu_rmsnorm_rope_xb,
	.matmul_fixed_gu = cpu_matmul_fixed_gu,
	.denoise = cpu_denoise,
	.fetch = cpu_fetch,
	.fetch_wait = cpu_fetch_wait,
};

/* The CUDA backend defines gpu_ops() (lib/gpu.h) when it is built in (DICE_CUDA); a build
 * without it simply has no "cuda" backend. The reference is strong on purpose: a weak
 * undefined symbol does not pull lib/cuda/backend.o out of libdice.a. */
#ifdef DICE_CUDA
const struct ops *gpu_ops(void);
#endif

const struct ops *ops_get(const char *name)
{
	if (!strcmp(name, "cpu"))
		return &ops_cpu;
#ifdef DICE_CUDA
	if (!strcmp(name, "cuda"))
		return gpu_ops();
#endif
	return NULL;
}

const char *ops_missing(const char *name)
{
#ifdef DICE_CUDA
	if (!strcmp(name, "cuda"))
		return "found: the CUDA backend of this build sees no GPU";
	return "in this build (cpu, cuda)";     /* with a GPU or without */
#else
	return "in this build (cpu)";
#endif
}
