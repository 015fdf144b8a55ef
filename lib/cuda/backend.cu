/* backend.cu: the CUDA backend's table (gpu_ops) and its per-process state: one stream, one
 * cuBLAS handle bound to it, one scratch buffer that grows on demand, and the fatal
 * CUDA_CHECK / CUBLAS_CHECK reporters. The table's ops call the launchers of the other files
 * on that stream; a launcher's shape error is a bug in the caller, so the table aborts on it. */
#include <string.h>

#include "common.cuh"
#include "train.cuh"

/* ---------------------------------------------------------------- checks */

void gpu_check_cuda(cudaError_t e, const char *file, int line)
{
	if (e == cudaSuccess)
		return;
	warn_msg("cuda error at %s:%d: %s", file, line, cudaGetErrorString(e));
	if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
		warn_msg("hint: no usable GPU; use --device cpu");
	exit(1);
}

void gpu_check_cublas(cublasStatus_t s, const char *file, int line)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return;
	warn_msg("cublas error at %s:%d: %s", file, line, cublasGetStatusString(s));
	exit(1);
}

/* ---------------------------------------------------------------- state */

static cudaStream_t g_stream;
static cublasHandle_t g_cublas;
static void *g_scratch;
static size_t g_scratch_cap;

cudaStream_t gpu_stream(void)
{
	if (!g_stream)
		CUDA_CHECK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
	return g_stream;
}

cublasHandle_t gpu_cublas(void)
{
	if (!g_cublas) {
		CUBLAS_CHECK(cublasCreate(&g_cublas));
		/* fp32 stays fp32: no TF32 behind the caller's back */
		CUBLAS_CHECK(cublasSetMathMode(g_cublas, CUBLAS_DEFAULT_MATH));
	}
	return g_cublas;
}

static unsigned g_scratch_gen;          /* bumped when the scratch moves (graphs hold it) */

void *gpu_scratch(size_t bytes)
{
	if (bytes > g_scratch_cap) {
		cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
		if (g_stream)
			CUDA_CHECK(cudaStreamIsCapturing(g_stream, &cs));
		if (cs != cudaStreamCaptureStatusNone) {
			warn_msg("the scratch grew inside a graph capture (a bug)");
			abort();
		}
		if (g_scratch)
			CUDA_CHECK(cudaFree(g_scratch));      /* synchronises: no kernel still reads it */
		g_scratch_cap = bytes + bytes / 4;
		CUDA_CHECK(cudaMalloc(&g_scratch, g_scratch_cap));
		g_scratch_gen++;
	}
	return g_scratch;
}

void gpu_graphs_stale(void)
{
	g_scratch_gen++;
}

/* ---------------------------------------------------------------- launch switches */

/* each switch: -1 = from its environment variable (on unless "0") on first use */
static int g_pdl = -1, g_graphs = -1;

int gpu_switch(int *sw, const char *env)
{
	if (*sw < 0) {
		const char *v = getenv(env);
		*sw = !(v && v[0] == '0' && !v[1]);
	}
	return *sw;
}

int gpu_cc(void)
{
	static int cc;
	if (!cc) {
		int dev, major, minor;
		CUDA_CHECK(cudaGetDevice(&dev));
		CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
		CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
		cc = 10 * major + minor;
	}
	return cc;
}

int gpu_pdl(void)
{
	if (g_pdl < 0)
		g_pdl = gpu_switch(&g_pdl, "DICE_PDL") && gpu_cc() >= 90;
	return g_pdl;
}

void gpu_set_pdl(int on)
{
	g_pdl = on < 0 ? -1 : on && gpu_cc() >= 90;
}

int gpu_graphs(void) { return gpu_switch(&g_graphs, "DICE_GRAPH"); }
void gpu_set_graphs(int on) { g_graphs = on < 0 ? -1 : on != 0; }

void gpu_launch(const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                void **args)
{
	if (gpu_pdl()) {
		cudaLaunchConfig_t cfg;
		cudaLaunchAttribute at[1];
		memset(&cfg, 0, sizeof cfg);
		memset(at, 0, sizeof at);
		at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at[0].val.programmaticStreamSerializationAllowed = 1;
		cfg.gridDim = grid;
		cfg.blockDim = block;
		cfg.dynamicSmemBytes = smem;
		cfg.stream = st;
		cfg.attrs = at;
		cfg.numAttrs = 1;
		CUDA_CHECK(cudaLaunchKernelExC(&cfg, fn, args));
	} else {
		CUDA_CHECK(cudaLaunchKernel(fn, grid, block, args, smem, st));
	}
}

