/* nvcc: see nvcc.h. */
#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "file.h"
#include "nvcc.h"
#include "paths.h"
#include "proc.h"
#include "strmap.h"

extern char **environ;

/*
 * nvcc's options for other modes than one source to one object, for
 * dependency files other than -MD's, for temporary files kept or put
 * elsewhere, and for what nvcc reports of its own run (-time, -v): nvcc
 * itself runs these. An option's value that happens to
 * read like one of them only costs the speed-up.
 */
static const char *const not_ours[] = {
	"-E", "--preprocess", "-M", "--generate-dependencies", "-MM", "--generate-nonsystem-dependencies",
	"-MMD", "--generate-nonsystem-dependencies-with-compile", "-MT", "--dependency-target-name",
	"-MP", "--generate-dependency-targets", "-cuda", "--cuda", "-ptx", "--ptx", "-cubin", "--cubin",
	"-fatbin", "--fatbin", "-optix-ir", "--optix-ir", "-ltoir", "--ltoir", "-rdc", "--relocatable-device-code",
	"-dc", "--device-c", "-dw", "--device-w", "-dlink", "--device-link", "-dlto", "--dlink-time-opt",
	"-lib", "--lib", "-link", "--link", "-run", "--run", "-keep", "--keep", "-keep-dir", "--keep-dir",
	"-save-temps", "--save-temps", "-odir", "--output-directory", "-dryrun", "--dryrun", "-V", "--version",
	"-h", "--help", "-optf", "--options-file", "-code-ls", "--list-gpu-code", "-arch-ls", "--list-gpu-arch",
	"-time", "--time", "-v", "--verbose", NULL,
};

enum kind { PREPROCESS, CUDAFE, CICC, PTXAS, DEPENDENCIES, OTHER };
enum state { WAITING, RUNNING, DONE, KILLED };

struct step {
	enum kind kind;
	char *line;           /* the command for /bin/sh -c (cicc's rewritten); the file name for DEPENDENCIES */
	char **words;         /* line split as the shell splits it, when it could be */
	size_t nwords;
	const char *output;   /* the file its -o names (one of words), or NULL */
	size_t *deps, ndeps;  /* steps that must have succeeded before it starts */
	char *module_id;      /* cicc: the file it writes its own module id to */
	struct ca_proc proc;
	enum state state;
	int status;
};

struct plan {
	char dir[PATH_MAX];   /* our temporary directory; the plan's files are in it */
	char **env;           /* environ, TMPDIR set to dir, and the plan's variables */
	size_t nenv;
	struct step *v;
	size_t n;
	size_t parallel;      /* steps [0, parallel) run side by side, the rest one after another */
	const char *module_id;  /* the file cudafe++ writes the module id to */
	const char *object;   /* the last step's -o: the dependency file's target */
	char *notes;          /* what nvcc printed beside its plan (warnings), shown first */
	const char *why;      /* why nvcc itself has to run it */
	struct ca_proc **procs;
};

static volatile sig_atomic_t caught;

static void on_signal(int sig)
{
	caught = sig;
}

static int is_arg(const char *arg, const char *option)
{
	size_t len = strlen(option);
	return strncmp(arg, option, len) == 0 && (arg[len] == '\0' || arg[len] == '=');
}

/* -c, and nothing of not_ours. */
static int compiles_one_object(char *const *args)
{
	int compile = 0;
	for (size_t i = 0; args[i]; i++) {
		compile |= strcmp(args[i], "-c") == 0 || strcmp(args[i], "--compile") == 0;
		for (size_t k = 0; not_ours[k]; k++)
			if (is_arg(args[i], not_ours[k]))
				return 0;
	}
	return compile;
}

/* A file name the shell and a dependency file take as it is. */
static int plain_name(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("/._+-~@,=%", *s))
			return 0;
	return 1;
}

