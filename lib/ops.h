/* ops: the operations of the SDAR transformer, behind one backend interface.
 *
 * The model (lib/model.c) is written once against `struct ops`; a backend fills the table:
 * ops_cpu (lib/ops_cpu.c, plain fp32 loops: THE SPECIFICATION) and ops_cuda (lib/cuda/ kernels,
 * declared in lib/gpu.h, built when CUDA is on). Every CUDA op is tested against its CPU
 * twin on random data (tests/gpu/test_<op>.cu).
 *
 * Conventions for every op:
 *  - Activations are fp32, row-major, contiguous. On the CUDA backend every pointer is a
 *    device pointer (activations and weights); on the CPU backend a host pointer.
 *  - Weights carry a dtype (enum dice_dtype) and use PyTorch Linear layout w[out, in].
 *  - Dimension letters: N rows (tokens), C channels, NH query heads, NKV key/value heads,
 *    HD head dim, T queries, S keys, V vocabulary.
 *  - Ops never allocate on the hot path beyond the backend's own scratch; they write their
 *    output and do not read it first unless the doc says "in place" or "accumulate".
 *  - Backward ops (training) follow the same table with *_backward names, at its end.
 */
#ifndef DICE_OPS_H
#define DICE_OPS_H

#include <stddef.h>
#include <stdint.h>

enum dice_dtype {
	DICE_F32 = 0,
	DICE_BF16 = 1,
	DICE_F16 = 2,
};

size_t dice_dtype_size(enum dice_dtype dt);
float dice_bf16_to_f32(uint16_t h);
uint16_t dice_f32_to_bf16(float f);   /* round to nearest even */
float dice_f16_to_f32(uint16_t h);
uint16_t dice_f32_to_f16(float f);    /* round to nearest even */

/* Which key a query may see. One rule covers inference and training:
 *  - different seg (packed samples) -> never
 *  - without noisy flags: key block <= query block (block-causal, blocks aligned to absolute
 *    position 0; the decode step is the same rule: cache + the whole current block)
 *  - with noisy flags (SFT [x_t | x_0], TraceRL [prompt | clean | noisy]):
 *      noisy -> noisy: same block only;  noisy -> clean: strictly earlier block;
 *      clean -> clean: block <= own;      clean -> noisy: never.
 * Block index = pos / block. Any pointer may be NULL (no segments, no noisy half).
 * The arrays live where the backend's memory lives: HOST pointers on the CPU backend, DEVICE
 * pointers on the CUDA backend (upload them once per forward with ops->to_device into
 * ops->alloc'ed buffers; the struct itself stays on the host and is passed by pointer).
 * attn_allowed() reads host arrays only. */
struct attn_mask {
	int block;                      /* block size, e.g. 4 */
	const int *qpos, *kpos;         /* (T), (S) absolute positions */
	const int *qseg, *kseg;         /* (T), (S) packed-sample ids, or NULL */
	const uint8_t *qnoisy, *knoisy; /* (T), (S) 1 = noisy half, or NULL */
};
int attn_allowed(const struct attn_mask *m, int i, int j);  /* query i may see key j */

/* Where the new rows of several sequences and their KV caches are, for the cache ops of
 * struct ops (kv_append, attention_kv): the engine's forward packs the T_s new rows of
 * sequence s at rows row0[s] .. row0[s+1]-1 (N rows in all); they sit at positions len[s] ..
 * len[s]+T_s-1 of that sequence. Its cache holds (L, cap[s], NKV, HD) keys (k[s]) and values
 * (v[s]) of element type dt; layer l starts at element l * cap[s] * NKV * HD.
 * The arrays live in backend memory (device on CUDA); nseq, N, maxT, maxS are host ints
 * (maxS = the largest len[s] + T_s). */
struct kv_batch {
	int nseq, N, maxT, maxS;
	enum dice_dtype dt;             /* DICE_F32, or DICE_BF16 / DICE_F16 (CUDA backend) */
	const int *row0;                /* (nseq + 1), row0[nseq] = N */
	const int *len, *cap;           /* (nseq) */
	const int *rowseq;              /* (N) the sequence of each packed row */
	void *const *k, *const *v;      /* (nseq) cache bases */
};

/* The scalars of one AdamW update (struct ops .adamw). */
struct adamw_step {
	float lr, beta1, beta2, eps, weight_decay;
	float gscale;                   /* gradient multiplier (clipping x 1/accumulation) */
	int step;                       /* 1-based step number, for the bias corrections */
};

