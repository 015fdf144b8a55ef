/* sampler_fit: lib/sampler's runs within the memory there is, for dice-sample and dice-rl.
 *
 * The KV caches of a run (sampler_kv_bytes) may take at most a limit: $DICE_MEM_LIMIT bytes
 * where it is set, else what the backend has (sampler_mem_limit). A request whose cache
 * cannot fit even alone is for the caller to refuse (sampler_fit_alone says so). A run whose
 * max_active caches would pass the limit is split (sampler_run_fit): each request runs with
 * as many others as fit beside it at its length, the requests that fit the same number at
 * once together, at that batch. A request's result does not depend on its batch
 * (lib/sampler.h), so the results are those of one sampler_run; the progress callback is
 * called after each request finishes, with its result in res at its own index, as
 * sampler_run's is.
 */
#ifndef DICE_SAMPLER_FIT_H
#define DICE_SAMPLER_FIT_H

#include <stddef.h>

#include "model.h"
#include "sampler.h"

/* The bytes the KV caches of a run on m may take, into *limit: $DICE_MEM_LIMIT where set (on
 * any backend); else on the CPU backend 90% of the physical memory, and on a backend that
 * says its free memory (CUDA) that memory less the matrices' packed copies where they are
 * still to be made (model_pack_bytes: a run of up to 4 sequences makes them) and a reserve
 * for the forwards' buffers (a quarter of the rest, at most 3 GiB), at least 1; 0: unchecked
 * (a backend that cannot say). Read it again before each run where the memory in use may
 * have changed (a training step's buffers). 0, or -1 with the message in err for a
 * DICE_MEM_LIMIT that is no number of bytes ("bad DICE_MEM_LIMIT '1G' (want an integer of
 * at least 1)"; a usage error). */
int sampler_mem_limit(const struct model *m, size_t *limit, char *err, size_t errlen);

/* "1.5 GiB", "12.0 MiB" or "512 bytes" into buf; returns buf */
const char *sampler_mem_str(char buf[32], size_t bytes);

/* 0 when the KV cache of one request of a prompt of plen tokens fits limit (or limit is 0);
 * else -1 with "the KV cache of a prompt of P tokens + --max-tokens G needs X, more than the
 * Y of memory" in err. plen < 0: any prompt, as an empty one ("the KV cache of one sequence
 * of --max-tokens G needs ..."): none fits where it does not. */
int sampler_fit_alone(const struct model *m, const struct sampler_opts *o, int plen,
                      size_t limit, char *err, size_t errlen);

/* sampler_run of the nreq requests into res (nreq), their KV caches within limit (0: one
 * sampler_run, unchecked). Where max_active caches of the longest prompt would pass it, the
 * run is split as the top of this file says, with one warning on stderr the first time
 * (*warned 0; it is set then): "warning: the KV caches of --batch N x (P prompt + G new
 * tokens) need X, more than the Y of memory: fewer sequences run at once, with the same
 * results (said once)". A request that does not fit alone runs alone. progress (or NULL)
 * gets the requests finished so far over the whole run and nreq. 0, or -1 as sampler_run's
 * (the model failed: the runs after the failed one are not made; res partial). */
int sampler_run_fit(struct model *m, const struct sampler_opts *o,
                    const struct sampler_request *req, int nreq, struct sampler_result *res,
                    size_t limit, int *warned, sampler_progress_fn progress, void *arg);

#endif