static void env_set(struct plan *pl, const char *assignment)
{
	size_t name_len = strcspn(assignment, "=") + 1, i;
	for (i = 0; i < pl->nenv; i++)
		if (strncmp(pl->env[i], assignment, name_len) == 0)
			break;
	if (i == pl->nenv) {
		pl->env = ca_xrealloc(pl->env, (pl->nenv + 2) * sizeof *pl->env);
		pl->env[++pl->nenv] = NULL;
	} else {
		free(pl->env[i]);
	}
	pl->env[i] = ca_xstrdup(assignment);
}

static void push_word(struct step *s, const char *word, size_t len)
{
	s->words = ca_xrealloc(s->words, (s->nwords + 1) * sizeof *s->words);
	s->words[s->nwords] = ca_xmalloc(len + 1);
	memcpy(s->words[s->nwords], word, len);
	s->words[s->nwords++][len] = '\0';
}

/*
 * Split s->line into words as /bin/sh would, $NAME left as it is: quotes
 * and backslashes; -1 for anything else the shell would act on
 * (operators, globs, substitutions), which a plan we run never has.
 */
static int split_words(struct step *s)
{
	const char *p = s->line;
	char *word = ca_xmalloc(strlen(p) + 1);
	int bad = 0;
	while (!bad) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p)
			break;
		size_t len = 0;
		if (*p == '#' || *p == '~')
			bad = 1;
		while (!bad && *p && *p != ' ' && *p != '\t') {
			char quote = *p == '"' || *p == '\'' ? *p++ : 0;
			if (!quote && *p == '\\')
				p++;
			else if (!quote && strchr(";&|<>()`*?[\n", *p))
				bad = 1;
			for (; !bad && quote && *p != quote; p++) {
				if (!*p || (quote == '"' && *p == '`')) {
					bad = 1;
					break;
				}
				if (quote == '"' && *p == '\\' && p[1] && strchr("\"\\$`", p[1]))
					word[len++] = *++p;
				else
					word[len++] = *p;
			}
			if (!bad && quote)
				p++;
			else if (!bad && *p)
				word[len++] = *p++;
			else if (!bad)
				bad = 1;  /* a backslash at the end */
		}
		if (!bad)
			push_word(s, word, len);
	}
	free(word);
	return bad ? -1 : 0;
}

static int has_word(const struct step *s, const char *word)
{
	for (size_t i = 0; i < s->nwords; i++)
		if (strcmp(s->words[i], word) == 0)
			return 1;
	return 0;
}

/* The word after the last `option`, or NULL. */
static const char *value_of(const struct step *s, const char *option)
{
	const char *v = NULL;
	for (size_t i = 0; i + 1 < s->nwords; i++)
		if (strcmp(s->words[i], option) == 0)
			v = s->words[i + 1];
	return v;
}

static enum kind classify(struct step *s)
{
	static const char filter[] = "-- Filter Dependencies -- > ";
	if (strncmp(s->line, filter, sizeof filter - 1) == 0) {
		memmove(s->line, s->line + sizeof filter - 1, strlen(s->line) - sizeof filter + 2);
		s->line[strcspn(s->line, " ")] = '\0';
		return plain_name(s->line) && strcmp(s->line, "-") != 0 ? DEPENDENCIES : OTHER;
	}
	if (split_words(s) != 0 || s->nwords == 0)
		return OTHER;
	s->output = value_of(s, "-o");
	const char *slash = strrchr(s->words[0], '/');
	const char *base = slash ? slash + 1 : s->words[0];
	if (strcmp(base, "cudafe++") == 0)
		return CUDAFE;
	if (strcmp(base, "cicc") == 0)
		return CICC;
	if (strcmp(base, "ptxas") == 0)
		return PTXAS;
	if (has_word(s, "-E") && !has_word(s, "-c") && s->output)
		return PREPROCESS;
	return OTHER;
}