/* ---------------------------------------------------------------- graphs (ops->replay)
 * A small cache of keys: a key seen once is remembered without a graph (its first run is
 * eager, and makes every lazy allocation and upload the launches need); the second time fn
 * is captured on the stream (cudaStreamCaptureModeThreadLocal: a sync or allocation in it is
 * an error), instantiated and launched, and from then on launched. A graph made before the
 * scratch moved or a packed copy was made or freed (gpu_graphs_stale), or under the other
 * gpu_pdl() setting, is captured again. The least recently
 * used entry makes room. */
#define GR_SLOTS 32

static struct gr_slot {
	void *key;
	size_t keylen;
	cudaGraphExec_t exec;           /* NULL: seen once */
	unsigned gen;                   /* g_scratch_gen at capture */
	int pdl;                        /* gpu_pdl() at capture */
	unsigned long long used;
} g_gr[GR_SLOTS];
static unsigned long long g_gr_clock;
static long g_gr_captured, g_gr_launched;

void gpu_graph_counts(long *captured, long *launched)
{
	*captured = g_gr_captured;
	*launched = g_gr_launched;
}

static void gr_drop(struct gr_slot *e)
{
	if (e->exec)
		CUDA_CHECK(cudaGraphExecDestroy(e->exec));
	free(e->key);
	memset(e, 0, sizeof *e);
}

static void cu_replay(const void *key, size_t keylen, void (*fn)(void *), void *arg)
{
	struct gr_slot *e = NULL, *lru = &g_gr[0];
	cudaStream_t st = gpu_stream();

	if (!gpu_graphs()) {
		fn(arg);
		return;
	}
	for (int i = 0; i < GR_SLOTS && !e; i++) {
		if (g_gr[i].key && g_gr[i].keylen == keylen && !memcmp(g_gr[i].key, key, keylen))
			e = &g_gr[i];
		else if (g_gr[i].used < lru->used)
			lru = &g_gr[i];
	}
	if (!e) {                               /* first sighting: remember, run eagerly */
		gr_drop(lru);
		lru->key = malloc(keylen);
		if (!lru->key) {
			fn(arg);
			return;
		}
		memcpy(lru->key, key, keylen);
		lru->keylen = keylen;
		lru->used = ++g_gr_clock;
		fn(arg);
		return;
	}
	e->used = ++g_gr_clock;
	if (e->exec && (e->gen != g_scratch_gen || e->pdl != gpu_pdl())) {
		CUDA_CHECK(cudaGraphExecDestroy(e->exec));
		e->exec = NULL;
	}
	if (!e->exec) {
		cudaGraph_t g;
		unsigned gen = g_scratch_gen;
		CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
		fn(arg);
		CUDA_CHECK(cudaStreamEndCapture(st, &g));
		CUDA_CHECK(cudaGraphInstantiate(&e->exec, g, 0));
		CUDA_CHECK(cudaGraphDestroy(g));
		e->gen = gen;
		e->pdl = gpu_pdl();
		g_gr_captured++;
	}
	CUDA_CHECK(cudaGraphLaunch(e->exec, st));
	g_gr_launched++;
}

int gpu_sm_count(void)
{
	static int n;
	if (!n) {
		int dev;
		CUDA_CHECK(cudaGetDevice(&dev));
		CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
	}
	return n;
}

/* ---------------------------------------------------------------- the table */

#define OPS_CALL(op, call) do { if ((call) != 0) { \
	warn_msg("cuda %s: bad arguments", (op)); abort(); } } while (0)

static void cu_matmul(float *y, const float *x, const void *w, enum dice_dtype wdt,
                      int N, int in, int out)
{
	OPS_CALL("matmul", gpu_matmul(gpu_stream(), y, x, w, wdt, N, in, out));
}

static void cu_rmsnorm(float *y, const float *x, const void *w, enum dice_dtype wdt,
                       int N, int C, float eps)
{
	OPS_CALL("rmsnorm", gpu_rmsnorm(gpu_stream(), y, x, w, wdt, N, C, eps));
}

static void cu_rope(float *x, const int *pos, int N, int NH, int HD, float theta)
{
	OPS_CALL("rope", gpu_rope(gpu_stream(), x, pos, N, NH, HD, theta));
}

static void cu_swiglu(float *y, const float *gate, const float *up, int N, int C)
{
	OPS_CALL("swiglu", gpu_swiglu(gpu_stream(), y, gate, up, N, C));
}

