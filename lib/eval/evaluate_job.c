/*
 * evaluate_job: one record's job up to a loaded candidate (job_prepare):
 * the candidate's workspace, its kernels built (lib/build), the torch
 * extension cache, the reference task loaded and the candidate loaded
 * with its weights; and what verify and profile share: phases, failures,
 * calls to the two workers, kernel lists.
 */
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build.h"
#include "evaluate_impl.h"
#include "file.h"
#include "hash.h"
#include "json.h"
#include "paths.h"
#include "proc.h"

/* Charge the time since the last mark to phase name. */
void job_phase(struct job *j, const char *name)
{
	double now = ca_proc_now(), prev = 0;
	jv v = jv_object_get(jv_copy(j->phases), jv_string(name));
	if (jv_get_kind(v) == JV_KIND_NUMBER)
		prev = jv_number_value(v);
	jv_free(v);
	j->phases = jv_object_set(j->phases, jv_string(name), jv_number(round((prev + now - j->mark) * 1e4) / 1e4));
	j->mark = now;
}

void job_fail(struct job *j, const char *stage, const char *error)
{
	j->result = jv_object_set(j->result, jv_string("ok"), jv_false());
	j->result = set_str(j->result, "stage", stage);
	j->result = set_str(j->result, "error", error);
}

/* Merge a fault object {"stage","error"} (consumed) into the result. */
void job_fault(struct job *j, jv fault, const char *prefix)
{
	char *stage = ca_json_strdup(fault, "stage");
	char *error = ca_json_strdup(fault, "error");
	char msg[4096];
	snprintf(msg, sizeof msg, "%s%s", prefix ? prefix : "", error ? error : "unknown failure");
	job_fail(j, stage ? stage : "crash", msg);
	j->result = ca_json_copy_field(j->result, fault, "detail", JV_KIND_STRING);
	j->result = ca_json_copy_field(j->result, fault, "forbidden", JV_KIND_ARRAY);
	free(stage);
	free(error);
	jv_free(fault);
}

/* A worker's reply (consumed): 0 when ok, else merged as a failure. */
static int reply_ok(struct job *j, jv reply, jv *keep)
{
	if (ca_json_bool(reply, "ok") == 1) {
		if (keep)
			*keep = reply;
		else
			jv_free(reply);
		return 0;
	}
	if (keep)
		*keep = jv_invalid();
	job_fault(j, reply, NULL);
	return -1;
}

unsigned long long fresh_seed(void)
{
	return random_u64() & ((1ULL << 48) - 1);
}

/* The reference's failure (reply or fault, consumed) merged into the result. */
void reference_failed(struct job *j, jv why)
{
	job_fault(j, why, "reference: ");
	j->result = set_str(j->result, "stage", "reference");
}

/*
 * Receive the reference's reply to a request sent: 0 with *reply; 1 when
 * it answered that the request failed, *why its reply, or when it died or
 * did not answer in time beside a candidate, *why the fault (not
 * recorded: reference_again may yet find whose the failure is); -1 after
 * recording a fault (it broke the protocol, or is gone for good).
 */
int reference_answer(struct job *j, double timeout, jv *reply, jv *why)
{
	jv fault;
	*why = jv_invalid();
	if (worker_recv(&j->slot->reference, ca_proc_now() + timeout, reply, &fault, NULL) != 0)
		return reference_gone(j, fault, why);
	if (ca_json_bool(*reply, "ok") != 1) {
		*why = *reply;
		*reply = jv_invalid();
		return 1;
	}
	return 0;
}

/*
 * Send req (consumed) to the reference, its answer due within timeout,
 * asking for the GPU's memory around it while a failure is asked again
 * (j->ask_mem); -1 after recording that the reference is gone.
 */
int reference_send(struct job *j, jv req, double timeout)
{
	jv fault;
	if (j->ask_mem)
		req = jv_object_set(req, jv_string("mem"), jv_true());
	j->slot->reference.limit_s = timeout;
	if (worker_send(&j->slot->reference, req, &fault) != 0) {
		reference_failed(j, fault);
		return -1;
	}
	return 0;
}

/*
 * Send req (consumed) to the reference and wait for its reply, at most
 * timeout (worker_call's way). A request that failed is asked again
 * (reference_again); a failure that stays is the task's (or its worker
 * died): -1 after recording it, stage "reference", or the candidate's
 * when only its death let the reference work.
 */
