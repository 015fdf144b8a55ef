/* gpu: the CUDA backend of lib/ops.h (the .cu files of lib/cuda), declared for C and C++.
 *
 * gpu_ops() returns the backend table (struct ops, "cuda") or NULL when no GPU is present; it
 * is what ops_get("cuda") hands out. The table's functions run on one backend stream
 * (gpu_stream()) in issue order; to_host waits for it. Under the table sit the launchers
 * below, one per op: each takes an explicit stream, checks its shapes (returns -1 on bad
 * shapes, with a warning) and checks the launch; 0 on success. CUDA or cuBLAS failures are
 * fatal and name file:line (CUDA_CHECK / CUBLAS_CHECK in lib/cuda/common.cuh).
 *
 * The table fills every op: forward, memory and copy here; the training ops of struct ops
 * (*_backward, cross_entropy, zero, sumsq, adamw) are declared in lib/gpu_bwd.h.
 *
 * Every pointer is a DEVICE pointer, attn_mask's arrays included (see lib/ops.h); shapes
 * and semantics are exactly those of the CPU twin in lib/ops_cpu.c, the specification.
 * Every launcher is tested against that twin on random data (tests/gpu/test_<op>.cu).
 *
 * matmul converts x to the weight dtype (in the backend's scratch buffer) and accumulates
 * in fp32 with fp32 output: a bf16/fp16 result differs from the fp32 CPU twin by the
 * rounding of x. Decode-sized N with small weights takes a bandwidth-bound kernel of our
 * own (gpu_matmul_gemv), everything else cuBLAS; the split is measured (bench/gpu-ops.sh).
 * The engine forward (lib/model.c) takes matmul_fixed instead: the same function, but a row's
 * result is the same bits whatever N is (matmul_fixed.cu), so that decoding is
 * batch-invariant; training keeps matmul (cuBLAS). */
#ifndef DICE_GPU_H
#define DICE_GPU_H

#include <cuda_runtime_api.h>

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "ops.h"

#define GPU_GEMV_NMAX 8

const struct ops *gpu_ops(void);
cudaStream_t gpu_stream(void);          /* the stream of the ops table (created on first use) */

/* Launch overlap and graphs of the decode path, both on by default and neither changing a
 * bit of any result: gpu_pdl() is 1 when the engine forward's kernels (matmul_fixed's
 * streaming kernel, the decode.cu ops) are launched with programmatic dependent launch (an
 * sm_90 GPU, and the environment variable DICE_PDL is not 0), so that a matrix product
 * streams its first weights while the kernel before it ends; gpu_graphs() is 1 when the ops
 * table's replay op captures small forwards as CUDA graphs (DICE_GRAPH is not 0). The setters
 * override the environment (tests, benchmarks): 0 off, 1 on, -1 back to the environment. */
int gpu_pdl(void);
void gpu_set_pdl(int on);
int gpu_graphs(void);
void gpu_set_graphs(int on);
/* graphs captured and graph launches so far (ops->replay) */
void gpu_graph_counts(long *captured, long *launched);

/* matmul: y(N,out) fp32 = x(N,in) fp32 @ w(out,in)^T; the path is chosen by N, or forced:
 * gpu_matmul_cublas (any N) and gpu_matmul_gemv (N <= GPU_GEMV_NMAX) are there for tests
 * and the bench. */
int gpu_matmul(cudaStream_t st, float *y, const float *x, const void *w, enum dice_dtype wdt,
               int N, int in, int out);
int gpu_matmul_cublas(cudaStream_t st, float *y, const float *x, const void *w,
                      enum dice_dtype wdt, int N, int in, int out);
int gpu_matmul_gemv(cudaStream_t st, float *y, const float *x, const void *w,
                    enum dice_dtype wdt, int N, int in, int out);
/* the batch-invariant matmul (struct ops matmul_fixed, matmul_fixed.cu): a row's result is
 * the same bits whatever N is. gpu_matmul_fixed_path forces a kernel of the 16-bit path (1
 * streaming: a staged one where it takes the shape and gpu_set_mfx allows, 2 tiled, 3 and 4
 * the staged streaming kernel with two or one steps' weights in flight (up to 8 rows; an
 * error where it does not take the shape); in % 8 == 0, x and w 16-byte aligned), for tests
 * and the bench: all give the same bits.
 * gpu_set_mfx: whether the streaming path takes the staged kernel (1, the default), 0 never,
 * -1 as DICE_MFX says (0: never). gpu_matmul_gemv_rows: the gemv kernel over 8-row chunks
 * (fp32 path). */
