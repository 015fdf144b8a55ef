/* model: the SDAR transformer forward (SPEC §1.1, §1.3), written once against lib/ops.h.
 *
 * model_init copies the weights to the backend in one allocation; model_forward packs the new
 * rows of several sequences, runs the matrix products on all of them at once and attention per
 * sequence against its KV cache (struct kvcache) under the block-causal rule. Logits are
 * computed only for the sequences that ask for them. No logit shift: the logit at a position
 * predicts that position's token.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "rng.h"
#include "util.h"

#define ALIGN 256

/* ---------------------------------------------------------------- weights */

enum wkind { WK_MAT, WK_NORM };

struct wdesc {
	struct wref *dst;
	const struct wref *src;
	size_t n;                    /* elements */
	enum wkind kind;
	const char *name;
};

static int weight_list(struct wdesc *d, struct model_weights *dst, const struct model_weights *src,
                       const struct model_config *c)
{
	size_t C = (size_t)c->hidden_size, QD = (size_t)c->num_heads * c->head_dim;
	size_t KVD = (size_t)c->num_kv_heads * c->head_dim, I = (size_t)c->intermediate_size;
	size_t HD = (size_t)c->head_dim, V = (size_t)c->vocab_size;
	int n = 0;

#define W(D, S, N, K, NAME) (d[n++] = (struct wdesc){ &(D), &(S), (N), (K), (NAME) })
	W(dst->embed, src->embed, V * C, WK_MAT, "embed_tokens");
	for (int l = 0; l < c->num_layers; l++) {
		struct layer_weights *a = &dst->layers[l];
		const struct layer_weights *b = &src->layers[l];
		W(a->input_norm, b->input_norm, C, WK_NORM, "input_layernorm");
		W(a->q_proj, b->q_proj, QD * C, WK_MAT, "q_proj");
		W(a->k_proj, b->k_proj, KVD * C, WK_MAT, "k_proj");
		W(a->v_proj, b->v_proj, KVD * C, WK_MAT, "v_proj");
		W(a->o_proj, b->o_proj, C * QD, WK_MAT, "o_proj");
		W(a->q_norm, b->q_norm, HD, WK_NORM, "q_norm");
		W(a->k_norm, b->k_norm, HD, WK_NORM, "k_norm");
		W(a->post_norm, b->post_norm, C, WK_NORM, "post_attention_layernorm");
		W(a->gate_proj, b->gate_proj, I * C, WK_MAT, "gate_proj");
		W(a->up_proj, b->up_proj, I * C, WK_MAT, "up_proj");
		W(a->down_proj, b->down_proj, C * I, WK_MAT, "down_proj");
	}
	W(dst->final_norm, src->final_norm, C, WK_NORM, "norm");
	if (!c->tie_word_embeddings && src->lm_head.p)
		W(dst->lm_head, src->lm_head, V * C, WK_MAT, "lm_head");
#undef W
	return n;
}

static size_t align_up(size_t n)
{
	return (n + ALIGN - 1) / ALIGN * ALIGN;
}

/* Bytes from a weight's start to the next one's: ALIGN-aligned, except that q_proj, k_proj,
 * v_proj (and gate_proj, up_proj) follow each other without a gap when their sizes keep
 * 16-byte alignment, so that one matrix product serves the three (the two). */
static size_t weight_step(const struct wdesc *d, const struct wdesc *next)
{
	size_t bytes = d->n * dice_dtype_size(d->dst->dt);
	int glued = next && bytes % 16 == 0 &&
	            ((!strcmp(d->name, "q_proj") && !strcmp(next->name, "k_proj")) ||
	             (!strcmp(d->name, "k_proj") && !strcmp(next->name, "v_proj")) ||
	             (!strcmp(d->name, "gate_proj") && !strcmp(next->name, "up_proj")));
	return glued ? bytes : align_up(bytes);
}

size_t model_weight_bytes(const struct model_config *c, enum dice_dtype dt)
{
	size_t C = (size_t)c->hidden_size, QD = (size_t)c->num_heads * c->head_dim;
	size_t KVD = (size_t)c->num_kv_heads * c->head_dim, I = (size_t)c->intermediate_size;
	size_t per = (2 * QD * C + 2 * KVD * C + 3 * I * C) * dice_dtype_size(dt);
	return (size_t)c->num_layers * per + (size_t)c->vocab_size * C * dice_dtype_size(dt);
}

/* the input width of a matrix by its name: down_proj reads I, o_proj reads NH*HD, others C */
static size_t matrix_fan_in(const struct model_config *c, const char *name)
{
	if (!strcmp(name, "down_proj"))
		return (size_t)c->intermediate_size;
	if (!strcmp(name, "o_proj"))
		return (size_t)c->num_heads * c->head_dim;
	return (size_t)c->hidden_size;
}

float *model_weights_random(struct model_weights *w, const struct model_config *c, uint64_t seed)
{
	struct model_weights shape = { .nlayers = c->num_layers };
	struct wdesc *d = xmalloc((size_t)(11 * c->num_layers + 3) * sizeof *d);
	struct rng r;
	size_t total = 0;
	float *mem, *p;
	int n;

	memset(w, 0, sizeof *w);
	w->nlayers = c->num_layers;
	w->layers = xcalloc((size_t)c->num_layers, sizeof *w->layers);
	shape.layers = w->layers;       /* sources are unused here: only sizes and kinds */
	shape.lm_head.p = c->tie_word_embeddings ? NULL : (void *)1;
	n = weight_list(d, w, &shape, c);
	for (int i = 0; i < n; i++)
		total += d[i].n;
	mem = p = xmalloc(total * sizeof *mem);
	rng_seed(&r, seed);
	for (int i = 0; i < n; i++) {
		for (size_t j = 0; j < d[i].n; j++)     /* uniform with unit variance: fast */
			p[j] = (rng_uniformf(&r) * 2.0f - 1.0f) * 1.7320508f;
		if (d[i].kind == WK_NORM) {
			for (size_t j = 0; j < d[i].n; j++)
				p[j] = 1.0f + 0.1f * p[j];
		} else if (d[i].dst != &w->embed) {
			size_t fan_in = matrix_fan_in(c, d[i].name);
			float sc = 1.0f / sqrtf((float)fan_in);
			for (size_t j = 0; j < d[i].n; j++)
				p[j] *= sc;
		}
		d[i].dst->p = p;
		d[i].dst->dt = DICE_F32;
		p += d[i].n;
	}
	if (c->tie_word_embeddings)
		w->lm_head = w->embed;
	free(d);
	return mem;
}