int reference_call(struct job *j, jv req, double timeout, jv *reply)
{
	jv why;
	*reply = jv_invalid();
	if (reference_send(j, jv_copy(req), timeout) != 0) {
		jv_free(req);
		return -1;
	}
	int rc = reference_answer(j, timeout, reply, &why);
	if (rc > 0)
		return reference_again(j, req, timeout, why, reply);
	jv_free(req);
	return rc;
}

int candidate_call(struct job *j, jv req, double timeout, jv *reply, struct loop_clock *ours)
{
	jv fault;
	if (worker_call(&j->cand, req, timeout, reply, &fault, ours) != 0) {
		job_fault(j, fault, NULL);
		return -1;
	}
	return reply_ok(j, *reply, reply);
}

/* A build of the candidate's kernels (see job_prepare), run where it may overlap the reference's work. */
struct job_build_run {
	const char *dir;
	struct ca_build_options opt;
	struct ca_build_result res;
	double seconds;
	atomic_int done;
};

/* lib/build on the candidate's directory, into b->res; nothing of the job's touched (a thread's). */
static void *job_build_run(void *arg)
{
	struct job_build_run *b = arg;
	double t0 = ca_proc_now();
	ca_build_workspace(b->dir, &b->opt, &b->res);
	b->seconds = ca_proc_now() - t0;
	atomic_store(&b->done, 1);
	return NULL;
}

/* The build's result into the record, its library into the candidate's directory. 0, or -1 with the record failed. */
static int job_build_done(struct job *j, struct ca_build_result *res)
{
	j->result = jv_object_set(j->result, jv_string("build"),
		jv_object_delete(ca_build_result_json(res), jv_string("log")));
	if (!res->ok) {
		/*
		 * A build that failed for no reason in the sources (the compiler
		 * killed by a signal we did not send, a full disk: transient, no
		 * limit named) is the evaluator's; a compile error or a limit the
		 * sources ran into is the candidate's.
		 */
		int ours = res->transient && !res->limit[0];
		job_fail(j, ours ? "system" : "compile", res->log && *res->log ? res->log : "the kernels did not compile");
		ca_build_result_free(res);
		return -1;
	}
	int rc = 0;
	if (res->library) {
		/* Copy the library into the candidate's own directory: the build cache may be unreadable there. */
		int ca = !strcmp(res->flavour, "ca");
		const char *base = strrchr(res->library, '/') ? strrchr(res->library, '/') + 1 : res->library;
		char dst[PATHLEN];
		if (ca)
			snprintf(dst, sizeof dst, "%s/libkernels.so", j->io);
		else
			snprintf(dst, sizeof dst, "%s/%s", j->cand.dir, base);
		size_t len;
		char *data = eval_read_file(res->library, 1u << 30, &len);
		if (!data || eval_write_file(dst, data, len) != 0) {
			job_fail(j, "system", "cannot copy the built library into the candidate's directory");
			rc = -1;
		} else {
			chmod(dst, 0755);
			if (ca)
				snprintf(j->kernels_lib, sizeof j->kernels_lib, "%s", dst);
		}
		free(data);
	}
	ca_build_result_free(res);
	return rc;
}

/* ------------------------------------------------------------------ torch extension builds */

/* Whether the candidate's model_new.py builds a torch extension as it loads (load_inline, cpp_extension.load). */
static int builds_extension(const struct job *j)
{
	char path[PATHLEN];
	snprintf(path, sizeof path, "%s/model_new.py", j->cand.dir);
	size_t len;
	char *src = eval_read_file(path, 16 << 20, &len);
	int builds = src && (strstr(src, "load_inline") || strstr(src, "cpp_extension"));
	free(src);
	return builds;
}

struct hash_walk {
	struct ca_sha256 *h;
	size_t root_len;
	int n;
};
static struct hash_walk *g_hash_walk;  /* nftw has no user pointer; used by one thread at a time */
static pthread_mutex_t hash_walk_lock = PTHREAD_MUTEX_INITIALIZER;

