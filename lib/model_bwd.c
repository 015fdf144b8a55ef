/* model_bwd: training forward (activations kept) and backward of the SDAR model over a
 * packed [x_t | x_0] batch (lib/model_bwd.h), written once against lib/ops.h.
 *
 * Per layer the forward keeps xn1, q/k before and after norm+rope, v, the attention output,
 * the mid residual, xn2, gate, up and silu(gate)*up (with bf16 copies: the GEMM inputs xn1,
 * att, xn2, h also, or only, rounded to bf16, lib/model_bwd.h); the backward walks the layers in reverse
 * with the residual-stream gradient in dx. With recompute only the layer inputs xs are kept
 * and each layer's forward is run again into one shared activation block before its backward.
 * The logit rows (rows with a target) are gathered with ops->embed (the final residual as an
 * fp32 table, the row indices as ids) and their gradient scattered back with
 * ops->embed_backward into the zeroed dx (the rows are distinct, so the sum is a copy).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "model_bwd.h"
#include "pool.h"
#include "util.h"

/* the activation block of one layer, carved from acts[l]. fp32: xn1, xn2, h (GEMM inputs)
 * only without bf16 copies (t->lp 0; else NULL: the forward writes their bf16 only);
 * bf16 (t->lp 1, else NULL): xn1b, attb, xn2b, hb, the GEMM inputs rounded once; and
 * (t->lp 1) stat, what ops->attention_tc_stat keeps for the attention backward. With the
 * MLP in bf16 (gu_fused) gub holds the gate and up products as bf16 rows [gate | up] and
 * gate, up are NULL; with the attention's inputs in bf16 (att_bf) qb, kb, vb hold q, k, v
 * (the normed, rotated q and k) and q, k, v are NULL. */
struct acts {
	float *xn1, *qraw, *q, *kraw, *k, *v, *att, *xmid, *xn2, *gate, *up, *h;
	void *xn1b, *attb, *xn2b, *hb, *gub, *qb, *kb, *vb;
	float *stat;                    /* t->lp: (rows, NH) attention statistics */
};

/* the bytes of n bf16 values, rounded up to 16 */
static size_t bf16_bytes(size_t n)
{
	return (n * 2 + 15) & ~(size_t)15;
}

static size_t acts_bytes(const struct model_config *c, int rows, int lp, int gu, int ab)
{
	size_t R = (size_t)rows, C = (size_t)c->hidden_size, QD = (size_t)c->num_heads * c->head_dim;
	size_t KVD = (size_t)c->num_kv_heads * c->head_dim, I = (size_t)c->intermediate_size;
	if (!lp)
		return R * (3 * C + 3 * QD + 3 * KVD + 3 * I) * 4;
	return R * (C + (ab ? 2 : 3) * QD + (ab ? 1 : 3) * KVD + (gu ? 0 : 2 * I) +
	            (size_t)c->num_heads) * 4 +
	       2 * bf16_bytes(R * C) + bf16_bytes(R * QD) + bf16_bytes(R * I) +
	       (gu ? bf16_bytes(R * 2 * I) : 0) +
	       (ab ? bf16_bytes(R * QD) + 2 * bf16_bytes(R * KVD) : 0);
}

static int gu_fused(const struct model_train *t);
static int att_bf(const struct model_train *t);

static struct acts acts_carve(const struct model_train *t, int l)
{
	const struct model_config *c = &t->m->cfg;
	size_t R = (size_t)t->rows, C = (size_t)c->hidden_size;
	size_t QD = (size_t)c->num_heads * c->head_dim, KVD = (size_t)c->num_kv_heads * c->head_dim;
	size_t I = (size_t)c->intermediate_size;
	char *p = (char *)t->acts[t->recompute ? 0 : l];
	struct acts a;
	int lp = t->lp;

	memset(&a, 0, sizeof a);
#define TAKE(f, n) (a.f = (float *)p, p += R * (n) * 4)
#define TAKE_B(f, n) (a.f = p, p += bf16_bytes(R * (n)))
	if (att_bf(t)) {
		TAKE(qraw, QD); TAKE(kraw, KVD);
		TAKE_B(qb, QD); TAKE_B(kb, KVD); TAKE_B(vb, KVD);
	} else {
		TAKE(qraw, QD); TAKE(q, QD); TAKE(kraw, KVD); TAKE(k, KVD); TAKE(v, KVD);
	}
	TAKE(att, QD); TAKE(xmid, C);
	if (gu_fused(t))
		TAKE_B(gub, 2 * I);
	else {
		TAKE(gate, I); TAKE(up, I);
	}
	if (lp) {
		TAKE(stat, (size_t)c->num_heads);
		TAKE_B(xn1b, C); TAKE_B(attb, QD); TAKE_B(xn2b, C); TAKE_B(hb, I);
	} else {
		TAKE(xn1, C); TAKE(xn2, C); TAKE(h, I);
	}
#undef TAKE
#undef TAKE_B
	return a;
}

/* y(N,out) = x @ w^T, or with acc y += (then out must be C: dtmp is the fp32 path's
 * temporary), for a GEMM input x: with bf16 copies, its bf16 xb */
static void mm(const struct model_train *t, float *y, const float *x, const void *xb,
               struct wref w, int N, int in, int out, int acc)
{
	const struct ops *o = t->ops;

