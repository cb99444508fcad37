/*
 * ca-compose: fuse torch operators into new tasks (the second stage of the
 * paper's synthesis pipeline).
 *
 * Reads ca-crawl's seed records, keeps the operators of its built-in
 * table (lib/synth) that the installed torch has, and writes -n task
 * records, each 1 to 5 operators stacked so that shapes flow, sized for a
 * target eager time. Standalone transformers blocks come from concrete
 * transformers seeds. Duplicates (the same normalised Model class) are
 * dropped. With --llm the composition itself is delegated to a command.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "json.h"
#include "ndjson.h"
#include "opt.h"
#include "proc.h"
#include "pylex.h"
#include "synth.h"

static const char usage_text[] =
	"usage: ca-compose [-hu] [--distribution LIST] [--llm CMD] [--llm-timeout S] [--max-tensor-mb N]\n"
	"                  [-n N] [--no-seeds] [--seed N] [--target-ms X] [file ...]\n";

/* The paper's dataset: 1..5 torch operators, then standalone transformers blocks (percent). */
static const double paper_distribution[6] = {3.40, 83.77, 7.62, 2.80, 1.23, 1.18};

struct standalone {
	char *name, *code;
};

struct seen {
	char **key;
	size_t cap, n;
};

static unsigned long long hash_text(const char *s)
{
	unsigned long long h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

/* 1 when key was new (and is now remembered). */
static int remember(struct seen *st, const char *key)
{
	if (2 * (st->n + 1) > st->cap) {
		struct seen big = {ca_xcalloc(st->cap ? st->cap * 2 : 1024, sizeof(char *)), st->cap ? st->cap * 2 : 1024, 0};
		for (size_t i = 0; i < st->cap; i++)
			if (st->key[i])
				remember(&big, st->key[i]), free(st->key[i]);
		free(st->key);
		*st = big;
	}
	size_t h = (size_t)hash_text(key) & (st->cap - 1);
	while (st->key[h]) {
		if (!strcmp(st->key[h], key))
			return 0;
		h = (h + 1) & (st->cap - 1);
	}
	st->key[h] = ca_xstrdup(key);
	st->n++;
	return 1;
}

static const char prompt_text[] =
	"You write reference problems for a benchmark of GPU kernels.\n"
	"Write one self-contained Python file in KernelBench format:\n"
	"- import torch, torch.nn as nn and, if used, torch.nn.functional as F;\n"
	"- class Model(nn.Module) whose forward applies these operators, in this order: %s;\n"
	"  insert the reshapes, reductions or projections the shapes require;\n"
	"- get_inputs() returning a list with one input made by torch.randn of shape [%s];\n"
	"- get_init_inputs() returning the constructor arguments as a list.\n"
	"No randomness or dropout inside the model, no printing, no file or network access.\n"
	"Reply with the file only, without explanation.\n";

/* The module text inside an LLM's reply: the first fenced block if any, else all of it. */
static char *extract_code(const char *reply)
{
	const char *fence = strstr(reply, "```");
	if (!fence)
		return ca_xstrdup(reply);
	const char *start = strchr(fence, '\n');
	if (!start)
		return ca_xstrdup("");
	start++;
	const char *end = strstr(start, "```");
	size_t n = end ? (size_t)(end - start) : strlen(start);
	char *code = ca_xmalloc(n + 1);
	memcpy(code, start, n);
	code[n] = '\0';
	return code;
}

/* The items of the task's array key, ", " between them, into buf (cut to fit): names as they are, sizes as integers. */
static void join_items(jv task, const char *key, char *buf, size_t size)
{
	size_t used = 0;
	buf[0] = '\0';
	jv list = ca_json_get(task, key);
	for (int i = 0; i < jv_array_length(jv_copy(list)); i++) {
		jv item = jv_array_get(jv_copy(list), i);
		const char *sep = i ? ", " : "";
		if (jv_get_kind(item) == JV_KIND_STRING)
			used += (size_t)snprintf(buf + used, size - used, "%s%s", sep, jv_string_value(item));
		else
			used += (size_t)snprintf(buf + used, size - used, "%s%.0f", sep, jv_number_value(item));
		if (used >= size)
			used = size - 1;
		jv_free(item);
	}
	jv_free(list);
}

static char *ask_llm(const char *cmd, double timeout_s, jv task, const char **why)
{
	static char message[256];
	char ops[1024], shape[256];
	join_items(task, "ops", ops, sizeof ops);
	join_items(task, "input_shape", shape, sizeof shape);
	size_t n = sizeof prompt_text + strlen(ops) + strlen(shape);
	char *prompt = ca_xmalloc(n);
	snprintf(prompt, n, prompt_text, ops, shape);
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	struct ca_proc p;
	ca_proc_init(&p, argv);
	p.timeout_s = timeout_s;
	struct ca_buf out = {0};
	int status = ca_proc_capture(&p, prompt, strlen(prompt), &out, NULL, 1 << 20);
	free(prompt);
	if (status != 0) {
		snprintf(message, sizeof message, status < 0 ? "--llm command could not start" :
		         p.timed_out ? "--llm command timed out" : "--llm command failed with status %d", status);
		*why = message;
		ca_buf_free(&out);
		return NULL;
	}
	char *code = extract_code(out.data ? out.data : "");
	ca_buf_free(&out);
	if (!strstr(code, "class Model")) {
		*why = "--llm reply has no class Model";
		free(code);
		return NULL;
	}
	return code;
}

/* "batch_size = N" in a crawled seed task, scaled so standalone blocks are a real workload. */
static char *scale_batch(const char *code, double target_ms)
{
	const char *p = strstr(code, "\nbatch_size = ");
	if (!p)
		return ca_xstrdup(code);
	/* crawled blocks take (batch, 32, 64): about 100M values at the default target */
	long batch = (long)(32768 * (target_ms / 5.0));
	if (batch < 1)
		batch = 1;
	const char *end = strchr(p + 1, '\n');
	size_t n = strlen(code) + 32;
	char *out = ca_xmalloc(n);
	snprintf(out, n, "%.*s\nbatch_size = %ld%s", (int)(p - code), code, batch, end ? end : "");
	return out;
}

struct options {
	double dist[6];           /* class weights: 1..5 operators, transformers blocks */
	long long count, seed;
	double target_ms, llm_timeout, max_mb;
	const char *llm;
	int use_seeds;
};

static void parse_distribution(const char *arg, double dist[6])
{
	double *v;
	size_t k = ca_opt_double_list("--distribution", arg, &v);
	if (k < 1 || k > 6)
		ca_err_die(CA_EXIT_USAGE, "--distribution: give 1 to 6 weights (1..5 ops, transformers)");
	for (size_t i = 0; i < 6; i++) {
		dist[i] = i < k ? v[i] : 0;
		if (dist[i] < 0 || !isfinite(dist[i]))
			ca_err_die(CA_EXIT_USAGE, "--distribution: weights must be non-negative");
	}
	free(v);
}

static void parse_options(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{"distribution", required_argument, NULL, 'd'},
		{"help", no_argument, NULL, 'h'},
		{"llm", required_argument, NULL, 'L'},
		{"llm-timeout", required_argument, NULL, 'T'},
		{"max-tensor-mb", required_argument, NULL, 'M'},
		{"no-seeds", no_argument, NULL, 'N'},
		{"seed", required_argument, NULL, 's'},
		{"target-ms", required_argument, NULL, 't'},
		{"unbuffered", no_argument, NULL, 'u'},
		{NULL, 0, NULL, 0},
	};
	int c;
	memcpy(o->dist, paper_distribution, sizeof o->dist);
	o->count = 10, o->seed = 1;
	o->target_ms = 5, o->llm_timeout = 300, o->max_mb = 2048;
	o->llm = NULL;
	o->use_seeds = 1;
	while ((c = getopt_long(argc, argv, "hn:u", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': parse_distribution(optarg, o->dist); break;
		case 'L': o->llm = optarg; break;
		case 'M': o->max_mb = ca_opt_double("--max-tensor-mb", optarg, 1, 1e9); break;
		case 'n': o->count = ca_opt_long("-n", optarg, 0, 100000000); break;
		case 'N': o->use_seeds = 0; break;
		case 's': o->seed = ca_opt_long("--seed", optarg, 0, (long long)1 << 62); break;
		case 't': o->target_ms = ca_opt_double("--target-ms", optarg, 1e-6, 1e6); break;
		case 'T': o->llm_timeout = ca_opt_double("--llm-timeout", optarg, 0.001, 1e6); break;
		default: ca_opt_common(c, usage_text);
		}
	}
}

/* What the seeds allow: the operators to stack, and the standalone transformers blocks. */
struct pool {
	size_t nops;
	unsigned char *enabled;
	struct standalone *blocks;
	size_t nblocks;
};

/* One seed object (borrowed) of record rec (borrowed): enable its operator, keep its block. */
static void add_seed(struct pool *p, jv rec, jv seed_obj)
{
	char *name = ca_json_strdup(seed_obj, "name");
	char *library = ca_json_strdup(seed_obj, "library");
	for (size_t i = 0; name && i < p->nops; i++)
		if (!strcmp(name, ca_synth_op_qualified(i)))
			p->enabled[i] = 1;
	char *code = ca_json_strdup(rec, "code");
	if (library && !strcmp(library, "transformers") && code && ca_json_bool(seed_obj, "stochastic") != 1) {
		p->blocks = ca_xrealloc(p->blocks, (p->nblocks + 1) * sizeof *p->blocks);
		p->blocks[p->nblocks].name = name;
		p->blocks[p->nblocks++].code = code;
		name = code = NULL;
	}
	free(name);
	free(library);
	free(code);
}

/* Read ca-crawl's seed records into p; dies where none is usable. */
static void read_seeds(int argc, char **argv, struct pool *p, int *status)
{
	struct ca_ndjson_reader *r = ca_ndjson_open(argc, argv);
	jv rec;
	size_t nseeds = 0;
	while (ca_ndjson_next_valid(r, &rec, status) != CA_NDJSON_EOF) {
		jv seed_obj = ca_json_get(rec, "seed");
		if (jv_get_kind(seed_obj) == JV_KIND_OBJECT) {
			nseeds++;
			add_seed(p, rec, seed_obj);
		}
		jv_free(seed_obj);
		jv_free(rec);
	}
	*status = ca_err_worst(*status, ca_ndjson_status(r));
	ca_ndjson_close(r);
	size_t on = 0;
	for (size_t i = 0; i < p->nops; i++)
		on += p->enabled[i];
	/* An input that could not be read (missing, a directory) is a system
	 * error, worth retrying, not bad data: its status wins. */
	if (nseeds == 0)
		ca_err_die(ca_err_worst(*status, CA_EXIT_DATA),
			"no seed records on input (pipe ca-crawl's output, or give --no-seeds)");
	if (on == 0)
		ca_err_die(CA_EXIT_DATA, "none of the seeds is an operator ca-compose can stack");
}

/* The sum of the class weights, with no weight left on blocks the seeds did not give. */
static double class_total(double dist[6], size_t nblocks)
{
	if (nblocks == 0)
		dist[5] = 0;
	double total = 0;
	for (int i = 0; i < 6; i++)
		total += dist[i];
	if (!(total > 0))
		ca_err_die(CA_EXIT_USAGE, "--distribution: all weights are zero");
	return total;
}

static int draw_class(struct ca_synth_rng *rng, const double dist[6], double total)
{
	double u = ca_synth_rng_unit(rng) * total;
	int cls = 0;
	while (cls < 5 && u >= dist[cls]) {
		u -= dist[cls];
		cls++;
	}
	return cls;
}

/* A task of class cls and its source into source[32]; jv_invalid() when this draw gives none. */
static jv draw_task(const struct options *o, const struct pool *p, const struct ca_synth_config *cfg, int cls,
	struct ca_synth_rng *rng, char *source)
{
	jv task;
	if (cls == 5) {
		struct standalone *b = &p->blocks[ca_synth_rng_below(rng, p->nblocks)];
		task = jv_object();
		const char *dot = strrchr(b->name, '.');
		task = jv_object_set(task, jv_string("ops"), jv_array_append(jv_array(), jv_string(dot ? dot + 1 : b->name)));
		char *code = scale_batch(b->code, o->target_ms);
		task = jv_object_set(task, jv_string("code"), jv_string(code));
		free(code);
		snprintf(source, 32, "transformers#1");
		return task;
	}
	task = ca_synth_compose(cfg, cls + 1, rng);
	if (!jv_is_valid(task)) {
		jv_free(task);
		return jv_invalid();
	}
	/* Capped by --max-tensor-mb, a memory-bound chain can fall far
	 * short of the target; ca-filter's workload bound (1 ms) would
	 * reject it, so it is drawn again. */
	double est;
	if (ca_json_number(task, "est_ms", &est) == 1 && est < (o->target_ms / 4 < 1 ? o->target_ms / 4 : 1)) {
		jv_free(task);
		return jv_invalid();
	}
	snprintf(source, 32, "torch#%d", cls + 1);
	return task;
}

/* The task with the --llm command's module as its code; jv_invalid() (task freed) when it failed. */
static jv llm_rewrite(const struct options *o, jv task, long long made, long long *llm_failures)
{
	const char *why;
	char *code = ask_llm(o->llm, o->llm_timeout, task, &why);
	if (!code) {
		ca_err_warn("task %lld: %s", made, why);
		++*llm_failures;
		jv_free(task);
		if (*llm_failures > 10 && *llm_failures > made)
			ca_err_die(CA_EXIT_SYSTEM, "--llm keeps failing; giving up");
		return jv_invalid();
	}
	task = jv_object_set(task, jv_string("code"), jv_string(code));
	task = jv_object_delete(task, jv_string("adapters"));
	task = jv_object_delete(task, jv_string("output_shape"));
	task = jv_object_delete(task, jv_string("est_ms"));
	free(code);
	return task;
}

/* 1 when the task (borrowed) is new: its operators and normalised code not seen before. */
static int is_new(struct seen *seen, jv task)
{
	char *text = ca_json_strdup(task, "code");
	const char *why;
	char *fp = ca_pylex_fingerprint(text, strlen(text), CA_PYLEX_KEEP_LITERALS, &why);
	free(text);
	/* The fingerprint abstracts bare names, so two transformers blocks
	 * built the same way (LlamaRMSNorm(config), Qwen2RMSNorm(config))
	 * would look alike: the operators are part of the key. */
	jv ops_text = jv_dump_string(ca_json_get(task, "ops"), 0);
	char *key = NULL;
	if (fp) {
		size_t kn = strlen(fp) + (size_t)jv_string_length_bytes(jv_copy(ops_text)) + 2;
		key = ca_xmalloc(kn);
		snprintf(key, kn, "%s\n%s", jv_string_value(ops_text), fp);
	}
	jv_free(ops_text);
	free(fp);
	int fresh = key && remember(seen, key);
	free(key);
	return fresh;
}

/* Write the task record; what ca_ndjson_write returns. */
static int write_task(const struct options *o, jv task, long long made, const char *source, const char *composer)
{
	char id[64];
	snprintf(id, sizeof id, "compose-%lld-%lld", o->seed, made);
	jv out = jv_object();
	out = jv_object_set(out, jv_string("id"), jv_string(id));
	out = jv_object_set(out, jv_string("source"), jv_string(source));
	jv_object_foreach(task, k, v) out = jv_object_set(out, k, v);
	jv_free(task);
	jv meta = jv_object();
	meta = jv_object_set(meta, jv_string("seed"), jv_number((double)o->seed));
	meta = jv_object_set(meta, jv_string("index"), jv_number((double)made));
	meta = jv_object_set(meta, jv_string("composer"), jv_string(composer));
	meta = jv_object_set(meta, jv_string("target_ms"), jv_number(o->target_ms));
	out = jv_object_set(out, jv_string("compose"), meta);
	return ca_ndjson_write(out);
}

/* Write up to o->count distinct tasks; the status they leave. */
static int compose_tasks(const struct options *o, const struct pool *p, double total)
{
	struct ca_synth_config cfg = {.enabled = p->enabled, .target_ms = o->target_ms, .max_tensor_mb = o->max_mb};
	struct ca_synth_rng rng;
	ca_synth_rng_seed(&rng, (uint64_t)o->seed);
	struct seen seen = {0};
	long long made = 0, attempts = 0, limit = 200 * o->count + 1000, llm_failures = 0;
	int status = CA_EXIT_OK;
	/* A class is drawn once and kept until a task of it is made (or 100
	 * draws fail): redrawing the class after every duplicate or task under
	 * the workload bound would starve the classes where those are common
	 * (single cheap operators), and the mix would drift from the distribution. */
	int cls = -1, cls_tries = 0;
	while (made < o->count && attempts++ < limit) {
		if (cls < 0 || ++cls_tries > 100) {
			cls = draw_class(&rng, o->dist, total);
			cls_tries = 0;
		}
		if (o->dist[cls] == 0) {
			cls = -1;
			continue;
		}
		char source[32];
		jv task = draw_task(o, p, &cfg, cls, &rng, source);
		if (!jv_is_valid(task))
			continue;
		const char *composer = "builtin";
		if (o->llm && cls < 5) {
			task = llm_rewrite(o, task, made, &llm_failures);
			if (!jv_is_valid(task))
				continue;
			composer = "llm";
		}
		if (!is_new(&seen, task)) {
			jv_free(task);
			continue;
		}
		if (write_task(o, task, made, source, composer) < 0)
			break;
		made++;
		cls = -1;
	}
	if (made < o->count) {
		ca_err_warn("made %lld of %lld tasks: the enabled operators give no more distinct tasks", made, o->count);
		status = CA_EXIT_NEGATIVE;
	}
	if (llm_failures)
		status = ca_err_worst(status, CA_EXIT_SYSTEM);
	ca_free_strings(seen.key, seen.cap);  /* a hash table: the empty slots are NULL */
	return status;
}

int main(int argc, char **argv)
{
	struct options o;
	ca_err_init(argv[0]);
	parse_options(argc, argv, &o);
	struct pool p = {.nops = ca_synth_op_count()};
	p.enabled = ca_xcalloc(p.nops, 1);
	int status = CA_EXIT_OK;
	if (o.use_seeds)
		read_seeds(argc - optind, argv + optind, &p, &status);
	else
		memset(p.enabled, 1, p.nops);
	double total = class_total(o.dist, p.nblocks);
	status = ca_err_worst(status, compose_tasks(&o, &p, total));
	for (size_t i = 0; i < p.nblocks; i++)
		free(p.blocks[i].name), free(p.blocks[i].code);
	free(p.blocks);
	free(p.enabled);
	return ca_err_finish(status);
}