static int hash_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	struct hash_walk *w = g_hash_walk;
	const char *rel = path + w->root_len;
	if (!strncmp(rel, "/.ca-io", 7) || !strncmp(rel, "/.ca-ext", 8))
		return 0;
	if (flag != FTW_F || !S_ISREG(st->st_mode) || st->st_size > (16 << 20) || ++w->n > 2000)
		return 0;
	size_t len;
	char *data = eval_read_file(path, (size_t)st->st_size, &len);
	if (!data)
		return 0;
	ca_sha256_string(w->h, rel);
	ca_sha256_update(w->h, data, len);
	free(data);
	return 0;
}

/*
 * A candidate that builds torch extensions when it is imported (KernelBench's
 * load_inline, or cpp_extension.load) pays tens of seconds per process. The
 * build directory is kept under $CA_CACHE/torch-ext/KEY, KEY the hash of
 * every file of the workspace with the torch version and the GPU, and given
 * to the next process of the same candidate (ca-profile after ca-verify, the
 * same candidate proposed again): only identical workspaces share it.
 */
static void ext_prepare(struct job *j)
{
	struct slot *s = j->slot;
	j->ext_key[0] = '\0';
	if (!builds_extension(j))
		return;
	struct ca_sha256 h;
	ca_sha256_init(&h);
	ca_sha256_string(&h, "ca-torch-ext-1");
	char *gpu = ca_json_strdup(s->reference.run.hello, "gpu");
	char *torch = ca_json_strdup(s->reference.run.hello, "torch");
	ca_sha256_string(&h, gpu ? gpu : "cpu");
	ca_sha256_string(&h, torch ? torch : "");
	free(gpu);
	free(torch);
	struct hash_walk w = {&h, strlen(j->cand.dir), 0};
	pthread_mutex_lock(&hash_walk_lock);
	g_hash_walk = &w;
	nftw(j->cand.dir, hash_entry, 16, FTW_PHYS);
	g_hash_walk = NULL;
	pthread_mutex_unlock(&hash_walk_lock);
	ca_sha256_final_hex(&h, j->ext_key);
	char cached[PATHLEN], dst[PATHLEN];
	snprintf(cached, sizeof cached, "%s/torch-ext/%s", ca_paths_cache(), j->ext_key);
	snprintf(dst, sizeof dst, "%s/.ca-ext", j->cand.dir);
	mkdir_mode(dst, 0777);
	struct stat st;
	if (stat(cached, &st) == 0 && S_ISDIR(st.st_mode)) {
		/* Timestamps kept: ninja decides what to rebuild by them. */
		ca_file_copy_tree(cached, dst, CA_FILE_KEEP_TIMES);
		chmod_tree(dst);
		j->result = jv_object_set(j->result, jv_string("extension_cached"), jv_true());
	}
}

/* After a loaded candidate has stopped: keep its extension builds for the next process. */
void ext_save(struct job *j)
{
	if (!j->ext_key[0] || !j->loaded)
		return;
	char cached[PATHLEN], tmp[PATHLEN + 32], src[PATHLEN], dir[PATHLEN];
	snprintf(dir, sizeof dir, "%s/torch-ext", ca_paths_cache());
	snprintf(cached, sizeof cached, "%s/%s", dir, j->ext_key);
	snprintf(src, sizeof src, "%s/.ca-ext", j->cand.dir);
	struct stat st;
	if (stat(cached, &st) == 0 || stat(src, &st) != 0)
		return;
	ca_paths_mkdirs(dir, 0755);
	snprintf(tmp, sizeof tmp, "%s.tmp%ld.%d", cached, (long)getpid(), j->slot->index);
	if (mkdir_mode(tmp, 0755) == 0 && ca_file_copy_tree(src, tmp, CA_FILE_KEEP_TIMES) == 0 && rename(tmp, cached) == 0)
		return;
	ca_file_remove_tree(tmp);
}

/*
 * The candidate's files (cand borrowed: its "files", or a "dir" to copy)
 * in its private directory, model_new.py among them, and the tree opened
 * to its uid. 0, or -1 with the record failed.
 */
