/*
 * eval: the face of lib/eval, the environment a candidate kernel meets:
 * ca-verify and ca-profile's engine (evaluate.h; the private
 * evaluate_impl.h says where a record goes through evaluate*.c), the
 * builds behind ca-build (build.h; build_impl.h private to build*.c),
 * nvcc's compile with its host and device halves side by side behind
 * ca-nvcc (nvcc.h), the tensor files that cross the sandbox (tensor.h), the trusted comparison
 * of outputs (compare.h), kernel tracing (cupti.h), the agent's tools
 * confined to a workspace (tools.h), and the one worker pool (pool.h:
 * records over N threads, released in input order) and runner protocol
 * (runner.h: a warm worker process's lines) that ca-verify, ca-profile,
 * ca-filter and ca-agent share.
 *
 * eval knows lib/core and nothing else; in particular it does not know the
 * policy engine (lib/model), and the model does not know it. See
 * core/core.h for the folders and their faces.
 *
 * This header includes every public eval header; a file may as well
 * include only the modules it uses.
 */
#ifndef CA_EVAL_H
#define CA_EVAL_H

#include "build.h"
#include "compare.h"
#include "cupti.h"
#include "evaluate.h"
#include "nvcc.h"
#include "pool.h"
#include "runner.h"
#include "tensor.h"
#include "tools.h"

#endif
