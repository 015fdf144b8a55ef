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

/* The scalars of one AdamW update (struct ops .adamw). */
struct adamw_step {
	float lr, beta1, beta2, eps, weight_decay;
	float gscale;                   /* gradient multiplier (clipping x 1/accumulation) */
	int step;                       /* 1-based step number, for the bias corrections */
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
};

extern const struct ops ops_cpu;

/* The backend by name ("cpu" or "cuda"); NULL when it is not built in or no GPU is present. */
const struct ops *ops_get(const char *name);

#endif