	if (t->lp) {
		o->matmul_xb(y, xb, w.p, N, in, out, acc);
	} else if (!acc) {
		o->matmul(y, x, w.p, w.dt, N, in, out);
	} else {
		o->matmul(t->dtmp, x, w.p, w.dt, N, in, out);
		o->add(y, t->dtmp, (size_t)N * out);
	}
}

/* the backward of mm: dx(N,in) written, or with acc added (then in must be C: dtmp is the
 * fp32 path's temporary); dw += */
static void mm_bwd(const struct model_train *t, float *dx, float *dw, const float *dy,
                   const float *x, const void *xb, struct wref w, int N, int in, int out, int acc)
{
	const struct ops *o = t->ops;

	if (t->lp) {
		o->matmul_backward_xb(dx, dw, dy, xb, w.p, N, in, out, acc);
	} else if (!acc) {
		o->matmul_backward(dx, dw, dy, x, w.p, w.dt, N, in, out);
	} else {
		o->matmul_backward(t->dtmp, dw, dy, x, w.p, w.dt, N, in, out);
		o->add(dx, t->dtmp, (size_t)N * in);
	}
}

/* with bf16 copies: xb(n) = bf16(x), the GEMM input's one rounding */
static void keep_bf16(const struct model_train *t, void *xb, const float *x, size_t n)
{
	if (t->lp)
		t->ops->cast_bf16(xb, x, n);
}

/* y(N,C) = rmsnorm(x) with w, a GEMM input: with bf16 copies only its bf16 yb is made */
static void norm_in(const struct model_train *t, float *y, void *yb, const float *x,
                    struct wref w, int N, int C)
{
	float eps = t->m->cfg.rms_norm_eps;

	if (t->lp)
		t->ops->rmsnorm_xb(yb, x, w.p, w.dt, N, C, eps);
	else
		t->ops->rmsnorm(y, x, w.p, w.dt, N, C, eps);
}

/* the fused mixed-precision passes below are on: bf16 copies, DICE_SFT_UNFUSED unset */
static int fused_lp(const struct model_train *t)
{
	return t->lp && !t->unfused;
}

/* the q/k/v backward as one GEMM pair over bf16 gradients side by side (t->dqkvb) */
static int qkv_fused(const struct model_train *t)
{
	const struct ops *o = t->ops;

	return fused_lp(t) && t->g_qkv && t->m->fuse_qkv && o->rope_rmsnorm_backward &&
	       o->cast_bf16_rows && o->matmul_backward_xbb;
}

/* the MLP's gate and up products in bf16, one GEMM over both (rows [gate | up]): the
 * weights and the gradients of gate_proj and up_proj lie one after the other */
static int gu_fused(const struct model_train *t)
{
	const struct ops *o = t->ops;

	return fused_lp(t) && t->g_gu && t->m->fuse_gu && o->matmul_xbb &&
	       o->swiglu_cat_bb && o->swiglu_cat_backward_bb && o->matmul_backward_xbb;
}

/* the head in bf16 passes: the final norm's output made in bf16 (in the memory of t->xnf),
 * dlogits rounded to bf16 by the cross-entropy (t->dlb) for the lm_head backward: the same
 * bits as the fp32 ops, whose products round both anyway */
static int head_xb(const struct model_train *t)
{
	const struct ops *o = t->ops;

	return fused_lp(t) && t->wc->lm_head.dt == DICE_BF16 && o->rmsnorm_xb &&
	       o->matmul_xb && o->cross_entropy_xb && o->matmul_backward_xbb;
}

/* the attention's q, k, v made in bf16 by the passes before it (rmsnorm_rope_xb, the v
 * product rounded to bf16): the attention casts none, and no fp32 copies are kept */
static int att_bf(const struct model_train *t)
{
	const struct ops *o = t->ops;

	return fused_lp(t) && o->attention_tc_stat_bf && o->attention_tc_backward_stat_bf &&
	       o->rmsnorm_rope_xb && o->matmul_xbb;
}

/* the residual adds in the products' epilogue (no copy of the stream first) */
static int res_add(const struct model_train *t)
{
	return fused_lp(t) && t->ops->matmul_xb_add;
}

/* the residual stream's gradient kept in bf16 too (t->dxb), made by the norms' backward,
 * for the o and down products' backward */
static int dres_bf16(const struct model_train *t)
{
	const struct ops *o = t->ops;

	return fused_lp(t) && o->rmsnorm_backward_add && o->matmul_backward_xbb &&
	       o->cast_bf16;
}

/* dres(N,C) += the rmsnorm backward's dx from dy and the norm's input x; dw +=; with
 * dres_bf16, t->dxb = bf16(dres) */
static void norm_bwd_add(const struct model_train *t, float *dres, float *dw, const float *dy,
                         const float *x, struct wref w, int N, int C)
{
	const struct ops *o = t->ops;
	float eps = t->m->cfg.rms_norm_eps;

	if (o->rmsnorm_backward_add && !t->unfused) {
		o->rmsnorm_backward_add(dres, dres_bf16(t) ? t->dxb : NULL, dw, dy, x, w.p, w.dt, N,
		                        C, eps);
	} else {
		o->rmsnorm_backward(t->dtmp, dw, dy, x, w.p, w.dt, N, C, eps);
		o->add(dres, t->dtmp, (size_t)N * C);
	}
}

