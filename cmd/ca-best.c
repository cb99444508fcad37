/*
 * ca-best: the best snapshot of each trajectory, as the paper scores it.
 *
 * A trajectory (ca-agent) holds a snapshot of the candidate files at every
 * build, verify and profile the agent ran. Scoring them goes through the
 * ordinary evaluation pipeline:
 *
 *   ca-best --explode < traj | ca-verify | ca-profile | ca-reward | ca-best --trajectories traj
 *
 * --explode turns each trajectory into candidate records, one per distinct
 * snapshot; the default mode reads scored candidate records and keeps, per
 * trajectory, the one with the highest reward, then the highest speedup
 * over torch.compile, then the earliest. --trajectories FILE joins the
 * winners back onto the trajectory records of FILE (one out per trajectory).
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
#include "strmap.h"

static const char usage_text[] =
	"usage: ca-best [-hu] [--explode] [--progress] [--trajectories FILE] [file ...]\n";

/* Fields a candidate record must not inherit from the trajectory record. */
static const char *const scored_fields[] = {
	"trajectory", "candidate", "verify", "profile", "reward", "best", "snapshot", "rft", NULL,
};

static jv get(jv obj, const char *key)
{
	jv v = ca_json_get(obj, key);
	if (!jv_is_valid(v)) {
		jv_free(v);
		return jv_null();
	}
	return v;
}

static jv without_scores(jv record)
{
	for (size_t i = 0; scored_fields[i]; i++)
		if (jv_object_has(jv_copy(record), jv_string(scored_fields[i])))
			record = jv_object_delete(record, jv_string(scored_fields[i]));
	return record;
}

/* trajectory.id, else id: a string, or null when neither is one. Borrows record. */
static jv trajectory_id(jv record)
{
	jv traj = get(record, "trajectory");
	jv id = get(traj, "id");
	jv_free(traj);
	if (jv_get_kind(id) != JV_KIND_STRING) {
		jv_free(id);
		id = get(record, "id");
	}
	if (jv_get_kind(id) != JV_KIND_STRING) {
		jv_free(id);
		id = jv_null();
	}
	return id;
}

static long lookup(const struct ca_strmap *m, jv key)
{
	return ca_strmap_get(m, jv_string_value(key), (size_t)jv_string_length_bytes(jv_copy(key)));
}

/* ---- explode ---- */

/* The candidate records of one trajectory record (consumed), as an array. */
static jv explode_one(jv record)
{
	jv traj = get(record, "trajectory");
	jv id = trajectory_id(record);
	jv base = without_scores(record);
	jv snaps = get(traj, "snapshots");
	if (jv_get_kind(snaps) != JV_KIND_ARRAY) {
		jv_free(snaps);
		snaps = jv_array();
	}
	/* Append the final workspace as a last snapshot. */
	jv final = get(traj, "final");
	jv final_files = jv_get_kind(final) == JV_KIND_OBJECT ? get(final, "files") : jv_null();
	jv_free(final);
	int nsnap = jv_array_length(jv_copy(snaps));
	if (jv_get_kind(final_files) == JV_KIND_OBJECT && jv_object_length(jv_copy(final_files)) > 0) {
		jv f = jv_object();
		f = jv_object_set(f, jv_string("index"), jv_number(nsnap));
		f = jv_object_set(f, jv_string("turn"), get(traj, "turns"));
		f = jv_object_set(f, jv_string("command"), jv_string("final"));
		f = jv_object_set(f, jv_string("files"), final_files);
		snaps = jv_array_append(snaps, f);
	} else {
		jv_free(final_files);
	}
	/* Distinct file sets, in order; later duplicates are listed in "same". */
	int n = jv_array_length(jv_copy(snaps));
	jv outs = jv_array();
	struct ca_strmap *seen = ca_strmap_new();  /* file set (sorted JSON) -> index in outs */
	for (int i = 0; i < n; i++) {
		jv s = jv_array_get(jv_copy(snaps), i);
		jv files = jv_get_kind(s) == JV_KIND_OBJECT ? get(s, "files") : jv_null();
		if (jv_get_kind(files) != JV_KIND_OBJECT) {
			jv_free(files);
			jv_free(s);
			continue;
		}
		jv key = jv_dump_string(jv_copy(files), JV_PRINT_SORTED);
		long found = ca_strmap_put(seen, jv_string_value(key), (size_t)jv_string_length_bytes(jv_copy(key)),
			jv_array_length(jv_copy(outs)));
		int is_new = found == jv_array_length(jv_copy(outs));
		jv_free(key);
		double index = i;
		jv idx = get(s, "index");
		if (jv_get_kind(idx) == JV_KIND_NUMBER)
			index = jv_number_value(idx);
		jv_free(idx);
		if (!is_new) {
			jv o = jv_array_get(jv_copy(outs), (int)found);
			jv snap = get(o, "snapshot");
			jv same = get(snap, "same");
			snap = jv_object_set(snap, jv_string("same"), jv_array_append(same, jv_number(index)));
			o = jv_object_set(o, jv_string("snapshot"), snap);
			outs = jv_array_set(outs, (int)found, o);
			jv_free(files);
			jv_free(s);
			continue;
		}
		jv snap = jv_object();
		snap = jv_object_set(snap, jv_string("trajectory"),
			jv_get_kind(id) == JV_KIND_STRING ? jv_copy(id) : jv_string(""));
		snap = jv_object_set(snap, jv_string("index"), jv_number(index));
		snap = jv_object_set(snap, jv_string("turn"), get(s, "turn"));
		snap = jv_object_set(snap, jv_string("command"), get(s, "command"));
		snap = jv_object_set(snap, jv_string("same"), jv_array());
		jv o = jv_copy(base);
		o = jv_object_set(o, jv_string("candidate"), jv_object_set(jv_object(), jv_string("files"), files));
		o = jv_object_set(o, jv_string("snapshot"), snap);
		outs = jv_array_append(outs, o);
		jv_free(s);
	}
	ca_strmap_free(seen);
	jv_free(snaps);
	jv_free(base);
	jv_free(traj);
	jv_free(id);
	return outs;
}

