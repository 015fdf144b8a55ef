/* test_optim: learning-rate schedules (transformers' formulas), global-norm clipping, weight
 * decay only on matrices, and the state file: round trip, wrong format refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "optim.h"
#include "test.h"
#include "util.h"

static void test_schedules(void)
{
	struct optim_opts o;

	optim_defaults(&o);
	o.lr = 1.0f, o.warmup = 4, o.total = 14;
	CHECK(optim_lr(&o, 0) == 0.0f && optim_lr(&o, 2) == 0.5f && optim_lr(&o, 4) == 1.0f &&
	      optim_lr(&o, 13) == 1.0f, "constant_with_warmup");
	o.schedule = OPTIM_COSINE;
	CHECK_NEAR(optim_lr(&o, 9), 0.5, 1e-6, "cosine: half way");
	CHECK_NEAR(optim_lr(&o, 14), 0.0, 1e-6, "cosine: zero at the end");
	CHECK_NEAR(optim_lr(&o, 6), 0.5 * (1 + cos(M_PI * 0.2)), 1e-6, "cosine formula");
	o.warmup = 0;
	CHECK(optim_lr(&o, 0) == 1.0f, "no warm-up: full rate at step 0");
	enum optim_schedule s;
	CHECK(optim_schedule_parse("cosine", &s) == 0 && s == OPTIM_COSINE &&
	      optim_schedule_parse("linear", &s) < 0, "schedule names");
}

static struct optim_param *params(float *p, float *g)
{
	struct optim_param *par = xcalloc(2, sizeof *par);
	par[0] = (struct optim_param){ .p = p, .g = g, .n = 4, .decay = 1 };
	strcpy(par[0].name, "a.weight");
	par[1] = (struct optim_param){ .p = p + 4, .g = g + 4, .n = 2, .decay = 0 };
	strcpy(par[1].name, "norm.weight");
	return par;
}

static void test_step(void)
{
	float p[6] = { 1, 1, 1, 1, 1, 1 }, g[6] = { 3, 0, 0, 4, 0, 0 };
	struct optim op;
	struct optim_opts o;

	optim_defaults(&o);
	o.lr = 0.1f, o.weight_decay = 0.5f;
	optim_init(&op, &ops_cpu, &o, params(p, g), 2, g, 6);
	double norm = optim_step(&op, NULL);
	CHECK_NEAR(norm, 5.0, 1e-9, "gradient norm before clipping");
	/* clipped to norm 1: g = (0.6, 0, 0, 0.8); first Adam step moves by lr * sign */
	CHECK_NEAR(p[0], 1 * (1 - 0.05) - 0.1, 1e-6, "first step: decay then lr * m/sqrt(v)");
	CHECK_NEAR(p[1], 0.95, 1e-6, "decay on a matrix with zero gradient");
	CHECK(p[4] == 1.0f, "no decay on norm vectors");
	CHECK_NEAR(op.m[0], 0.1 * 0.6, 1e-6, "moment of the clipped gradient");
	/* save and load */
	char path[] = "/tmp/dice-test-optim-XXXXXX";
	int fd = mkstemp(path);
	close(fd);
	char err[512];
	const char *meta[] = { "seed", "9" };
	CHECK(optim_save(&op, path, meta, 1, err, sizeof err) == 0, "save state");
	struct optim op2;
	float p2[6], g2[6] = { 0 };
	optim_init(&op2, &ops_cpu, &o, params(p2, g2), 2, g2, 6);
	struct safetensors st;
	CHECK(safetensors_open(&st, path, err, sizeof err) == 0 &&
	      optim_load(&op2, &st, err, sizeof err) == 0, "load state");
	CHECK(op2.step == 1 && !memcmp(op.m, op2.m, 6 * 4) && !memcmp(op.v, op2.v, 6 * 4),
	      "state round trip: step and moments");
	CHECK_STR(safetensors_meta(&st, "seed"), "9", "caller metadata kept");
	safetensors_close(&st);
	/* a file of another format */
	const char *bad[] = { "x", "y" };
	struct st_wtensor t = { .name = "w", .dtype = DICE_F32, .ndim = 1, .shape = { 1 }, .data = p };
	safetensors_write(path, &t, 1, bad, 1, err, sizeof err);
	safetensors_open(&st, path, err, sizeof err);
	CHECK(optim_load(&op2, &st, err, sizeof err) < 0 && strstr(err, "dice-sft-state"),
	      "another format is refused with a hint");
	safetensors_close(&st);
	unlink(path);
	optim_free(&op);
	optim_free(&op2);
}

/* .adamw_multi == .adamw per tensor (own weight decay) + .cast_bf16 where lp is set, bitwise */
static void test_multi(void)
{
	enum { n = 37 };
	float p[2][n], m[2][n], v[2][n], g[n];
	uint16_t lp[n], want[n];
	struct adamw_step s = { .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
	                        .weight_decay = 7.0f, .gscale = 0.5f, .step = 3 };

	for (int i = 0; i < n; i++) {
		p[0][i] = p[1][i] = sinf((float)i);
		m[0][i] = m[1][i] = 0.01f * cosf((float)i);
		v[0][i] = v[1][i] = 0.001f * (float)(i % 5);
		g[i] = cosf(3.0f * (float)i);
	}
	struct adamw_tensor t[2] = {
		{ .p = p[0], .m = m[0], .v = v[0], .g = g, .lp = lp, .n = 30, .weight_decay = 0.1f },
		{ .p = p[0] + 30, .m = m[0] + 30, .v = v[0] + 30, .g = g + 30, .n = 7 },
	};
	ops_cpu.adamw_multi(t, 2, &s);
	s.weight_decay = 0.1f;
	ops_cpu.adamw(p[1], m[1], v[1], g, 30, &s);
	s.weight_decay = 0.0f;
	ops_cpu.adamw(p[1] + 30, m[1] + 30, v[1] + 30, g + 30, 7, &s);
	ops_cpu.cast_bf16(want, p[1], 30);
	CHECK(!memcmp(p[0], p[1], sizeof p[0]) && !memcmp(m[0], m[1], sizeof m[0]) &&
	      !memcmp(v[0], v[1], sizeof v[0]) && !memcmp(lp, want, 30 * 2),
	      "adamw_multi == adamw per tensor + cast_bf16 (bitwise)");
}

int main(void)
{
	test_schedules();
	test_step();
	test_multi();
	return test_done();
}
