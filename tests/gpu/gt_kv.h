/* gt_kv.h: the engine cache tests' batches (test_decode, test_prefill): host and device views
 * of one struct kv_batch of GT_KV_LAYERS layers, caches filled at random. */
#ifndef GT_KV_H
#define GT_KV_H

#include "gpu_test.h"

#define GT_KV_LAYERS 2                      /* layers of every test cache (layer 1 is used) */

struct batch {                              /* host and device views of one struct kv_batch */
	struct kv_batch h, d;
	void **hk, **hv, **dk, **dv;            /* cache bases: host arrays, device pointers */
	size_t *bytes;                          /* per sequence, of one of k / v */
};

/* nseq sequences with T[s] new rows after len[s] cached positions; caches filled at random */
static void batch_make(struct batch *b, int nseq, const int *T, const int *len, int NKV, int HD,
                       enum dice_dtype dt)
{
	int N = 0, maxT = 0, maxS = 0;
	int *row0 = (int *)xmalloc(sizeof(int) * (nseq + 1));
	int *cap = (int *)xmalloc(sizeof(int) * nseq), *lens = (int *)xmalloc(sizeof(int) * nseq);
	size_t es = dice_dtype_size(dt);

	for (int s = 0; s < nseq; s++) {
		row0[s] = N;
		N += T[s];
		lens[s] = len[s];
		maxT = T[s] > maxT ? T[s] : maxT;
		maxS = len[s] + T[s] > maxS ? len[s] + T[s] : maxS;
		cap[s] = len[s] + T[s] + 5;
	}
	row0[nseq] = N;
	int *rowseq = (int *)xmalloc(sizeof(int) * (N + 1));
	for (int s = 0; s < nseq; s++)
		for (int n = row0[s]; n < row0[s + 1]; n++)
			rowseq[n] = s;
	b->hk = (void **)xmalloc(sizeof(void *) * nseq);
	b->hv = (void **)xmalloc(sizeof(void *) * nseq);
	b->dk = (void **)xmalloc(sizeof(void *) * nseq);
	b->dv = (void **)xmalloc(sizeof(void *) * nseq);
	b->bytes = (size_t *)xmalloc(sizeof(size_t) * nseq);
	for (int s = 0; s < nseq; s++) {
		size_t n = (size_t)GT_KV_LAYERS * cap[s] * NKV * HD;
		b->bytes[s] = n * es;
		b->hk[s] = gt_rand_w(n, dt, -2, 2);
		b->hv[s] = gt_rand_w(n, dt, -1, 1);
		b->dk[s] = gt_up(b->hk[s], n * es);
		b->dv[s] = gt_up(b->hv[s], n * es);
	}
	b->h = (struct kv_batch){ nseq, N, maxT, maxS, dt, row0, lens, cap, rowseq, b->hk, b->hv };
	b->d = b->h;
	b->d.row0 = (int *)gt_up(row0, sizeof(int) * (nseq + 1));
	b->d.len = (int *)gt_up(lens, sizeof(int) * nseq);
	b->d.cap = (int *)gt_up(cap, sizeof(int) * nseq);
	b->d.rowseq = (int *)gt_up(rowseq, sizeof(int) * (N + 1));
	b->d.k = (void *const *)gt_up(b->dk, sizeof(void *) * nseq);
	b->d.v = (void *const *)gt_up(b->dv, sizeof(void *) * nseq);
}

static void batch_free(struct batch *b)
{
	for (int s = 0; s < b->h.nseq; s++) {
		free(b->hk[s]); free(b->hv[s]);
		G->free(b->dk[s]); G->free(b->dv[s]);
	}
	free(b->hk); free(b->hv); free(b->dk); free(b->dv); free(b->bytes);
	free((void *)b->h.row0); free((void *)b->h.len); free((void *)b->h.cap);
	free((void *)b->h.rowseq);
	G->free((void *)b->d.row0); G->free((void *)b->d.len); G->free((void *)b->d.cap);
	G->free((void *)b->d.rowseq); G->free((void *)b->d.k); G->free((void *)b->d.v);
}

#endif