/* the backward of a product whose dy is the residual stream's gradient t->dx */
static void mm_bwd_res(const struct model_train *t, float *dx, float *dw, const float *x,
                       const void *xb, struct wref w, int N, int in, int out)
{
	if (dres_bf16(t))
		t->ops->matmul_backward_xbb(dx, dw, t->dxb, xb, w.p, N, in, out, 0);
	else
		mm_bwd(t, dx, dw, t->dx, x, xb, w, N, in, out, 0);
}

int model_train_init(struct model_train *t, struct model *m, int recompute)
{
	const struct ops *o = m->ops;
	struct ckpt_tensor *list;
	size_t n, off = 0;

	memset(t, 0, sizeof *t);
	if (m->dtype != DICE_F32) {
		warn_msg("model_bwd: training needs fp32 weights on the backend (master copy)");
		return -1;
	}
	if (!o->matmul_backward || !o->attention_backward || !o->cross_entropy || !o->adamw) {
		warn_msg("model_bwd: backend %s has no training ops", o->name);
		return -1;
	}
	t->m = m;
	t->ops = o;
	t->recompute = recompute;
	list = checkpoint_tensor_list(&m->cfg, &t->g, &n);
	for (size_t i = 0; i < n; i++)
		off += (size_t)list[i].shape[0] * (list[i].ndim == 2 ? (size_t)list[i].shape[1] : 1);
	t->ngrad = off;
	t->gbuf = o->alloc(off * sizeof(float));
	off = 0;
	for (size_t i = 0; i < n; i++) {
		list[i].ref->p = t->gbuf + off;
		list[i].ref->dt = DICE_F32;
		off += (size_t)list[i].shape[0] * (list[i].ndim == 2 ? (size_t)list[i].shape[1] : 1);
	}
	t->g.nlayers = m->cfg.num_layers;
	t->g_qkv = t->g_gu = 1;         /* q/k/v and gate/up gradients one after the other */
	for (int l = 0; l < m->cfg.num_layers; l++) {
		const struct layer_weights *g = &t->g.layers[l];
		size_t C = (size_t)m->cfg.hidden_size, QD = (size_t)m->cfg.num_heads * m->cfg.head_dim;
		size_t KVD = (size_t)m->cfg.num_kv_heads * m->cfg.head_dim;
		size_t I = (size_t)m->cfg.intermediate_size;
		t->g_qkv &= (const float *)g->k_proj.p == (const float *)g->q_proj.p + QD * C &&
		            (const float *)g->v_proj.p == (const float *)g->k_proj.p + KVD * C;
		t->g_gu &= (const float *)g->up_proj.p == (const float *)g->gate_proj.p + I * C;
	}
	if (m->cfg.tie_word_embeddings || m->w.lm_head.p == m->w.embed.p)
		t->g.lm_head = t->g.embed;
	free(list);
	t->wc = &m->w;
	{
		const char *e = getenv("DICE_SFT_PROFILE");
		t->prof = !e ? 0 : !strcmp(e, "2") ? 2 : 1;
	}
	t->prof_last = t->op_last = pool_now();
	t->unfused = getenv("DICE_SFT_UNFUSED") && strcmp(getenv("DICE_SFT_UNFUSED"), "0");
	model_train_zero_grad(t);
	return 0;
}

void model_train_mark(struct model_train *t, int ph)
{
	double now;

	if (!t->prof)
		return;
	t->ops->sync();
	now = pool_now();
	t->prof_s[ph] += now - t->prof_last;
	t->prof_last = now;
}

void model_train_op(struct model_train *t, const char *name)
{
	double now;
	int i;

	if (t->prof < 2)
		return;
	t->ops->sync();
	now = pool_now();
	for (i = 0; i < t->nop && t->op_name[i] != name; i++)
		;
	if (i == t->nop && t->nop < MT_PROF_OPS)
		t->op_name[t->nop++] = name;
	if (i < t->nop)
		t->op_s[i] += now - t->op_last;
	t->op_last = now;
}

void model_train_profile_print(struct model_train *t)
{
	static const char *name[MT_PROF_N] = { "forward (not attention)", "forward attention",
	                                       "head + loss", "backward (not attention)",
	                                       "backward attention", "optimizer + bf16 refresh" };
	double sum = 0.0;

	if (!t->prof)
		return;
	t->prof_printed = 1;
	for (int i = 0; i < MT_PROF_N; i++)
		sum += t->prof_s[i];
	for (int i = 0; i < MT_PROF_N; i++)
		fprintf(stderr, "profile: %-26s %9.3f s %5.1f%%\n", name[i], t->prof_s[i],
		        sum > 0 ? 100.0 * t->prof_s[i] / sum : 0.0);
	for (int i = 0; i < t->nop; i++)
		fprintf(stderr, "profile: op %-23s %9.3f s %5.1f%%\n", t->op_name[i], t->op_s[i],
		        sum > 0 ? 100.0 * t->op_s[i] / sum : 0.0);
}

static void scratch_free(struct model_train *t);

/* the bf16 view of a master matrix: same byte offset in lbuf, halved */
static struct wref lp_view(const struct model_train *t, struct wref w)
{
	size_t off = (size_t)((const char *)w.p - (const char *)t->m->wbuf);
	return (struct wref){ .p = (char *)t->lbuf + off / 2, .dt = DICE_BF16 };
}

