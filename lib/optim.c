/* optim: AdamW + clipping + schedules over backend memory, and the versioned state file
 * (lib/optim.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "optim.h"
#include "util.h"

void optim_defaults(struct optim_opts *o)
{
	*o = (struct optim_opts){ .lr = 1e-5f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
	                          .weight_decay = 0.0f, .clip = 1.0f,
	                          .schedule = OPTIM_CONSTANT_WITH_WARMUP };
}

int optim_schedule_parse(const char *s, enum optim_schedule *out)
{
	if (!strcmp(s, "constant_with_warmup"))
		*out = OPTIM_CONSTANT_WITH_WARMUP;
	else if (!strcmp(s, "cosine"))
		*out = OPTIM_COSINE;
	else
		return -1;
	return 0;
}

const char *optim_schedule_name(enum optim_schedule s)
{
	return s == OPTIM_COSINE ? "cosine" : "constant_with_warmup";
}

float optim_lr(const struct optim_opts *o, int s)
{
	if (s < o->warmup)
		return o->lr * (float)s / (float)(o->warmup > 1 ? o->warmup : 1);
	if (o->schedule == OPTIM_COSINE) {
		int span = o->total - o->warmup;
		double prog = (double)(s - o->warmup) / (double)(span > 1 ? span : 1);
		double f = 0.5 * (1.0 + cos(M_PI * prog));
		return (float)(o->lr * (f > 0 ? f : 0));
	}
	return o->lr;
}

struct optim_param *optim_model_params(struct model_train *t, size_t *n)
{
	struct model_weights *w = &t->m->w;
	struct ckpt_tensor *wl = checkpoint_tensor_list(&t->m->cfg, w, n);
	struct ckpt_tensor *gl = checkpoint_tensor_list(&t->m->cfg, &t->g, n);
	struct optim_param *par = xcalloc(*n, sizeof *par);

	for (size_t i = 0; i < *n; i++) {
		snprintf(par[i].name, sizeof par[i].name, "%s", wl[i].name);
		par[i].p = (float *)wl[i].ref->p;
		par[i].g = gl[i].ref->p;
		par[i].n = (size_t)wl[i].shape[0] * (wl[i].ndim == 2 ? (size_t)wl[i].shape[1] : 1);
		par[i].decay = wl[i].ndim == 2;
	}
	free(wl);
	free(gl);
	return par;
}

void optim_init(struct optim *op, const struct ops *ops, const struct optim_opts *o,
                struct optim_param *par, size_t npar, const float *gflat, size_t ngflat)
{
	memset(op, 0, sizeof *op);
	op->ops = ops;
	op->o = *o;
	op->par = par;
	op->npar = npar;
	for (size_t i = 0; i < npar; i++)
		op->ntotal += par[i].n;
	op->m = ops->alloc(op->ntotal * sizeof(float));
	op->v = ops->alloc(op->ntotal * sizeof(float));
	ops->zero(op->m, op->ntotal * sizeof(float));
	ops->zero(op->v, op->ntotal * sizeof(float));
	op->gflat = gflat;
	op->ngflat = ngflat;
}

void optim_link_bf16(struct optim *op, const struct model_train *t)
{
	if (!t->lp || !op->ops->adamw_multi)
		return;
	for (size_t i = 0; i < op->npar; i++)
		op->par[i].lp = model_train_lp_of(t, op->par[i].p);
	op->lp = 1;
}

void optim_free(struct optim *op)
{
	if (!op->ops)
		return;
	op->ops->free(op->m);
	op->ops->free(op->v);
	free(op->par);
	memset(op, 0, sizeof *op);
}

double optim_step(struct optim *op, float *lr_out)
{
	const struct ops *o = op->ops;
	double norm = sqrt(o->sumsq(op->gflat, op->ngflat));
	float lr = optim_lr(&op->o, op->step);
	struct adamw_step s = { .lr = lr, .beta1 = op->o.beta1, .beta2 = op->o.beta2,
	                        .eps = op->o.eps, .gscale = 1.0f, .step = op->step + 1 };
	size_t off = 0;

	if (lr_out)
		*lr_out = lr;
	op->step++;
	if (!isfinite(norm))
		return norm;
	if (op->o.clip > 0 && norm > op->o.clip)
		s.gscale = (float)(op->o.clip / (norm + 1e-6));
	if (o->adamw_multi) {
		struct adamw_tensor *t = xmalloc((op->npar ? op->npar : 1) * sizeof *t);
		for (size_t i = 0; i < op->npar; i++) {
			const struct optim_param *p = &op->par[i];
			t[i] = (struct adamw_tensor){ .p = p->p, .m = op->m + off, .v = op->v + off,
			                              .g = p->g, .lp = p->lp, .n = p->n,
			                              .weight_decay = p->decay ? op->o.weight_decay : 0.0f };
			off += p->n;
		}
		o->adamw_multi(t, (int)op->npar, &s);
		free(t);
		return norm;
	}
	for (size_t i = 0; i < op->npar; i++) {
		struct optim_param *p = &op->par[i];
		s.weight_decay = p->decay ? op->o.weight_decay : 0.0f;
		o->adamw(p->p, op->m + off, op->v + off, p->g, p->n, &s);
		off += p->n;
	}
	return norm;
}

int optim_save(const struct optim *op, const char *path, const char *const *meta, size_t nmeta,
               char *err, size_t errlen)
{
	size_t nt = 2 * op->npar, off = 0;
	struct st_wtensor *t = xcalloc(nt ? nt : 1, sizeof *t);
	char **names = xcalloc(nt ? nt : 1, sizeof *names);
	const char **kv = xmalloc((2 * nmeta + 6) * sizeof *kv);
	float *host = xmalloc((2 * op->ntotal + 1) * sizeof *host);
	char ver[16], step[32];
	int ret;

	op->ops->to_host(host, op->m, op->ntotal * sizeof(float));
	op->ops->to_host(host + op->ntotal, op->v, op->ntotal * sizeof(float));
	for (size_t i = 0; i < op->npar; i++) {
		for (int k = 0; k < 2; k++) {
			size_t j = 2 * i + (size_t)k;
			names[j] = xasprintf("%s.%s", k ? "exp_avg_sq" : "exp_avg", op->par[i].name);
			t[j] = (struct st_wtensor){ .name = names[j], .dtype = DICE_F32, .ndim = 1,
			                            .shape = { (int64_t)op->par[i].n },
			                            .data = host + (k ? op->ntotal : 0) + off };
		}
		off += op->par[i].n;
	}
	snprintf(ver, sizeof ver, "%d", OPTIM_FORMAT_VERSION);
	snprintf(step, sizeof step, "%d", op->step);
	kv[0] = "dice_format", kv[1] = OPTIM_FORMAT;
	kv[2] = "dice_format_version", kv[3] = ver;
	kv[4] = "step", kv[5] = step;
	for (size_t i = 0; i < 2 * nmeta; i++)
		kv[6 + i] = meta[i];
	ret = safetensors_write(path, t, nt, kv, nmeta + 3, err, errlen);
	for (size_t i = 0; i < nt; i++)
		free(names[i]);
	free(names);
	free(t);
	free(kv);
	free(host);
	return ret;
}

int optim_load(struct optim *op, const struct safetensors *st, char *err, size_t errlen)
{
	const char *step = safetensors_meta(st, "step");
	size_t off = 0;
	long s;

	if (safetensors_check_format(st, OPTIM_FORMAT, OPTIM_FORMAT_VERSION, err, errlen) < 0)
		return -1;
	/* decimal digits alone, as optim_save writes it ("+2" is no step of ours) */
	if (!step || strspn(step, "0123456789") != strlen(step) ||
	    parse_long(step, 0, 1L << 30, &s) < 0) {
		snprintf(err, errlen, "%s: no valid \"step\" in __metadata__", st->path);
		return -1;
	}
	for (size_t i = 0; i < op->npar; i++) {
		for (int k = 0; k < 2; k++) {
			char name[128];
			snprintf(name, sizeof name, "%s.%s", k ? "exp_avg_sq" : "exp_avg", op->par[i].name);
			const struct st_tensor *t = safetensors_find(st, name);
			if (!t || t->dtype != DICE_F32 || t->nelem != op->par[i].n) {
				snprintf(err, errlen, "%s: tensor %s missing or of another shape (was "
				         "the state written for this model?)", st->path, name);
				return -1;
			}
			op->ops->to_device((k ? op->v : op->m) + off, t->data, t->nbytes);
		}
		off += op->par[i].n;
	}
	op->step = (int)s;
	return 0;
}