static jv explode_record(jv record, void *ctx, int *status)
{
	jv traj = ca_json_path(record, "trajectory");
	int has = jv_get_kind(traj) == JV_KIND_OBJECT;
	jv_free(traj);
	if (has)
		return explode_one(record);
	*status = CA_EXIT_DATA;
	return ca_ndjson_record_error(record, "record has no trajectory object");
}

/* ---- select ---- */

struct group {
	jv id;           /* string */
	jv best;         /* the best record so far, as parsed from text */
	char *text;      /* its line, for passing its fields through as written */
	size_t len;
	long count, correct;
};

struct selection {
	struct group *groups;
	size_t ngroups, cap;
	struct ca_strmap *by_id;  /* trajectory id -> index in groups */
	char *used;               /* --trajectories: groups joined */
};

static double reward_of(jv record)
{
	jv v = ca_json_path(record, "reward.value");
	double r = jv_get_kind(v) == JV_KIND_NUMBER && isfinite(jv_number_value(v)) ? jv_number_value(v) : -INFINITY;
	jv_free(v);
	return r;
}

/* Passed verify and profile (borrows record). */
static int profile_passed(jv record)
{
	jv v = ca_json_path(record, "verify.ok"), p = ca_json_path(record, "profile.ok");
	int passed = jv_get_kind(v) == JV_KIND_TRUE && jv_get_kind(p) == JV_KIND_TRUE;
	jv_free(v);
	jv_free(p);
	return passed;
}

/* Correct: a reward above 0, or without a reward, verify passed (borrows record). */
static int correct_of(jv record)
{
	jv v = ca_json_path(record, "reward.value");
	int correct;
	if (jv_get_kind(v) == JV_KIND_NUMBER) {
		correct = jv_number_value(v) > 0;
	} else {
		jv ok = ca_json_path(record, "verify.ok"), profile = ca_json_get(record, "profile");
		correct = jv_get_kind(ok) == JV_KIND_TRUE &&
			(jv_get_kind(profile) != JV_KIND_OBJECT || profile_passed(record));
		jv_free(ok);
		jv_free(profile);
	}
	jv_free(v);
	return correct;
}

/* The speedup over torch.compile; a time the profile did not pass counts for nothing. */
static double speedup_of(jv record)
{
	jv v = ca_json_path(record, "reward.speedup_compile");
	double s = 0;
	if (jv_get_kind(v) == JV_KIND_NUMBER) {
		s = jv_number_value(v);
	} else if (profile_passed(record)) {
		jv c = ca_json_path(record, "profile.compile_us"), t = ca_json_path(record, "profile.candidate_us");
		if (jv_get_kind(c) == JV_KIND_NUMBER && jv_get_kind(t) == JV_KIND_NUMBER && jv_number_value(t) > 0)
			s = jv_number_value(c) / jv_number_value(t);
		jv_free(c);
		jv_free(t);
	}
	jv_free(v);
	return isfinite(s) ? s : 0;
}