int model_train_set_bf16(struct model_train *t)
{
	const struct ops *o = t->ops;
	const struct model_weights *w = &t->m->w;

	if (!o->cast_bf16 || !o->attention_tc || !o->attention_tc_backward) {
		warn_msg("model_bwd: backend %s has no mixed-precision ops", o->name);
		return -1;
	}
	if (t->lp)
		return 0;
	if (!o->matmul_xb || !o->matmul_backward_xb || !o->attention_tc_stat ||
	    !o->attention_tc_backward_stat || !o->rmsnorm_xb || !o->swiglu_xb) {
		warn_msg("model_bwd: backend %s has no bf16-input GEMMs", o->name);
		return -1;
	}
	scratch_free(t);                /* the activation blocks are carved otherwise */
	t->lbuf = o->alloc(t->m->wbytes / 2);
	if (!t->lbuf)
		return -1;
	t->wl = *w;
	t->wl.layers = xmalloc((size_t)w->nlayers * sizeof *t->wl.layers);
	for (int l = 0; l < w->nlayers; l++) {
		const struct layer_weights *a = &w->layers[l];
		struct layer_weights *b = &t->wl.layers[l];
		*b = *a;
		b->q_proj = lp_view(t, a->q_proj);
		b->k_proj = lp_view(t, a->k_proj);
		b->v_proj = lp_view(t, a->v_proj);
		b->o_proj = lp_view(t, a->o_proj);
		b->gate_proj = lp_view(t, a->gate_proj);
		b->up_proj = lp_view(t, a->up_proj);
		b->down_proj = lp_view(t, a->down_proj);
	}
	t->wl.lm_head = lp_view(t, w->lm_head);
	t->lp = 1;
	t->wc = &t->wl;
	model_train_refresh(t);
	return 0;
}

void model_train_refresh(struct model_train *t)
{
	if (t->lp)
		t->ops->cast_bf16(t->lbuf, (const float *)t->m->wbuf, t->m->wbytes / 4);
}

void *model_train_lp_of(const struct model_train *t, const void *master)
{
	return (void *)lp_view(t, (struct wref){ .p = master, .dt = DICE_F32 }).p;
}

static void scratch_free(struct model_train *t)
{
	const struct ops *o = t->ops;
	float **f[] = { &t->xs, &t->xnf, &t->sel, &t->logits, &t->loss, &t->dx, &t->dtmp, &t->dxn,
	                &t->dq, &t->dk, &t->dv, &t->datt, &t->dg, &t->du, &t->dh, &t->weight_d,
	                &t->dqkvb, &t->dlb, &t->dxb };
	for (size_t i = 0; i < ARRAY_LEN(f); i++) {
		if (*f[i])
			o->free(*f[i]);
		*f[i] = NULL;
	}
	for (int l = 0; l < t->nlayer_acts; l++)
		o->free(t->acts[l]);
	free(t->acts);
	t->acts = NULL;
	t->nlayer_acts = 0;
	if (t->ids_d)
		o->free(t->ids_d);
	if (t->pos_d)
		o->free(t->pos_d);
	if (t->target_d)
		o->free(t->target_d);
	if (t->rowsel_d)
		o->free(t->rowsel_d);
	if (t->noisy_d)
		o->free(t->noisy_d);
	t->ids_d = t->pos_d = t->target_d = t->rowsel_d = NULL;
	t->noisy_d = NULL;
	free(t->rowsel_h);
	t->rowsel_h = NULL;
	t->rows = t->lrows = 0;
}

void model_train_free(struct model_train *t)
{
	if (!t->ops)
		return;
	if (!t->prof_printed)
		model_train_profile_print(t);
	scratch_free(t);
	if (t->gbuf)
		t->ops->free(t->gbuf);
	if (t->lbuf)
		t->ops->free(t->lbuf);
	free(t->wl.layers);
	free(t->g.layers);
	memset(t, 0, sizeof *t);
}

void model_train_zero_grad(struct model_train *t)
{
	t->ops->zero(t->gbuf, t->ngrad * sizeof(float));
}

static void reserve(struct model_train *t, int N)
{
	const struct ops *o = t->ops;
	const struct model_config *c = &t->m->cfg;
	size_t R = (size_t)N, C = (size_t)c->hidden_size, QD = (size_t)c->num_heads * c->head_dim;
	size_t KVD = (size_t)c->num_kv_heads * c->head_dim, I = (size_t)c->intermediate_size;

	if (N <= t->rows)
		return;
	scratch_free(t);
	t->rows = N;
	t->nlayer_acts = t->recompute ? 1 : c->num_layers;
	t->acts = xcalloc((size_t)t->nlayer_acts, sizeof *t->acts);
	for (int l = 0; l < t->nlayer_acts; l++)
		t->acts[l] = o->alloc(acts_bytes(c, N, t->lp, gu_fused(t), att_bf(t)));
	t->xs = o->alloc((size_t)(c->num_layers + 1) * R * C * 4);
	t->xnf = o->alloc(R * C * 4);
	t->sel = o->alloc(R * C * 4);
	t->loss = o->alloc(R * 4);
	t->dx = o->alloc(R * C * 4);
	t->dtmp = o->alloc(R * C * 4);
	t->dxn = o->alloc(R * C * 4);
	t->dq = o->alloc(R * QD * 4);
	t->datt = o->alloc(R * QD * 4);
	t->dk = o->alloc(R * KVD * 4);
	t->dv = o->alloc(R * KVD * 4);
	t->dg = o->alloc(R * I * 4);
	t->du = o->alloc(R * I * 4);
	t->dh = o->alloc(R * I * 4);
	if (qkv_fused(t))
		t->dqkvb = o->alloc(R * (QD + 2 * KVD) * 2);
	if (dres_bf16(t))
		t->dxb = o->alloc(R * C * 2);
	t->weight_d = o->alloc(R * 4);
	t->ids_d = o->alloc(R * sizeof(int));
	t->pos_d = o->alloc(R * sizeof(int));
	t->target_d = o->alloc(R * sizeof(int));
	t->rowsel_d = o->alloc(R * sizeof(int));
	t->noisy_d = o->alloc(R);
	t->rowsel_h = xmalloc(R * sizeof(int));
}

