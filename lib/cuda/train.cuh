/* train.cuh: the training entries of the CUDA ops table (lib/ops.h, end of struct ops),
 * defined in ops_train.cu and put into the table by backend.cu. Each calls its launcher
 * (lib/gpu_bwd.h) on gpu_stream() and aborts on a shape error (a bug in the caller). */
#ifndef DICE_CUDA_TRAIN_CUH
#define DICE_CUDA_TRAIN_CUH

#include "ops.h"

void cu_matmul_backward(float *dx, float *dw, const float *dy, const float *x, const void *w,
                        enum dice_dtype wdt, int N, int in, int out);
void cu_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const void *w,
                         enum dice_dtype wdt, int N, int C, float eps);
void cu_rope_backward(float *dx, const int *pos, int N, int NH, int HD, float theta);
void cu_rmsnorm_backward_add(float *dres, void *dresb, float *dw, const float *dy,
                             const float *x, const void *w, enum dice_dtype wdt, int N, int C,
                             float eps);
void cu_rmsnorm_rope(float *y, const float *x, const void *w, enum dice_dtype wdt,
                     const int *pos, int N, int NH, int HD, float theta, float eps);
void cu_rope_rmsnorm_backward(float *dx, void *dxb, int ldb, float *dw, const float *dy,
                              const float *x, const void *w, enum dice_dtype wdt, const int *pos,
                              int N, int NH, int HD, float theta, float eps);
void cu_cast_bf16_rows(void *dst, int ld, const float *src, int N, int C);
void cu_swiglu_backward(float *dgate, float *dup, const float *dy, const float *gate,
                        const float *up, int N, int C);
void cu_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *out, int T, int S,
                           int NH, int NKV, int HD, const struct attn_mask *m);
void cu_embed_backward(float *dw, const int *ids, const float *dy, int N, int C);
void cu_cross_entropy(float *loss, float *dlogits, const float *logits, const int *target,
                      const float *weight, int N, int V);
void cu_zero(void *p, size_t bytes);
double cu_sumsq(const float *x, size_t n);
void cu_adamw(float *p, float *m, float *v, const float *g, size_t n, const struct adamw_step *s);
void cu_cast_bf16(void *dst, const float *src, size_t n);
void cu_attention_tc(float *out, const float *q, const float *k, const float *v, int T, int S,
                     int NH, int NKV, int HD, const struct attn_mask *m);
void cu_attention_tc_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                              const float *k, const float *v, const float *out, int T, int S,
                              int NH, int NKV, int HD, const struct attn_mask *m);
void cu_device_info(size_t *mem_used, double *peak_flops);
void cu_attention_tc_stat(float *out, float *stat, const float *q, const float *k,
                          const float *v, int T, int S, int NH, int NKV, int HD,
                          const struct attn_mask *m);
void cu_attention_tc_backward_stat(float *dq, float *dk, float *dv, const float *dout,
                                   const float *q, const float *k, const float *v,
                                   const float *out, const float *stat, int T, int S, int NH,
                                   int NKV, int HD, const struct attn_mask *m);
void cu_rmsnorm_xb(void *yb, const float *x, const void *w, enum dice_dtype wdt, int N, int C,
                   float eps);
void cu_swiglu_xb(void *yb, const float *gate, const float *up, int N, int C);
void cu_adamw_multi(const struct adamw_tensor *t, int nt, const struct adamw_step *s);
void cu_matmul_xb(float *y, const void *xb, const void *w, int N, int in, int out, int acc);
void cu_matmul_backward_xb(float *dx, float *dw, const float *dy, const void *xb, const void *w,
                           int N, int in, int out, int dx_acc);
void cu_matmul_backward_xbb(float *dx, float *dw, const void *dyb, const void *xb, const void *w,
                            int N, int in, int out, int dx_acc);
void cu_swiglu_backward_xb(void *dgate, void *dup, const float *dy, const float *gate,
                           const float *up, int N, int C);
void cu_matmul_xbb(void *yb, const void *xb, const void *w, int N, int in, int out);
void cu_swiglu_cat_bb(void *hb, const void *gub, int N, int I);
void cu_swiglu_cat_backward_bb(void *dgub, const float *dy, const void *gub, int N, int I);
void cu_matmul_xb_add(float *y, const void *xb, const void *w, const float *c, int N, int in,
                      int out);
void cu_cross_entropy_xb(float *loss, void *dlb, const float *logits, const int *target,
                         const float *weight, int N, int V);
void cu_attention_tc_stat_bf(float *out, float *stat, const void *qb, const void *kb,
                             const void *vb, int T, int S, int NH, int NKV, int HD,
                             const struct attn_mask *m);
void cu_attention_tc_backward_stat_bf(float *dq, float *dk, float *dv, const float *dout,
                                      const void *qb, const void *kb, const void *vb,
                                      const float *out, const float *stat, int T, int S, int NH,
                                      int NKV, int HD, const struct attn_mask *m);
void cu_rmsnorm_rope_xb(void *yb, const float *x, const void *w, enum dice_dtype wdt,
                        const int *pos, int N, int NH, int HD, float theta, float eps);

#endif