/* One tensor of a multi-tensor AdamW step (struct ops .adamw_multi); pointers in backend
 * memory. */
struct adamw_tensor {
	float *p, *m, *v;               /* (n) master weights and moments, updated */
	const float *g;                 /* (n) gradient */
	void *lp;                       /* (n) bf16 copy of p, rewritten after the update; or NULL */
	size_t n;
	float weight_decay;             /* this tensor's (struct adamw_step's is not read) */
};

/* one sequence's block in a .denoise step: backend arrays of the block's B positions */
struct denoise_seq {
	int row;                        /* the block's first row of logits */
	int quota;                      /* positions to commit (capped by the masks left) */
	int gstep;                      /* the step its commits record */
	int u0;                         /* its first uniform */
	int *x;                         /* ids (the mask id where masked) */
	uint8_t *msk;                   /* 1: still masked */
	int *step;                      /* committing step */
	float *conf;                    /* probability of the committed draw */
};

struct ops {
	const char *name;               /* "cpu" or "cuda" */
	/* y(N,out) = x(N,in) @ w(out,in)^T */
	void (*matmul)(float *y, const float *x, const void *w, enum dice_dtype wdt,
	               int N, int in, int out);
	/* y(N,C) = x / rms(x) * w(C); w has dtype wdt; y may equal x */
	void (*rmsnorm)(float *y, const float *x, const void *w, enum dice_dtype wdt,
	                int N, int C, float eps);
	/* in place on x(N,NH,HD): rotate-half RoPE at positions pos(N), inv_freq = theta^(-2j/HD) */
	void (*rope)(float *x, const int *pos, int N, int NH, int HD, float theta);
	/* y(N,C) = silu(gate(N,C)) * up(N,C); y may equal gate */
	void (*swiglu)(float *y, const float *gate, const float *up, int N, int C);
	/* y(n) += x(n) */
	void (*add)(float *y, const float *x, size_t n);
	/* out(T,NH,HD) = softmax(q k^T / sqrt(HD) + mask) v, with q(T,NH,HD), k,v(S,NKV,HD),
	 * GQA: query head h uses kv head h / (NH/NKV). A query with no visible key gets zeros. */
	void (*attention)(float *out, const float *q, const float *k, const float *v,
	                  int T, int S, int NH, int NKV, int HD, const struct attn_mask *m);
	/* y(N,C) = embedding rows w[ids[n]] (w is (V,C) of dtype wdt) */
	void (*embed)(float *y, const int *ids, const void *w, enum dice_dtype wdt, int N, int C);
	/* host <-> backend memory; on the CPU backend plain malloc/memcpy */
	void *(*alloc)(size_t bytes);
	void (*free)(void *p);
	void (*to_host)(void *dst, const void *src, size_t bytes);
	void (*to_device)(void *dst, const void *src, size_t bytes);
	void (*sync)(void);
	/* backend -> backend copy (both pointers backend memory; regions do not overlap) */
	void (*copy)(void *dst, const void *src, size_t bytes);