static double index_of(jv record)
{
	jv v = ca_json_path(record, "snapshot.index");
	double i = jv_get_kind(v) == JV_KIND_NUMBER ? jv_number_value(v) : 1e300;
	jv_free(v);
	return i;
}

/* 1 when a ranks above b (borrows both). */
static int better(jv a, jv b)
{
	double ra = reward_of(a), rb = reward_of(b);
	if (ra != rb)
		return ra > rb;
	double sa = speedup_of(a), sb = speedup_of(b);
	if (sa != sb)
		return sa > sb;
	return index_of(a) < index_of(b);
}

static jv with_summary(jv best, const struct group *g)
{
	jv s = jv_object();
	s = jv_object_set(s, jv_string("trajectory"), jv_copy(g->id));
	s = jv_object_set(s, jv_string("index"), ca_json_path(best, "snapshot.index"));
	s = jv_object_set(s, jv_string("turn"), ca_json_path(best, "snapshot.turn"));
	s = jv_object_set(s, jv_string("snapshots"), jv_number((double)g->count));
	s = jv_object_set(s, jv_string("correct"), jv_number((double)g->correct));
	s = jv_object_set(s, jv_string("reward"), ca_json_path(best, "reward.value"));
	return jv_object_set(best, jv_string("best"), s);
}

/* Count a scored record (consumed, with its line) into its trajectory's group. */
static void add_scored(struct selection *sel, jv record, jv tid, const char *text, size_t len)
{
	long at = ca_strmap_put(sel->by_id, jv_string_value(tid), (size_t)jv_string_length_bytes(jv_copy(tid)),
		(long)sel->ngroups);
	if (at == (long)sel->ngroups) {
		if (sel->ngroups == sel->cap)
			sel->groups = ca_xrealloc(sel->groups, (sel->cap = sel->cap ? 2 * sel->cap : 64) * sizeof *sel->groups);
		sel->groups[sel->ngroups++] = (struct group){.id = tid, .best = jv_null()};
	} else {
		jv_free(tid);
	}
	struct group *g = &sel->groups[at];
	g->count++;
	g->correct += correct_of(record);
	if (jv_get_kind(g->best) == JV_KIND_NULL || better(record, g->best)) {
		jv_free(g->best);
		g->best = record;
		g->text = ca_xrealloc(g->text, len + 1);
		memcpy(g->text, text, len);
		g->len = len;
	} else {
		jv_free(record);
	}
}

/*
 * Read the scored records into their groups. An aggregation, not a 1:1
 * loop: malformed lines and records without snapshot.trajectory are
 * reported at once and their error records written before the winners.
 */
static int read_scored(struct selection *sel, int nfiles, char **files, jv *errors)
{
	struct ca_ndjson_reader *r = ca_ndjson_open(nfiles, files);
	int status = CA_EXIT_OK, kind;
	const char *text;
	size_t len;
	while ((kind = ca_ndjson_next_text(r, &text, &len)) != CA_NDJSON_EOF) {
		jv v;
		const char *why = NULL;
		if (kind == CA_NDJSON_BAD || ca_ndjson_parse(text, len, &v) == CA_NDJSON_BAD) {
			if (kind == CA_NDJSON_BAD)
				v = jv_string(text);
			ca_ndjson_warn(r, "%s", jv_string_value(v));
			*errors = jv_array_append(*errors, ca_ndjson_error_record(ca_ndjson_name(r), ca_ndjson_line(r), jv_string_value(v)));
			jv_free(v);
			status = CA_EXIT_DATA;
			continue;
		}
		jv tid = ca_json_path(v, "snapshot.trajectory");
		if (jv_get_kind(tid) != JV_KIND_STRING) {
			why = "record has no snapshot.trajectory";
			ca_ndjson_warn(r, "%s (make candidates with ca-best --explode)", why);
			*errors = jv_array_append(*errors, ca_ndjson_error_record(ca_ndjson_name(r), ca_ndjson_line(r), why));
			jv_free(tid);
			jv_free(v);
			status = CA_EXIT_DATA;
			continue;
		}
		add_scored(sel, v, tid, text, len);
		ca_ndjson_progress_tick();
	}
	status = ca_err_worst(status, ca_ndjson_status(r));
	ca_ndjson_close(r);
	return status;
}

