/* test_memory: the CUDA backend's table: name, ops_get("cuda"), zeroed alloc, to_device /
 * to_host round trip, device copy, sync, free(NULL). */
#include "gpu_test.h"

int main(void)
{
	if (gt_init(17))
		return 0;
	CHECK(!strcmp(G->name, "cuda") && ops_get("cuda") == G, "ops_get(\"cuda\") is gpu_ops()");
	CHECK(G->matmul && G->rmsnorm && G->rope && G->swiglu && G->add && G->attention && G->embed &&
	      G->alloc && G->free && G->to_host && G->to_device && G->sync && G->copy, "every op filled");
	size_t n = 3 * 1024 * 1024 + 5;
	unsigned char *z = (unsigned char *)gt_up("", 0), *d = (unsigned char *)G->alloc(n);
	unsigned char *h = (unsigned char *)xmalloc(n), *back = (unsigned char *)xmalloc(n);
	G->to_host(back, d, n);
	int zero = 1;
	for (size_t i = 0; i < n; i++)
		zero &= back[i] == 0;
	CHECK(zero, "alloc is zeroed");
	for (size_t i = 0; i < n; i++)
		h[i] = (unsigned char)rng_u32(&R);
	G->to_device(d, h, n);
	G->sync();
	G->to_host(back, d, n);
	CHECK(!memcmp(h, back, n), "to_device / to_host round trip");
	unsigned char *d2 = (unsigned char *)G->alloc(n);
	G->copy(d2 + 7, d + 3, n - 10);
	G->to_host(back, d2, n);
	CHECK(!memcmp(h + 3, back + 7, n - 10) && back[0] == 0 && back[n - 1] == 0,
	      "copy device to device, unaligned, nothing else touched");
	G->free(d2);
	G->free(d);
	G->free(z);
	G->free(NULL);
	CHECK(1, "free, free(NULL)");
	free(h); free(back);
	return test_done();
}