	/* ---- training (lib/ops_bwd_cpu.c is the specification). Appended after the inference
	 * ops so tables written with designated initialisers keep compiling; a backend without
	 * training leaves them NULL. "fwd" arguments are the forward op's inputs/outputs.
	 * Gradients are fp32 whatever the weight dtype. "accumulate" = add into, "write" =
	 * overwrite. */
	/* dx(N,in) = dy(N,out) @ w  (write; skipped when dx is NULL)
	 * dw(out,in) += dy^T @ x     (accumulate; skipped when dw is NULL) */
	void (*matmul_backward)(float *dx, float *dw, const float *dy, const float *x,
	                        const void *w, enum dice_dtype wdt, int N, int in, int out);
	/* rmsnorm: dx(N,C) (write; may equal dy), dw(C) += (accumulate; skipped when NULL),
	 * from dy(N,C) and the forward input x(N,C) */
	void (*rmsnorm_backward)(float *dx, float *dw, const float *dy, const float *x,
	                         const void *w, enum dice_dtype wdt, int N, int C, float eps);
	/* in place on dx(N,NH,HD): the transpose of rope (rotation by minus the angle) */
	void (*rope_backward)(float *dx, const int *pos, int N, int NH, int HD, float theta);
	/* dgate, dup (N,C) (write) from dy(N,C) and the forward inputs gate, up; dgate may
	 * equal dy */
	void (*swiglu_backward)(float *dgate, float *dup, const float *dy, const float *gate,
	                        const float *up, int N, int C);
	/* dq(T,NH,HD), dk, dv(S,NKV,HD) (write) from dout(T,NH,HD) and the forward's q, k, v,
	 * out, with the same mask */
	void (*attention_backward)(float *dq, float *dk, float *dv, const float *dout,
	                           const float *q, const float *k, const float *v,
	                           const float *out, int T, int S, int NH, int NKV, int HD,
	                           const struct attn_mask *m);
	/* dw(V,C) += dy(N,C) rows scattered at ids(N) (accumulate; repeated ids add up) */
	void (*embed_backward)(float *dw, const int *ids, const float *dy, int N, int C);
	/* Weighted cross-entropy over logits(N,V) with target(N), weight(N): for target >= 0
	 * loss(n) = weight * (logsumexp - logit[target]) and dlogits(n) = weight *
	 * (softmax - onehot); for target < 0 both are 0. loss (N) and dlogits (N,V) are
	 * written; dlogits may equal logits. */
	void (*cross_entropy)(float *loss, float *dlogits, const float *logits, const int *target,
	                      const float *weight, int N, int V);
	/* p(bytes) = 0 */
	void (*zero)(void *p, size_t bytes);
	/* sum of x(n)^2, accumulated in double, returned to the host (a sync point) */
	double (*sumsq)(const float *x, size_t n);
	/* One AdamW step (PyTorch's torch.optim.AdamW) on n fp32 parameters p with moments m,
	 * v and gradient g scaled by s->gscale (the clipping factor):
	 *   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
	 *   p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps), bc1 = 1-b1^step, bc2 = 1-b2^step */
	void (*adamw)(float *p, float *m, float *v, const float *g, size_t n,
	              const struct adamw_step *s);

