/*
 * tools: the agent's tools, confined to one workspace directory (owner: D).
 *
 * ca-agent answers a policy's tool calls through this module: bash (a
 * shell session whose working directory and exported variables persist
 * from one command to the next; each command runs in ca-sandbox with a
 * time limit and its output truncated), bash_output and kill_bash for
 * background commands, read, write (refuses to overwrite a file it has
 * not read first), edit (one unique string replacement), multiedit
 * (several edits, all or nothing), glob and grep.
 *
 * Every path a file tool touches is resolved with symlinks followed and
 * must stay inside the workspace; the files named protected (the task's
 * model.py, the skill) may be read but never written through the tools.
 * Observations are plain text: what the agent sees. A failed call returns
 * an observation starting with "error: " and sets *is_error: to
 * CA_TOOLS_INVALID when the call broke the tool's schema (an unknown tool,
 * arguments not an object, a required argument missing, an argument of
 * the wrong type or outside its allowed values; numbers may come as
 * numeric strings, booleans may not), else to CA_TOOLS_FAILED (a file not
 * found, a command that exited nonzero, an edit that did not apply).
 */
#ifndef CA_TOOLS_H
#define CA_TOOLS_H

#include <stddef.h>
#include <jv.h>

struct ca_tools_config {
	const char *workspace;          /* directory the agent works in (must exist) */
	const char *state_dir;          /* private directory outside it for job logs */
	const char *const *protected;   /* workspace-relative paths, NULL-terminated */
	/*
	 * The confinement prefix for shell commands, NULL-terminated, without
	 * --dir/--time/--: for example {"ca-sandbox", "--mem", "8192", NULL}.
	 * NULL runs commands unconfined (tests and debugging only).
	 */
	const char *const *sandbox;
	const char *const *hide;        /* absolute paths the shell must not reach (other tasks), NULL-terminated */
	double command_time_s;          /* default and maximum seconds per bash command */
	double job_time_s;              /* limit for background commands */
	size_t max_output;              /* bytes of output shown per observation */
};

struct ca_tools;

enum { CA_TOOLS_OK = 0, CA_TOOLS_FAILED = 1, CA_TOOLS_INVALID = 2 };

struct ca_tools *ca_tools_new(const struct ca_tools_config *config);
/* Kills background commands still running. */
void ca_tools_free(struct ca_tools *tools);

/*
 * Run tool name with its arguments (an object; borrowed). Returns the
 * observation (malloc'd); *is_error is CA_TOOLS_OK, CA_TOOLS_FAILED or
 * CA_TOOLS_INVALID (see above).
 */
char *ca_tools_call(struct ca_tools *tools, const char *name, jv arguments, int *is_error);

/* 1 when name is one of the tools. */
int ca_tools_known(const char *name);

/* The tools' schema in OpenAI function-calling form: an array of {"type": "function", ...}. */
jv ca_tools_schema(void);

/* Shorten text to at most max bytes, keeping the head and the tail and saying how much went (malloc'd). */
char *ca_tools_truncate(const char *text, size_t len, size_t max);

/*
 * The same for the first len bytes a capture kept (buf; borrowed) followed
 * by the text more (may be NULL): the bytes the capture dropped, past its
 * cap or in the gap of a keep_tail buffer, count as left out.
 */
struct ca_buf;
char *ca_tools_truncate_buf(const struct ca_buf *buf, size_t len, const char *more, size_t max);

#endif
