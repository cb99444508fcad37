/*
 * st_compare: compare the tensors of two safetensors files or checkpoint
 * directories, as the policy engine's tests need.
 *
 *   test-st_compare A B TOL
 *
 * Prints the relative error ||a - b|| / ||b|| of every tensor of B (a
 * tensor missing from A is an error) and the worst one; exits 1 when any
 * exceeds TOL.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"
#include "opt.h"
#include "safetensors.h"

static struct ca_st_dir *open_any(const char *path)
{
	char why[CA_ST_WHY];
	struct stat st;
	struct ca_st_dir *d;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		d = ca_st_dir_open(path, why);
	} else {
		d = ca_xcalloc(1, sizeof *d);
		d->files = ca_xmalloc(sizeof *d->files);
		d->files[0] = ca_st_open(path, why);
		d->nfiles = d->files[0] != NULL;
		if (!d->nfiles) {
			free(d->files);
			free(d);
			d = NULL;
		}
	}
	if (!d)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	return d;
}

int main(int argc, char **argv)
{
	ca_err_init(argv[0]);
	if (argc != 4)
		ca_err_die(CA_EXIT_USAGE, "usage: test-st_compare A B TOL");
	double tol = ca_opt_double("TOL", argv[3], 0, 1e9);
	struct ca_st_dir *a = open_any(argv[1]), *b = open_any(argv[2]);
	double worst = 0;
	const char *worst_name = "";
	int bad = 0, n = 0;
	for (int f = 0; f < b->nfiles; f++)
		for (int i = 0; i < b->files[f]->ntensors; i++) {
			const struct ca_st_tensor *tb = &b->files[f]->tensors[i];
			const struct ca_st_tensor *ta = ca_st_dir_find(a, tb->name);
			n++;
			if (!ta || ta->numel != tb->numel) {
				fprintf(stderr, "%s: %s in %s\n", tb->name, ta ? "size differs" : "missing", argv[1]);
				bad = 1;
				continue;
			}
			float *xa = ca_xmalloc(sizeof(float) * (size_t)ta->numel + 1);
			float *xb = ca_xmalloc(sizeof(float) * (size_t)tb->numel + 1);
			ca_st_to_f32(ta, xa);
			ca_st_to_f32(tb, xb);
			double diff = 0, ref = 0;
			for (int64_t k = 0; k < tb->numel; k++) {
				diff += ((double)xa[k] - xb[k]) * ((double)xa[k] - xb[k]);
				ref += (double)xb[k] * xb[k];
			}
			double rel = ref > 0 ? sqrt(diff / ref) : sqrt(diff);
			printf("%-50s rel_err %.3e\n", tb->name, rel);
			if (!(rel <= tol)) {
				fprintf(stderr, "%s: relative error %.3g above %.3g\n", tb->name, rel, tol);
				bad = 1;
			}
			if (rel > worst) {
				worst = rel;
				worst_name = tb->name;
			}
			free(xa);
			free(xb);
		}
	printf("worst relative error %.3e (%s) over %d tensors\n", worst, worst_name, n);
	ca_st_dir_close(a);
	ca_st_dir_close(b);
	return bad;
}
