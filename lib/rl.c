/* rl: group advantages, TraceRL samples from sampler traces, and the clipped surrogate + k3
 * KL loss with its gradient w.r.t. the target log-probabilities (lib/rl.h). The model side
 * (log-probabilities of a noisy/clean sequence and the backward) is lib/model_bwd.c's
 * model_train_batch_fn; the row layout is lib/sft.c's sft_batch_build_masked. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rl.h"
#include "sft.h"
#include "util.h"

int rl_advantages(const float *r, int ngroups, int G, float *adv, uint8_t *keep)
{
	int skipped = 0;

	for (int g = 0; g < ngroups; g++) {
		const float *x = r + (size_t)g * G;
		float *a = adv + (size_t)g * G;
		double mean = 0.0, var = 0.0;
		int equal = 1;

		for (int i = 0; i < G; i++) {
			mean += x[i];
			equal &= x[i] == x[0];
		}
		mean /= G;
		for (int i = 0; i < G; i++)
			var += (x[i] - mean) * (x[i] - mean);
		var /= G;
		keep[g] = !equal && var > 0.0;
		skipped += !keep[g];
		for (int i = 0; i < G; i++)
			a[i] = keep[g] ? (float)((x[i] - mean) / sqrt(var)) : 0.0f;
	}
	return skipped;
}

/* The k-th smallest distinct step among response tokens [lo, hi) of t; -1 when fewer. */
static int kth_step(const struct rl_trace *t, int lo, int hi, int k)
{
	int prev = -1;

	for (int round = 0;; round++) {
		int best = -1;
		for (int i = lo; i < hi; i++)
			if (t->step[i] > prev && (best < 0 || t->step[i] < best))
				best = t->step[i];
		if (best < 0)
			return -1;
		if (round == k)
			return best;
		prev = best;
	}
}

/* Response index range [*lo, *hi) of absolute block j. */
static void block_range(const struct rl_trace *t, int block, int j, int *lo, int *hi)
{
	int a = j * block - t->plen, b = (j + 1) * block - t->plen;
	*lo = a < 0 ? 0 : a;
	*hi = b > t->n ? t->n : b;
}

int rl_rounds(const struct rl_trace *t, int block)
{
	int nb = (t->plen + t->n + block - 1) / block, most = 0;

	for (int j = t->plen / block; j < nb; j++) {
		int lo, hi, k = 0;
		block_range(t, block, j, &lo, &hi);
		while (kth_step(t, lo, hi, k) >= 0)
			k++;
		if (k > most)
			most = k;
	}
	return most;
}

void rl_batch_build(struct rl_batch *rb, const struct rl_item *items, int ns, int block,
                    int mask_id, int pad_id)
{
	struct sft_sample *s = xcalloc((size_t)(ns ? ns : 1), sizeof *s);
	const struct sft_sample **sp = xmalloc((size_t)(ns ? ns : 1) * sizeof *sp);
	uint8_t **mask = xmalloc((size_t)(ns ? ns : 1) * sizeof *mask);
	uint8_t **tgt = xmalloc((size_t)(ns ? ns : 1) * sizeof *tgt);
	double *p = xmalloc((size_t)(ns ? ns : 1) * sizeof *p);

	memset(rb, 0, sizeof *rb);
	for (int i = 0; i < ns; i++) {
		const struct rl_trace *t = items[i].t;
		int end = t->plen + t->n, nb = (end + block - 1) / block, n = nb * block;
		int *ids = xmalloc((size_t)(n ? n : 1) * sizeof *ids);

		memcpy(ids, t->prompt, (size_t)t->plen * sizeof *ids);
		memcpy(ids + t->plen, t->ids, (size_t)t->n * sizeof *ids);
		s[i] = (struct sft_sample){ .ids = ids, .n = n, .prompt_len = t->plen };
		sp[i] = &s[i];
		mask[i] = xcalloc((size_t)(n ? n : 1), 1);
		tgt[i] = xcalloc((size_t)(n ? n : 1), 1);
		p[i] = 1.0;
		/* the last block's positions past the response: pads, masked in every round */
		for (int j = end; j < n; j++) {
			ids[j] = pad_id >= 0 ? pad_id : mask_id;
			mask[i][j] = 1;
		}
		for (int j = t->plen / block; j < nb; j++) {
			int lo, hi, st;
			block_range(t, block, j, &lo, &hi);
			if ((st = kth_step(t, lo, hi, items[i].round)) < 0)
				continue;
			for (int r = lo; r < hi; r++) {
				mask[i][t->plen + r] = t->step[r] >= st;
				tgt[i][t->plen + r] = t->step[r] == st && t->ids[r] != pad_id;
			}
		}
	}
	sft_batch_build_masked(&rb->b, sp, ns, mask_id, 1.0, (const uint8_t *const *)mask, p);
	rb->adv = xcalloc((size_t)(rb->b.N ? rb->b.N : 1), sizeof *rb->adv);
	rb->logp_old = xcalloc((size_t)(rb->b.N ? rb->b.N : 1), sizeof *rb->logp_old);
	for (int i = 0; i < ns; i++) {
		int row = rb->b.start[i], n = s[i].n;
		for (int j = 0; j < n; j++) {
			/* the noisy half comes first: rows row .. row+n-1 */
			if (rb->b.target[row + j] >= 0 && !tgt[i][j])
				rb->b.target[row + j] = -1;
			rb->ntarget += rb->b.target[row + j] >= 0;
			rb->b.weight[row + j] = rb->b.target[row + j] >= 0 ? 1.0f : 0.0f;
			rb->adv[row + j] = items[i].t->adv;
		}
		free(s[i].ids);
		free(mask[i]);
		free(tgt[i]);
	}
	free(s);
	free(sp);
	free(mask);
	free(tgt);
	free(p);
}

