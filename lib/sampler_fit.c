/* sampler_fit: the memory the KV caches of a sampler run may take, and runs split to stay
 * within it (see sampler_fit.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops.h"
#include "sampler_fit.h"
#include "util.h"

int sampler_mem_limit(const struct model *m, size_t *limit, char *err, size_t errlen)
{
	const char *e = util_env("DICE_MEM_LIMIT", NULL);
	long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE), v;

	*limit = 0;
	if (e) {
		if (parse_long(e, 1, LONG_MAX, &v) < 0) {
			snprintf(err, errlen, "bad DICE_MEM_LIMIT '%s' (want an integer of at least 1)",
			         e);
			return -1;
		}
		*limit = (size_t)v;
	} else if (m->ops == &ops_cpu) {
		*limit = pages > 0 && size > 0 ? (size_t)pages * (size_t)size / 10 * 9 : 0;
	} else if (m->ops->mem_free) {
		size_t fr = m->ops->mem_free(), pack = model_pack_bytes(m);
		size_t left = fr > pack ? fr - pack : 0;
		size_t reserve = left / 4 < (size_t)3 << 30 ? left / 4 : (size_t)3 << 30;
		*limit = left - reserve > 0 ? left - reserve : 1;
	}
	return 0;
}

const char *sampler_mem_str(char buf[32], size_t bytes)
{
	if (bytes >= (size_t)1 << 30)
		snprintf(buf, 32, "%.1f GiB", bytes / 1073741824.0);
	else if (bytes >= (size_t)1 << 20)
		snprintf(buf, 32, "%.1f MiB", bytes / 1048576.0);
	else
		snprintf(buf, 32, "%zu bytes", bytes);
	return buf;
}

int sampler_fit_alone(const struct model *m, const struct sampler_opts *o, int plen,
                      size_t limit, char *err, size_t errlen)
{
	size_t one = sampler_kv_bytes(m, o, plen > 0 ? plen : 0, 1);
	char a[32], b[32];

	if (!limit || one <= limit)
		return 0;
	if (plen < 0)
		snprintf(err, errlen, "the KV cache of one sequence of --max-tokens %d needs %s, more "
		         "than the %s of memory", o->max_tokens, sampler_mem_str(a, one),
		         sampler_mem_str(b, limit));
	else
		snprintf(err, errlen, "the KV cache of a prompt of %d tokens + --max-tokens %d needs "
		         "%s, more than the %s of memory", plen, o->max_tokens,
		         sampler_mem_str(a, one), sampler_mem_str(b, limit));
	return -1;
}

/* one run of a split: n requests at batch, their results into res by map */
struct fit_group {
	struct sampler_result *res;  /* (nreq) the caller's */
	struct sampler_result *gres; /* (n) this run's */
	const int *map;              /* (n) index in res of each of this run's requests */
	int n, before, nreq;         /* before: requests finished in the runs before */
	sampler_progress_fn progress;
	void *arg;
};

/* each result finished is in the caller's res before its progress call (lib/rl_run feeds
 * the reward program from res as the requests finish) */
static void fit_group_put(struct fit_group *g)
{
	for (int k = 0; k < g->n; k++)
		if (g->gres[k].ids)
			g->res[g->map[k]] = g->gres[k];
}

static void fit_group_done(void *arg, int done, int total)
{
	struct fit_group *g = arg;

	(void)total;
	fit_group_put(g);
	g->progress(g->arg, g->before + done, g->nreq);
}

int sampler_run_fit(struct model *m, const struct sampler_opts *o,
                    const struct sampler_request *req, int nreq, struct sampler_result *res,
                    size_t limit, int *warned, sampler_progress_fn progress, void *arg)
{
	struct sampler_request *grq;
	struct fit_group g = { res, NULL, NULL, 0, 0, nreq, progress, arg };
	struct sampler_opts go = *o;
	int *fit, *map, maxp = 0, max_active = o->max_active > 0 ? o->max_active : 1, rc = 0;
	size_t need;
	char a[32], b[32];

	for (int i = 0; i < nreq; i++)
		if (req[i].plen > maxp)
			maxp = req[i].plen;
	need = sampler_kv_bytes(m, o, maxp, nreq);
	if (!limit || need <= limit)
		return sampler_run(m, o, req, nreq, res, progress, arg);
	if (!*warned) {
		warn_msg("warning: the KV caches of --batch %d x (%d prompt + %d new tokens) need %s, "
		         "more than the %s of memory: fewer sequences run at once, with the same "
		         "results (said once)", max_active < nreq ? max_active : nreq, maxp,
		         o->max_tokens, sampler_mem_str(a, need), sampler_mem_str(b, limit));
		*warned = 1;
	}
	fit = xmalloc((size_t)nreq * sizeof *fit);
	map = xmalloc((size_t)nreq * sizeof *map);
	grq = xmalloc((size_t)nreq * sizeof *grq);
	g.gres = xmalloc((size_t)nreq * sizeof *g.gres);
	g.map = map;
	for (int i = 0; i < nreq; i++) {      /* how many of its length fit at once: 1 .. batch */
		size_t one = sampler_kv_bytes(m, o, req[i].plen, 1);   /* 0: no tokens at all */
		size_t f = one ? limit / one : (size_t)max_active;
		fit[i] = f < 1 ? 1 : f < (size_t)max_active ? (int)f : max_active;
	}
	for (int left = nreq; left > 0 && rc == 0; left -= g.n) {
		int batch = 0;
		for (int i = 0; i < nreq; i++)
			if (fit[i] > batch)
				batch = fit[i];
		g.n = 0;
		for (int i = 0; i < nreq; i++) {
			if (fit[i] != batch)
				continue;
			grq[g.n] = req[i];
			map[g.n++] = i;
			fit[i] = 0;             /* taken */
		}
		memset(g.gres, 0, (size_t)g.n * sizeof *g.gres);
		go.max_active = batch;
		rc = sampler_run(m, &go, grq, g.n, g.gres, progress ? fit_group_done : NULL, &g);
		for (int k = 0; k < g.n; k++) /* the unfinished too (a failed run: partial) */
			res[map[k]] = g.gres[k];
		g.before += g.n;
	}
	free(fit), free(map), free(grq), free(g.gres);
	return rc;
}
