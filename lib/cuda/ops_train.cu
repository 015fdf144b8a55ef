/* ops_train.cu: the training entries of the CUDA ops table (declared in train.cuh): each
 * runs its launcher (lib/gpu_bwd.h) on the backend stream; a shape error is a bug in the
 * caller, so it aborts, as the forward entries in backend.cu do. */
#include "gpu_bwd.h"
#include "common.cuh"
#include "train.cuh"

#define TRAIN_CALL(op, call) do { if ((call) != 0) { \
	warn_msg("cuda %s: bad arguments", (op)); abort(); } } while (0)

void cu_matmul_backward(float *dx, float *dw, const float *dy, const float *x, const void *w,
                        enum dice_dtype wdt, int N, int in, int out)
{
	TRAIN_CALL("matmul_backward",
	           gpu_matmul_backward(gpu_stream(), dx, dw, dy, x, w, wdt, N, in, out));
}

void cu_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const void *w,
                         enum dice_dtype wdt, int N, int C, float eps)
{
	TRAIN_CALL("rmsnorm_backward",
	           gpu_rmsnorm_backward(gpu_stream(), dx, dw, dy, x, w, wdt, N, C, eps));
}

void cu_rmsnorm_backward_add(float *dres, void *dresb, float *dw, const float *dy,
                             const float *x, const void *w, enum dice_dtype wdt, int N, int C,
                             float eps)
{
	TRAIN_CALL("rmsnorm_backward_add",
	           gpu_rmsnorm_backward_add(gpu_stream(), dres, dresb, dw, dy, x, w, wdt, N, C,
	                                    eps));
}

void cu_rmsnorm_rope(float *y, const float *x, const void *w, enum dice_dtype wdt,
                     const int *pos, int N, int NH, int HD, float theta, float eps)
{
	TRAIN_CALL("rmsnorm_rope",
	           gpu_rmsnorm_rope(gpu_stream(), y, x, w, wdt, pos, N, NH, HD, theta, eps));
}

void cu_rope_rmsnorm_backward(float *dx, void *dxb, int ldb, float *dw, const float *dy,
                              const float *x, const void *w, enum dice_dtype wdt, const int *pos,
                              int N, int NH, int HD, float theta, float eps)
{
	TRAIN_CALL("rope_rmsnorm_backward",
	           gpu_rope_rmsnorm_backward(gpu_stream(), dx, dxb, ldb, dw, dy, x, w, wdt, pos, N,
	                                     NH, HD, theta, eps));
}

void cu_cast_bf16_rows(void *dst, int ld, const float *src, int N, int C)
{
	TRAIN_CALL("cast_bf16_rows", gpu_cast_bf16_rows(gpu_stream(), dst, ld, src, N, C));
}

void cu_rope_backward(float *dx, const int *pos, int N, int NH, int HD, float theta)
{
	TRAIN_CALL("rope_backward", gpu_rope_backward(gpu_stream(), dx, pos, N, NH, HD, theta));
}

void cu_swiglu_backward(float *dgate, float *dup, const float *dy, const float *gate,
                        const float *up, int N, int C)
{
	TRAIN_CALL("swiglu_backward",
	           gpu_swiglu_backward(gpu_stream(), dgate, dup, dy, gate, up, N, C));
}

void cu_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *out, int T, int S,
                           int NH, int NKV, int HD, const struct attn_mask *m)
{
	TRAIN_CALL("attention_backward",
	           gpu_attention_backward(gpu_stream(), dq, dk, dv, dout, q, k, v, out, T, S, NH,
	                                  NKV, HD, m));
}

void cu_embed_backward(float *dw, const int *ids, const float *dy, int N, int C)
{
	TRAIN_CALL("embed_backward", gpu_embed_backward(gpu_stream(), dw, ids, dy, N, C));
}

void cu_cross_entropy(float *loss, float *dlogits, const float *logits, const int *target,
                      const float *weight, int N, int V)
{
	TRAIN_CALL("cross_entropy",
	           gpu_cross_entropy(gpu_stream(), loss, dlogits, logits, target, weight, N, V));
}

void cu_zero(void *p, size_t bytes)
{
	TRAIN_CALL("zero", gpu_zero(gpu_stream(), p, bytes));
}

double cu_sumsq(const float *x, size_t n)
{
	double r = 0.0;
	TRAIN_CALL("sumsq", gpu_sumsq(gpu_stream(), &r, x, n));
	return r;
}

void cu_adamw(float *p, float *m, float *v, const float *g, size_t n, const struct adamw_step *s)
{
	TRAIN_CALL("adamw", gpu_adamw(gpu_stream(), p, m, v, g, n, s));
}

void cu_cast_bf16(void *dst, const float *src, size_t n)
{
	TRAIN_CALL("cast_bf16", gpu_cast_bf16(gpu_stream(), dst, src, n));
}

void cu_attention_tc(float *out, const float *q, const float *k, const float *v, int T, int S,
                     int NH, int NKV, int HD, const struct attn_mask *m)
{
	TRAIN_CALL("attention_tc",
	           gpu_attention_tc(gpu_stream(), out, q, k, v, T, S, NH, NKV, HD, m));
}

void cu_attention_tc_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                              const float *k, const float *v, const float *out, int T, int S,
                              int NH, int NKV, int HD, const struct attn_mask *m)
{
	TRAIN_CALL("attention_tc_backward",
	           gpu_attention_tc_backward(gpu_stream(), dq, dk, dv, dout, q, k, v, out, T, S,
	                                     NH, NKV, HD, m));
}

