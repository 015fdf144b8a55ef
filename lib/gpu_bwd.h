/* gpu_bwd: the training launchers of the CUDA backend (the _bwd.cu files of lib/cuda, train.cu),
 * the twins of lib/ops_bwd_cpu.c, declared for C and C++. Same contract as lib/gpu.h: an
 * explicit stream, every pointer a DEVICE pointer (attn_mask arrays included), shapes checked
 * (-1 and a warning on bad shapes), launches checked, 0 on success. The ops table (gpu_ops(),
 * its training entries) calls them on gpu_stream().
 *
 * Accumulation order differs from the CPU twin where atomics or block reductions add up
 * (dw of matmul/rmsnorm, embed_backward, sumsq): equal up to fp32 rounding, not bitwise.
 * Every launcher is tested against its twin on random data (tests/gpu/test_<op>_bwd.cu). */
#ifndef DICE_GPU_BWD_H
#define DICE_GPU_BWD_H

#include "gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dx(N,in) = dy(N,out) @ w (write; skipped if dx NULL); dw(out,in) += dy^T x (skipped if
 * dw NULL). fp32/fp16 w: cuBLAS fp32 (no TF32), fp16 widened to fp32 in the scratch first;
 * bf16 w: dy and x rounded to bf16, tensor-core GEMMs with fp32 accumulation and output. */
int gpu_matmul_backward(cudaStream_t st, float *dx, float *dw, const float *dy, const float *x,
                        const void *w, enum dice_dtype wdt, int N, int in, int out);
/* dx(N,C) (write, may equal dy), dw(C) += (skipped if NULL), from dy and the forward x */
int gpu_rmsnorm_backward(cudaStream_t st, float *dx, float *dw, const float *dy, const float *x,
                         const void *w, enum dice_dtype wdt, int N, int C, float eps);
/* the same with dx added into dres(N,C) (dres += dx; dres is neither dy nor x); C <= 16384
 * for both */
int gpu_rmsnorm_backward_add(cudaStream_t st, float *dres, void *dresb, float *dw,
                             const float *dy, const float *x, const void *w,
                             enum dice_dtype wdt, int N, int C, float eps);
/* gpu_rope_backward on dy then gpu_rmsnorm_backward over rows of HD, in one pass where HD is
 * 64, 128 or 256: dx(N,NH,HD) (write; may equal dy), dw(HD) += (skipped if NULL), x the
 * norm's input; with dxb, bf16 into token rows of dxb (stride ldb elements), dx scratch */
int gpu_rope_rmsnorm_backward(cudaStream_t st, float *dx, void *dxb, int ldb, float *dw,
                              const float *dy, const float *x, const void *w,
                              enum dice_dtype wdt, const int *pos, int N, int NH, int HD,
                              float theta, float eps);
/* dst: src(N,C) rounded to bf16 into rows of stride ld elements */
int gpu_cast_bf16_rows(cudaStream_t st, void *dst, int ld, const float *src, int N, int C);
/* in place on dx(N,NH,HD): rotation by minus the angle (HD even, HD <= 1024) */
int gpu_rope_backward(cudaStream_t st, float *dx, const int *pos, int N, int NH, int HD,
                      float theta);
/* dgate, dup (N,C) (write; dgate may equal dy) */
int gpu_swiglu_backward(cudaStream_t st, float *dgate, float *dup, const float *dy,
                        const float *gate, const float *up, int N, int C);
/* dq(T,NH,HD), dk, dv(S,NKV,HD) (write) from dout and the forward's q, k, v, out; HD <= 256 */
int gpu_attention_backward(cudaStream_t st, float *dq, float *dk, float *dv, const float *dout,
                           const float *q, const float *k, const float *v, const float *out,
                           int T, int S, int NH, int NKV, int HD, const struct attn_mask *m);
/* dw(V,C) += dy(N,C) rows at ids(N) (atomics: repeated ids add up) */
int gpu_embed_backward(cudaStream_t st, float *dw, const int *ids, const float *dy, int N, int C);
/* loss(N), dlogits(N,V) (write; dlogits may equal logits); target < 0: zeros */
/* gpu_cross_entropy with dlogits rounded to bf16 into dlb (lib/ops.h .cross_entropy_xb) */
int gpu_cross_entropy_xb(cudaStream_t st, float *loss, void *dlb, const float *logits,
                         const int *target, const float *weight, int N, int V);
int gpu_cross_entropy(cudaStream_t st, float *loss, float *dlogits, const float *logits,
                      const int *target, const float *weight, int N, int V);
/* p(bytes) = 0 */
int gpu_zero(cudaStream_t st, void *p, size_t bytes);
/* *res = sum x(n)^2 in double (waits for the stream) */
int gpu_sumsq(cudaStream_t st, double *res, const float *x, size_t n);
/* one AdamW step on n parameters (lib/ops.h) */
int gpu_adamw(cudaStream_t st, float *p, float *m, float *v, const float *g, size_t n,
              const struct adamw_step *s);

/* AdamW over nt tensors (host array) with each updated weight's bf16 copy (lib/ops.h
 * .adamw_multi) */
int gpu_adamw_multi(cudaStream_t st, const struct adamw_tensor *t, int nt,
                    const struct adamw_step *s);
/* gpu_matmul / gpu_matmul_backward for bf16 w with the input given in bf16 (xb); acc,
 * dx_acc: y += / dx += instead of = (lib/ops.h .matmul_xb, .matmul_backward_xb;
 * lib/cuda/matmul*.cu) */