/* element i of a host weight as float */
static float host_w(const struct wref *w, size_t i)
{
	switch (w->dt) {
	case DICE_F32: return ((const float *)w->p)[i];
	case DICE_BF16: return dice_bf16_to_f32(((const uint16_t *)w->p)[i]);
	case DICE_F16: return dice_f16_to_f32(((const uint16_t *)w->p)[i]);
	}
	return 0;
}

static void upload(const struct ops *o, void *dst, const struct wref *src, size_t n,
                   enum dice_dtype dt)
{
	size_t chunk = 1 << 20, es = dice_dtype_size(dt);
	void *tmp;

	if (src->dt == dt) {
		o->to_device(dst, src->p, n * es);
		return;
	}
	tmp = xmalloc(chunk * es);
	for (size_t i = 0; i < n; i += chunk) {
		size_t m = n - i < chunk ? n - i : chunk;
		for (size_t j = 0; j < m; j++) {
			float f = host_w(src, i + j);
			if (dt == DICE_F32)
				((float *)tmp)[j] = f;
			else if (dt == DICE_BF16)
				((uint16_t *)tmp)[j] = dice_f32_to_bf16(f);
			else
				((uint16_t *)tmp)[j] = dice_f32_to_f16(f);
		}
		o->to_device((char *)dst + i * es, tmp, m * es);
	}
	free(tmp);
}

int model_init(struct model *m, const struct model_config *cfg, const struct model_weights *host,
               const struct ops *ops, enum dice_dtype dt)
{
	const struct model_config *c = cfg;
	struct wdesc *d;
	size_t off = 0;
	int n;

	memset(m, 0, sizeof *m);
	if (c->num_layers <= 0 || c->hidden_size <= 0 || c->num_heads <= 0 || c->num_kv_heads <= 0 ||
	    c->head_dim <= 0 || c->head_dim % 2 || c->num_heads % c->num_kv_heads ||
	    c->intermediate_size <= 0 || c->vocab_size <= 0 || c->block_size <= 0) {
		warn_msg("model: bad geometry in the config");
		return -1;
	}
	if (host->nlayers != c->num_layers) {
		warn_msg("model: %d layers of weights for %d in the config", host->nlayers, c->num_layers);
		return -1;
	}
	m->cfg = *c;
	m->ops = ops;
	m->dtype = dt;
	m->w.nlayers = c->num_layers;
	m->w.layers = xcalloc((size_t)c->num_layers, sizeof *m->w.layers);
	d = xmalloc((size_t)(11 * c->num_layers + 3) * sizeof *d);
	n = weight_list(d, &m->w, host, c);
	for (int i = 0; i < n; i++) {
		if (!d[i].src->p) {
			warn_msg("model: weight %s missing", d[i].name);
			free(d);
			free(m->w.layers);
			m->w.layers = NULL;
			return -1;
		}
		d[i].dst->dt = d[i].kind == WK_NORM ? DICE_F32 : dt;
		off += weight_step(&d[i], i + 1 < n ? &d[i + 1] : NULL);
	}
	m->wbytes = off;
	m->wbuf = ops->alloc(off);
	off = 0;
	for (int i = 0; i < n; i++) {
		d[i].dst->p = (char *)m->wbuf + off;
		upload(ops, (char *)m->wbuf + off, d[i].src, d[i].n, d[i].dst->dt);
		off += weight_step(&d[i], i + 1 < n ? &d[i + 1] : NULL);
	}
	m->fuse_qkv = m->fuse_gu = ops->qkv_prep && ops->kv_append && ops->attention_kv &&
	                           ops->swiglu_cat;
	for (int l = 0; l < c->num_layers; l++) {
		const struct layer_weights *w = &m->w.layers[l];
		size_t es = dice_dtype_size(dt), QD = (size_t)c->num_heads * c->head_dim;
		size_t KVD = (size_t)c->num_kv_heads * c->head_dim, C = (size_t)c->hidden_size;
		size_t I = (size_t)c->intermediate_size;
		m->fuse_qkv &= (const char *)w->k_proj.p == (const char *)w->q_proj.p + QD * C * es &&
		               (const char *)w->v_proj.p == (const char *)w->k_proj.p + KVD * C * es;
		m->fuse_gu &= (const char *)w->up_proj.p == (const char *)w->gate_proj.p + I * C * es;
	}
	/* the GPU keeps K/V in the matrices' 16-bit type: half the bytes the attention reads */
	m->cfg.kv_dtype = dt != DICE_F32 && strcmp(ops->name, "cpu") && ops->attention_kv ? dt :
	                  DICE_F32;
	if (c->tie_word_embeddings || !host->lm_head.p)
		m->w.lm_head = m->w.embed;
	free(d);
	ops->sync();
	return 0;
}

