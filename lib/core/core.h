/*
 * core: the face of lib/core, what every subsystem and command stands on:
 * the record stream (ndjson), JSON helpers over libjq (json), diagnostics
 * and exit statuses (err), checked option parsing (opt), child processes
 * (proc), the sandbox for untrusted commands (sandbox), whole files and
 * trees (file), ca's own files at run time (paths), SHA-256 and content
 * hashes (hash), a string table (strmap), the seedable generator
 * (splitmix), the little HTTP a loopback service needs (http) and the
 * CPUs ranked by their speed now (cpu).
 *
 * lib/ has one folder per subsystem, and the header named after the folder
 * is its face: core/core.h, eval/eval.h, model/model.h, synth/synth.h,
 * rl/rl.h (README, Layout). core knows no subsystem: nothing in lib/core
 * includes a header of another folder (the Makefile gives it no other
 * include path; tests/t0005-layout.sh checks it).
 *
 * This header includes every core module's header; a file may as well
 * include only the modules it uses.
 */
#ifndef CA_CORE_H
#define CA_CORE_H

#include "cpu.h"
#include "err.h"
#include "file.h"
#include "hash.h"
#include "http.h"
#include "json.h"
#include "ndjson.h"
#include "opt.h"
#include "paths.h"
#include "proc.h"
#include "sandbox.h"
#include "splitmix.h"
#include "strmap.h"

#endif