void rl_batch_free(struct rl_batch *rb)
{
	sft_batch_free(&rb->b);
	free(rb->adv);
	free(rb->logp_old);
	free(rb->logp_ref);
	memset(rb, 0, sizeof *rb);
}

double rl_loss(const float *logp, const float *logp_old, const float *logp_kl, const float *adv,
               int R, const struct rl_loss_opts *o, float *dlogp, struct rl_stats *st)
{
	double total = 0.0, ssum = 0.0, ksum = 0.0;
	long clipped = 0;

	if (!logp_kl)
		logp_kl = logp_old;
	for (int r = 0; r < R; r++) {
		double x = (double)logp[r] - logp_old[r], A = adv[r];
		double xc = x < -10.0 ? -10.0 : x > 10.0 ? 10.0 : x;
		double rho = exp(xc);
		double rc = rho < 1.0 - o->eps ? 1.0 - o->eps : rho > 1.0 + o->eps ? 1.0 + o->eps : rho;
		double un = rho * A, cl = rc * A, surr = un < cl ? un : cl;
		double d = (double)logp[r] - logp_kl[r], kl = exp(-d) - 1.0 + d;
		double g = 0.0;

		/* the unclipped term carries the gradient where it is the minimum (at a tie the
		 * two gradients agree: rho inside the clip range) */
		if (un <= cl && x > -10.0 && x < 10.0)
			g = -A * rho;
		g += o->beta * (1.0 - exp(-d));
		if (dlogp)
			dlogp[r] = (float)(g * o->scale);
		total += (-surr + o->beta * kl) * o->scale;
		ssum += surr;
		ksum += kl;
		clipped += fabs(rho - 1.0) > o->eps;
	}
	if (st) {
		st->loss += total;
		st->surr += ssum;
		st->kl += ksum;
		st->targets += R;
		st->clipped += clipped;
	}
	return total;
}

struct logp_ctx {
	float *out;
};

static void store_logp(void *arg, int R, const int *rows, const float *logp, float *weight)
{
	struct logp_ctx *c = arg;
	for (int r = 0; r < R; r++) {
		c->out[rows[r]] = logp[r];
		weight[r] = 0.0f;
	}
}

int rl_batch_logp(struct model_train *t, const struct rl_batch *rb, float *out)
{
	struct logp_ctx c = { out };
	double dummy;
	return model_train_batch_fn(t, &rb->b, 0, store_logp, &c, &dummy);
}

struct loss_ctx {
	const struct rl_batch *rb;
	const struct rl_loss_opts *o;
	struct rl_stats *st;
};

static void loss_weights(void *arg, int R, const int *rows, const float *logp, float *weight)
{
	struct loss_ctx *c = arg;
	float *old = xmalloc((size_t)(R ? R : 1) * sizeof *old);
	float *ref = c->rb->logp_ref ? xmalloc((size_t)(R ? R : 1) * sizeof *ref) : NULL;
	float *adv = xmalloc((size_t)(R ? R : 1) * sizeof *adv);

	for (int r = 0; r < R; r++) {
		old[r] = c->rb->logp_old[rows[r]];
		adv[r] = c->rb->adv[rows[r]];
		if (ref)
			ref[r] = c->rb->logp_ref[rows[r]];
	}
	rl_loss(logp, old, ref, adv, R, c->o, weight, c->st);
	for (int r = 0; r < R; r++)     /* weight * CE = weight * -logp */
		weight[r] = -weight[r];
	free(old);
	free(ref);
	free(adv);
}

int rl_batch_loss(struct model_train *t, const struct rl_batch *rb, const struct rl_loss_opts *o,
                  int grad, struct rl_stats *st)
{
	struct rl_stats tmp = { 0 };
	struct loss_ctx c = { rb, o, st ? st : &tmp };
	double dummy;

	if (!rb->ntarget)
		return 0;
	return model_train_batch_fn(t, &rb->b, grad, loss_weights, &c, &dummy);
}