static int job_workspace(struct job *j, jv cand)
{
	char why[1024];
	jv files = ca_json_get(cand, "files");
	jv dir = ca_json_get(cand, "dir");
	int bad = 0;
	if (jv_get_kind(files) == JV_KIND_OBJECT) {
		if (write_files(j->cand.dir, jv_copy(files), why, sizeof why)) {
			job_fail(j, "input", why);
			bad = 1;
		}
	} else if (jv_get_kind(dir) == JV_KIND_STRING) {
		struct stat st;
		if (stat(jv_string_value(dir), &st) != 0 || !S_ISDIR(st.st_mode)) {
			snprintf(why, sizeof why, "candidate.dir %s is not a directory", jv_string_value(dir));
			job_fail(j, "input", why);
			bad = 1;
		} else if (ca_file_copy_tree(jv_string_value(dir), j->cand.dir, 0) != 0) {
			job_fail(j, "input", "cannot copy candidate.dir");
			bad = 1;
		}
	} else {
		job_fail(j, "input", "candidate has neither \"files\" nor \"dir\"");
		bad = 1;
	}
	jv_free(files);
	jv_free(dir);
	char path[PATHLEN];
	snprintf(path, sizeof path, "%s/model_new.py", j->cand.dir);
	if (!bad && access(path, R_OK) != 0) {
		job_fail(j, "input", "the candidate has no model_new.py");
		bad = 1;
	}
	if (bad)
		return -1;
	mkdir_mode(j->io, 0777);
	chmod_tree(j->cand.dir);
	return 0;
}

/*
 * The reference: load the task, write its weights and init inputs. The
 * candidate gets the task's code too (for its get_inputs: it draws the
 * inputs itself, under the same seeds), never the reference's outputs.
 * code borrowed. 0, or -1 with the record failed.
 */
static int job_load_reference(struct job *j, jv code, const char *weights, const char *init)
{
	struct slot *s = j->slot;
	const struct ca_eval_config *cfg = s->cfg;
	char path[PATHLEN];
	jv fault;
	snprintf(path, sizeof path, "%s/model.py", s->trusted);
	snprintf(j->task_path, sizeof j->task_path, "%s/task.py", j->io);
	size_t code_len = (size_t)jv_string_length_bytes(jv_copy(code));
	if (eval_write_file(path, jv_string_value(code), code_len) != 0 ||
			eval_write_file(j->task_path, jv_string_value(code), code_len) != 0) {
		job_fail(j, "system", "cannot write the task file");
		return -1;
	}
	chmod(j->task_path, 0644);
	if (reference_ready(s, &fault) != 0) {
		job_fault(j, fault, "reference worker: ");
		j->result = set_str(j->result, "stage", "reference");
		return -1;
	}
	jv req = jv_object();
	req = set_str(req, "op", "task");
	req = set_str(req, "path", path);
	req = set_num(req, "seed", (double)j->seed);
	req = set_str(req, "weights_out", weights);
	req = set_str(req, "init_out", init);
	jv reply;
	job_phase(j, "reference_start");
	/* Loads put weights and modules on the GPU: not while another slot's loop is timed. */
	gpu_lock(s, LOCK_SH);
	double t0 = ca_proc_now();
	int rc = reference_call(j, jv_copy(req), cfg->load_timeout_s, &reply);
	gpu_lock(s, LOCK_UN);
	if (rc != 0) {
		jv_free(req);
		return -1;
	}
	reference_state(j, req, ca_proc_now() - t0);
	jv_free(j->sizes);
	j->sizes = ca_json_get(reply, "sizes");
	jv_free(reply);
	job_phase(j, "task");
	chmod(weights, 0644);
	chmod(init, 0644);
	jv gpu = ca_json_get(s->reference.run.hello, "gpu");
	jv torch = ca_json_get(s->reference.run.hello, "torch");
	j->result = jv_object_set(j->result, jv_string("device"), jv_string(cfg->device));
	j->result = jv_object_set(j->result, jv_string("gpu"), jv_get_kind(gpu) == JV_KIND_STRING ? gpu : (jv_free(gpu), jv_null()));
	/* Which of --gpus ran it (the pool's share per GPU); null on the CPU. */
	j->result = jv_object_set(j->result, jv_string("gpu_index"), s->gpu >= 0 ? jv_number(s->gpu) : jv_null());
	j->result = jv_object_set(j->result, jv_string("torch"), jv_get_kind(torch) == JV_KIND_STRING ? torch : (jv_free(torch), jv_null()));
	return 0;
}

/*
 * A profile that times torch.compile has the reference compile the
 * task's model now and call it once, while the candidate builds
 * (worker_post): a fresh reference's first compile loop, a cached
 * baseline timed again beside a fast candidate, took 1.8 s of a 7.2 s
 * record on the H100 with the compiler already imported. Called only
 * while a build runs (its kernels, or a torch extension its load makes),
 * where it comes free: a candidate that loads at once would wait for it
 * at its first check, one that fails verification never needs it, and
 * with the baseline cached only one that beats it does. Nothing is
 * waited for here; a failure is for the compile loop to report.
 */