void gpu_set_mfx(int on);
/* the decode forward's block timeline (a build with -DDICE_TIMELINE, matmul_fixed.cu: the
 * streaming and staged products, the small kernels and the decode attention): arm 1 clears
 * and starts it; 0 stops it and writes a line a block to f, "in out start waited end" (a
 * product's (in, out), or a small kernel's code and 0; ns, the global timer), returning the
 * lines; -1 in a build without it */
int gpu_timeline(int arm, FILE *f);
/* a copy of the 16-bit w(out, in) in the packed layout (a tile of 8 outputs' 32-input blocks
 * one after the other, 512 bytes each; gpu_matmul_fixed_packed_bytes of them), which
 * gpu_matmul_fixed and gpu_matmul_fixed_gu then read for products of (w, out, in) of up to 32
 * rows, the same bits (ops->pack): 1 made (made again where w has one: its values changed),
 * 0 not (not a 16-bit matrix the kernels take, or it would leave less than a quarter of the
 * GPU's memory free); gpu_matmul_fixed_unpack frees it */
size_t gpu_matmul_fixed_packed_bytes(int out, int in);
/* the replayed graphs (ops->replay) are captured again at their next use: the memory their
 * kernels read moved (a packed copy made or freed) */
void gpu_graphs_stale(void);
int gpu_matmul_fixed_pack(cudaStream_t st, const void *w, enum dice_dtype wdt, int out, int in);
void gpu_matmul_fixed_unpack(const void *w);
int gpu_matmul_fixed(cudaStream_t st, float *y, const float *x, const void *w,
                     enum dice_dtype wdt, int N, int in, int out);
int gpu_matmul_fixed_path(cudaStream_t st, float *y, const float *x, const void *w,
                          enum dice_dtype wdt, int N, int in, int out, int kernel);
/* the same with x16 (or NULL): x rounded to wdt (bf16 or f16, as every kernel rounds x; the
 * 16-bit copy that gpu_add_rmsnorm16, gpu_attention_kv16 and gpu_matmul_fixed_gu16 write beside
 * fp32 outputs), which the streaming kernel of up to 8 rows then reads instead of x: half the
 * bytes a step, the same bits */
int gpu_matmul_fixed16(cudaStream_t st, float *y, const float *x, const void *x16, const void *w,
                       enum dice_dtype wdt, int N, int in, int out);
int gpu_matmul_fixed_path16(cudaStream_t st, float *y, const float *x, const void *x16,
                            const void *w, enum dice_dtype wdt, int N, int in, int out,
                            int kernel);
/* the tiled kernel at one of its tile shapes (variant 0 .. gpu_matmul_fixed_variants() - 1,
 * the wgmma ones last where they run, named by gpu_matmul_fixed_variant_name; -1: the one
 * gpu_matmul_fixed_choice picks for the shape, with its split), split 1: one block per
 * segment of the inputs and an ordered reduce, 0: a block walks all segments (split anyway
 * where the shape's 64-input stages would straddle a segment; the wgmma ones always walk, and
 * fall back to the mma.sync kernel where they cannot); every variant and split gives the same
 * bits. For tests and benches. */
int gpu_matmul_fixed_tiled(cudaStream_t st, float *y, const float *x, const void *w,
                           enum dice_dtype wdt, int N, int in, int out, int variant, int split);
/* y(N,out) = swiglu_cat(gu)(N,I) @ w(out,I)^T for gu(N, 2I) = [gate | up], the same bits as
 * gpu_swiglu_cat into h(N,I) then gpu_matmul_fixed (what it does where it cannot fold the
 * SwiGLU into the tiled path's input conversion; there h is left untouched). variant: -1 as
 * the engine calls it, or the tiled path at that variant (tests). */
int gpu_matmul_fixed_glu(cudaStream_t st, float *y, float *h, const float *gu, const void *w,
                         enum dice_dtype wdt, int N, int I, int out, int variant);
/* gu(N, 2I) = x(N,in) @ w(2I,in)^T as gpu_matmul_fixed, w's rows [gate | up]; up to 8 rows
 * (I % 8 == 0) it also makes h(N,I) = silu(gate) * up, the bits of gpu_swiglu_cat, a block of
 * the streaming kernel, or of the staged one where it takes the product, multiplying gate
 * tile p and up tile p + I / 8 (returns 1); else gu alone (0); -1 bad arguments. kernel: 1 as
 * the engine calls it; tests: 2 the streaming kernel's pairs, 3 the staged kernel's (4: with
 * one step in flight; -2 where that kernel does not take the shape, nothing launched) */
int gpu_matmul_fixed_gu(cudaStream_t st, float *gu, float *h, const float *x, const void *w,
                        enum dice_dtype wdt, int N, int in, int I, int kernel);