/* the matrices model_forward multiplies by with .matmul_fixed, as it calls it: (w, out, in),
 * fused q/k/v and gate/up by their whole shape */
struct mshape {
	const void *p;
	enum dice_dtype dt;
	int out, in;
};

static int product_list(const struct model *m, struct mshape *d)
{
	const struct model_config *c = &m->cfg;
	int C = c->hidden_size, QD = c->num_heads * c->head_dim, I = c->intermediate_size;
	int KVD = c->num_kv_heads * c->head_dim, n = 0;

	for (int l = 0; l < m->w.nlayers; l++) {
		const struct layer_weights *w = &m->w.layers[l];
		if (m->fuse_qkv) {
			d[n++] = (struct mshape){ w->q_proj.p, w->q_proj.dt, QD + 2 * KVD, C };
		} else {
			d[n++] = (struct mshape){ w->q_proj.p, w->q_proj.dt, QD, C };
			d[n++] = (struct mshape){ w->k_proj.p, w->k_proj.dt, KVD, C };
			d[n++] = (struct mshape){ w->v_proj.p, w->v_proj.dt, KVD, C };
		}
		d[n++] = (struct mshape){ w->o_proj.p, w->o_proj.dt, C, QD };
		if (m->fuse_gu) {
			d[n++] = (struct mshape){ w->gate_proj.p, w->gate_proj.dt, 2 * I, C };
		} else {
			d[n++] = (struct mshape){ w->gate_proj.p, w->gate_proj.dt, I, C };
			d[n++] = (struct mshape){ w->up_proj.p, w->up_proj.dt, I, C };
		}
		d[n++] = (struct mshape){ w->down_proj.p, w->down_proj.dt, C, I };
	}
	d[n++] = (struct mshape){ m->w.lm_head.p, m->w.lm_head.dt, c->vocab_size, C };
	return n;
}

/* product_list into a new array (of *n) */
static struct mshape *products(const struct model *m, int *n)
{
	struct mshape *d = xmalloc((size_t)(7 * m->w.nlayers + 1) * sizeof *d);
	*n = product_list(m, d);
	return d;
}

static void unpack_all(struct model *m, const struct mshape *d, int n)
{
	for (int i = 0; i < n; i++)
		m->ops->unpack(d[i].p);
}

/* can model_pack make the copies (they are not there yet)? */
static int packable(const struct model *m)
{
	const struct ops *o = m->ops;

	return !m->packed && o->pack && o->unpack && o->matmul_fixed && m->dtype != DICE_F32 &&
	       !util_env_zero("DICE_PACK");
}

size_t model_pack_bytes(const struct model *m)
{
	size_t bytes = 0;
	int n;

	if (!packable(m))
		return 0;
	struct mshape *d = products(m, &n);
	for (int i = 0; i < n; i++)
		bytes += (size_t)d[i].out * d[i].in * dice_dtype_size(d[i].dt);
	free(d);
	return bytes;
}

int model_pack(struct model *m)
{
	const struct ops *o = m->ops;

	if (!packable(m))
		return m->packed;
	int n;
	struct mshape *d = products(m, &n);
	for (int i = 0; i < n; i++) {
		if (!o->pack(d[i].p, d[i].dt, d[i].out, d[i].in)) {
			unpack_all(m, d, i);
			n = 0;
			break;
		}
	}
	o->sync();
	free(d);
	return m->packed = n;
}

void model_unpack(struct model *m)
{
	if (!m->packed)
		return;
	int n;
	struct mshape *d = products(m, &n);
	unpack_all(m, d, n);
	free(d);
	m->packed = 0;
}

int model_pack_for(struct model *m, long rows)
{
	return rows <= MODEL_PACK_ROWS ? model_pack(m) : m->packed;
}

static void scratch_free(struct model *m)
{
	const struct ops *o = m->ops;
	float **f[] = { &m->x, &m->xn, &m->q, &m->k, &m->v, &m->att, &m->tmp, &m->gate, &m->up,
	                &m->hsel, &m->qkv };
	for (size_t i = 0; i < ARRAY_LEN(f); i++) {
		if (*f[i])
			o->free(*f[i]);
		*f[i] = NULL;
	}
	m->rows = 0;
}