static struct attn_mask sample_mask(const struct model_train *t, const struct train_batch *b,
                                    int s)
{
	int off = b->start[s];
	return (struct attn_mask){ .block = t->m->cfg.block_size, .qpos = t->pos_d + off,
	                           .kpos = t->pos_d + off, .qnoisy = t->noisy_d + off,
	                           .knoisy = t->noisy_d + off };
}

static void layer_forward(struct model_train *t, const struct train_batch *b, int l)
{
	const struct ops *o = t->ops;
	const struct model_config *c = &t->m->cfg;
	const struct layer_weights *w = &t->wc->layers[l];
	int N = b->N, C = c->hidden_size, NH = c->num_heads, NKV = c->num_kv_heads;
	int HD = c->head_dim, QD = NH * HD, KVD = NKV * HD, I = c->intermediate_size;
	float eps = c->rms_norm_eps;
	float *xin = t->xs + (size_t)l * t->rows * C, *xout = xin + (size_t)t->rows * C;
	struct acts a = acts_carve(t, l);

	norm_in(t, a.xn1, a.xn1b, xin, w->input_norm, N, C);
	model_train_op(t, "f norm1");
	mm(t, a.qraw, a.xn1, a.xn1b, w->q_proj, N, C, QD, 0);
	mm(t, a.kraw, a.xn1, a.xn1b, w->k_proj, N, C, KVD, 0);
	if (att_bf(t))
		o->matmul_xbb(a.vb, a.xn1b, w->v_proj.p, N, C, KVD);
	else
		mm(t, a.v, a.xn1, a.xn1b, w->v_proj, N, C, KVD, 0);
	model_train_op(t, "f qkv gemm");
	if (att_bf(t)) {
		o->rmsnorm_rope_xb(a.qb, a.qraw, w->q_norm.p, w->q_norm.dt, t->pos_d, N, NH, HD,
		                   c->rope_theta, eps);
		o->rmsnorm_rope_xb(a.kb, a.kraw, w->k_norm.p, w->k_norm.dt, t->pos_d, N, NKV, HD,
		                   c->rope_theta, eps);
	} else if (o->rmsnorm_rope && !t->unfused) {
		o->rmsnorm_rope(a.q, a.qraw, w->q_norm.p, w->q_norm.dt, t->pos_d, N, NH, HD,
		                c->rope_theta, eps);
		o->rmsnorm_rope(a.k, a.kraw, w->k_norm.p, w->k_norm.dt, t->pos_d, N, NKV, HD,
		                c->rope_theta, eps);
	} else {
		o->rmsnorm(a.q, a.qraw, w->q_norm.p, w->q_norm.dt, N * NH, HD, eps);
		o->rmsnorm(a.k, a.kraw, w->k_norm.p, w->k_norm.dt, N * NKV, HD, eps);
		o->rope(a.q, t->pos_d, N, NH, HD, c->rope_theta);
		o->rope(a.k, t->pos_d, N, NKV, HD, c->rope_theta);
	}
	model_train_op(t, "f qk norm rope");
	model_train_mark(t, t->recompute && t->in_bwd ? MT_PROF_BWD : MT_PROF_FWD);
	for (int s = 0; s < b->nsamp; s++) {
		size_t off = (size_t)b->start[s];
		struct attn_mask mk = sample_mask(t, b, s);
		if (att_bf(t))
			o->attention_tc_stat_bf(a.att + off * QD, a.stat + off * NH,
			                        (char *)a.qb + off * QD * 2, (char *)a.kb + off * KVD * 2,
			                        (char *)a.vb + off * KVD * 2, b->len[s], b->len[s], NH,
			                        NKV, HD, &mk);
		else if (t->lp)
			o->attention_tc_stat(a.att + off * QD, a.stat + off * NH, a.q + off * QD,
			                     a.k + off * KVD, a.v + off * KVD, b->len[s], b->len[s], NH,
			                     NKV, HD, &mk);
		else
			o->attention(a.att + off * QD, a.q + off * QD, a.k + off * KVD, a.v + off * KVD,
			             b->len[s], b->len[s], NH, NKV, HD, &mk);
	}
	model_train_op(t, "f attention");
	model_train_mark(t, t->recompute && t->in_bwd ? MT_PROF_BWD_ATT : MT_PROF_FWD_ATT);
	keep_bf16(t, a.attb, a.att, (size_t)N * QD);
	if (!res_add(t))
		o->copy(a.xmid, xin, (size_t)N * C * 4);
	model_train_op(t, "f cast att, copy");
	if (res_add(t))
		o->matmul_xb_add(a.xmid, a.attb, w->o_proj.p, xin, N, QD, C);
	else
		mm(t, a.xmid, a.att, a.attb, w->o_proj, N, QD, C, 1);
	model_train_op(t, "f o gemm");
	norm_in(t, a.xn2, a.xn2b, a.xmid, w->post_norm, N, C);
	model_train_op(t, "f norm2");
	if (gu_fused(t)) {
		o->matmul_xbb(a.gub, a.xn2b, w->gate_proj.p, N, C, 2 * I);
	} else {
		mm(t, a.gate, a.xn2, a.xn2b, w->gate_proj, N, C, I, 0);
		mm(t, a.up, a.xn2, a.xn2b, w->up_proj, N, C, I, 0);
	}
	model_train_op(t, "f gate up gemm");
	if (gu_fused(t))
		o->swiglu_cat_bb(a.hb, a.gub, N, I);
	else if (t->lp)
		o->swiglu_xb(a.hb, a.gate, a.up, N, I);
	else
		o->swiglu(a.h, a.gate, a.up, N, I);
	if (!res_add(t))
		o->copy(xout, a.xmid, (size_t)N * C * 4);
	model_train_op(t, "f swiglu, copy");
	if (res_add(t))
		o->matmul_xb_add(xout, a.hb, w->down_proj.p, a.xmid, N, I, C);
	else
		mm(t, xout, a.h, a.hb, w->down_proj, N, I, C, 1);
	model_train_op(t, "f down gemm");
}