/* cicc makes the module id itself, into a file of its own: 0, or -1 when its line is not as expected. */
static int own_module_id(struct plan *pl, struct step *s, size_t index)
{
	char old[PATH_MAX + 32];
	snprintf(old, sizeof old, "--module_id_file_name \"%s\"", pl->module_id);
	char *at = strstr(s->line, old);
	if (!at || strstr(at + 1, old) || has_word(s, "--gen_module_id_file"))
		return -1;
	size_t len = strlen(s->line) + strlen(pl->module_id) + 64;
	char *line = ca_xmalloc(len);
	s->module_id = ca_xmalloc(strlen(pl->module_id) + 32);
	sprintf(s->module_id, "%s.cicc%zu", pl->module_id, index);
	snprintf(line, len, "%.*s--gen_module_id_file --module_id_file_name \"%s\"%s",
		(int)(at - s->line), s->line, s->module_id, at + strlen(old));
	free(s->line);
	s->line = line;
	return 0;
}

static void add_dep(struct step *s, size_t j)
{
	s->deps = ca_xrealloc(s->deps, (s->ndeps + 1) * sizeof *s->deps);
	s->deps[s->ndeps++] = j;
}

/*
 * Which steps run side by side, and after what: the dependency file after
 * every step before it (it reads what they preprocessed), the others
 * after the steps whose -o they name. 0, or -1 when the plan is not the
 * compile we know (one cudafe++, cicc reading its module id, a compile last).
 */
static int arrange(struct plan *pl)
{
	size_t nfe = 0, ncicc = 0;
	const struct step *last = pl->n ? &pl->v[pl->n - 1] : NULL;
	if (!last || last->kind != OTHER || !has_word(last, "-c") || !last->output || !plain_name(last->output))
		return -1;
	pl->object = last->output;
	while (pl->parallel < pl->n && pl->v[pl->parallel].kind != OTHER)
		pl->parallel++;
	for (size_t i = pl->parallel; i < pl->n; i++)
		if (pl->v[i].kind != OTHER)
			return -1;  /* a step we would run side by side, after one we would not */
	for (size_t i = 0; i < pl->parallel; i++) {
		struct step *s = &pl->v[i];
		if (s->kind != CUDAFE)
			continue;
		nfe++;
		pl->module_id = value_of(s, "--module_id_file_name");
		if (!pl->module_id || !has_word(s, "--gen_module_id_file") || strchr(pl->module_id, '"'))
			return -1;
	}
	if (nfe != 1)
		return -1;
	for (size_t i = 0; i < pl->parallel; i++) {
		struct step *s = &pl->v[i];
		if (s->kind == CICC && (++ncicc, own_module_id(pl, s, i) != 0))
			return -1;
		for (size_t j = 0; j < i; j++) {
			int reads = s->kind == DEPENDENCIES;
			for (size_t w = 0; !reads && w < s->nwords && pl->v[j].output; w++)
				reads = strcmp(s->words[w], pl->v[j].output) == 0;
			if (s->kind != DEPENDENCIES && pl->v[j].output && s->output && strcmp(s->output, pl->v[j].output) == 0)
				return -1;  /* two steps writing one file */
			if (reads)
				add_dep(s, j);
		}
		if ((s->kind == CUDAFE || s->kind == CICC || s->kind == PTXAS) && s->ndeps == 0)
			return -1;  /* it reads what no step before it made */
	}
	return ncicc >= 1 ? 0 : -1;
}

