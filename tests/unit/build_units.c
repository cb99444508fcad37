/* Unit tests for lib/build_units: which workspace files a unit's cache key covers, who may use torch's precompiled header. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build_impl.h"

static int failures;

#define CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "test-build_units: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
		failures++; \
	} \
} while (0)

/* A workspace in memory: pairs of path and text, NULL-terminated. */
static struct sources workspace(const char *const *files)
{
	struct sources s = {0};
	for (size_t i = 0; files[i]; i += 2)
		s.n++;
	s.v = calloc(s.n, sizeof *s.v);
	for (size_t i = 0; i < s.n; i++) {
		s.v[i].rel = strdup(files[2 * i]);
		s.v[i].data = strdup(files[2 * i + 1]);
		s.v[i].len = strlen(files[2 * i + 1]);
	}
	return s;
}

static void workspace_free(struct sources *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].rel);
		free(s->v[i].data);
	}
	free(s->v);
}

static size_t index_of(const struct sources *s, const char *rel)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i].rel, rel) == 0)
			return i;
	abort();
}

/* The key of unit rel in files, and in files with the text of changed replaced. */
static int key_changes(const char *const *files, const char *rel, const char *changed, const char *text)
{
	struct sources a = workspace(files), b = workspace(files);
	struct argv_list argv = {0};
	char ka[65], kb[65];
	argv_add(&argv, "g++");
	size_t j = index_of(&b, changed);
	free(b.v[j].data);
	b.v[j].data = strdup(text);
	b.v[j].len = strlen(text);
	unit_key(&a, NULL, index_of(&a, rel), "tools", &argv, ka);
	unit_key(&b, NULL, index_of(&b, rel), "tools", &argv, kb);
	argv_free(&argv);
	workspace_free(&a);
	workspace_free(&b);
	return strcmp(ka, kb) != 0;
}

static int torch_first(const char *const *files, const char *rel)
{
	struct sources s = workspace(files);
	int r = unit_starts_with_torch(&s, index_of(&s, rel));
	workspace_free(&s);
	return r;
}

static void test_keys(void)
{
	const char *ws[] = {
		"binding.cpp", "#include \"binding_registry.h\"\nPYBIND11_MODULE(m, m) {}\n",
		"binding_registry.h", "#pragma once\n#include <torch/extension.h>\n#include \"util.h\"\n",
		"util.h", "// util\n",
		"kernels/a.cu", "#include <cuda_runtime.h>\n#  include \"common.cuh\"\n__global__ void a() {}\n",
		"kernels/common.cuh", "#pragma once\n",
		"kernels/a_binding.cpp", "#include \"../binding_registry.h\"\nvoid f();\n",
		"kernels/other.cuh", "// nobody includes me\n",
		"kernels/macro.cu", "#define H \"other.cuh\"\n#include H\n",
		"kernels/probe.cpp", "#if __has_include(\"nothing.h\")\n#endif\n",
		"kernels/loop.h", "#include \"loop.h\"\n",
		"kernels/loop.cpp", "#include \"loop.h\"\n",
		NULL,
	};
	/* The unit itself, and what it includes, directly or through another header. */
	CHECK(key_changes(ws, "kernels/a.cu", "kernels/a.cu", "// changed\n"));
	CHECK(key_changes(ws, "kernels/a.cu", "kernels/common.cuh", "// changed\n"));
	CHECK(key_changes(ws, "binding.cpp", "util.h", "// changed\n"));
	CHECK(key_changes(ws, "kernels/a_binding.cpp", "util.h", "// changed\n"));
	/* Not what it does not include: binding.cpp stays cached while kernels change. */
	CHECK(!key_changes(ws, "binding.cpp", "kernels/a.cu", "// changed\n"));
	CHECK(!key_changes(ws, "binding.cpp", "kernels/other.cuh", "// changed\n"));
	CHECK(!key_changes(ws, "kernels/a.cu", "kernels/other.cuh", "// changed\n"));
	/* A computed include or __has_include: everything counts. */
	CHECK(key_changes(ws, "kernels/macro.cu", "util.h", "// changed\n"));
	CHECK(key_changes(ws, "kernels/probe.cpp", "kernels/other.cuh", "// changed\n"));
	/* A header that includes itself ends. */
	CHECK(key_changes(ws, "kernels/loop.cpp", "kernels/loop.h", "#include \"loop.h\"\n// changed\n"));
	CHECK(!key_changes(ws, "kernels/loop.cpp", "util.h", "// changed\n"));
	/* An include that a later edit makes resolve: the new header's text counts from then on. */
	const char *late[] = {
		"kernels/k.cu", "#include \"new.cuh\"\n",
		"kernels/new.cuh", "// one\n",
		NULL,
	};
	CHECK(key_changes(late, "kernels/k.cu", "kernels/new.cuh", "// two\n"));
}