/* A trajectory record (consumed) with its winner's fields and summary. */
static jv join_one(jv record, void *ctx, int *status)
{
	struct selection *sel = ctx;
	jv id = trajectory_id(record);
	long at = jv_get_kind(id) == JV_KIND_STRING ? lookup(sel->by_id, id) : -1;
	if (at < 0) {
		jv s = jv_object();
		s = jv_object_set(s, jv_string("trajectory"), id);
		s = jv_object_set(s, jv_string("snapshots"), jv_number(0));
		s = jv_object_set(s, jv_string("correct"), jv_number(0));
		s = jv_object_set(s, jv_string("reward"), jv_null());
		return jv_object_set(record, jv_string("best"), s);
	}
	jv_free(id);
	struct group *g = &sel->groups[at];
	sel->used[at] = 1;
	jv best = with_summary(jv_copy(g->best), g);
	static const char *const take[] = {"candidate", "verify", "profile", "reward", "snapshot", "best", NULL};
	for (size_t k = 0; take[k]; k++) {
		jv f = ca_json_get(best, take[k]);
		if (jv_is_valid(f))
			record = jv_object_set(record, jv_string(take[k]), f);
		else
			jv_free(f);
	}
	jv_free(best);
	ca_ndjson_pass_from(g->best, g->text, g->len);  /* the winner's fields as it was written */
	return record;
}

static int write_errors(jv errors)
{
	int rc = 0;
	jv_array_foreach(errors, i, e) {
		if (rc == 0)
			rc = ca_ndjson_write(e);
		else
			jv_free(e);
	}
	jv_free(errors);
	return rc;
}

static int run_select(int nfiles, char **files, const char *trajectories)
{
	struct selection sel = {.by_id = ca_strmap_new()};
	jv errors = jv_array();
	int status = read_scored(&sel, nfiles, files, &errors);
	int rc = write_errors(errors);
	if (rc == 0 && !trajectories) {
		for (size_t i = 0; i < sel.ngroups && rc == 0; i++) {
			struct group *g = &sel.groups[i];
			rc = ca_ndjson_write_spliced(with_summary(jv_copy(g->best), g), g->best, g->text, g->len);
		}
		ca_ndjson_progress_done();
		status = rc == 0 ? ca_err_finish(status) : status;
	} else if (rc == 0) {
		char *names[] = {(char *)trajectories};
		sel.used = ca_xcalloc(sel.ngroups + 1, 1);
		status = ca_err_worst(status, ca_ndjson_map(1, names, join_one, &sel));
		for (size_t i = 0; i < sel.ngroups; i++)
			if (!sel.used[i]) {
				ca_err_warn("%s: no trajectory %s for its scored snapshots", trajectories, jv_string_value(sel.groups[i].id));
				status = ca_err_worst(status, CA_EXIT_DATA);
			}
		free(sel.used);
	}
	for (size_t i = 0; i < sel.ngroups; i++) {
		jv_free(sel.groups[i].id);
		jv_free(sel.groups[i].best);
		free(sel.groups[i].text);
	}
	free(sel.groups);
	ca_strmap_free(sel.by_id);
	if (rc != 0) {
		ca_err_warn_sys("write error on stdout");
		return CA_EXIT_SYSTEM;
	}
	return status;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"explode", no_argument, NULL, 'x'},
		{"help", no_argument, NULL, 'h'},
		{"progress", no_argument, NULL, 'P'},
		{"trajectories", required_argument, NULL, 't'},
		{"unbuffered", no_argument, NULL, 'u'},
		{NULL, 0, NULL, 0},
	};
	int explode = 0, c;
	const char *trajectories = NULL;
	ca_err_init(argv[0]);
	while ((c = getopt_long(argc, argv, "hu", longopts, NULL)) != -1) {
		switch (c) {
		case 'x': explode = 1; break;
		case 't': trajectories = optarg; break;
		default: ca_opt_common(c, usage_text);
		}
	}
	if (explode && trajectories) {
		ca_err_warn("--explode and --trajectories do not go together");
		fputs(usage_text, stderr);
		ca_opt_bad_usage();
	}
	if (explode)
		return ca_ndjson_map(argc - optind, argv + optind, explode_record, NULL);
	return run_select(argc - optind, argv + optind, trajectories);
}