/* Parse nvcc's --dryrun text into pl: 0, or -1 when it is not a plan we run. */
static int read_plan(struct plan *pl, char *text)
{
	size_t notes_len = 0;
	pl->notes = ca_xstrdup("");
	for (char *line = text, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (strncmp(line, "#$ ", 3) != 0) {
			size_t len = strlen(line);
			pl->notes = ca_xrealloc(pl->notes, notes_len + len + 2);
			memcpy(pl->notes + notes_len, line, len);
			notes_len += len;
			pl->notes[notes_len++] = '\n';
			pl->notes[notes_len] = '\0';
			continue;
		}
		char *body = line + 3;
		size_t name = 0;
		while (body[name] == '_' || isalpha((unsigned char)body[name]) || (name && isdigit((unsigned char)body[name])))
			name++;
		if (name && body[name] == '=') {
			if (pl->n)
				return -1;  /* a variable set between commands */
			env_set(pl, body);
			continue;
		}
		pl->v = ca_xrealloc(pl->v, (pl->n + 1) * sizeof *pl->v);
		struct step *s = &pl->v[pl->n++];
		memset(s, 0, sizeof *s);
		ca_proc_init(&s->proc, NULL);
		s->line = ca_xstrdup(body);
		s->kind = classify(s);
	}
	return arrange(pl);
}

/* Ask nvcc for its plan, with our directory for its temporary files: 0, or -1. */
static int ask_plan(struct plan *pl, const char *real, char *const *args)
{
	size_t nargs = 0;
	while (args[nargs])
		nargs++;
	const char **argv = ca_xcalloc(nargs + 3, sizeof *argv);
	argv[0] = real;
	argv[1] = "--dryrun";
	for (size_t i = 0; i < nargs; i++)
		argv[i + 2] = args[i];
	struct ca_proc p;
	struct ca_buf out = {0}, err = {0};
	ca_proc_init(&p, argv);
	p.env = (const char *const *)pl->env;
	int status = ca_proc_capture(&p, NULL, 0, &out, &err, (size_t)16 << 20);
	int ok = status == 0 && out.len == 0 && err.dropped == 0 && err.data && read_plan(pl, err.data) == 0;
	ca_buf_free(&out);
	ca_buf_free(&err);
	free(argv);
	return ok ? 0 : -1;
}

static void step_file(const struct plan *pl, size_t i, const char *stream, char *path, size_t size)
{
	snprintf(path, size, "%s/ca-nvcc.%zu.%s", pl->dir, i, stream);
}

/*
 * nvcc's dependency file: the target, then each file a line marker of the
 * preprocessed outputs before step i names, once, in order of first
 * appearance. 0; 1 when it cannot be written (nvcc's message in the
 * step's stderr file); -1 for a name we would not know how to write.
 */
static int write_dependencies(struct plan *pl, size_t i)
{
	struct ca_strmap *seen = ca_strmap_new();
	size_t len = 0, cap = strlen(pl->object) + 4096, n = 0;
	char *text = ca_xmalloc(cap), *line = NULL;
	size_t line_cap = 0;
	int bad = 0;
	len = (size_t)snprintf(text, cap, "%s :", pl->object);
	for (size_t j = 0; j < i && !bad; j++) {
		FILE *f = pl->v[j].kind == PREPROCESS ? fopen(pl->v[j].output, "r") : NULL;
		if (pl->v[j].kind == PREPROCESS && !f)
			bad = 1;
		while (f && !bad && getline(&line, &line_cap, f) > 0) {
			char *p = line;
			if (*p++ != '#' || *p++ != ' ' || !isdigit((unsigned char)*p))
				continue;
			while (isdigit((unsigned char)*p))
				p++;
			if (*p++ != ' ' || *p++ != '"' || *p == '<')
				continue;
			char *end = strchr(p, '"');
			if (!end)
				continue;
			*end = '\0';
			if (!plain_name(p)) {
				bad = 1;
				break;
			}
			if (ca_strmap_put(seen, p, strlen(p), (long)n) != (long)n)
				continue;
			size_t need = len + strlen(p) + 8;
			if (need > cap)
				text = ca_xrealloc(text, cap = need * 2);
			len += (size_t)sprintf(text + len, "%s%s", n++ ? " \\\n    " : " ", p);
		}
		if (f)
			fclose(f);
	}
	free(line);
	ca_strmap_free(seen);
	int status = bad ? -1 : 0;
	if (!bad) {
		text[len++] = '\n';
		FILE *out = fopen(pl->v[i].line, "w");
		if (!out || fwrite(text, 1, len, out) != len || fclose(out) != 0) {
			char path[PATH_MAX + 64];
			step_file(pl, i, "err", path, sizeof path);
			FILE *err = fopen(path, "w");
			if (err) {
				fprintf(err, "nvcc fatal   : Could not open output file %s\n", pl->v[i].line);
				fclose(err);
			}
			status = 1;
		}
	}
	free(text);
	return status;
}