static void test_torch_first(void)
{
	const char *ws[] = {
		"direct.cpp", "// a comment\n/* another */\n\n#include <torch/extension.h>\nint x;\n",
		"quoted.cpp", "#include \"torch/extension.h\"\n",
		"registry.h", "#pragma once\n#include <torch/extension.h>\n",
		"guarded.h", "#ifndef GUARDED_H\n#define GUARDED_H\n#include <torch/extension.h>\n#endif\n",
		"kernels/via.cpp", "#include \"../registry.h\"\n",
		"kernels/via_guard.cpp", "#include \"../guarded.h\"\n",
		"kernels/define_first.cpp", "#define NDEBUG\n#include <torch/extension.h>\n",
		"kernels/other_first.cpp", "#include <vector>\n#include <torch/extension.h>\n",
		"kernels/code_first.cpp", "int x;\n#include <torch/extension.h>\n",
		"other.h", "#pragma once\n#include <cuda_runtime.h>\n#include <torch/extension.h>\n",
		"kernels/via_other.cpp", "#include \"../other.h\"\n",
		"kernels/bad_guard.cpp", "#ifndef A\n#define B\n#include <torch/extension.h>\n#endif\n",
		"kernels/missing.cpp", "#include \"missing.h\"\n",
		NULL,
	};
	CHECK(torch_first(ws, "direct.cpp"));
	CHECK(torch_first(ws, "quoted.cpp"));
	CHECK(torch_first(ws, "kernels/via.cpp"));
	CHECK(torch_first(ws, "kernels/via_guard.cpp"));
	CHECK(!torch_first(ws, "kernels/define_first.cpp"));
	CHECK(!torch_first(ws, "kernels/other_first.cpp"));
	CHECK(!torch_first(ws, "kernels/code_first.cpp"));
	CHECK(!torch_first(ws, "kernels/via_other.cpp"));
	CHECK(!torch_first(ws, "kernels/bad_guard.cpp"));
	CHECK(!torch_first(ws, "kernels/missing.cpp"));
}

static void test_shadow(const char *tmp)
{
	char dir[4096], path[4200];
	snprintf(dir, sizeof dir, "%s/include", tmp);
	snprintf(path, sizeof path, "%s/torch", dir);
	mkdir(dir, 0755);
	mkdir(path, 0755);
	snprintf(path, sizeof path, "%s/torch/extension.h", dir);
	FILE *fp = fopen(path, "w");
	if (fp)
		fclose(fp);
	const char *dirs[] = {dir};
	const char *clean[] = {"binding.cpp", "", "kernels/a.cu", "", "kernels/sub/b.h", "", NULL};
	const char *shadow_top[] = {"torch/extension.h", "", NULL};
	const char *shadow_kernels[] = {"kernels/torch/extension.h", "", NULL};
	const char *no_dot[] = {"kernels/vector", "", NULL};
	struct sources s = workspace(clean);
	CHECK(!sources_shadow_headers(&s, dirs, 1));
	workspace_free(&s);
	s = workspace(shadow_top);
	CHECK(sources_shadow_headers(&s, dirs, 1));
	workspace_free(&s);
	s = workspace(shadow_kernels);
	CHECK(sources_shadow_headers(&s, dirs, 1));
	workspace_free(&s);
	s = workspace(no_dot);
	CHECK(sources_shadow_headers(&s, dirs, 1));
	workspace_free(&s);
}

int main(int argc, char **argv)
{
	test_keys();
	test_torch_first();
	if (argc > 1)
		test_shadow(argv[1]);
	if (failures)
		fprintf(stderr, "test-build_units: %d failures\n", failures);
	return failures ? 1 : 0;
}
