/*
 * eval: the face of lib/eval, the environment a candidate kernel meets:
 * ca-verify and ca-profile's engine (evaluate.h; the private
 * evaluate_impl.h says where a record goes through evaluate*.c), the
 * builds of ca-build, ca-verify and ca-profile (build.h; build_impl.h
 * private to build*.c), nvcc's compile with its host and device halves
 * side by side behind ca-nvcc (nvcc.h), the tensor files that cross the
 * sandbox (tensor.h), the trusted comparison of outputs (compare.h), kernel
 * tracing (cupti.h), the agent's tools confined to a workspace (tools.h),
 * and the one worker pool (pool.h: records over N threads, released in
 * input order, their untouched fields as read) and runner protocol
 * (runner.h: a warm worker process's lines) that ca-verify, ca-profile,
 * ca-filter and ca-agent share.
 *
 * A record in ca-verify: cmd/ca-verify.c parses the options into
 * ca_eval_option and hands over to ca_eval_run (evaluate.c), which gives
 * the stream to ca_eval_stream (evaluate_stream.c): one slot per GPU, each
 * a thread of the pool. In a slot, evaluate_record (evaluate.c) runs
 * job_prepare (evaluate_job.c: the candidate's private workspace; its
 * kernels built by ca_build_workspace in this thread, the compilers under
 * ca-sandbox; the reference task loaded in the trusted worker and the
 * candidate in a sandboxed one, evaluate_worker.c over runner.h), then
 * do_verify (evaluate_verify.c: checks judged by compare.h), and
 * finish_result gives the verdict and the exit status; the pool writes the
 * record in its turn (ca_pool_write). ca-profile takes the same road to
 * do_profile (evaluate_profile.c, evaluate_baseline.c, evaluate_clock.c).
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