static void reference_warm(struct job *j)
{
	struct slot *s = j->slot;
	const struct ca_eval_config *cfg = s->cfg;
	if (!warm_compile_wanted(cfg))
		return;
	jv req = set_num(set_str(jv_object(), "op", "warm"), "seed", (double)(j->seed + 1));
	if (cfg->compile_mode)
		req = set_str(req, "compile_mode", cfg->compile_mode);
	if (s->lock_fd >= 0)
		req = set_str(req, "lock", s->lock_path);
	jv fault;
	if (worker_post(&s->reference, req, cfg->timeout_s * 10 + 600, &fault) != 0)
		jv_free(fault);  /* gone: the next request finds it */
}

/*
 * The candidate: wait for it to be up, then load ModelNew with the
 * reference's weights. 0, or -1 with the record failed.
 */
static int job_load_candidate(struct job *j, const char *weights, const char *init)
{
	const struct ca_eval_config *cfg = j->slot->cfg;
	char path[PATHLEN];
	jv fault, reply;
	if (worker_ready(&j->cand, cfg->load_timeout_s, &fault) != 0) {
		job_fault(j, fault, "candidate worker: ");
		return -1;
	}
	job_phase(j, "candidate_start");
	ext_prepare(j);
	if (j->ext_key[0] && ca_json_bool(j->result, "extension_cached") != 1)
		reference_warm(j);  /* its load builds the extension */
	snprintf(path, sizeof path, "%s/model_new.py", j->cand.dir);
	jv req = jv_object();
	req = set_str(req, "op", "candidate");
	req = set_str(req, "path", path);
	req = set_str(req, "weights", weights);
	req = set_str(req, "init", init);
	req = set_num(req, "seed", (double)j->seed);
	req = jv_object_set(req, jv_string("allow_torch"), jv_bool(cfg->allow_torch));
	req = jv_object_set(req, jv_string("kernels_lib"), j->kernels_lib[0] ? jv_string(j->kernels_lib) : jv_null());
	req = set_str(req, "task", j->task_path);
	if (j->ext_key[0]) {
		snprintf(path, sizeof path, "%s/.ca-ext", j->cand.dir);
		req = set_str(req, "ext_dir", path);
		req = set_str(req, "ext_key", j->ext_key);
	}
	/* Not under the lock: a candidate's import may build for minutes (load_inline). */
	worker_hold_from_now(&j->cand);
	if (candidate_call(j, req, cfg->load_timeout_s, &reply, NULL) != 0) {
		if (jv_get_kind(reply) == JV_KIND_OBJECT)
			jv_free(reply);
		return -1;
	}
	jv_free(reply);
	j->loaded = 1;
	job_phase(j, "load");
	return 0;
}

/*
 * Everything before the first check: candidate worker, workspace, build,
 * reference task, candidate load. 0 when the candidate is loaded.
 */