	/* ---- sampling (SPEC §2), appended after training. For r < R: row rows[r] of
	 * logits(.., V) (backend memory; rows NULL = row r) is filtered exactly as sample_draw
	 * below (temperature -> top-k -> top-p -> softmax) and drawn with the uniform u[r]:
	 * tok[r] and its probability prob[r] under the filtered distribution. rows, u, tok and
	 * prob are HOST arrays (R of each): the op returns when they are written (a sync point,
	 * like sumsq). The CUDA backend draws top-k 1 and top-k 0/top-p 1 (any temperature) on
	 * the GPU and copies only the R rows to the host for other filters. */
	void (*sample)(int *tok, float *prob, const float *logits, const int *rows,
	               const double *u, int R, int V, float temperature, int top_k, float top_p);
	/* ---- the decode path's cache and fused ops (lib/ops_cpu.c composes each from the ops
	 * above, so the CPU engine computes exactly what the unfused sequence did). */
	/* the new rows' k, v (N, NKV, HD) into layer l of their sequences' caches at positions
	 * len .. len+T-1, converted to b->dt */
	void (*kv_append)(const struct kv_batch *b, int l, const float *k, const float *v,
	                  int NKV, int HD);
	/* out(N,NH,HD): every sequence's new rows q(N,NH,HD) against layer l of its cache (keys
	 * 0 .. len+T-1, the new rows appended already): .attention with qpos = len + t, kpos =
	 * 0 .. len+T-1 and the block-causal rule of `block`. CUDA may read b's arrays and the
	 * keys below len before the op just before it has finished: those must come from an
	 * upload or an earlier forward, not from the ops of this one (lib/gpu.h) */
	void (*attention_kv)(float *out, const float *q, const struct kv_batch *b, int l,
	                     int NH, int NKV, int HD, int block);
	/* from qkv(N, (NH + 2 NKV) HD) = [q | k | v] rows of the fused projection: q(N,NH,HD) =
	 * the q part after per-head rmsnorm (weight qw (HD), fp32) and rope at pos(N); the k part
	 * after the same with kw, and the v part, go to layer l of the caches (kv_append) */
	void (*qkv_prep)(float *q, const float *qkv, const float *qw, const float *kw, const int *pos,
	                 const struct kv_batch *b, int l, int NH, int NKV, int HD, float eps,
	                 float theta);
	/* y(N,C) = silu(gu[:, :C]) * gu[:, C:] for gu(N, 2C) (the fused gate/up projection) */
	void (*swiglu_cat)(float *y, const float *gu, int N, int C);
	/* x(N,C) += r(N,C); then y(N,C) = rmsnorm(x) with w (fp32, C) */
	void (*add_rmsnorm)(float *y, float *x, const float *r, const float *w, int N, int C,
	                    float eps);
	/* ---- mixed-precision training (appended; NULL where a backend has none) */
	/* dst(n) bf16 = src(n) fp32, round to nearest even (the bf16 copies of the weights) */
	void (*cast_bf16)(void *dst, const float *src, size_t n);
	/* attention / attention_backward for long training sequences (same arguments and
	 * results; CUDA: tensor cores with bf16 operands; CPU: the fp32 twins themselves) */
	void (*attention_tc)(float *out, const float *q, const float *k, const float *v,
	                     int T, int S, int NH, int NKV, int HD, const struct attn_mask *m);
	void (*attention_tc_backward)(float *dq, float *dk, float *dv, const float *dout,
	                              const float *q, const float *k, const float *v,
	                              const float *out, int T, int S, int NH, int NKV, int HD,
	                              const struct attn_mask *m);
	/* device memory in use now (bytes) and the device's dense bf16 peak FLOP/s (0 unknown) */
	void (*device_info)(size_t *mem_used, double *peak_flops);
	/* ---- batch invariance (appended): y(N,out) = x(N,in) @ w(out,in)^T as .matmul, but a
	 * row's result does not depend on N or on the other rows, bit for bit: every output
	 * element is accumulated in one order fixed by (in, out). The engine forward
	 * (lib/model.c) uses it, so that a sequence decodes to the same logits alone or in a
	 * batch; training keeps .matmul. CPU: .matmul itself (its loops are invariant). */
	void (*matmul_fixed)(float *y, const float *x, const void *w, enum dice_dtype wdt,
	                     int N, int in, int out);
	/* ---- fused mixed-precision training steps (appended; NULL where a backend has none) */
	/* .adamw on each of the nt tensors t[i] (a host array) with the scalars of s and the
	 * tensor's own weight decay, then lp = bf16(p) (as .cast_bf16) where lp is set: one pass
	 * over the parameters, few launches (CUDA). CPU: .adamw and .cast_bf16 per tensor. */
	void (*adamw_multi)(const struct adamw_tensor *t, int nt, const struct adamw_step *s);
	/* .matmul with bf16 w and the input given already rounded to bf16: xb(N,in) bf16 (made
	 * once by .cast_bf16 and shared by the forward and weight-gradient GEMMs); with acc the
	 * product is added into y instead of written (a residual add without its own pass) */
	void (*matmul_xb)(float *y, const void *xb, const void *w, int N, int in, int out,
	                  int acc);
	/* .matmul_backward with bf16 w and the forward input as xb(N,in) bf16; with dx_acc the
	 * dx product is added into dx instead of written (dy is fp32, rounded to bf16 as
	 * .matmul_backward does) */
	void (*matmul_backward_xb)(float *dx, float *dw, const float *dy, const void *xb,
	                           const void *w, int N, int in, int out, int dx_acc);
	/* .attention_tc that also keeps what its backward would otherwise recompute: stat
	 * (T, NH) floats, backend-specific (CUDA fused kernels: each query row's log-sum-exp of
	 * the scaled scores, base 2; the CPU and the other CUDA paths leave it unwritten), read
	 * only by .attention_tc_backward_stat with the same q, k, v, shapes and mask. Results
	 * as .attention_tc / .attention_tc_backward. */
	void (*attention_tc_stat)(float *out, float *stat, const float *q, const float *k,
	                          const float *v, int T, int S, int NH, int NKV, int HD,
	                          const struct attn_mask *m);
	void (*attention_tc_backward_stat)(float *dq, float *dk, float *dv, const float *dout,
	                                   const float *q, const float *k, const float *v,
	                                   const float *out, const float *stat, int T, int S,
	                                   int NH, int NKV, int HD, const struct attn_mask *m);
	/* .rmsnorm and .swiglu with the result rounded to bf16 (yb(N,C) = .cast_bf16 of the fp32
	 * result, bit for bit): a bf16 GEMM input made in one pass */
	void (*rmsnorm_xb)(void *yb, const float *x, const void *w, enum dice_dtype wdt, int N,
	                   int C, float eps);
	void (*swiglu_xb)(void *yb, const float *gate, const float *up, int N, int C);
	/* ---- replay (appended; NULL on the CPU backend): run fn(arg), the launches of one
	 * forward, on the backend. fn makes no host<->device copy, no sync and no allocation
	 * beyond what the same fn with the same key did before; key (keylen bytes) holds every
	 * host value fn's launches depend on (shapes, pointers), device memory contents aside.
	 * CUDA: the second time a key comes, fn is captured as a CUDA graph, and launched as that
	 * graph from then on (eager with DICE_GRAPH=0); the results are the same bits. */
	void (*replay)(const void *key, size_t keylen, void (*fn)(void *), void *arg);
	/* ---- (appended) .swiglu_cat then .matmul_fixed in one op, the same bits:
	 * y(N,out) = (silu(gu[:, :I]) * gu[:, I:]) @ w(out,I)^T for gu(N, 2I); h(N,I) is the
	 * op's to use (its contents afterwards are undefined). CUDA folds the SwiGLU into the
	 * tiled product's input conversion (no pass of its own) where that path runs. */
	void (*matmul_fixed_glu)(float *y, float *h, const float *gu, const void *w,
	                         enum dice_dtype wdt, int N, int I, int out);
	/* ---- (appended) bf16 gradients for the GEMMs, the same bits as the fp32 op then
	 * .cast_bf16: .swiglu_backward with dgate(N,C) and dup(N,C) written in bf16, and
	 * .matmul_backward_xb with dy given in bf16 (dyb(N,out)) */
	void (*swiglu_backward_xb)(void *dgate, void *dup, const float *dy, const float *gate,
	                           const float *up, int N, int C);
	void (*matmul_backward_xbb)(float *dx, float *dw, const void *dyb, const void *xb,
	                            const void *w, int N, int in, int out, int dx_acc);
	/* ---- (appended) fused backward passes, each the composition of the ops above:
	 * .rmsnorm_backward with its dx added into dres(N,C) (dres += dx; dres is neither dy
	 * nor x; dresb not NULL: also the new dres rounded to bf16 there, as .cast_bf16), and .rope_backward on dy(N,NH,HD) then .rmsnorm_backward over its rows of HD
	 * (the per-head norm in front of RoPE): dx (write; may equal dy), dw(HD) +=, x(N,NH,HD)
	 * the norm's input; with dxb not NULL the result goes to dxb instead, in bf16 (as
	 * .cast_bf16), token n's NH HD values at dxb + n ldb (ldb >= NH HD, in elements), and
	 * dx's contents afterwards are undefined (scratch) */
	void (*rmsnorm_backward_add)(float *dres, void *dresb, float *dw, const float *dy,
	                             const float *x, const void *w, enum dice_dtype wdt, int N,
	                             int C, float eps);
	void (*rope_rmsnorm_backward)(float *dx, void *dxb, int ldb, float *dw, const float *dy,
	                              const float *x, const void *w, enum dice_dtype wdt,
	                              const int *pos, int N, int NH, int HD, float theta, float eps);
	/* and the forward of that pair: .rmsnorm over the rows of HD of x(N,NH,HD) with w(HD),
	 * then .rope: y (write; may equal x) */
	void (*rmsnorm_rope)(float *y, const float *x, const void *w, enum dice_dtype wdt,
	                     const int *pos, int N, int NH, int HD, float theta, float eps);
	/* .cast_bf16 of src(N,C) into rows of dst: row n at dst + n ld (ld >= C, in elements) */
	void (*cast_bf16_rows)(void *dst, int ld, const float *src, int N, int C);
	/* ---- (appended) the MLP's intermediates in bf16 (mixed-precision training, as autocast
	 * keeps them): .matmul_xb with the product rounded to bf16, yb(N,out) = bf16(xb @ w^T)
	 * (w bf16); .swiglu_cat over gub(N, 2I) in bf16 (rows [gate | up]), hb(N,I) =
	 * bf16(silu(gate) up); and its backward, dgub(N, 2I) = bf16([dgate | dup]) from
	 * dy(N,I) (dgub is neither dy nor gub) */
	void (*matmul_xbb)(void *yb, const void *xb, const void *w, int N, int in, int out);
	void (*swiglu_cat_bb)(void *hb, const void *gub, int N, int I);
	void (*swiglu_cat_backward_bb)(void *dgub, const float *dy, const void *gub, int N, int I);
	/* ---- (appended) .cross_entropy with dlogits rounded to bf16 into dlb(N,V) (as
	 * .cast_bf16; dlb is not logits): the lm_head backward's GEMM input in one pass */
	void (*cross_entropy_xb)(float *loss, void *dlb, const float *logits, const int *target,
	                         const float *weight, int N, int V);
	/* ---- (appended) .matmul_xb added to another array: y(N,out) = c(N,out) + xb @ w^T
	 * (y may equal c; else c is only read): a residual add without a copy first */
	void (*matmul_xb_add)(float *y, const void *xb, const void *w, const float *c, int N,
	                      int in, int out);
	/* ---- (appended) .attention_tc_stat and .attention_tc_backward_stat with q(T, NH*HD),
	 * k and v(S, NKV*HD) given in bf16 (qb, kb, vb; made by the caller's own passes, so that
	 * the op casts none): the results of the fp32 ops on their widened values, bit for bit
	 * where those are deterministic (CUDA rounds its operands to bf16 anyway; CPU: widens,
	 * then the fp32 twins) */
	void (*attention_tc_stat_bf)(float *out, float *stat, const void *qb, const void *kb,
	                             const void *vb, int T, int S, int NH, int NKV, int HD,
	                             const struct attn_mask *m);
	void (*attention_tc_backward_stat_bf)(float *dq, float *dk, float *dv, const float *dout,
	                                      const void *qb, const void *kb, const void *vb,
	                                      const float *out, const float *stat, int T, int S,
	                                      int NH, int NKV, int HD, const struct attn_mask *m);
	/* ---- (appended) .rmsnorm_rope with y rounded to bf16 (yb, as .cast_bf16): the
	 * attention's q and k made in bf16 in one pass */
	void (*rmsnorm_rope_xb)(void *yb, const float *x, const void *w, enum dice_dtype wdt,
	                        const int *pos, int N, int NH, int HD, float theta, float eps);
	/* ---- (appended) the prefill attention: .attention_kv's out rows for the sequences s0 ..
	 * b->nseq-1 of b (rows row0[s0] .. N-1; the other rows are not touched) by a kernel built
	 * for many rows a sequence (CUDA: the fused training attention, bf16 q and P; its own
	 * rounding, but a row's result depends on its sequence alone, never on the batch).
	 * row0h, lenh: HOST copies of b's row0 (nseq+1) and len (nseq). Returns 0, or -1 with
	 * nothing done where it does not serve (the caller takes .attention_kv); with out NULL it
	 * only answers whether it would (row0h NULL too: whether it could for b->dt and HD at
	 * all). NULL on the CPU backend. */
	int (*attention_prefill)(float *out, const float *q, const struct kv_batch *b, int s0,
	                         const int *row0h, const int *lenh, int l, int NH, int NKV, int HD,
	                         int block);
	/* ---- (appended) .matmul_fixed of the fused gate/up weight w(2I,in) (rows [gate | up])
	 * into gu(N,2I), and h(N,I) = .swiglu_cat of it, the same bits, where the backend makes
	 * it in the product's own pass: returns 1 (h written) or 0 (gu alone; the caller takes
	 * .matmul_fixed_glu). CUDA: up to 8 rows, the streaming or the staged kernel pairs each
	 * gate tile with its up tile in one block; the CPU makes both. */
	int (*matmul_fixed_gu)(float *gu, float *h, const float *x, const void *w,
	                       enum dice_dtype wdt, int N, int in, int I);
	/* ---- (appended) a copy of the 16-bit matrix w(out, in) in the layout the backend's
	 * products of few rows stream fastest, which .matmul_fixed and .matmul_fixed_gu then read
	 * for (w, out, in) (fused matrices by their whole shape), the same bits: 1 made (made
	 * again where w has one: call it after w's values change), 0 not (w alone serves). CUDA:
	 * up to 32 rows, a tile of 8 rows' 32-input blocks one after the other; none where it
	 * would leave less than a quarter of the GPU's memory free. .unpack(w) frees it. NULL on
	 * the CPU backend (its products read w as it is). */
	int (*pack)(const void *w, enum dice_dtype wdt, int out, int in);
	void (*unpack)(const void *w);
	/* ---- (appended) a denoising step on the backend without a sync (SPEC §2; the sampler's
	 * static and sequential decoding, lib/sampler.c): for each of the n sequences of ds, every
	 * masked position j of its block of B (<= 32) positions is drawn as .sample draws row
	 * ds.row + j of logits(.., V), with the uniform u[ds.u0 + the masked positions before
	 * j]; then the commit rule of lib/choose.h (decoding, ds.quota, threshold) picks the
	 * positions to commit, and for each: x[j] = its draw, msk[j] = 0, step[j] = ds.gstep,
	 * conf[j] = its probability. out (n * B, backend): each block's ids afterwards, sequence
	 * s's at out + s * B. ds and u (nu values) are host arrays the op copies before it
	 * returns. -1 (nothing done) where the backend cannot draw these filters without the
	 * host (CUDA: as .sample, top-k 0 or 1 with top-p 1): the caller takes .sample then; n = 0
	 * only asks. */
	int (*denoise)(const float *logits, int V, const struct denoise_seq *ds, int n, int B,
	               const double *u, int nu, int *out, int decoding, float threshold,
	               float temperature, int top_k, float top_p);
	/* ---- (appended) a copy to the host in order with the backend's work, without a wait:
	 * bytes (at most 64 KiB) of backend memory src, as they are once the work queued before
	 * is done, are in host memory dst when fetch_wait(ticket) returns; waiting for a
	 * ticket completes every earlier one (CUDA: tickets count up from 1). The CPU backend
	 * copies at once. */
	long (*fetch)(void *dst, const void *src, size_t bytes);
	void (*fetch_wait)(long ticket);
	/* ---- (appended) 16-bit copies of the few-row products' inputs (NULL on the CPU
	 * backend). .add_rmsnorm16, .attention_kv16 and .matmul_fixed_gu16 are .add_rmsnorm,
	 * .attention_kv and .matmul_fixed_gu that may also write their output (y, out, h) rounded
	 * to dt16 (bf16 or f16, the weights' type) into y16 / out16 / h16 (or NULL): they return
	 * 1 where they did, 0 where only the fp32 output was written (and .matmul_fixed_gu16 -1
	 * where h was not made either: as .matmul_fixed_gu's 0). .matmul_fixed16 is .matmul_fixed
	 * given x16, x rounded to w's type, which it may read instead of x: the same bits, every
	 * product rounding its input to w's type (CUDA: the streaming kernel of up to 8 rows,
	 * half the bytes a step). */
	int (*add_rmsnorm16)(float *y, void *y16, enum dice_dtype dt16, float *x, const float *r,
	                     const float *w, int N, int C, float eps);
	int (*attention_kv16)(float *out, void *out16, enum dice_dtype dt16, const float *q,
	                      const struct kv_batch *b, int l, int NH, int NKV, int HD, int block);
	int (*matmul_fixed_gu16)(float *gu, float *h, void *h16, const float *x, const void *x16,
	                         const void *w, enum dice_dtype wdt, int N, int in, int I);
	void (*matmul_fixed16)(float *y, const float *x, const void *x16, const void *w,
	                       enum dice_dtype wdt, int N, int in, int out);
	/* ---- appended: the backend memory free now, bytes (CUDA: the device's, as the driver
	 * counts it); NULL where the backend does not know (the CPU: the host's memory) */
	size_t (*mem_free)(void);
};

/* The CPU twin of .sample for one row (the specification): filter logits(V) with
 * temperature (> 0; 1 = unchanged), top-k (0 = off: keep the values >= the k-th largest),
 * top-p (1 = off: keep the largest-first prefix until the mass before a token exceeds top_p),
 * softmax (exp(e - max), sum in double), then draw with u in [0,1): the first index, in index
 * order, at which the running sum exceeds u * sum (so ties go toward the lowest index for
 * small u). Returns the token; *prob = its probability under the filtered distribution.
 * work: scratch of at least 3*V floats. */
int sample_draw(const float *logits, int V, float temperature, int top_k, float top_p, double u,
                float *prob, float *work);

extern const struct ops ops_cpu;

/* The backend by name ("cpu" or "cuda"); NULL when it is not built in or no GPU is present. */
const struct ops *ops_get(const char *name);
/* Why ops_get(name) is NULL, to follow "no device 'NAME'" in a message: "in this build (cpu)"
 * (", cuda" too where ops_get("cuda") is not NULL), or for "cuda" in a build with the CUDA
 * backend, that it finds no GPU. */
const char *ops_missing(const char *name);

#endif