void model_free(struct model *m)
{
	if (!m->ops)
		return;
	scratch_free(m);
	for (int i = 0; i < 2; i++)
		if (m->x16[i])
			m->ops->free(m->x16[i]);
	if (m->logits)
		m->ops->free(m->logits);
	if (m->meta_d)
		m->ops->free(m->meta_d);
	free(m->meta_h);
	model_unpack(m);
	if (m->wbuf)
		m->ops->free(m->wbuf);
	free(m->w.layers);
	memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- scratch */

static void reserve_rows(struct model *m, int rows)
{
	const struct ops *o = m->ops;
	const struct model_config *c = &m->cfg;
	size_t C = (size_t)c->hidden_size, QD = (size_t)c->num_heads * c->head_dim;
	size_t KVD = (size_t)c->num_kv_heads * c->head_dim, I = (size_t)c->intermediate_size, R;

	if (rows <= m->rows)
		return;
	scratch_free(m);
	R = (size_t)rows;
	m->rows = rows;
	m->x = o->alloc(R * C * 4);
	m->xn = o->alloc(R * C * 4);
	m->tmp = o->alloc(R * C * 4);
	m->hsel = o->alloc(R * C * 4);
	m->q = o->alloc(R * QD * 4);
	m->att = o->alloc(R * QD * 4);
	m->k = o->alloc(R * KVD * 4);
	m->v = o->alloc(R * KVD * 4);
	m->gate = o->alloc(R * I * 4 * (m->fuse_gu ? 2 : 1));
	m->up = o->alloc(R * I * 4);
	m->qkv = o->alloc(R * (QD + 2 * KVD) * 4);
}

static void reserve_logits(struct model *m, int lrows)
{
	if (lrows <= m->lrows)
		return;
	if (m->logits)
		m->ops->free(m->logits);
	m->logits = m->ops->alloc((size_t)lrows * m->cfg.vocab_size * 4);
	m->lrows = lrows;
}

/* whether row t of sequence q wants logits */
static int row_wants(const struct model_seq *q, int t)
{
	int j = t - q->logits_from;

	return q->logits && j >= 0 && t < q->T && !(j < 32 && (q->logits_skip >> j & 1u));
}

/* The forward's one upload: ids (N), pos (N), then the arrays of struct kv_batch: row0
 * (nseq+1), len, cap (nseq), rowseq (N), then selr (R, when given: the packed rows whose
 * logits are wanted, in the caller's sequence order; *sel, what the gather of those rows
 * reads), and the cache bases k, v (nseq pointers). */
static void meta_fill(struct model *m, const struct model_seq *seqs, int nseq, int N, int R,
                      const int *selr, struct kv_batch *b, const int **sel)
{
	size_t ni = (size_t)3 * N + 3 * (size_t)nseq + 1 + R;
	size_t off_p = (ni * sizeof(int) + 15) / 16 * 16;
	size_t bytes = off_p + 2 * (size_t)nseq * sizeof(void *);
	int *h, *row0, *len, *cap, *rowseq;
	void **kp;

	if (bytes > m->meta_cap) {
		if (m->meta_d)
			m->ops->free(m->meta_d);
		free(m->meta_h);
		m->meta_cap = bytes + bytes / 2;
		m->meta_d = m->ops->alloc(m->meta_cap);
		m->meta_h = xmalloc(m->meta_cap);
	}
	h = m->meta_h;
	row0 = h + 2 * N;
	len = row0 + nseq + 1;
	cap = len + nseq;
	rowseq = cap + nseq;
	if (selr)
		memcpy(rowseq + N, selr, (size_t)R * sizeof *selr);
	kp = (void **)((char *)m->meta_h + off_p);
	for (int s = 0, n = 0; s < nseq; s++) {
		const struct kvcache *kv = seqs[s].kv;
		row0[s] = n;
		len[s] = kv->len;
		cap[s] = kv->cap;
		kp[s] = kv->k;
		kp[nseq + s] = kv->v;
		for (int t = 0; t < seqs[s].T; t++, n++) {
			h[n] = seqs[s].ids_dev ? 0 : seqs[s].ids[t];
			h[N + n] = kv->len + t;
			rowseq[n] = s;
		}
	}
	row0[nseq] = N;
	m->ops->to_device(m->meta_d, m->meta_h, bytes);
	for (int s = 0; s < nseq; s++)
		if (seqs[s].ids_dev)
			m->ops->copy((int *)m->meta_d + row0[s], seqs[s].ids_dev,
			             (size_t)seqs[s].T * sizeof(int));
	m->ids_h = h;
	m->pos_h = h + N;
	m->ids_d = m->meta_d;
	m->pos_d = m->ids_d + N;
	b->nseq = nseq;
	b->N = N;
	b->dt = m->cfg.kv_dtype;
	b->row0 = m->ids_d + 2 * N;
	b->len = b->row0 + nseq + 1;
	b->cap = b->len + nseq;
	b->rowseq = b->cap + nseq;
	*sel = b->rowseq + N;
	b->k = (void *const *)((char *)m->meta_d + off_p);
	b->v = b->k + nseq;
}

/* ---------------------------------------------------------------- KV cache */

size_t kvcache_bytes(const struct model_config *c, int cap)
{
	return 2 * (size_t)c->num_layers * (size_t)cap * c->num_kv_heads * c->head_dim *
	       dice_dtype_size(c->kv_dtype);
}

int kvcache_init(struct kvcache *kv, const struct model *m, int cap)
{
	size_t half = kvcache_bytes(&m->cfg, cap) / 2;

	kv->cap = cap;
	kv->len = 0;
	kv->k = m->ops->alloc(half);
	kv->v = kv->k ? m->ops->alloc(half) : NULL;
	if (!kv->v) {           /* the backend is full (its alloc said so): no cache */
		kvcache_free(kv, m);
		return -1;
	}
	return 0;
}

void kvcache_free(struct kvcache *kv, const struct model *m)
{
	if (kv->k)
		m->ops->free(kv->k);
	if (kv->v)
		m->ops->free(kv->v);
	memset(kv, 0, sizeof *kv);
}

/* ---------------------------------------------------------------- forward */

/* The device work of one forward: no sync, no copy to or from the host, no allocation (what
 * ops->replay needs). */
struct fwd {
	struct model *m;
	const struct model_seq *seqs;       /* the caller's order (the logit rows' order) */
	const int *roff;                    /* the packed row of each one's first row; NULL: in
	                                     * the caller's order */
	int nseq, N, R;
	int hrow;                           /* R < N and the logit rows contiguous: the first */
	const int *sel;                     /* (R) device: the rows that want logits */
	int skips;                          /* some sequence skips some of its logit rows */
	struct kv_batch kb;
	/* the packed sequences s0 .. nseq-1 take ops->attention_prefill (nseq: none), the
	 * others attention_kv over kbd, the prefix of kb that holds them; row0h, lenh: kb's
	 * row0 and len on the host */
	int s0;
	struct kv_batch kbd;
	const int *row0h, *lenh;
	int x16;                            /* the products' inputs in 16 bits too (m->x16) */
};

typedef void (*mm_fn)(float *, const float *, const void *, enum dice_dtype, int, int, int);

/* Whether the prefill sequences' products go through ops->matmul one sequence at a time
 * (DICE_PREFILL_MM=0: never). */
static int prefill_mm = -1;

static int prefill_mm_on(void)
{
	if (prefill_mm < 0)
		prefill_mm = !util_env_zero("DICE_PREFILL_MM");
	return prefill_mm;
}

/* the rows (from 0) that layer_mm puts on mm for a product of in -> out; the rest are the
 * prefill sequences', a product each. (Widths of 64: every sequence's rows start 256-byte
 * aligned, as alone, so that the GEMM's choice of kernel cannot differ.) */
static int mm_rows(const struct fwd *f, int in, int out)
{
	if (f->s0 < f->nseq && f->m->ops->matmul_fixed && in % 64 == 0 && out % 64 == 0 &&
	    prefill_mm_on())
		return f->row0h[f->s0];
	return f->N;
}

/* A layer's product y = x w^T over the forward's rows. The rows of the sequences that take
 * the prefill attention (f->s0 ..) go through ops->matmul (CUDA: cuBLAS), one product a
 * sequence: its rows then depend on that sequence alone, whatever else the forward holds,
 * and a prompt's many rows take the fast GEMM (where in and out are multiples of 64); the
 * others through mm, the batch-invariant product. glu: x holds rows of [gate | up] (2 in
 * values each) and the product's input is their SwiGLU (ops->matmul_fixed_glu for mm's rows;
 * ops->swiglu_cat into h, then the product, for the prefill rows). seqs 0: mm's rows only,
 * the caller takes the prefill sequences' own way. */
static void layer_mm(const struct fwd *f, mm_fn mm, int glu, float *y, const float *x, float *h,
                     const void *w, enum dice_dtype dt, int in, int out, int seqs)
{
	const struct ops *o = f->m->ops;
	int nd = mm_rows(f, in, out);

	if (nd) {
		if (glu)
			o->matmul_fixed_glu(y, h, x, w, dt, nd, in, out);
		else
			mm(y, x, w, dt, nd, in, out);
	}
	for (int s = f->s0; seqs && nd < f->N && s < f->nseq; s++) {
		int r0 = f->row0h[s], n = f->row0h[s + 1] - r0;
		const float *xs = x + (size_t)r0 * (glu ? 2 : 1) * in;
		if (glu) {
			o->swiglu_cat(h + (size_t)r0 * in, xs, n, in);
			xs = h + (size_t)r0 * in;
		}
		o->matmul(y + (size_t)r0 * out, xs, w, dt, n, in, out);
	}
}

/* The MLP with gate and up in one product (rows [gate | up]): m->tmp = down(SwiGLU). With
 * bf16 weights, a prefill sequence's rows (mm_rows) go as training's autocast runs them: xn
 * rounded to bf16, gate and up kept in bf16, their SwiGLU in bf16, the down product from it,
 * a sequence at a time (the bf16 copies in its own rows of m->tmp, m->gate and m->up); the
 * other rows as layer_mm has them, glu: the SwiGLU folded into the down product. */
static void mlp_fused(const struct fwd *f, mm_fn mm, int glu, const struct layer_weights *w,
                      int xv)
{
	struct model *m = f->m;
	const struct ops *o = m->ops;
	int C = m->cfg.hidden_size, I = m->cfg.intermediate_size;
	int nd = mm_rows(f, C, 2 * I);
	int bf = nd < f->N && nd == mm_rows(f, I, C) && w->gate_proj.dt == DICE_BF16 &&
	         w->down_proj.dt == DICE_BF16 && o->cast_bf16 && o->matmul_xbb &&
	         o->swiglu_cat_bb && o->matmul_xb;

	/* every row on mm (a decode forward): the backend may make the SwiGLU (into m->up) in
	 * the gate/up product's own pass, and the down product takes it as its input */
	if (glu && nd == f->N && f->x16) {      /* xv: m->x16[0] holds m->xn in 16 bits */
		int rc = o->matmul_fixed_gu16(m->gate, m->up, m->x16[1], m->xn, xv ? m->x16[0] : NULL,
		                              w->gate_proj.p, w->gate_proj.dt, nd, C, I);
		if (rc == 1)
			o->matmul_fixed16(m->tmp, m->up, m->x16[1], w->down_proj.p, w->down_proj.dt, nd,
			                  I, C);
		else if (rc == 0)
			mm(m->tmp, m->up, w->down_proj.p, w->down_proj.dt, nd, I, C);
		else
			o->matmul_fixed_glu(m->tmp, m->up, m->gate, w->down_proj.p, w->down_proj.dt, nd,
			                    I, C);
		return;
	}
	if (glu && nd == f->N && o->matmul_fixed_gu) {  /* (glu: mm is .matmul_fixed) */
		if (o->matmul_fixed_gu(m->gate, m->up, m->xn, w->gate_proj.p, w->gate_proj.dt, nd, C,
		                       I))
			mm(m->tmp, m->up, w->down_proj.p, w->down_proj.dt, nd, I, C);
		else
			o->matmul_fixed_glu(m->tmp, m->up, m->gate, w->down_proj.p, w->down_proj.dt, nd,
			                    I, C);
		return;
	}
	/* mm's rows (and, without bf, the prefill sequences' as layer_mm takes them) */
	layer_mm(f, mm, 0, m->gate, m->xn, NULL, w->gate_proj.p, w->gate_proj.dt, C, 2 * I, !bf);
	if (!glu)
		o->swiglu_cat(m->up, m->gate, bf ? nd : f->N, I);
	layer_mm(f, mm, glu, m->tmp, glu ? m->gate : m->up, glu ? m->up : NULL, w->down_proj.p,
	         w->down_proj.dt, I, C, !bf);
	for (int s = f->s0; bf && s < f->nseq; s++) {
		int r0 = f->row0h[s], n = f->row0h[s + 1] - r0;
		float *y = m->tmp + (size_t)r0 * C;
		void *gub = m->gate + (size_t)r0 * 2 * I, *hb = m->up + (size_t)r0 * I;
		o->cast_bf16(y, m->xn + (size_t)r0 * C, (size_t)n * C);
		o->matmul_xbb(gub, y, w->gate_proj.p, n, C, 2 * I);
		o->swiglu_cat_bb(hb, gub, n, I);
		o->matmul_xb(y, hb, w->down_proj.p, n, I, C, 0);
	}
}

/* the residual add and a norm: x += tmp, xn = rmsnorm(x) * w; with f->x16 xn in 16 bits into
 * m->x16[0] too, where the backend writes it (returns 1 then) */
static int add_norm(const struct fwd *f, const float *w)
{
	struct model *m = f->m;
	const struct ops *o = m->ops;
	int N = f->N, C = m->cfg.hidden_size;
	float eps = m->cfg.rms_norm_eps;

	if (f->x16)
		return o->add_rmsnorm16(m->xn, m->x16[0], m->dtype, m->x, m->tmp, w, N, C, eps) == 1;
	o->add_rmsnorm(m->xn, m->x, m->tmp, w, N, C, eps);
	return 0;
}

static void forward_launch(void *arg)
{
	struct fwd *f = arg;
	struct model *m = f->m;
	const struct ops *o = m->ops;
	const struct model_config *c = &m->cfg;
	int C = c->hidden_size, NH = c->num_heads, NKV = c->num_kv_heads, HD = c->head_dim;
	int QD = NH * HD, KVD = NKV * HD, I = c->intermediate_size, V = c->vocab_size;
	int N = f->N, R = f->R;
	float eps = c->rms_norm_eps;
	struct kv_batch *kb = &f->kb;
	/* the batch-invariant product where the backend has one: a sequence's logits are then
	 * the same bits alone or in any batch */
	mm_fn mm = o->matmul_fixed ? o->matmul_fixed : o->matmul;
	int glu = m->fuse_gu && o->matmul_fixed && o->matmul_fixed_glu;

	/* xv: m->x16[0] holds m->xn in 16 bits (f->x16: the norms wrote it); av: m->x16[1]
	 * holds m->att */
	int xv = 0, av = 0;

	o->embed(m->x, m->ids_d, m->w.embed.p, m->w.embed.dt, N, C);
	o->rmsnorm(m->xn, m->x, m->w.layers[0].input_norm.p, m->w.layers[0].input_norm.dt, N, C,
	           eps);
	for (int l = 0; l < c->num_layers; l++) {
		const struct layer_weights *w = &m->w.layers[l];

		if (m->fuse_qkv) {
			if (xv)
				o->matmul_fixed16(m->qkv, m->xn, m->x16[0], w->q_proj.p, w->q_proj.dt, N, C,
				                  QD + 2 * KVD);
			else
				layer_mm(f, mm, 0, m->qkv, m->xn, NULL, w->q_proj.p, w->q_proj.dt, C,
				         QD + 2 * KVD, 1);
			o->qkv_prep(m->q, m->qkv, w->q_norm.p, w->k_norm.p, m->pos_d, kb, l, NH, NKV,
			            HD, eps, c->rope_theta);
		} else {
			layer_mm(f, mm, 0, m->q, m->xn, NULL, w->q_proj.p, w->q_proj.dt, C, QD, 1);
			layer_mm(f, mm, 0, m->k, m->xn, NULL, w->k_proj.p, w->k_proj.dt, C, KVD, 1);
			layer_mm(f, mm, 0, m->v, m->xn, NULL, w->v_proj.p, w->v_proj.dt, C, KVD, 1);
			o->rmsnorm(m->q, m->q, w->q_norm.p, w->q_norm.dt, N * NH, HD, eps);
			o->rmsnorm(m->k, m->k, w->k_norm.p, w->k_norm.dt, N * NKV, HD, eps);
			o->rope(m->q, m->pos_d, N, NH, HD, c->rope_theta);
			o->rope(m->k, m->pos_d, N, NKV, HD, c->rope_theta);
			o->kv_append(kb, l, m->k, m->v, NKV, HD);
		}
		if (f->x16) {
			av = o->attention_kv16(m->att, m->x16[1], m->dtype, m->q, kb, l, NH, NKV, HD,
			                       c->block_size) == 1;
		} else if (f->s0 == f->nseq) {
			o->attention_kv(m->att, m->q, kb, l, NH, NKV, HD, c->block_size);
		} else {
			int B = c->block_size;
			if (f->s0)
				o->attention_kv(m->att, m->q, &f->kbd, l, NH, NKV, HD, B);
			/* (model_forward asked first: it serves) */
			if (o->attention_prefill(m->att, m->q, kb, f->s0, f->row0h, f->lenh, l, NH, NKV,
			                         HD, B))
				o->attention_kv(m->att, m->q, kb, l, NH, NKV, HD, B);
		}
		if (av)
			o->matmul_fixed16(m->tmp, m->att, m->x16[1], w->o_proj.p, w->o_proj.dt, N, QD, C);
		else
			layer_mm(f, mm, 0, m->tmp, m->att, NULL, w->o_proj.p, w->o_proj.dt, QD, C, 1);
		xv = add_norm(f, w->post_norm.p);
		if (m->fuse_gu) {
			mlp_fused(f, mm, glu, w, xv);
		} else {
			layer_mm(f, mm, 0, m->gate, m->xn, NULL, w->gate_proj.p, w->gate_proj.dt, C, I, 1);
			layer_mm(f, mm, 0, m->up, m->xn, NULL, w->up_proj.p, w->up_proj.dt, C, I, 1);
			o->swiglu(m->up, m->gate, m->up, N, I);
			layer_mm(f, mm, 0, m->tmp, m->up, NULL, w->down_proj.p, w->down_proj.dt, I, C, 1);
		}
		if (l + 1 < c->num_layers)      /* the residual add with the next layer's norm */
			xv = add_norm(f, m->w.layers[l + 1].input_norm.p);
		else
			o->add(m->x, m->tmp, (size_t)N * C);
	}
	if (R) {
		const float *h = m->x;
		if (f->hrow >= 0) {             /* the rows that want logits, in one piece */
			h = m->x + (size_t)f->hrow * C;
		} else if (R < N && f->roff && !f->skips) {     /* gather them, prefills packed last */
			const struct model_seq *seqs = f->seqs;
			for (int s = 0, r = 0; s < f->nseq; s++) {
				if (!seqs[s].logits)
					continue;
				int from = seqs[s].logits_from, n = seqs[s].T - from;
				o->copy(m->hsel + (size_t)r * C, m->x + (size_t)(f->roff[s] + from) * C,
				        (size_t)n * C * sizeof(float));
				r += n;
			}
			h = m->hsel;
		} else if (R < N) {             /* gather them: the embedding op over fp32 rows */
			o->embed(m->hsel, f->sel, m->x, DICE_F32, R, C);
			h = m->hsel;
		}
		o->rmsnorm(m->xn, h, m->w.final_norm.p, m->w.final_norm.dt, R, C, eps);
		mm(m->logits, m->xn, m->w.lm_head.p, m->w.lm_head.dt, R, C, V);
	}
}

/* Forwards of up to GRAPH_ROWS rows in GRAPH_SEQS sequences go through ops->replay (CUDA
 * graphs): decoding steps, whose launches repeat with new cache lengths in device memory. */
#define GRAPH_ROWS MODEL_GRAPH_ROWS
#define GRAPH_SEQS MODEL_GRAPH_SEQS

/* A sequence of at least PREFILL_ROWS new rows (a prompt; the sampler's decoding steps are 4
 * or 8 rows) takes ops->attention_prefill where the backend has it and it serves (CUDA: a
 * bf16 cache, head dim 64 or 128, sm_80 or later, DICE_PREFILL_FA not 0), and its products
 * ops->matmul one sequence at a time (layer_mm): a rule on the sequence alone, so that its
 * rows' results never depend on the batch. */
#define PREFILL_ROWS 64

/* what forward_launch's launches depend on, host side (see ops->replay) */
struct fwd_key {
	struct model_config cfg;
	const void *wbuf, *x, *logits, *meta_d, *x16[2];
	int nseq, N, R, hrow, maxT, maxS, rows, lrows, use16;
	int seq[GRAPH_SEQS][3];             /* T, logits, logits_from */
};

/* whether a forward of N rows passes the products 16-bit copies of their inputs (the
 * backend's ops for them, 16-bit matrices, DICE_X16 not 0), its buffers made at the first */
static int x16_ok(struct model *m, int N)
{
	static int on = -1;
	const struct ops *o = m->ops;
	const struct model_config *c = &m->cfg;

	if (on < 0)
		on = !util_env_zero("DICE_X16");
	if (!on || N > MODEL_X16_ROWS || !o->matmul_fixed || !o->matmul_fixed16 ||
	    !o->add_rmsnorm16 || !o->attention_kv16 || !o->matmul_fixed_gu16 ||
	    (m->dtype != DICE_BF16 && m->dtype != DICE_F16))
		return 0;
	if (!m->x16[0]) {
		size_t C = (size_t)c->hidden_size, QD = (size_t)c->num_heads * c->head_dim;
		size_t I = (size_t)c->intermediate_size, W = QD > I ? QD : I;
		m->x16[0] = o->alloc(MODEL_X16_ROWS * C * 2);
		m->x16[1] = m->x16[0] ? o->alloc(MODEL_X16_ROWS * W * 2) : NULL;
		if (!m->x16[1]) {
			if (m->x16[0])
				o->free(m->x16[0]);
			m->x16[0] = NULL;
			on = 0;
			return 0;
		}
	}
	return 1;
}

int model_forward(struct model *m, const struct model_seq *seqs, int nseq, float *logits)
{
	const struct ops *o = m->ops;
	const struct model_config *c = &m->cfg;
	int V = c->vocab_size, C = c->hidden_size;
	int N = 0, R = 0, maxpos = 0, maxT = 0, maxcap = 0, skips = 0;

	for (int s = 0; s < nseq; s++) {
		const struct model_seq *q = &seqs[s];
		if (q->commit_rows < 0 || q->commit_rows > q->T || q->logits_from < 0 ||
		    (q->logits && q->logits_from >= q->T)) {
			warn_msg("model: bad commit_rows or logits_from");
			return -1;
		}
		if (q->T <= 0 || q->kv->len + q->T > q->kv->cap) {
			warn_msg("model: %d new positions after %d do not fit a cache of %d", q->T,
			         q->kv->len, q->kv->cap);
			return -1;
		}
		for (int t = 0; !q->ids_dev && t < q->T; t++) {
			if (q->ids[t] < 0 || q->ids[t] >= V) {
				warn_msg("model: token id %d outside the vocabulary (%d)", q->ids[t], V);
				return -1;
			}
		}
		N += q->T;
		maxT = q->T > maxT ? q->T : maxT;
		for (int t = q->logits_from; q->logits && t < q->T; t++)
			R += row_wants(q, t);
		skips |= q->logits && q->logits_skip;
		if (q->kv->len + q->T > maxpos)
			maxpos = q->kv->len + q->T;
		if (q->kv->cap > maxcap)
			maxcap = q->kv->cap;
	}
	if (N == 0)
		return 0;
	reserve_rows(m, N);
	if (R)
		reserve_logits(m, R);
	struct fwd f = { .m = m, .seqs = seqs, .nseq = nseq, .N = N, .R = R, .hrow = -1,
	                 .s0 = nseq };
	/* the prefill sequences (PREFILL_ROWS) go last in the packed rows, the others keep
	 * their order before them (the rows' results do not depend on it) */
	const struct model_seq *ps = seqs;
	struct model_seq *perm = NULL;
	int *roff = NULL, nf = 0, late = 0;
	if (o->attention_prefill) {
		struct kv_batch probe = { .dt = c->kv_dtype };
		if (o->attention_prefill(NULL, NULL, &probe, 0, NULL, NULL, 0, c->num_heads,
		                         c->num_kv_heads, c->head_dim, c->block_size) == 0) {
			for (int s = 0; s < nseq; s++) {
				int pf = seqs[s].T >= PREFILL_ROWS;
				late |= nf && !pf;      /* one of the others after a prefill one */
				nf += pf;
			}
		}
	}
	if (late) {
		perm = xmalloc((size_t)nseq * sizeof *perm);
		roff = xmalloc((size_t)nseq * sizeof *roff);
		for (int pass = 0, k = 0, n = 0; pass < 2; pass++) {
			for (int s = 0; s < nseq; s++) {
				if ((seqs[s].T >= PREFILL_ROWS) != pass)
					continue;
				perm[k++] = seqs[s];
				roff[s] = n;
				n += seqs[s].T;
			}
		}
		ps = perm;
		f.roff = roff;
	}
	/* the rows that want logits, in sequence order (gathered by forward_launch) */
	int *selh = NULL;
	if (R && R < N) {
		selh = xmalloc((size_t)R * sizeof *selh);
		for (int s = 0, off = 0, r = 0; s < nseq; off += seqs[s].T, s++)
			for (int t = 0; t < seqs[s].T; t++)
				if (row_wants(&seqs[s], t))
					selh[r++] = (roff ? roff[s] : off) + t;
	}
	meta_fill(m, ps, nseq, N, R, selh, &f.kb, &f.sel);
	f.skips = skips;
	f.kb.maxT = maxT;
	f.kb.maxS = maxpos;
	if (nf) {
		f.row0h = (const int *)m->meta_h + 2 * N;
		f.lenh = f.row0h + nseq + 1;
		f.s0 = nseq - nf;
		if (o->attention_prefill(NULL, NULL, &f.kb, f.s0, f.row0h, f.lenh, 0, c->num_heads,
		                         c->num_kv_heads, c->head_dim, c->block_size) != 0)
			f.s0 = nseq;                    /* it would not: attention_kv for all */
		f.kbd = f.kb;
		f.kbd.nseq = f.s0;
		f.kbd.N = f.row0h[f.s0];
		f.kbd.maxT = f.kbd.maxS = 0;
		for (int s = 0; s < f.s0; s++) {
			int T = ps[s].T, S = ps[s].kv->len + T;
			f.kbd.maxT = T > f.kbd.maxT ? T : f.kbd.maxT;
			f.kbd.maxS = S > f.kbd.maxS ? S : f.kbd.maxS;
		}
	}
	if (R && R < N && !skips) {             /* the logit rows in one piece? (its first row) */
		int next = -1, pieces = 0;
		for (int s = 0, off = 0; s < nseq; off += seqs[s].T, s++) {
			int at = roff ? roff[s] : off;
			if (!seqs[s].logits)
				continue;
			if (at + seqs[s].logits_from != next) {
				pieces++;
				f.hrow = at + seqs[s].logits_from;
			}
			next = at + seqs[s].T;
		}
		if (pieces != 1 || (size_t)f.hrow * C % 4)
			f.hrow = -1;
	}
	f.x16 = x16_ok(m, N) && f.s0 == nseq;
	/* (a prefill attention's launches depend on the cache lengths: never a graph) */
	if (o->replay && f.s0 == nseq && N <= GRAPH_ROWS && nseq <= GRAPH_SEQS) {
		struct fwd_key k;
		/* the launches may not depend on the lengths: the attention's grid is sized for
		 * the caches' capacity (its blocks past a sequence's keys return at once) */
		f.kb.maxS = maxcap;
		memset(&k, 0, sizeof k);
		k.cfg = m->cfg;
		k.wbuf = m->wbuf, k.x = m->x, k.logits = m->logits, k.meta_d = m->meta_d;
		k.nseq = nseq, k.N = N, k.R = R, k.hrow = f.hrow, k.maxT = maxT, k.maxS = maxcap;
		k.rows = m->rows, k.lrows = m->lrows;
		k.use16 = f.x16, k.x16[0] = m->x16[0], k.x16[1] = m->x16[1];
		for (int s = 0; s < nseq; s++) {
			k.seq[s][0] = seqs[s].T;
			k.seq[s][1] = seqs[s].logits;
			k.seq[s][2] = seqs[s].logits ? seqs[s].logits_from : 0;
		}
		o->replay(&k, sizeof k, forward_launch, &f);
	} else {
		forward_launch(&f);
	}
	if (R && logits)
		o->to_host(logits, m->logits, (size_t)R * V * sizeof(float));
	else if (!m->lazy)
		o->sync();
	free(perm);
	free(roff);
	free(selh);
	for (int s = 0; s < nseq; s++)
		seqs[s].kv->len += seqs[s].store ? seqs[s].T : seqs[s].commit_rows;
	return 0;
}