int gpu_matmul_xb(cudaStream_t st, float *y, const void *xb, const void *w, int N, int in,
                  int out, int acc);
int gpu_matmul_backward_xb(cudaStream_t st, float *dx, float *dw, const float *dy,
                           const void *xb, const void *w, int N, int in, int out, int dx_acc);
/* gpu_matmul_backward_xb with dy given in bf16 (dyb), and gpu_swiglu_backward with dgate and
 * dup rounded to bf16 (lib/ops.h .matmul_backward_xbb, .swiglu_backward_xb) */
int gpu_matmul_backward_xbb(cudaStream_t st, float *dx, float *dw, const void *dyb,
                            const void *xb, const void *w, int N, int in, int out, int dx_acc);
int gpu_swiglu_backward_xb(cudaStream_t st, void *dgate, void *dup, const float *dy,
                           const float *gate, const float *up, int N, int C);

/* gpu_rmsnorm / gpu_swiglu with the output rounded to bf16 (lib/ops.h .rmsnorm_xb,
 * .swiglu_xb; lib/cuda/rmsnorm.cu, elementwise.cu) */
int gpu_rmsnorm_xb(cudaStream_t st, void *yb, const float *x, const void *w, enum dice_dtype wdt,
                   int N, int C, float eps);
int gpu_swiglu_xb(cudaStream_t st, void *yb, const float *gate, const float *up, int N, int C);
/* the MLP's bf16 intermediates (lib/ops.h .matmul_xbb, .swiglu_cat_bb,
 * .swiglu_cat_backward_bb; lib/cuda/matmul.cu, elementwise.cu, swiglu_bwd.cu) */
int gpu_matmul_xbb(cudaStream_t st, void *yb, const void *xb, const void *w, int N, int in,
                   int out);
int gpu_swiglu_cat_bb(cudaStream_t st, void *hb, const void *gub, int N, int I);
/* y(N,out) = c + xb @ w^T (lib/ops.h .matmul_xb_add; lib/cuda/matmul.cu) */
int gpu_matmul_xb_add(cudaStream_t st, float *y, const void *xb, const void *w, const float *c,
                      int N, int in, int out);
int gpu_swiglu_cat_backward_bb(cudaStream_t st, void *dgub, const float *dy, const void *gub,
                               int N, int I);
/* gpu_rmsnorm over rows of HD then gpu_rope on y(N,NH,HD) (y may equal x): one pass where HD
 * is 64, 128 or 256 (lib/ops.h .rmsnorm_rope; lib/cuda/rope.cu) */
int gpu_rmsnorm_rope_xb(cudaStream_t st, void *yb, const float *x, const void *w,
                        enum dice_dtype wdt, const int *pos, int N, int NH, int HD, float theta,
                        float eps);
int gpu_rmsnorm_rope(cudaStream_t st, float *y, const float *x, const void *w,
                     enum dice_dtype wdt, const int *pos, int N, int NH, int HD, float theta,
                     float eps);

/* mixed-precision training (lib/cuda/attention_train.cu) */
/* dst(n) bf16 = src(n) rounded to nearest even */
int gpu_cast_bf16(cudaStream_t st, void *dst, const float *src, size_t n);
/* gpu_attention / gpu_attention_backward on the tensor cores (bf16 operands, fp32 softmax
 * statistics and accumulation), one head's T x S scores at a time; HD a multiple of 8 */
int gpu_attention_tc(cudaStream_t st, float *out, const float *q, const float *k, const float *v,
                     int T, int S, int NH, int NKV, int HD, const struct attn_mask *m);
int gpu_attention_tc_backward(cudaStream_t st, float *dq, float *dk, float *dv, const float *dout,
                              const float *q, const float *k, const float *v, const float *out,
                              int T, int S, int NH, int NKV, int HD, const struct attn_mask *m);
/* the same with the softmax statistics kept by the forward (stat (T, NH), lib/ops.h
 * .attention_tc_stat; NULL: none kept / recomputed) */
int gpu_attention_tc_stat(cudaStream_t st, float *out, float *stat, const float *q,
                          const float *k, const float *v, int T, int S, int NH, int NKV, int HD,
                          const struct attn_mask *m);
int gpu_attention_tc_backward_stat(cudaStream_t st, float *dq, float *dk, float *dv,
                                   const float *dout, const float *q, const float *k,
                                   const float *v, const float *out, const float *stat, int T,
                                   int S, int NH, int NKV, int HD, const struct attn_mask *m);
/* the same two with q, k, v given in bf16 (lib/ops.h .attention_tc_stat_bf) */
int gpu_attention_tc_stat_bf(cudaStream_t st, float *out, float *stat, const void *qb,
                             const void *kb, const void *vb, int T, int S, int NH, int NKV,
                             int HD, const struct attn_mask *m);
int gpu_attention_tc_backward_stat_bf(cudaStream_t st, float *dq, float *dk, float *dv,
                                      const float *dout, const void *qb, const void *kb,
                                      const void *vb, const float *out, const float *stat, int T,
                                      int S, int NH, int NKV, int HD, const struct attn_mask *m);
/* device memory in use (total - free, bytes) and the dense bf16 peak FLOP/s of the device by
 * its name (H100/H200: 989e12; 0 when unknown) */
int gpu_device_info(size_t *mem_used, double *peak_flops);

#ifdef __cplusplus
}
#endif

#endif