/* t->dx: gradient of the layer's output on entry, of its input on return */
static void layer_backward(struct model_train *t, const struct train_batch *b, int l)
{
	const struct ops *o = t->ops;
	const struct model_config *c = &t->m->cfg;
	const struct layer_weights *w = &t->wc->layers[l];
	struct layer_weights *g = &t->g.layers[l];
	int N = b->N, C = c->hidden_size, NH = c->num_heads, NKV = c->num_kv_heads;
	int HD = c->head_dim, QD = NH * HD, KVD = NKV * HD, I = c->intermediate_size;
	float eps = c->rms_norm_eps;
	float *xin = t->xs + (size_t)l * t->rows * C;
	struct acts a;

	if (t->recompute)
		layer_forward(t, b, l);
	a = acts_carve(t, l);
	model_train_op(t, "b recompute");
	/* MLP */
	mm_bwd_res(t, t->dh, (float *)g->down_proj.p, a.h, a.hb, w->down_proj, N, I, C);
	model_train_op(t, "b down gemm");
	if (gu_fused(t)) {
		/* [dgate | dup] in bf16 rows (in the memory of t->dg), one GEMM pair over both */
		o->swiglu_cat_backward_bb(t->dg, t->dh, a.gub, N, I);
		model_train_op(t, "b swiglu");
		o->matmul_backward_xbb(t->dxn, (float *)g->gate_proj.p, t->dg, a.xn2b,
		                       w->gate_proj.p, N, C, 2 * I, 0);
	} else if (t->lp && o->swiglu_backward_xb && o->matmul_backward_xbb) {
		/* dgate, dup made in bf16 (their one rounding for the GEMMs, the same bits), in
		 * the memory of t->dg and t->du */
		o->swiglu_backward_xb(t->dg, t->du, t->dh, a.gate, a.up, N, I);
		model_train_op(t, "b swiglu");
		o->matmul_backward_xbb(t->dxn, (float *)g->gate_proj.p, t->dg, a.xn2b, w->gate_proj.p,
		                       N, C, I, 0);
		o->matmul_backward_xbb(t->dxn, (float *)g->up_proj.p, t->du, a.xn2b, w->up_proj.p, N,
		                       C, I, 1);
	} else {
		o->swiglu_backward(t->dg, t->du, t->dh, a.gate, a.up, N, I);
		mm_bwd(t, t->dxn, (float *)g->gate_proj.p, t->dg, a.xn2, a.xn2b, w->gate_proj, N, C,
		       I, 0);
		mm_bwd(t, t->dxn, (float *)g->up_proj.p, t->du, a.xn2, a.xn2b, w->up_proj, N, C, I, 1);
	}
	model_train_op(t, "b gate up gemm");
	norm_bwd_add(t, t->dx, (float *)g->post_norm.p, t->dxn, a.xmid, w->post_norm, N, C);
	model_train_op(t, "b norm2, add");
	/* attention */
	mm_bwd_res(t, t->datt, (float *)g->o_proj.p, a.att, a.attb, w->o_proj, N, QD, C);
	model_train_op(t, "b o gemm");
	model_train_mark(t, MT_PROF_BWD);
	for (int s = 0; s < b->nsamp; s++) {
		size_t off = (size_t)b->start[s];
		struct attn_mask mk = sample_mask(t, b, s);
		if (att_bf(t))
			o->attention_tc_backward_stat_bf(t->dq + off * QD, t->dk + off * KVD,
			                                 t->dv + off * KVD, t->datt + off * QD,
			                                 (char *)a.qb + off * QD * 2,
			                                 (char *)a.kb + off * KVD * 2,
			                                 (char *)a.vb + off * KVD * 2, a.att + off * QD,
			                                 a.stat + off * NH, b->len[s], b->len[s], NH, NKV,
			                                 HD, &mk);
		else if (t->lp)
			o->attention_tc_backward_stat(t->dq + off * QD, t->dk + off * KVD,
			                              t->dv + off * KVD, t->datt + off * QD,
			                              a.q + off * QD, a.k + off * KVD, a.v + off * KVD,
			                              a.att + off * QD, a.stat + off * NH, b->len[s],
			                              b->len[s], NH, NKV, HD, &mk);
		else
			o->attention_backward(t->dq + off * QD, t->dk + off * KVD, t->dv + off * KVD,
			                      t->datt + off * QD, a.q + off * QD, a.k + off * KVD,
			                      a.v + off * KVD, a.att + off * QD, b->len[s], b->len[s], NH,
			                      NKV, HD, &mk);
	}
	model_train_op(t, "b attention");
	model_train_mark(t, MT_PROF_BWD_ATT);
	if (qkv_fused(t)) {
		/* dq, dk, dv in bf16 side by side in rows of QD + 2 KVD: one pair of GEMMs over
		 * q_proj, k_proj, v_proj, which lie one after the other (weights and gradients) */
		int ld = QD + 2 * KVD;
		char *d = (char *)t->dqkvb;
		o->rope_rmsnorm_backward(t->dq, d, ld, (float *)g->q_norm.p, t->dq, a.qraw,
		                         w->q_norm.p, w->q_norm.dt, t->pos_d, N, NH, HD,
		                         c->rope_theta, eps);
		o->rope_rmsnorm_backward(t->dk, d + (size_t)QD * 2, ld, (float *)g->k_norm.p, t->dk,
		                         a.kraw, w->k_norm.p, w->k_norm.dt, t->pos_d, N, NKV, HD,
		                         c->rope_theta, eps);
		o->cast_bf16_rows(d + (size_t)(QD + KVD) * 2, ld, t->dv, N, KVD);
		model_train_op(t, "b qk rope norm");
		o->matmul_backward_xbb(t->dxn, (float *)g->q_proj.p, d, a.xn1b, w->q_proj.p, N, C, ld,
		                       0);
		model_train_op(t, "b qkv gemm");
		norm_bwd_add(t, t->dx, (float *)g->input_norm.p, t->dxn, xin, w->input_norm, N, C);
		model_train_op(t, "b norm1, add");
		return;
	}
	if (o->rope_rmsnorm_backward && !t->unfused) {
		o->rope_rmsnorm_backward(t->dq, NULL, 0, (float *)g->q_norm.p, t->dq, a.qraw,
		                         w->q_norm.p, w->q_norm.dt, t->pos_d, N, NH, HD,
		                         c->rope_theta, eps);
		o->rope_rmsnorm_backward(t->dk, NULL, 0, (float *)g->k_norm.p, t->dk, a.kraw,
		                         w->k_norm.p, w->k_norm.dt, t->pos_d, N, NKV, HD,
		                         c->rope_theta, eps);
	} else {
		o->rope_backward(t->dq, t->pos_d, N, NH, HD, c->rope_theta);
		o->rope_backward(t->dk, t->pos_d, N, NKV, HD, c->rope_theta);
		o->rmsnorm_backward(t->dq, (float *)g->q_norm.p, t->dq, a.qraw, w->q_norm.p,
		                    w->q_norm.dt, N * NH, HD, eps);
		o->rmsnorm_backward(t->dk, (float *)g->k_norm.p, t->dk, a.kraw, w->k_norm.p,
		                    w->k_norm.dt, N * NKV, HD, eps);
	}
	model_train_op(t, "b qk rope norm");
	mm_bwd(t, t->dxn, (float *)g->q_proj.p, t->dq, a.xn1, a.xn1b, w->q_proj, N, C, QD, 0);
	mm_bwd(t, t->dxn, (float *)g->k_proj.p, t->dk, a.xn1, a.xn1b, w->k_proj, N, C, KVD, 1);
	mm_bwd(t, t->dxn, (float *)g->v_proj.p, t->dv, a.xn1, a.xn1b, w->v_proj, N, C, KVD, 1);
	model_train_op(t, "b qkv gemm");
	norm_bwd_add(t, t->dx, (float *)g->input_norm.p, t->dxn, xin, w->input_norm, N, C);
	model_train_op(t, "b norm1, add");
}

