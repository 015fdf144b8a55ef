/* ops_bwd_cpu: the CPU training ops of lib/ops.h (backward of every forward op, weighted
 * cross-entropy, zero, sumsq, AdamW), in plain fp32 loops: the specification the CUDA
 * twins are tested against. Declared here for the ops_cpu table (lib/ops_cpu.c); call
 * them through struct ops elsewhere. Shapes and semantics: lib/ops.h.
 */
#ifndef DICE_OPS_BWD_CPU_H
#define DICE_OPS_BWD_CPU_H

#include "ops.h"

/* shared with the forward (lib/ops_cpu.c): softmax probabilities of one query row */
int cpu_attn_probs(float *p, const float *qh, const float *k, int t, int S, int NKV, int kh,
                   int HD, const struct attn_mask *m);

void cpu_matmul_backward(float *dx, float *dw, const float *dy, const float *x, const void *w,
                         enum dice_dtype wdt, int N, int in, int out);
void cpu_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const void *w,
                          enum dice_dtype wdt, int N, int C, float eps);
void cpu_rope_backward(float *dx, const int *pos, int N, int NH, int HD, float theta);
/* (lib/ops_cpu.c) RoPE's rotation, back = 1 the opposite way: the backward */
void cpu_rope_turn(float *x, const int *pos, int N, int NH, int HD, float theta, int back);
void cpu_swiglu_backward(float *dgate, float *dup, const float *dy, const float *gate,
                         const float *up, int N, int C);
void cpu_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                            const float *k, const float *v, const float *out, int T, int S,
                            int NH, int NKV, int HD, const struct attn_mask *m);
void cpu_embed_backward(float *dw, const int *ids, const float *dy, int N, int C);
void cpu_cross_entropy(float *loss, float *dlogits, const float *logits, const int *target,
                       const float *weight, int N, int V);
void cpu_zero(void *p, size_t bytes);
double cpu_sumsq(const float *x, size_t n);
void cpu_adamw(float *p, float *m, float *v, const float *g, size_t n, const struct adamw_step *s);

#endif
