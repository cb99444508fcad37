# ca: the CUDA Agent system as a Unix toolkit.
#
#   make              build bin/ca-* and lib/libca.a
#   make check        CPU test suite (what CI runs); ends with "N passed, N failed"
#   make check-gpu    GPU tests (skip with a message without a GPU)
#   make asan         the CPU suite under AddressSanitizer and UBSan
#   make bench        throughput benchmarks (no GPU)
#   make demo         the system run small on this machine (scripts/demo): installs what it needs
#   make lint         mandoc -Tlint over man/
#   make deps         install missing build/test dependencies (Debian, PyPI)
#   make install      PREFIX=/usr/local DESTDIR=

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
SHAREDIR ?= $(PREFIX)/share/ca
CC ?= cc
CFLAGS ?= -O2 -g
BUILD ?= build
BIN ?= bin
LIBCA ?= lib/libca.a

CA_CFLAGS = -std=c17 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter -Wno-format-truncation $(CFLAGS)
LDLIBS = -ljq -lz -lm -lpthread

# lib/ has one folder per subsystem (README, Layout). Header names are unique
# across lib/, so a file includes "err.h" or "model.h" without a folder, and
# the include path says what a folder may know: core knows no subsystem, eval
# and model do not know each other, rl trains the model. Commands and tests
# see every folder. tests/t0005-layout.sh checks the same rules in the sources.
LIB_DIRS := core eval model synth rl
LIB_INC := $(LIB_DIRS:%=-Ilib/%)
LIB_INC_core := -Ilib/core
LIB_INC_eval := -Ilib/core -Ilib/eval
LIB_INC_model := -Ilib/core -Ilib/model
LIB_INC_synth := -Ilib/core -Ilib/synth
LIB_INC_rl := -Ilib/core -Ilib/model -Ilib/rl
LIB_SRC := $(wildcard $(LIB_DIRS:%=lib/%/*.c))
LIB_OBJ := $(LIB_SRC:lib/%.c=$(BUILD)/lib/%.o)
LIB_HDR := $(wildcard $(LIB_DIRS:%=lib/%/*.h))
CMDS := $(patsubst cmd/%.c,$(BIN)/%,$(wildcard cmd/ca-*.c))
UNITS := $(patsubst tests/unit/%.c,$(BIN)/test-%,$(wildcard tests/unit/*.c))

# Optional parts, detected once and reported in one line each.
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)),)
CUPTI_H := $(firstword $(wildcard $(CUDA_HOME)/extras/CUPTI/include/cupti.h $(CUDA_HOME)/targets/x86_64-linux/include/cupti.h $(CUDA_HOME)/include/cupti.h))
# The kernel-tracing shim the Python runner loads (lib/eval/cupti.c, owner B2).
CUPTI_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/extras/CUPTI/lib64/libcupti.so $(CUDA_HOME)/targets/x86_64-linux/lib/libcupti.so $(CUDA_HOME)/lib64/libcupti.so))
CUPTI_SO := $(if $(and $(CUPTI_H),$(CUPTI_LIBDIR)),$(BIN)/libca-cupti.so,)

.PHONY: all check check-gpu asan bench bench-eval bench-policy model-cuda demo demo-rl bench-rl deps install clean config lint
.SUFFIXES:

all: config $(LIBCA) $(CMDS) $(UNITS) $(CUPTI_SO)

config:
	@echo "cuda: $(if $(NVCC),nvcc at $(NVCC),not found; GPU build parts disabled)"
	@echo "cupti: $(if $(CUPTI_H),header at $(CUPTI_H),not found; kernel tracing disabled)"

$(BUILD)/lib/%.o: lib/%.c $(LIB_HDR)
	@mkdir -p $(@D)
	$(CC) $(CA_CFLAGS) $(LIB_INC_$(firstword $(subst /, ,$*))) -c -o $@ $<

$(LIBCA): $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@
	ar rcs $@ $(LIB_OBJ)

$(BIN)/ca-%: cmd/ca-%.c $(LIBCA) $(LIB_HDR)
	@mkdir -p $(@D)
	$(CC) $(CA_CFLAGS) $(LIB_INC) $(LDFLAGS) -o $@ $< $(LIBCA) $(LDLIBS)

$(BIN)/libca-cupti.so: lib/eval/cupti.c lib/eval/cupti.h
	@mkdir -p $(@D)
	$(CC) -std=c17 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -shared -fPIC -DCA_HAVE_CUPTI -I$(dir $(CUPTI_H)) -o $@ lib/eval/cupti.c \
		-L$(dir $(CUPTI_LIBDIR)) -Wl,-rpath,$(dir $(CUPTI_LIBDIR)) -lcupti -lstdc++

$(BIN)/test-%: tests/unit/%.c $(LIBCA) $(LIB_HDR)
	@mkdir -p $(@D)
	$(CC) $(CA_CFLAGS) $(LIB_INC) $(LDFLAGS) -o $@ $< $(LIBCA) $(LDLIBS)

check: all
	@CA_BIN=$(CURDIR)/$(BIN) sh tests/run.sh tests/t[0-9]*.sh

# GPU_TESTS narrows it to some scripts, e.g. make check-gpu GPU_TESTS='tests/gpu/t015*.sh'
# GPU_MODEL= (the evaluation tests need no policy engine; its tests skip without it).
GPU_TESTS ?= tests/gpu/t[0-9]*.sh
GPU_MODEL ?= $(if $(NVCC),model-cuda)
check-gpu: all $(GPU_MODEL)
	@CA_BIN=$(CURDIR)/$(BIN) sh tests/run.sh $(GPU_TESTS)

asan:
	$(MAKE) BUILD=build-asan BIN=bin-asan LIBCA=build-asan/libca.a \
		CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
		LDFLAGS="-fsanitize=address,undefined" check

lint:
	@command -v mandoc >/dev/null || { echo "lint: mandoc is not installed (make deps)"; exit 1; }
	@for m in man/*.[157]; do mandoc -Tlint -Wwarning $$m || exit 1; done; echo "man pages: mandoc -Tlint clean"

# Stream throughput against jq on a generated token stream (BENCH_MB, default 200).
BENCH_MB ?= 200
bench: all
	CA_BIN=$(CURDIR)/$(BIN) sh bench/bench-stream.sh $(BENCH_MB)

# The main job: the whole system run small on this machine (scripts/demo):
# synthesis, the agent loop on KernelBench problems (scored, Table 1, on a
# GPU), the recorded candidates scored (without one), the toy RL loop.
# Dependencies first (make deps), then the build, then the demo; the parts
# that need a GPU say so on a machine without one. Output in DEMO_DIR.
DEMO_DIR ?= demo
demo:
	@sh scripts/install-deps
	@$(MAKE) --no-print-directory all
	@CA_BIN=$(CURDIR)/$(BIN) sh scripts/demo -o $(DEMO_DIR)

# Evaluation speed on a GPU machine (ca-verify, ca-profile, ca-build); see bench/bench-eval.sh.
bench-eval: all
	CA_BIN=$(CURDIR)/$(BIN) sh bench/bench-eval.sh

# The RL loop on the toy environment, on a CPU: the learning curve as text
# and, with gnuplot, demo-rl/curve.png (see scripts/toy-rl).
demo-rl: all
	PATH=$(CURDIR)/$(BIN):$(CURDIR)/scripts:$$PATH sh scripts/toy-rl -n 30 -o demo-rl

# The three training steps against the same steps in PyTorch (bench/bench-rl.sh;
# on a GPU machine: make bench-rl BENCH_RL="--device cuda --shape 0.5b --tokens 32768").
bench-rl: all
	CA_BIN=$(CURDIR)/$(BIN) sh bench/bench-rl.sh $(BENCH_RL)

# The policy engine's CUDA backend (issue 6), optional and not part of `all`:
# `make model-cuda` compiles lib/model/cuda/*.cu with nvcc into
# $(BIN)/libca-model-cuda.so, which the training commands dlopen for
# --device cuda (so `make` and `make check` need no CUDA), and links the
# GPU tests and benchmark: $(BIN)/test-model-cuda (tests/cuda, run by
# tests/gpu/t0500), $(BIN)/test-train-cuda (tests/cuda, t0510) and
# $(BIN)/bench-train-cuda (bench/).
MODEL_CUDA_ARCH ?= sm_90
MODEL_CUDA_OBJ := $(patsubst lib/model/cuda/%.cu,$(BUILD)/cuda/%.o,$(wildcard lib/model/cuda/*.cu))
MODEL_CUDA_LIBS = -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++ -lm
model-cuda: $(BIN)/test-model-cuda $(BIN)/test-train-cuda $(BIN)/bench-train-cuda $(BIN)/libca-model-cuda.so
$(BUILD)/cuda/%.o: lib/model/cuda/%.cu $(wildcard lib/model/cuda/*.h) $(LIB_HDR)
	@test -n "$(NVCC)" || { echo "model-cuda: nvcc not found" >&2; exit 1; }
	@mkdir -p $(@D)
	$(NVCC) -O3 -std=c++17 -arch=$(MODEL_CUDA_ARCH) -Xcompiler -fPIC,-Wall $(LIB_INC_model) -c -o $@ $<
$(BIN)/test-model-cuda $(BIN)/test-train-cuda: $(BIN)/%: tests/cuda/%.c $(MODEL_CUDA_OBJ) $(LIBCA) $(LIB_HDR)
	@mkdir -p $(@D)
	$(CC) $(CA_CFLAGS) $(LIB_INC) $(LDFLAGS) -o $@ $< $(MODEL_CUDA_OBJ) $(LIBCA) $(LDLIBS) $(MODEL_CUDA_LIBS)
$(BIN)/bench-train-cuda: bench/bench-train-cuda.c $(MODEL_CUDA_OBJ) $(LIBCA) $(LIB_HDR)
	@mkdir -p $(@D)
	$(CC) $(CA_CFLAGS) $(LIB_INC) $(LDFLAGS) -o $@ $< $(MODEL_CUDA_OBJ) $(LIBCA) $(LDLIBS) $(MODEL_CUDA_LIBS)
# lib/core/err.c built position-independent for the library, which links none of libca.a.
$(BUILD)/cuda/err.o: lib/core/err.c lib/core/err.h
	@mkdir -p $(@D)
	$(CC) $(CA_CFLAGS) -fPIC $(LIB_INC_core) -c -o $@ $<
$(BIN)/libca-model-cuda.so: $(MODEL_CUDA_OBJ) $(BUILD)/cuda/err.o
	@mkdir -p $(@D)
	$(CC) -shared -o $@ $(MODEL_CUDA_OBJ) $(BUILD)/cuda/err.o $(MODEL_CUDA_LIBS)

# The policy engine's CPU throughput against PyTorch (bench/bench-policy.sh, bench/policy-engine.md).
bench-policy: all
	CA_BIN=$(CURDIR)/$(BIN) sh bench/bench-policy.sh

deps:
	sh scripts/install-deps

install: all
	mkdir -p $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man7 $(DESTDIR)$(SHAREDIR)
	cp $(CMDS) $(DESTDIR)$(BINDIR)/
	if [ -n "$(CUPTI_SO)" ]; then cp $(CUPTI_SO) $(DESTDIR)$(BINDIR)/; fi
	if [ -f $(BIN)/libca-model-cuda.so ]; then cp $(BIN)/libca-model-cuda.so $(DESTDIR)$(BINDIR)/; fi
	for f in scripts/ca-* scripts/policy-*; do [ -f "$$f" ] && cp "$$f" $(DESTDIR)$(BINDIR)/; done; true
	cp man/*.1 $(DESTDIR)$(MANDIR)/man1/
	cp man/*.5 $(DESTDIR)$(MANDIR)/man5/
	cp man/*.7 $(DESTDIR)$(MANDIR)/man7/
	cp -R skills lib/py $(DESTDIR)$(SHAREDIR)/
	if [ -d scripts/slurm ]; then cp -R scripts/slurm $(DESTDIR)$(SHAREDIR)/; fi
	if [ -d data ]; then mkdir -p $(DESTDIR)$(SHAREDIR)/data && cp data/*.ndjson* data/README.md $(DESTDIR)$(SHAREDIR)/data/; fi

clean:
	rm -rf $(BUILD) build-asan $(BIN) bin-asan $(LIBCA)
