/* wgmma.cuh: Hopper warpgroup matrix products (wgmma.mma_async, sm_90a only) for the
 * kernels built for that target: shared-memory matrix descriptors, the fence / commit / wait
 * steps, and wg_op<N>::ss (A and B from shared memory) and ::rs (A from registers, the
 * mma.sync m16n8k16 A fragment of the warp's 16 rows) for m64nNk16 (N = 8 .. 256 by powers
 * of two, and 80, 112, 160) with fp32 accumulators, bf16 or fp16 operands. d: the N / 2 accumulators of a thread (n8 block j: d[4j], d[4j + 1]
 * = row g, columns 8j + 2q, + 1; d[4j + 2], d[4j + 3] = row g + 8; warp w: rows 16w + ...);
 * acc 0 ignores what d holds (D = A B), else D = A B + D; ::rs_if is ::rs under a guard, on 0
 * skipping the product (the same in the whole warpgroup: no branch around the asm, whose
 * copies of d would make ptxas wait for the products in flight); ::rst is ::rs with B
 * N-major (the transpose bit: B's rows along K hold N contiguous elements, as a row-major
 * V read as the B of P V). The operand lists below are spelled
 * out per N, each extending a shorter one (inline PTX takes only literal operand numbers). Then
 * the pieces of a TMA pipeline: mbarriers (init, arrive, arrive with expected bytes, wait on
 * a phase's parity), the bulk copies (2-d tensor, plain) that complete on one, setmaxnreg; and, for
 * the host, the tensor maps of those copies (wg_tensor_map, in matmul_wgmma.cu). */
#ifndef DICE_WGMMA_CUH
#define DICE_WGMMA_CUH

#include <stdint.h>
#include <cuda.h>                       /* CUtensorMap (no -lcuda) */

/* a shared-memory address */
static __device__ __forceinline__ unsigned wg_smem(const void *p)
{
	return (unsigned)__cvta_generic_to_shared(p);
}

/* a shared-memory matrix descriptor: start address, leading and stride byte offsets (lbo:
 * between core matrices along K, sbo: along M or N; both multiples of 16) and 128-byte
 * swizzle or none */
static __device__ __forceinline__ uint64_t wg_desc(const void *smem, unsigned lbo, unsigned sbo,
                                                   int swz128)
{
	unsigned a = wg_smem(smem);
	return (uint64_t)((a & 0x3FFFF) >> 4) | (uint64_t)((lbo & 0x3FFFF) >> 4) << 16 |
	       (uint64_t)((sbo & 0x3FFFF) >> 4) << 32 | (swz128 ? 1ull << 62 : 0ull);
}