/* Start step i under /bin/sh, its output into files of ours when capture is set: 0, or -1. */
static int start_step(struct plan *pl, size_t i, int capture)
{
	struct step *s = &pl->v[i];
	const char *argv[] = {"/bin/sh", "-c", s->line, NULL};
	char out[PATH_MAX + 64], err[PATH_MAX + 64];
	ca_proc_init(&s->proc, argv);
	s->proc.env = (const char *const *)pl->env;
	s->proc.in_mode = CA_PROC_NULL;
	if (capture) {
		step_file(pl, i, "out", out, sizeof out);
		step_file(pl, i, "err", err, sizeof err);
		s->proc.out = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		s->proc.err = open(err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		s->proc.out_mode = s->proc.err_mode = CA_PROC_FD;
	}
	int rc = capture && (s->proc.out < 0 || s->proc.err < 0) ? -1 : ca_proc_start(&s->proc);
	if (capture) {
		if (s->proc.out >= 0)
			close(s->proc.out);
		if (s->proc.err >= 0)
			close(s->proc.err);
	}
	s->proc.argv = NULL;
	s->state = rc == 0 ? RUNNING : DONE;
	return rc;
}

/* Wait for a running step to end; its index, or -1 when a signal came. */
static long wait_step(struct plan *pl)
{
	while (!caught) {
		int i = ca_proc_wait_any(pl->procs, pl->n, 0.25);
		if (i >= 0) {
			pl->v[i].status = ca_proc_finish(&pl->v[i].proc);
			pl->v[i].state = DONE;
			return i;
		}
	}
	return -1;
}

/* Kill the running steps after step first (all of them: first -1). */
static void kill_after(struct plan *pl, long first, size_t *running)
{
	for (size_t i = (size_t)(first + 1); i < pl->n; i++) {
		if (pl->v[i].state != RUNNING)
			continue;
		ca_proc_kill(&pl->v[i].proc, SIGKILL);
		ca_proc_finish(&pl->v[i].proc);
		pl->v[i].state = KILLED;
		--*running;
	}
}

static int ready(const struct plan *pl, const struct step *s)
{
	for (size_t k = 0; k < s->ndeps; k++)
		if (pl->v[s->deps[k]].state != DONE || pl->v[s->deps[k]].status != 0)
			return 0;
	return 1;
}

/*
 * Run steps [0, parallel) side by side as their inputs allow, at most a
 * CPU's worth at once. Once one fails, the steps after it in the plan are
 * killed or not started (nvcc would not have run them) and those before
 * it finish. Returns the first failed step, parallel when none did, or
 * -1 when we cannot go on.
 */
static long run_side_by_side(struct plan *pl)
{
	long jobs = sysconf(_SC_NPROCESSORS_ONLN);
	size_t failed = pl->parallel, running = 0;
	int give_up = 0;  /* a signal, or our own failure */
	for (;;) {
		for (size_t i = 0; i < failed && !caught && !give_up; i++) {
			struct step *s = &pl->v[i];
			if (s->state != WAITING || (long)running >= (jobs > 2 ? jobs : 2) || !ready(pl, s))
				continue;
			if (s->kind != DEPENDENCIES) {
				give_up = start_step(pl, i, 1) != 0;
				running += !give_up;
				continue;
			}
			s->status = write_dependencies(pl, i);
			s->state = DONE;
			give_up = s->status < 0;
			if (s->status > 0) {
				failed = i;
				kill_after(pl, (long)i, &running);
			}
		}
		long i = running && !caught && !give_up ? wait_step(pl) : -1;
		if (i < 0)
			break;
		running--;
		if (pl->v[i].status != 0 && (size_t)i < failed) {
			failed = (size_t)i;
			kill_after(pl, i, &running);
		}
	}
	for (size_t i = 0; i < failed && !give_up; i++)
		give_up = pl->v[i].state != DONE || pl->v[i].status != 0;
	if (caught || give_up) {
		kill_after(pl, -1, &running);
		return -1;
	}
	return (long)failed;
}

static int same_contents(const char *a, const char *b)
{
	size_t na, nb;
	char *x = ca_file_read(a, 0, 1 << 20, &na), *y = ca_file_read(b, 0, 1 << 20, &nb);
	int same = x && y && na == nb && memcmp(x, y, na) == 0;
	free(x);
	free(y);
	return same;
}

static void copy_to(const char *path, FILE *to)
{
	char buf[65536];
	size_t n;
	FILE *f = fopen(path, "r");
	while (f && (n = fread(buf, 1, sizeof buf, f)) > 0)
		fwrite(buf, 1, n, to);
	if (f)
		fclose(f);
}

/* What nvcc and steps [0, last] printed, in the plan's order. */
static void replay(const struct plan *pl, size_t last)
{
	char path[PATH_MAX + 64];
	fputs(pl->notes, stderr);
	for (size_t i = 0; i <= last && i < pl->n; i++) {
		step_file(pl, i, "out", path, sizeof path);
		copy_to(path, stdout);
		fflush(stdout);
		step_file(pl, i, "err", path, sizeof path);
		copy_to(path, stderr);
	}
	fflush(stderr);
}

/* The plan: -1 to fall back, else nvcc's exit status. */
static int run_plan(struct plan *pl)
{
	long failed = run_side_by_side(pl);
	if (failed < 0) {
		pl->why = caught ? "a signal came" : "a step could not be run, or named a file it cannot write";
		return -1;
	}
	if ((size_t)failed < pl->parallel) {
		replay(pl, (size_t)failed);
		return pl->v[failed].status;
	}
	for (size_t i = 0; i < pl->parallel; i++)
		if (pl->v[i].module_id && !same_contents(pl->module_id, pl->v[i].module_id)) {
			pl->why = "cicc's module id differs from cudafe++'s";
			return -1;
		}
	replay(pl, pl->parallel - 1);
	for (size_t i = pl->parallel; i < pl->n; i++) {
		if (pl->v[i].nwords && strcmp(pl->v[i].words[0], "rm") == 0) {
			/* nvcc removes these itself, and says nothing when one is not there */
			for (size_t w = 1; w < pl->v[i].nwords; w++)
				unlink(pl->v[i].words[w]);
			continue;
		}
		if (start_step(pl, i, 0) != 0) {
			ca_err_warn_sys("cannot run /bin/sh");
			return CA_EXIT_SYSTEM;
		}
		if (wait_step(pl) < 0) {
			size_t running = 1;
			kill_after(pl, -1, &running);
			pl->why = "a signal came";
			return -1;
		}
		if (pl->v[i].status != 0)
			return pl->v[i].status;
	}
	return 0;
}

/* With $CA_NVCC_VERBOSE set, each step's time on stderr: what ran side by side, and for how long. */
static void report(const struct plan *pl)
{
	static const char *const names[] = {"preprocess", "cudafe++", "cicc", "ptxas", "dependencies", "other"};
	const char *verbose = getenv("CA_NVCC_VERBOSE");
	for (size_t i = 0; verbose && *verbose && i < pl->n; i++) {
		const struct step *s = &pl->v[i];
		const char *name = names[s->kind];
		if (s->kind == OTHER && s->nwords)  /* fatbinary, the host compiler */
			name = strrchr(s->words[0], '/') ? strrchr(s->words[0], '/') + 1 : s->words[0];
		if (s->state == DONE)
			ca_err_warn("step %zu%s %s: %.2f s, status %d", i, i < pl->parallel ? " (side by side)" : "",
				name, s->proc.wall_s, s->status);
	}
}

static void plan_free(struct plan *pl)
{
	for (size_t i = 0; i < pl->n; i++) {
		struct step *s = &pl->v[i];
		ca_free_strings(s->words, s->nwords);
		free(s->line);
		free(s->deps);
		free(s->module_id);
	}
	free(pl->v);
	ca_free_strings(pl->env, pl->nenv);
	free(pl->notes);
	free(pl->procs);
}

int ca_nvcc_compile(const char *real, char *const *args, const char **why)
{
	const char *ignored;
	why = why ? why : &ignored;
	*why = "not a compile of one source to an object";
	if (!compiles_one_object(args))
		return -1;
	struct plan pl;
	memset(&pl, 0, sizeof pl);
	const char *tmp = getenv("TMPDIR");
	snprintf(pl.dir, sizeof pl.dir, "%s/ca-nvcc.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	*why = "cannot make a temporary directory";
	if (!mkdtemp(pl.dir))
		return -1;
	pl.env = ca_xcalloc(1, sizeof *pl.env);
	for (char **e = environ; *e; e++)
		env_set(&pl, *e);
	char tmpdir[PATH_MAX + 8];
	snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", pl.dir);
	env_set(&pl, tmpdir);

	/* A signal the caller ignores stays ignored. */
	struct sigaction on = {.sa_handler = on_signal}, old[3];
	const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
	sigemptyset(&on.sa_mask);
	memset(old, 0, sizeof old);
	for (int k = 0; k < 3; k++)
		if (sigaction(sigs[k], NULL, &old[k]) == 0 && old[k].sa_handler != SIG_IGN)
			sigaction(sigs[k], &on, NULL);
	int status = -1;
	*why = "nvcc's plan is not one ca-nvcc knows";
	if (ask_plan(&pl, real, args) == 0) {
		pl.procs = ca_xcalloc(pl.n, sizeof *pl.procs);
		for (size_t i = 0; i < pl.n; i++)
			pl.procs[i] = &pl.v[i].proc;
		status = run_plan(&pl);
		*why = status < 0 ? pl.why : NULL;
		report(&pl);
	}
	ca_file_remove_tree(pl.dir);
	plan_free(&pl);
	for (int k = 0; k < 3; k++)
		sigaction(sigs[k], &old[k], NULL);
	if (caught) {
		signal(caught, SIG_DFL);
		raise(caught);
		return 128 + caught;
	}
	return status;
}

/* An executable regular file, not the running program. */
static int usable(const char *path, const struct stat *self)
{
	struct stat st;
	return access(path, X_OK) == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
		!(self && st.st_dev == self->st_dev && st.st_ino == self->st_ino);
}

char *ca_nvcc_find_real(void)
{
	struct stat self_st;
	const struct stat *self = stat("/proc/self/exe", &self_st) == 0 ? &self_st : NULL;
	char buf[PATH_MAX];
	const char *env = getenv("CA_NVCC_REAL");
	if (env && *env && usable(env, self))
		return ca_xstrdup(env);
	const char *home = getenv("CUDA_HOME");
	snprintf(buf, sizeof buf, "%s/bin/nvcc", home ? home : "");
	if (home && *home && usable(buf, self))
		return ca_xstrdup(buf);
	const char *list = getenv("PATH");
	char dir[PATH_MAX];
	while (ca_paths_next_dir(&list, dir, sizeof dir)) {
		snprintf(buf, sizeof buf, "%s/nvcc", dir);
		if (*dir && usable(buf, self))
			return ca_xstrdup(buf);
	}
	return NULL;
}