/* the same with x16 (or NULL) as gpu_matmul_fixed16's, and h16 (or NULL): where h is made, h
 * rounded to wdt too */
int gpu_matmul_fixed_gu16(cudaStream_t st, float *gu, float *h, void *h16, const float *x,
                          const void *x16, const void *w, enum dice_dtype wdt, int N, int in,
                          int I, int kernel);
int gpu_matmul_fixed_variants(void);
const char *gpu_matmul_fixed_variant_name(int variant);
int gpu_matmul_fixed_choice(int N, int in, int out, int *split);
/* the segments every path of the product cuts the inputs of (in, out) into (its order of
 * sums: matmul_fixed.cu), and *kseg, the inputs a segment (a multiple of 32) */
int gpu_matmul_fixed_segments(int in, int out, int *kseg);
/* whether the tiled path may take its wgmma kernels (matmul_wgmma.cu: a compute-capability-9.0
 * GPU, the same bits, chosen where estimated faster; on unless DICE_WGMMA is 0): 0 off, 1 on
 * (where the GPU has them), -1 back to the environment */
void gpu_set_wgmma(int on);
/* whether the cost model may take the split TMA variants ((tile, segment) units, the last
 * warp of a tile adding the segments' sums in order; off unless DICE_MX_SPLIT is 1): 0 off, 1
 * on, -1 back to the environment. A split variant forced by number runs either way. */
void gpu_set_mx_split(int on);
/* whether the cost model may take the TMA variants of 80, 112 or 160 rows a tile (on unless
 * DICE_MX_ROWS is 0): 0 off, 1 on, -1 back to the environment. Forced by number they run
 * either way. */
void gpu_set_mx_rows(int on);
/* the TMA kernels' tensor maps: kept by their arguments (1, the default) or encoded on every
 * call (0); a bench hook */
void gpu_set_mx_mapcache(int on);
int gpu_matmul_gemv_rows(cudaStream_t st, float *y, const float *x, const void *w,
                         enum dice_dtype wdt, int N, int in, int out);
/* y(N,C) = x / rms(x) * w(C); y may equal x */
int gpu_rmsnorm(cudaStream_t st, float *y, const float *x, const void *w, enum dice_dtype wdt,
                int N, int C, float eps);
/* in place on x(N,NH,HD), positions pos(N); HD even, HD <= 1024 */
int gpu_rope(cudaStream_t st, float *x, const int *pos, int N, int NH, int HD, float theta);
/* y(N,C) = silu(gate) * up; y may equal gate */
int gpu_swiglu(cudaStream_t st, float *y, const float *gate, const float *up, int N, int C);
/* y(n) += x(n) */
int gpu_add(cudaStream_t st, float *y, const float *x, size_t n);
/* out(T,NH,HD) from q(T,NH,HD), k,v(S,NKV,HD) under mask m (device arrays); HD <= 256 and a
 * multiple of 4; q, k, v 16-byte aligned */
int gpu_attention(cudaStream_t st, float *out, const float *q, const float *k, const float *v,
                  int T, int S, int NH, int NKV, int HD, const struct attn_mask *m);
/* y(N,C) = w[ids[n]] rows, w (V,C) of dtype wdt, ids(N) on the device */
int gpu_embed(cudaStream_t st, float *y, const int *ids, const void *w, enum dice_dtype wdt,
              int N, int C);
/* the sample op (lib/ops.h) with DEVICE arrays: rows, u (R) in; tok, prob (R) out. Only
 * top_p >= 1 with top_k 1, or top_k <= 0 or >= V (the full softmax); -1 for other filters
 * (the table's op takes those rows to the host). Any temperature > 0. */
int gpu_sample(cudaStream_t st, int *tok, float *prob, const float *logits, const int *rows,
               const double *u, int R, int V, float temperature, int top_k, float top_p);
/* the denoise op (lib/ops.h) with ds, u on the DEVICE (ds's arrays and out too); the filters
 * of gpu_sample (-1 for others); no sync */
int gpu_denoise(cudaStream_t st, const float *logits, int V, const struct denoise_seq *ds, int n,
                int B, const double *u, int *out, int decoding, float threshold,
                float temperature, int top_k, float top_p);

/* the engine forward's cache and fused ops (decode.cu), struct ops semantics; kv_batch's
 * arrays on the device. attention_kv: HD <= 256, a multiple of 4, HD x element size a
 * multiple of 16 bytes; the caches 16-byte aligned; with PDL on, kv_batch's arrays and the
 * cache positions below each sequence's len must not have been written by kernels since the
 * stream's last operation that is not a kernel (the engine's forward uploads its batch
 * before its kernels and writes only positions len ..): the cluster kernel reads them
 * before its wait on the kernel before it. */