/* orders this thread's ordinary shared-memory writes before the tensor cores' reads */
static __device__ __forceinline__ void wg_fence_proxy(void)
{
	asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* before the first wgmma that reads registers written since the last one */
static __device__ __forceinline__ void wg_fence(void)
{
	asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void wg_commit(void)
{
	asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* wait until at most n committed groups are in flight */
template <int n>
static __device__ __forceinline__ void wg_wait(void)
{
	asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(n) : "memory");
}

/* pins the n registers d here (after a wg_wait: no read of the products' registers moves
 * above it; before a product: no write of them moves below) */
template <int n>
static __device__ __forceinline__ void wg_fence_acc(float *d)
{
#pragma unroll
	for (int i = 0; i < n; i++)
		asm volatile("" : "+f"(d[i]) :: "memory");
}

/* the accumulators' numbers in a product's asm string, %0 .. %(N/2 - 1) (spelled out) */
#define WG_R8 \
	"%0, %1, %2, %3"
#define WG_R16 \
	WG_R8 ", " \
	"%4, %5, %6, %7"
#define WG_R32 \
	WG_R16 ", " \
	"%8, %9, %10, %11, %12, %13, %14, %15"
#define WG_R64 \
	WG_R32 ", " \
	"%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"

/* N = 80, 112, 160 as well: tiles of rows that fit 640 rows better than 128 (8 x 80, 6 x 112,
 * 4 x 160); from 64 up each list extends the next smaller N's */
#define WG_R80 \
	WG_R64 ", " \
	"%32, %33, %34, %35, %36, %37, %38, %39"
#define WG_R112 \
	WG_R80 ", " \
	"%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55"
#define WG_R128 \
	WG_R112 ", " \
	"%56, %57, %58, %59, %60, %61, %62, %63"
#define WG_R160 \
	WG_R128 ", " \
	"%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define WG_R256 \
	WG_R160 ", " \
	"%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
	"%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
	"%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

/* the accumulator operands d[0 .. N/2 - 1] ("+f"), in blocks of 4 and 16 from d[b] */
#define WG_O4(b) "+f"(d[(b)]), "+f"(d[(b) + 1]), "+f"(d[(b) + 2]), "+f"(d[(b) + 3])
#define WG_O16B(b) WG_O4(b), WG_O4((b) + 4), WG_O4((b) + 8), WG_O4((b) + 12)
#define WG_O8 WG_O4(0)
#define WG_O16 WG_O8, WG_O4(4)
#define WG_O32 WG_O16, WG_O4(8), WG_O4(12)
#define WG_O64 WG_O32, WG_O16B(16)
#define WG_O80 WG_O64, WG_O4(32), WG_O4(36)
#define WG_O112 WG_O80, WG_O16B(40)
#define WG_O128 WG_O112, WG_O4(56), WG_O4(60)
#define WG_O160 WG_O128, WG_O16B(64)
#define WG_O256 WG_O160, WG_O16B(80), WG_O16B(96), WG_O16B(112)

template <int N>
struct wg_op;

/* The operands after the N/2 accumulators, numbered from N/2 (the asm strings spell the
 * numbers out; WG_DEF is given them, p0 = N/2 .. p6 = N/2 + 6): a product's scale-d
 * predicate from operand n (WG_PRED), its tail with A and B in shared memory (descriptors
 * da, db: operands p0, p1), with A from registers (a: p0 .. p3, db: p4; t: B's transpose
 * bit), and the guard of a product done only where operand n is not 0 (WG_PRED_IF). */
#define WG_PRED(n) "{\n.reg .pred p;\nsetp.ne.b32 p, %" #n ", 0;\n"
#define WG_PRED_IF(n, on) \
	"{\n.reg .pred p, g;\nsetp.ne.b32 p, %" #n ", 0;\nsetp.ne.b32 g, %" #on ", 0;\n@g "
#define WG_SS_TAIL(p0, p1) ", %" #p0 ", %" #p1 ", p, 1, 1, 0, 0;\n}\n"
#define WG_RS_TAIL(p0, p1, p2, p3, p4, t) \
	", {%" #p0 ", %" #p1 ", %" #p2 ", %" #p3 "}, %" #p4 ", p, 1, 1, " #t ";\n}\n"

#define WG_MMA(N, TY) "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " "
/* the product with A from registers, its predicate from operand P, ending in TAIL */
#define WG_RS_ASM(N, TY, P, TAIL) \
	asm volatile(WG_PRED(P) WG_MMA(N, TY) "{" WG_R##N "}" TAIL \
	             : WG_O##N : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(db), "r"(acc))
#define WG_DEF(N, p0, p1, p2, p3, p4, p5, p6) \
template <> \
struct wg_op<N> { \
	static __device__ __forceinline__ void ss(float *d, uint64_t da, uint64_t db, int acc, \
	                                          int f16) \
	{ \
		if (f16) \
			asm volatile(WG_PRED(p2) WG_MMA(N, "f16") "{" WG_R##N "}" WG_SS_TAIL(p0, p1) \
			             : WG_O##N : "l"(da), "l"(db), "r"(acc)); \
		else \
			asm volatile(WG_PRED(p2) WG_MMA(N, "bf16") "{" WG_R##N "}" WG_SS_TAIL(p0, p1) \
			             : WG_O##N : "l"(da), "l"(db), "r"(acc)); \
	} \
	static __device__ __forceinline__ void rs(float *d, uint4 a, uint64_t db, int acc, int f16) \
	{ \
		if (f16) \
			WG_RS_ASM(N, "f16", p5, WG_RS_TAIL(p0, p1, p2, p3, p4, 0)); \
		else \
			WG_RS_ASM(N, "bf16", p5, WG_RS_TAIL(p0, p1, p2, p3, p4, 0)); \
	} \
	static __device__ __forceinline__ void rst(float *d, uint4 a, uint64_t db, int acc, int f16) \
	{ \
		if (f16) \
			WG_RS_ASM(N, "f16", p5, WG_RS_TAIL(p0, p1, p2, p3, p4, 1)); \
		else \
			WG_RS_ASM(N, "bf16", p5, WG_RS_TAIL(p0, p1, p2, p3, p4, 1)); \
	} \
	static __device__ __forceinline__ void rs_if(float *d, uint4 a, uint64_t db, int acc, \
	                                             int f16, int on) \
	{ \
		if (f16) \
			asm volatile(WG_PRED_IF(p5, p6) WG_MMA(N, "f16") "{" WG_R##N "}" \
			             WG_RS_TAIL(p0, p1, p2, p3, p4, 0) \
			             : WG_O##N : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(db), \
			               "r"(acc), "r"(on)); \
		else \
			asm volatile(WG_PRED_IF(p5, p6) WG_MMA(N, "bf16") "{" WG_R##N "}" \
			             WG_RS_TAIL(p0, p1, p2, p3, p4, 0) \
			             : WG_O##N : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(db), \
			               "r"(acc), "r"(on)); \
	} \
};
WG_DEF(8, 4, 5, 6, 7, 8, 9, 10)
WG_DEF(16, 8, 9, 10, 11, 12, 13, 14)
WG_DEF(32, 16, 17, 18, 19, 20, 21, 22)
WG_DEF(64, 32, 33, 34, 35, 36, 37, 38)
WG_DEF(128, 64, 65, 66, 67, 68, 69, 70)
WG_DEF(256, 128, 129, 130, 131, 132, 133, 134)
WG_DEF(80, 40, 41, 42, 43, 44, 45, 46)
WG_DEF(112, 56, 57, 58, 59, 60, 61, 62)
WG_DEF(160, 80, 81, 82, 83, 84, 85, 86)
#undef WG_DEF

/* mbarriers in shared memory and the bulk tensor copy (TMA) that completes on one */
static __device__ __forceinline__ void mb_init(uint64_t *b, unsigned count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(wg_smem(b)), "r"(count)
	             : "memory");
}

/* makes the barriers just initialised visible to the copy engine */
static __device__ __forceinline__ void mb_fence_init(void)
{
	asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* this thread's arrival, announcing bytes the copies will bring before the phase ends */
static __device__ __forceinline__ void mb_expect(uint64_t *b, unsigned bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
	             :: "r"(wg_smem(b)), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void mb_arrive(uint64_t *b)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(wg_smem(b)) : "memory");
}

/* until the phase of this parity has completed (a fresh barrier: parity 1 passes at once) */
static __device__ __forceinline__ void mb_wait(uint64_t *b, unsigned parity)
{
	unsigned ok;
	do {
		asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
		             "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(ok) : "r"(wg_smem(b)), "r"(parity)
		             : "memory");
	} while (!ok);
}

/* the box at (c0 innermost, c1) of the tensor map m (a __grid_constant__ parameter) into
 * shared memory at dst, completing on bar; zeros where the box leaves the tensor */
static __device__ __forceinline__ void tma_load2(void *dst, const void *m, int c0, int c1,
                                                 uint64_t *bar)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
	             " [%0], [%1, {%2, %3}], [%4];\n"
	             :: "r"(wg_smem(dst)), "l"(m), "r"(c0), "r"(c1), "r"(wg_smem(bar)) : "memory");
}

/* bytes (a multiple of 16; both addresses 16-byte aligned) from global src into shared
 * memory at dst, completing on bar */
static __device__ __forceinline__ void tma_load1(void *dst, const void *src, unsigned bytes,
                                                 uint64_t *bar)
{
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
	             " [%0], [%1], %2, [%3];\n"
	             :: "r"(wg_smem(dst)), "l"(src), "r"(bytes), "r"(wg_smem(bar)) : "memory");
}

static __device__ __forceinline__ void tma_prefetch_map(const void *m)
{
	asm volatile("prefetch.tensormap [%0];\n" :: "l"(m) : "memory");
}

/* a warpgroup's register budget (sm_90a; the kernel needs a register cap at entry) */
template <int R>
static __device__ __forceinline__ void wg_setmaxnreg_dec(void)
{
	asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(R));
}

template <int R>
static __device__ __forceinline__ void wg_setmaxnreg_inc(void)
{
	asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(R));
}

/* host: a 2-d tensor map over 16-bit rows (cols, rows; rows of cols elements, contiguous):
 * boxes of bc x br, 128-byte swizzle or none, zeros outside; wg_tensor_map_ok: whether the
 * driver has the encoder (else no tensor map can be made) */
int wg_tensor_map(CUtensorMap *m, const void *p, int f16, int cols, int rows, int bc, int br,
                  int swz);
int wg_tensor_map_ok(void);

#endif