int job_prepare(struct job *j, jv record)
{
	struct slot *s = j->slot;
	const struct ca_eval_config *cfg = s->cfg;
	jv fault;
	j->seed = cfg->seed_set ? cfg->seed : fresh_seed();
	j->result = jv_object_set(j->result, jv_string("seed"), jv_number((double)j->seed));
	jv code = ca_json_get(record, "code");
	jv cand = ca_json_get(record, "candidate");
	if (jv_get_kind(code) != JV_KIND_STRING || jv_get_kind(cand) != JV_KIND_OBJECT) {
		job_fail(j, "input", jv_get_kind(code) != JV_KIND_STRING ? "record has no task code (string field \"code\")"
			: "record has no candidate object");
		jv_free(code);
		jv_free(cand);
		return -1;
	}
	ca_sha256_hex(jv_string_value(code), (size_t)jv_string_length_bytes(jv_copy(code)), j->task_sha);
	j->result = set_str(j->result, "task_sha256", j->task_sha);

	/* The candidate process starts now so its Python start-up overlaps the rest. */
	if (candidate_take(s, &j->cand, &fault) != 0) {
		job_fault(j, fault, NULL);
		jv_free(code);
		jv_free(cand);
		return -1;
	}
	snprintf(j->io, sizeof j->io, "%s/.ca-io", j->cand.dir);
	int rc = job_workspace(j, cand);
	jv_free(cand);
	if (rc != 0) {
		jv_free(code);
		return -1;
	}
	job_phase(j, "workspace");

	/*
	 * The candidate's kernels (when it has kernel sources) are built with
	 * lib/build in this process: it reads the candidate's files (bounded:
	 * sizes, counts, one pass each) and runs every compiler under
	 * ca-sandbox, so no candidate code runs here; ca-build(1) is the same
	 * code as a command. When the reference will compile the task's model
	 * (reference_warm), the build runs in a thread while the reference
	 * starts, loads the task and compiles, else before the task.
	 */
	char weights[PATHLEN], init[PATHLEN];
	snprintf(weights, sizeof weights, "%s/weights.ten", j->io);
	snprintf(init, sizeof init, "%s/init.ten", j->io);
	j->kernels_lib[0] = '\0';
	struct job_build_run b = {.dir = j->cand.dir, .opt = {.arch = cfg->arch, .cache = cfg->build_cache}};
	int builds = has_kernel_sources(j->cand.dir);
	pthread_t th;
	int beside = builds && warm_compile_wanted(cfg) && pthread_create(&th, NULL, job_build_run, &b) == 0;
	if (beside) {
		rc = job_load_reference(j, code, weights, init);
		if (rc == 0 && !atomic_load(&b.done))  /* a cache hit is done already */
			reference_warm(j);
		pthread_join(th, NULL);
		job_phase(j, "build");
		if (rc != 0) {
			ca_build_result_free(&b.res);
			jv_free(code);
			return -1;
		}
	} else if (builds) {
		job_build_run(&b);
		job_phase(j, "build");
	}
	if (builds && job_build_done(j, &b.res) != 0) {
		jv_free(code);
		return -1;
	}
	rc = beside ? 0 : job_load_reference(j, code, weights, init);
	jv_free(code);
	if (rc != 0)
		return -1;
	double t1 = ca_proc_now();
	if (job_load_candidate(j, weights, init) != 0)
		return -1;
	j->result = set_num(j->result, "build_s", b.seconds);
	j->result = set_num(j->result, "load_s", ca_proc_now() - t1);
	return 0;
}

/* The summed total_us of a kernel list (borrows); 0 without one. */
double kernel_sum_us(jv kernels)
{
	double sum = 0;
	if (jv_get_kind(kernels) != JV_KIND_ARRAY)
		return 0;
	int n = jv_array_length(jv_copy(kernels));
	for (int i = 0; i < n; i++) {
		jv k = jv_array_get(jv_copy(kernels), i);
		double us = 0;
		if (jv_get_kind(k) == JV_KIND_OBJECT && ca_json_number(k, "total_us", &us) && us > 0)
			sum += us;
		jv_free(k);
	}
	return sum;
}

/* Top kernels of a kernel list (borrowed), with "forbidden" marked; *nbad counts them. */
jv top_kernels(jv kernels, int top, int *nbad, jv *bad_names)
{
	jv out = jv_array();
	if (jv_get_kind(kernels) != JV_KIND_ARRAY)
		return out;
	int n = jv_array_length(jv_copy(kernels));
	for (int i = 0; i < n; i++) {
		jv k = jv_array_get(jv_copy(kernels), i);
		char *name = jv_get_kind(k) == JV_KIND_OBJECT ? ca_json_strdup(k, "name") : NULL;
		int forbidden = name && ca_eval_kernel_forbidden(name);
		if (forbidden) {
			(*nbad)++;
			if (bad_names && jv_array_length(jv_copy(*bad_names)) < 10)
				*bad_names = jv_array_append(*bad_names, jv_string(name));
		}
		if (i < top && jv_get_kind(k) == JV_KIND_OBJECT) {
			double calls = 0, us = 0;
			ca_json_number(k, "calls", &calls);
			ca_json_number(k, "total_us", &us);
			jv o = jv_object();
			o = set_str(o, "name", name ? name : "?");
			o = set_num(o, "calls", calls);
			o = set_num(o, "total_us", us);
			if (forbidden)
				o = jv_object_set(o, jv_string("forbidden"), jv_true());
			out = jv_array_append(out, o);
		}
		free(name);
		jv_free(k);
	}
	return out;
}