void cu_adamw_multi(const struct adamw_tensor *t, int nt, const struct adamw_step *s)
{
	TRAIN_CALL("adamw_multi", gpu_adamw_multi(gpu_stream(), t, nt, s));
}

void cu_matmul_xb(float *y, const void *xb, const void *w, int N, int in, int out, int acc)
{
	TRAIN_CALL("matmul_xb", gpu_matmul_xb(gpu_stream(), y, xb, w, N, in, out, acc));
}

void cu_matmul_backward_xb(float *dx, float *dw, const float *dy, const void *xb, const void *w,
                           int N, int in, int out, int dx_acc)
{
	TRAIN_CALL("matmul_backward_xb",
	           gpu_matmul_backward_xb(gpu_stream(), dx, dw, dy, xb, w, N, in, out, dx_acc));
}

void cu_matmul_backward_xbb(float *dx, float *dw, const void *dyb, const void *xb, const void *w,
                            int N, int in, int out, int dx_acc)
{
	TRAIN_CALL("matmul_backward_xbb",
	           gpu_matmul_backward_xbb(gpu_stream(), dx, dw, dyb, xb, w, N, in, out, dx_acc));
}

void cu_swiglu_backward_xb(void *dgate, void *dup, const float *dy, const float *gate,
                           const float *up, int N, int C)
{
	TRAIN_CALL("swiglu_backward_xb",
	           gpu_swiglu_backward_xb(gpu_stream(), dgate, dup, dy, gate, up, N, C));
}

void cu_attention_tc_stat(float *out, float *stat, const float *q, const float *k,
                          const float *v, int T, int S, int NH, int NKV, int HD,
                          const struct attn_mask *m)
{
	TRAIN_CALL("attention_tc_stat",
	           gpu_attention_tc_stat(gpu_stream(), out, stat, q, k, v, T, S, NH, NKV, HD, m));
}

void cu_attention_tc_backward_stat(float *dq, float *dk, float *dv, const float *dout,
                                   const float *q, const float *k, const float *v,
                                   const float *out, const float *stat, int T, int S, int NH,
                                   int NKV, int HD, const struct attn_mask *m)
{
	TRAIN_CALL("attention_tc_backward_stat",
	           gpu_attention_tc_backward_stat(gpu_stream(), dq, dk, dv, dout, q, k, v, out, stat,
	                                          T, S, NH, NKV, HD, m));
}

void cu_rmsnorm_xb(void *yb, const float *x, const void *w, enum dice_dtype wdt, int N, int C,
                   float eps)
{
	TRAIN_CALL("rmsnorm_xb", gpu_rmsnorm_xb(gpu_stream(), yb, x, w, wdt, N, C, eps));
}

void cu_swiglu_xb(void *yb, const float *gate, const float *up, int N, int C)
{
	TRAIN_CALL("swiglu_xb", gpu_swiglu_xb(gpu_stream(), yb, gate, up, N, C));
}

void cu_device_info(size_t *mem_used, double *peak_flops)
{
	gpu_device_info(mem_used, peak_flops);
}

void cu_matmul_xbb(void *yb, const void *xb, const void *w, int N, int in, int out)
{
	TRAIN_CALL("matmul_xbb", gpu_matmul_xbb(gpu_stream(), yb, xb, w, N, in, out));
}

void cu_swiglu_cat_bb(void *hb, const void *gub, int N, int I)
{
	TRAIN_CALL("swiglu_cat_bb", gpu_swiglu_cat_bb(gpu_stream(), hb, gub, N, I));
}

void cu_swiglu_cat_backward_bb(void *dgub, const float *dy, const void *gub, int N, int I)
{
	TRAIN_CALL("swiglu_cat_backward_bb",
	           gpu_swiglu_cat_backward_bb(gpu_stream(), dgub, dy, gub, N, I));
}

void cu_cross_entropy_xb(float *loss, void *dlb, const float *logits, const int *target,
                         const float *weight, int N, int V)
{
	TRAIN_CALL("cross_entropy_xb",
	           gpu_cross_entropy_xb(gpu_stream(), loss, dlb, logits, target, weight, N, V));
}

void cu_matmul_xb_add(float *y, const void *xb, const void *w, const float *c, int N, int in,
                      int out)
{
	TRAIN_CALL("matmul_xb_add", gpu_matmul_xb_add(gpu_stream(), y, xb, w, c, N, in, out));
}

void cu_attention_tc_stat_bf(float *out, float *stat, const void *qb, const void *kb,
                             const void *vb, int T, int S, int NH, int NKV, int HD,
                             const struct attn_mask *m)
{
	TRAIN_CALL("attention_tc_stat_bf",
	           gpu_attention_tc_stat_bf(gpu_stream(), out, stat, qb, kb, vb, T, S, NH, NKV, HD,
	                                    m));
}

void cu_attention_tc_backward_stat_bf(float *dq, float *dk, float *dv, const float *dout,
                                      const void *qb, const void *kb, const void *vb,
                                      const float *out, const float *stat, int T, int S, int NH,
                                      int NKV, int HD, const struct attn_mask *m)
{
	TRAIN_CALL("attention_tc_backward_stat_bf",
	           gpu_attention_tc_backward_stat_bf(gpu_stream(), dq, dk, dv, dout, qb, kb, vb, out,
	                                             stat, T, S, NH, NKV, HD, m));
}

void cu_rmsnorm_rope_xb(void *yb, const float *x, const void *w, enum dice_dtype wdt,
                        const int *pos, int N, int NH, int HD, float theta, float eps)
{
	TRAIN_CALL("rmsnorm_rope_xb",
	           gpu_rmsnorm_rope_xb(gpu_stream(), yb, x, w, wdt, pos, N, NH, HD, theta, eps));
}