static void cu_add(float *y, const float *x, size_t n)
{
	OPS_CALL("add", gpu_add(gpu_stream(), y, x, n));
}

static void cu_attention(float *out, const float *q, const float *k, const float *v,
                         int T, int S, int NH, int NKV, int HD, const struct attn_mask *m)
{
	OPS_CALL("attention", gpu_attention(gpu_stream(), out, q, k, v, T, S, NH, NKV, HD, m));
}

static void cu_embed(float *y, const int *ids, const void *w, enum dice_dtype wdt, int N, int C)
{
	OPS_CALL("embed", gpu_embed(gpu_stream(), y, ids, w, wdt, N, C));
}

static void cu_kv_append(const struct kv_batch *b, int l, const float *k, const float *v,
                         int NKV, int HD)
{
	OPS_CALL("kv_append", gpu_kv_append(gpu_stream(), b, l, k, v, NKV, HD));
}

static void cu_attention_kv(float *out, const float *q, const struct kv_batch *b, int l,
                            int NH, int NKV, int HD, int block)
{
	OPS_CALL("attention_kv", gpu_attention_kv(gpu_stream(), out, q, b, l, NH, NKV, HD, block));
}

static int cu_attention_prefill(float *out, const float *q, const struct kv_batch *b, int s0,
                                const int *row0h, const int *lenh, int l, int NH, int NKV,
                                int HD, int block)
{
	return gpu_attention_prefill(gpu_stream(), out, q, b, s0, row0h, lenh, l, NH, NKV, HD,
	                             block);
}

static void cu_qkv_prep(float *q, const float *qkv, const float *qw, const float *kw,
                        const int *pos, const struct kv_batch *b, int l, int NH, int NKV,
                        int HD, float eps, float theta)
{
	OPS_CALL("qkv_prep", gpu_qkv_prep(gpu_stream(), q, qkv, qw, kw, pos, b, l, NH, NKV, HD,
	                                  eps, theta));
}

static void cu_swiglu_cat(float *y, const float *gu, int N, int C)
{
	OPS_CALL("swiglu_cat", gpu_swiglu_cat(gpu_stream(), y, gu, N, C));
}

static void cu_add_rmsnorm(float *y, float *x, const float *r, const float *w, int N, int C,
                           float eps)
{
	OPS_CALL("add_rmsnorm", gpu_add_rmsnorm(gpu_stream(), y, x, r, w, N, C, eps));
}

/* zeroed like the CPU backend's calloc; NULL (with a warning) when the GPU is full */
static void *cu_alloc(size_t bytes)
{
	void *p = NULL;
	cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);

	if (e == cudaErrorMemoryAllocation) {
		cudaGetLastError();
		size_t free_b = 0, total_b = 0;
		cudaMemGetInfo(&free_b, &total_b);
		warn_msg("cannot allocate %zu bytes on the GPU (%zu free of %zu)",
		         bytes, free_b, total_b);
		return NULL;
	}
	CUDA_CHECK(e);
	CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, gpu_stream()));
	CUDA_CHECK(cudaStreamSynchronize(gpu_stream()));   /* zeroed for any stream's use */
	return p;
}

/* the device memory free now */
static size_t cu_mem_free(void)
{
	size_t free_b = 0, total_b = 0;

	CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
	return free_b;
}

static void cu_free(void *p)
{
	if (p)
		CUDA_CHECK(cudaFree(p));
}

static void cu_to_host(void *dst, const void *src, size_t bytes)
{
	CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, gpu_stream()));
	CUDA_CHECK(cudaStreamSynchronize(gpu_stream()));
}

static void cu_matmul_fixed(float *y, const float *x, const void *w, enum dice_dtype wdt,
                            int N, int in, int out)
{
	OPS_CALL("matmul_fixed", gpu_matmul_fixed(gpu_stream(), y, x, w, wdt, N, in, out));
}

static void cu_matmul_fixed_glu(float *y, float *h, const float *gu, const void *w,
                                enum dice_dtype wdt, int N, int I, int out)
{
	OPS_CALL("matmul_fixed_glu", gpu_matmul_fixed_glu(gpu_stream(), y, h, gu, w, wdt, N, I, out,
	                                                  -1));
}

static int cu_matmul_fixed_gu(float *gu, float *h, const float *x, const void *w,
                              enum dice_dtype wdt, int N, int in, int I)
{
	int rc = gpu_matmul_fixed_gu(gpu_stream(), gu, h, x, w, wdt, N, in, I, 1);
	OPS_CALL("matmul_fixed_gu", rc < 0);
	return rc;
}