/* forward to the loss; with grad, the backward too. */
static int run(struct model_train *t, const struct train_batch *b, double *loss, int grad,
               model_train_weight_fn fn, void *arg)
{
	const struct ops *o = t->ops;
	const struct model_config *c = &t->m->cfg;
	const struct model_weights *w = t->wc;
	int N = b->N, C = c->hidden_size, V = c->vocab_size, L = c->num_layers, R = 0;
	float *lossh, *wsel;
	int *tsel;
	double sum = 0.0;

	for (int n = 0; n < N; n++) {
		if (b->ids[n] < 0 || b->ids[n] >= V || (b->target[n] >= V)) {
			warn_msg("model_bwd: token id %d outside the vocabulary (%d)",
			         b->ids[n] >= V || b->ids[n] < 0 ? b->ids[n] : b->target[n], V);
			return -1;
		}
	}
	if (N == 0) {
		*loss = 0.0;
		return 0;
	}
	reserve(t, N);
	tsel = xmalloc((size_t)N * sizeof *tsel);
	wsel = xmalloc((size_t)N * sizeof *wsel);
	for (int n = 0; n < N; n++) {
		if (b->target[n] < 0)
			continue;
		t->rowsel_h[R] = n;
		tsel[R] = b->target[n];
		wsel[R] = b->weight[n];
		R++;
	}
	if (R > t->lrows) {             /* logits only for the rows with a target */
		if (t->logits)
			o->free(t->logits);
		t->logits = o->alloc((size_t)R * V * 4);
		if (t->dlb)
			o->free(t->dlb);
		t->dlb = head_xb(t) ? o->alloc((size_t)R * V * 2) : NULL;
		t->lrows = R;
	}
	int hx = head_xb(t) && t->dlb;      /* (dlb made with the logits) */
	o->to_device(t->ids_d, b->ids, (size_t)N * sizeof(int));
	o->to_device(t->pos_d, b->pos, (size_t)N * sizeof(int));
	o->to_device(t->noisy_d, b->noisy, (size_t)N);
	o->to_device(t->target_d, tsel, (size_t)R * sizeof(int));
	o->to_device(t->rowsel_d, t->rowsel_h, (size_t)R * sizeof(int));
	o->to_device(t->weight_d, wsel, (size_t)R * sizeof(float));
	free(tsel);
	free(wsel);

	model_train_mark(t, MT_PROF_OPT);      /* zeroing, uploads: charged to the last step */
	model_train_op(t, "uploads");
	t->in_bwd = 0;
	o->embed(t->xs, t->ids_d, w->embed.p, w->embed.dt, N, C);
	model_train_op(t, "embed");
	for (int l = 0; l < L; l++)
		layer_forward(t, b, l);
	model_train_mark(t, MT_PROF_FWD);
	/* head on the rows with a target */
	float *xf = t->xs + (size_t)L * t->rows * C;
	if (R) {
		o->embed(t->sel, t->rowsel_d, xf, DICE_F32, R, C);
		if (hx) {
			o->rmsnorm_xb(t->xnf, t->sel, w->final_norm.p, w->final_norm.dt, R, C,
			              c->rms_norm_eps);
			o->matmul_xb(t->logits, t->xnf, w->lm_head.p, R, C, V, 0);
		} else {
			o->rmsnorm(t->xnf, t->sel, w->final_norm.p, w->final_norm.dt, R, C,
			           c->rms_norm_eps);
			o->matmul(t->logits, t->xnf, w->lm_head.p, w->lm_head.dt, R, C, V);
		}
		lossh = xmalloc((size_t)R * sizeof *lossh);
		if (fn) {
			/* unit weights give -log p of each target (dlogits to a scratch so the
			 * logits survive); the caller turns them into the real weights */
			float *one = xmalloc((size_t)R * sizeof *one), *logp, *scr;
			for (int r = 0; r < R; r++)
				one[r] = 1.0f;
			o->to_device(t->weight_d, one, (size_t)R * sizeof *one);
			scr = o->alloc((size_t)R * V * 4);
			o->cross_entropy(t->loss, scr, t->logits, t->target_d, t->weight_d, R, V);
			o->free(scr);
			o->to_host(lossh, t->loss, (size_t)R * sizeof *lossh);
			logp = one;
			for (int r = 0; r < R; r++)
				logp[r] = -lossh[r];
			wsel = xmalloc((size_t)R * sizeof *wsel);
			fn(arg, R, t->rowsel_h, logp, wsel);
			o->to_device(t->weight_d, wsel, (size_t)R * sizeof *wsel);
			free(wsel);
			free(one);
		}
		if (hx)
			o->cross_entropy_xb(t->loss, t->dlb, t->logits, t->target_d, t->weight_d, R, V);
		else
			o->cross_entropy(t->loss, t->logits, t->logits, t->target_d, t->weight_d, R, V);
		o->to_host(lossh, t->loss, (size_t)R * sizeof *lossh);
		for (int r = 0; r < R; r++)
			sum += lossh[r];
		free(lossh);
	}
	*loss = sum;
	model_train_op(t, "head forward, loss");
	model_train_mark(t, MT_PROF_HEAD);
	if (!grad || !R) {
		o->sync();
		return 0;
	}
	/* backward: head, layers in reverse, embedding */
	if (hx)
		o->matmul_backward_xbb(t->dxn, (float *)t->g.lm_head.p, t->dlb, t->xnf, w->lm_head.p,
		                       R, C, V, 0);
	else
		o->matmul_backward(t->dxn, (float *)t->g.lm_head.p, t->logits, t->xnf,
		                   w->lm_head.p, w->lm_head.dt, R, C, V);
	o->rmsnorm_backward(t->dxn, (float *)t->g.final_norm.p, t->dxn, t->sel, w->final_norm.p,
	                    w->final_norm.dt, R, C, c->rms_norm_eps);
	model_train_op(t, "head backward");
	model_train_mark(t, MT_PROF_HEAD);
	t->in_bwd = 1;
	o->zero(t->dx, (size_t)N * C * 4);
	o->embed_backward(t->dx, t->rowsel_d, t->dxn, R, C);
	if (dres_bf16(t))
		o->cast_bf16(t->dxb, t->dx, (size_t)N * C);
	for (int l = L - 1; l >= 0; l--)
		layer_backward(t, b, l);
	o->embed_backward((float *)t->g.embed.p, t->ids_d, t->dx, N, C);
	o->sync();
	model_train_op(t, "embed backward");
	model_train_mark(t, MT_PROF_BWD);
	return 0;
}

int model_train_batch(struct model_train *t, const struct train_batch *b, double *loss)
{
	return run(t, b, loss, 1, NULL, NULL);
}

int model_train_loss(struct model_train *t, const struct train_batch *b, double *loss)
{
	return run(t, b, loss, 0, NULL, NULL);
}

int model_train_batch_fn(struct model_train *t, const struct train_batch *b, int grad,
                         model_train_weight_fn fn, void *arg, double *loss)
{
	return run(t, b, loss, grad, fn, arg);
}