int gpu_kv_append(cudaStream_t st, const struct kv_batch *b, int l, const float *k,
                  const float *v, int NKV, int HD);
int gpu_attention_kv(cudaStream_t st, float *out, const float *q, const struct kv_batch *b,
                     int l, int NH, int NKV, int HD, int block);
/* the same, and where out16 is given (8-byte aligned) and the kernel taken finishes its rows
 * itself (16-bit caches at HD 128: the unit kernels, the cluster kernel or a single split),
 * out rounded to dt16 (bf16 or f16) into out16 too: 1; 0 where it wrote out alone */
int gpu_attention_kv16(cudaStream_t st, float *out, void *out16, enum dice_dtype dt16,
                       const float *q, const struct kv_batch *b, int l, int NH, int NKV, int HD,
                       int block);
/* attention_kv's unit kernel (a block walks all key splits of one (sequence, row tile, kv
 * head); 16-bit caches, HD 128, sm_90; the same bits as the cluster kernel): taken for
 * launches of at least min_units units; 0 never, 1 always (where it runs), -1 back to
 * DICE_DK_UNIT or the default (3/4 of the multiprocessors' number of units, up to 2048 keys
 * a sequence). For tests and benches. */
void gpu_set_dk_unit(int min_units);
/* which unit kernel: version 1 (du_kernel, a block of 8 warps a unit), 2 (dv_kernel,
 * persistent blocks of 4 warps, two an SM, on at most grid blocks, 0: as many as fit) or 3
 * (dv_kernel, a split's chains of key tiles in turn over the warps); other versions: back to
 * DICE_DK_UNIT_V (1 to 3) or the default (2 from 3/4 of the number of its blocks that fit at
 * once, else 1). For tests and benches. */
void gpu_set_dk_unit_v(int version, int grid);
/* attention_kv's products on the tensor cores (16-bit caches, HD 128): 0 (the default), q and
 * the probabilities each rounded to the cache's 16-bit type, as a bf16 / fp16 flash attention
 * takes them; 1, each split into a high and a low 16-bit part (two products), fp32-accurate;
 * -1 back to DICE_DK_EXACT (1: exact). For tests and benches. */
void gpu_set_dk_exact(int on);
int gpu_qkv_prep(cudaStream_t st, float *q, const float *qkv, const float *qw, const float *kw,
                 const int *pos, const struct kv_batch *b, int l, int NH, int NKV, int HD,
                 float eps, float theta);
int gpu_swiglu_cat(cudaStream_t st, float *y, const float *gu, int N, int C);
int gpu_add_rmsnorm(cudaStream_t st, float *y, float *x, const float *r, const float *w, int N,
                    int C, float eps);
/* the same, and where y16 is given and the kernel's 16-byte path takes the rows (C % 8 == 0,
 * up to 4096 wide, every pointer 16-byte aligned), y rounded to dt16 into y16 too: 1; 0 where
 * it wrote y alone */
int gpu_add_rmsnorm16(cudaStream_t st, float *y, void *y16, enum dice_dtype dt16, float *x,
                      const float *r, const float *w, int N, int C, float eps);
/* the prefill attention (struct ops .attention_prefill, decode.cu): the out rows of sequences
 * s0 .. nseq-1 of b through the fused training attention; row0h, lenh host copies of b's
 * row0 and len. -1 (nothing done) where it does not serve: off (gpu_set_prefill_fa /
 * DICE_PREFILL_FA=0), a cache other than bf16, HD other than 64 or 128, before sm_80, or a
 * group of keys the fused kernels do not take. out NULL: only whether it would (row0h NULL:
 * whether it could for this cache type and head dim). */
int gpu_attention_prefill(cudaStream_t st, float *out, const float *q, const struct kv_batch *b,
                          int s0, const int *row0h, const int *lenh, int l, int NH, int NKV,
                          int HD, int block);
/* 0 off, 1 on, -1 back to DICE_PREFILL_FA (on unless "0"). For tests and benches. */
void gpu_set_prefill_fa(int on);
/* the fused training attention's forward on bf16 operands (attention_train.cu): whether it
 * takes (T, S, HD), the device scratch it needs, and the call: out(T,NH,HD) fp32 from q(T,NH,
 * HD), k, v(S,NKV,HD) bf16 under m (device arrays), every row written */
int gpu_attention_bf16_ok(int T, int S, int HD);
size_t gpu_attention_bf16_scratch(int T, int S);
int gpu_attention_bf16(cudaStream_t st, float *out, const void *q, const void *k, const void *v,
                       int T, int S, int NH, int NKV, int HD, const struct attn_mask *m,
                       void *scratch);

#ifdef __cplusplus
}
#endif

#endif