static void cu_matmul_fixed16(float *y, const float *x, const void *x16, const void *w,
                              enum dice_dtype wdt, int N, int in, int out)
{
	OPS_CALL("matmul_fixed", gpu_matmul_fixed16(gpu_stream(), y, x, x16, w, wdt, N, in, out));
}

static int cu_matmul_fixed_gu16(float *gu, float *h, void *h16, const float *x, const void *x16,
                                const void *w, enum dice_dtype wdt, int N, int in, int I)
{
	int rc = gpu_matmul_fixed_gu16(gpu_stream(), gu, h, h16, x, x16, w, wdt, N, in, I, 1);
	OPS_CALL("matmul_fixed_gu", rc < 0);
	return rc == 1 ? h16 != NULL : -1;
}

static int cu_add_rmsnorm16(float *y, void *y16, enum dice_dtype dt16, float *x, const float *r,
                            const float *w, int N, int C, float eps)
{
	int rc = gpu_add_rmsnorm16(gpu_stream(), y, y16, dt16, x, r, w, N, C, eps);
	OPS_CALL("add_rmsnorm", rc < 0);
	return rc;
}

static int cu_attention_kv16(float *out, void *out16, enum dice_dtype dt16, const float *q,
                             const struct kv_batch *b, int l, int NH, int NKV, int HD,
                             int block)
{
	int rc = gpu_attention_kv16(gpu_stream(), out, out16, dt16, q, b, l, NH, NKV, HD, block);
	OPS_CALL("attention_kv", rc < 0);
	return rc;
}

static int cu_pack(const void *w, enum dice_dtype wdt, int out, int in)
{
	int rc = gpu_matmul_fixed_pack(gpu_stream(), w, wdt, out, in);
	OPS_CALL("pack", rc < 0);
	return rc;
}

static void cu_unpack(const void *w)
{
	gpu_matmul_fixed_unpack(w);
}

/* returns when the host buffer may be reused: a copy of up to TD_BYTES goes through one of
 * TD_SLOTS page-locked slots (the host copies it there and returns; the stream copies it on,
 * in order with the kernels: no wait for the device, as a forward's per-call upload wants),
 * a larger one waits for its copy */
#define TD_SLOTS 8
#define TD_BYTES (64 * 1024)
void gpu_upload(void *dst, const void *src, size_t bytes)
{
	static char *slot;
	static cudaEvent_t done[TD_SLOTS];
	static unsigned next;

	if (bytes <= TD_BYTES) {
		if (!slot) {
			CUDA_CHECK(cudaMallocHost((void **)&slot, (size_t)TD_SLOTS * TD_BYTES));
			for (int i = 0; i < TD_SLOTS; i++)
				CUDA_CHECK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
		}
		unsigned i = next++ % TD_SLOTS;
		char *p = slot + (size_t)i * TD_BYTES;
		CUDA_CHECK(cudaEventSynchronize(done[i]));  /* (its last copy, long done) */
		memcpy(p, src, bytes);
		CUDA_CHECK(cudaMemcpyAsync(dst, p, bytes, cudaMemcpyHostToDevice, gpu_stream()));
		CUDA_CHECK(cudaEventRecord(done[i], gpu_stream()));
		return;
	}
	CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, gpu_stream()));
	CUDA_CHECK(cudaStreamSynchronize(gpu_stream()));
}

/* .fetch: a copy of up to TD_BYTES lands in one of FT_SLOTS page-locked slots, in stream
 * order; waiting for its ticket (or reusing its slot) syncs its event and copies it on to
 * dst. A larger copy is done before fetch returns. */
#define FT_SLOTS 16
static struct ft_slot {
	cudaEvent_t ev;
	void *dst;
	size_t bytes;
	long ticket;                    /* 0: nothing outstanding */
} g_ft[FT_SLOTS];
static char *g_ft_pin;
static long g_ft_next = 1, g_ft_done;   /* the next ticket; every ticket up to g_ft_done is done */

static void ft_complete(struct ft_slot *f)
{
	if (!f->ticket)
		return;
	CUDA_CHECK(cudaEventSynchronize(f->ev));
	memcpy(f->dst, g_ft_pin + (size_t)(f - g_ft) * TD_BYTES, f->bytes);
	f->ticket = 0;
}

