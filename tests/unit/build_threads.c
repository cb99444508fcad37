/*
 * lib/build from several threads at once, as ca-verify's slots call it:
 * two workspaces, each built by four threads together into a fresh cache
 * (the same entries stored at the same moment), then found in it; three
 * times over.
 * Usage: test-build_threads DIR (empty; NVCC set to a stand-in compiler).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build.h"

enum { THREADS = 8, ROUNDS = 6 };

static int failures;
static const char *root;

#define CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "test-build_threads: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
		__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED); \
	} \
} while (0)

struct job {
	int index;
	char hash[ROUNDS][65];
	char arch[16];
};

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) == EOF || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
}

static void *build(void *arg)
{
	struct job *j = arg;
	char dir[4096], cache[4096];
	snprintf(dir, sizeof dir, "%s/ws%d", root, j->index % 2);
	for (int r = 0; r < ROUNDS; r++) {
		/* Odd rounds find what the even round before stored; even rounds store together. */
		snprintf(cache, sizeof cache, "%s/cache%d", root, r / 2);
		struct ca_build_options opt = {.cache = cache, .jobs = 2};
		struct ca_build_result res;
		struct stat st;
		CHECK(ca_build_workspace(dir, &opt, &res) == 0);
		CHECK(res.ok);
		if (!res.ok)
			fprintf(stderr, "test-build_threads: %s: %s\n", dir, res.log);
		CHECK(res.library && stat(res.library, &st) == 0 && st.st_size > 0);
		snprintf(j->hash[r], sizeof j->hash[r], "%s", res.hash);
		snprintf(j->arch, sizeof j->arch, "%s", res.arch);
		ca_build_result_free(&res);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2 || !getenv("NVCC")) {
		fprintf(stderr, "usage: NVCC=COMPILER test-build_threads DIR\n");
		return 2;
	}
	root = argv[1];
	char path[4096];
	for (int w = 0; w < 2; w++) {
		snprintf(path, sizeof path, "%s/ws%d", root, w);
		mkdir(path, 0755);
		snprintf(path, sizeof path, "%s/ws%d/kernels", root, w);
		mkdir(path, 0755);
		/* Two units each, one header both reach: unit objects are stored by several threads too. */
		snprintf(path, sizeof path, "%s/ws%d/kernels/common.cuh", root, w);
		write_text(path, w ? "#define SCALE 2\n" : "#define SCALE 1\n");
		snprintf(path, sizeof path, "%s/ws%d/kernels/a.cu", root, w);
		write_text(path, "#include \"common.cuh\"\nint a = SCALE;\n");
		snprintf(path, sizeof path, "%s/ws%d/kernels/b.cu", root, w);
		write_text(path, "#include \"common.cuh\"\nint b = SCALE;\n");
	}
	pthread_t t[THREADS];
	struct job jobs[THREADS];
	memset(jobs, 0, sizeof jobs);
	for (int i = 0; i < THREADS; i++) {
		jobs[i].index = i;
		if (pthread_create(&t[i], NULL, build, &jobs[i]) != 0) {
			perror("pthread_create");
			return 1;
		}
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < THREADS; i++) {
		CHECK(strcmp(jobs[i].arch, ca_build_default_arch()) == 0);
		for (int r = 0; r < ROUNDS; r++)
			CHECK(strlen(jobs[i].hash[r]) == 64 && strcmp(jobs[i].hash[r], jobs[i % 2].hash[0]) == 0);
	}
	CHECK(strcmp(jobs[0].hash[0], jobs[1].hash[0]) != 0);
	if (failures) {
		fprintf(stderr, "test-build_threads: %d checks failed\n", failures);
		return 1;
	}
	printf("test-build_threads: all checks passed\n");
	return 0;
}