static void cu_fetch_wait(long ticket)
{
	for (; g_ft_done < ticket && g_ft_done + 1 < g_ft_next; g_ft_done++)
		ft_complete(&g_ft[(g_ft_done + 1) % FT_SLOTS]);
}

static long cu_fetch(void *dst, const void *src, size_t bytes)
{
	long t = g_ft_next++;
	struct ft_slot *f = &g_ft[t % FT_SLOTS];

	if (!g_ft_pin) {
		CUDA_CHECK(cudaMallocHost((void **)&g_ft_pin, (size_t)FT_SLOTS * TD_BYTES));
		for (int i = 0; i < FT_SLOTS; i++)
			CUDA_CHECK(cudaEventCreateWithFlags(&g_ft[i].ev, cudaEventDisableTiming));
	}
	cu_fetch_wait(t - FT_SLOTS);            /* the slot's last ticket and those before it */
	if (bytes > TD_BYTES) {
		cu_fetch_wait(t - 1);
		CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, gpu_stream()));
		CUDA_CHECK(cudaStreamSynchronize(gpu_stream()));
		g_ft_done = t;
		return t;
	}
	f->dst = dst;
	f->bytes = bytes;
	f->ticket = t;
	CUDA_CHECK(cudaMemcpyAsync(g_ft_pin + (size_t)(f - g_ft) * TD_BYTES, src, bytes,
	                           cudaMemcpyDeviceToHost, gpu_stream()));
	CUDA_CHECK(cudaEventRecord(f->ev, gpu_stream()));
	return t;
}

/* device -> device, in stream order */
static void cu_copy(void *dst, const void *src, size_t bytes)
{
	if (bytes)
		CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, gpu_stream()));
}

static void cu_sync(void)
{
	CUDA_CHECK(cudaStreamSynchronize(gpu_stream()));
}

static const struct ops ops_cuda = {
	"cuda",
	cu_matmul,
	cu_rmsnorm,
	cu_rope,
	cu_swiglu,
	cu_add,
	cu_attention,
	cu_embed,
	cu_alloc,
	cu_free,
	cu_to_host,
	gpu_upload,
	cu_sync,
	cu_copy,
	cu_matmul_backward,
	cu_rmsnorm_backward,
	cu_rope_backward,
	cu_swiglu_backward,
	cu_attention_backward,
	cu_embed_backward,
	cu_cross_entropy,
	cu_zero,
	cu_sumsq,
	cu_adamw,
	cu_sample,
	cu_kv_append,
	cu_attention_kv,
	cu_qkv_prep,
	cu_swiglu_cat,
	cu_add_rmsnorm,
	cu_cast_bf16,
	cu_attention_tc,
	cu_attention_tc_backward,
	cu_device_info,
	cu_matmul_fixed,
	cu_adamw_multi,
	cu_matmul_xb,
	cu_matmul_backward_xb,
	cu_attention_tc_stat,
	cu_attention_tc_backward_stat,
	cu_rmsnorm_xb,
	cu_swiglu_xb,
	cu_replay,
	cu_matmul_fixed_glu,
	cu_swiglu_backward_xb,
	cu_matmul_backward_xbb,
	cu_rmsnorm_backward_add,
	cu_rope_rmsnorm_backward,
	cu_rmsnorm_rope,
	cu_cast_bf16_rows,
	cu_matmul_xbb,
	cu_swiglu_cat_bb,
	cu_swiglu_cat_backward_bb,
	cu_cross_entropy_xb,
	cu_matmul_xb_add,
	cu_attention_tc_stat_bf,
	cu_attention_tc_backward_stat_bf,
	cu_rmsnorm_rope_xb,
	cu_attention_prefill,
	cu_matmul_fixed_gu,
	cu_pack,
	cu_unpack,
	cu_denoise,
	cu_fetch,
	cu_fetch_wait,
	cu_add_rmsnorm16,
	cu_attention_kv16,
	cu_matmul_fixed_gu16,
	cu_matmul_fixed16,
	cu_mem_free,
};

/* NULL when the driver finds no GPU; the first call decides */
extern "C" const struct ops *gpu_ops(void)
{
	static int state;                       /* 0 unknown, 1 present, -1 absent */
	int n = 0;

	if (!state) {
		cudaError_t e = cudaGetDeviceCount(&n);
		if (e != cudaSuccess || n < 1) {
			cudaGetLastError();
			state = -1;
		} else {
			state = 1;
		}
	}
	return state > 0 ? &ops_cuda : NULL;
}
