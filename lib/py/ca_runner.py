"""ca_runner: the one process type that runs PyTorch for ca's C commands.

ca-verify and ca-profile keep these as workers: a trusted reference worker
(the task's Model, input generation, baseline timing) and, per candidate, a
fresh worker inside ca-sandbox (the candidate's ModelNew). Everything the C
side decides -- whether outputs match, whether the timing is plausible --
it decides itself from tensor files and its own clocks; this process only
executes and reports.

Command line:
    python3 -B ca_runner.py --role reference|candidate [--device cuda|cpu]

Protocol: one JSON object per line. Requests arrive on stdin; replies go to
the file descriptor that was stdout at start (stdout itself is then pointed
at stderr, so a print() in task or candidate code cannot corrupt the
stream). The first line written is
    {"ready": true, "pid": N, "torch": "2.x", "device": "cuda:0"|"cpu",
     "gpu": "NVIDIA H200"|null, "tracer": "cupti"|"profiler"|"lazy"|null}
and every request gets exactly one reply, {"ok": true, ...} or
    {"ok": false, "stage": "load"|"weights"|"run"|"policy"|"time"|"protocol",
     "error": "one line", "detail": "traceback tail"}
except "time", which also writes {"timing": "start"} when its timed loop
begins, {"timing": "seed"} or {"timing": "input"} when it needs a timed
call's seed or shipped inputs (see "live"),
{"timing": "ready"} when a timed call's inputs are in place,
{"timing": "tick"} after each timed call and {"timing": "end"} when the
loop ends (before the kept outputs are written), so the parent can clock
the loop, each call and each call's inputs with its own wall clock.

Requests (paths are files; tensor files are described in lib/eval/tensor.h):
  {"op": "task", "path": P, "seed": S, "weights_out": P, "init_out": P}
      reference: load class Model, get_inputs and get_init_inputs from P;
      seed the generators with S, build Model(*get_init_inputs()) on the
      device in eval mode; write its state_dict and the init inputs.
      Reply adds "parameters" (count), "sha256" of the source and
      "sizes", the task's size globals and their values (see "resize").
  {"op": "inputs", "seed": S | "inputs": P, "out": P?, "ref_out": P?, "ref_digest": bool?,
   "robust": {"dist": D, "signed": bool, "seed": S}?}
      reference: draw the inputs under seed S (see Worker.make_inputs: on
      the GPU with it as the default device, else on the host; with
      robust, moved to distribution D by robust_inputs), or read
      them from the tensor file P, write
      them to out when given, run the reference on them and write its
      outputs to ref_out when given. Reply adds "gen" ("device"|"host")
      and "digest" (a fingerprint of the inputs; see digest()). With
      ref_digest (and no ref_out) the reference runs on them and the reply
      adds "out_digest" (_out_digest of its output) and "out_numel" (its
      elements), nothing written. With robust and ref_out the reply adds
      "out_usable" (the output can judge the check: finite, not all zero,
      not constant), "out_unusable_why" and "out_rms" (see _out_usable).
  {"op": "candidate", "path": P, "weights": P, "init": P, "seed": S,
   "allow_torch": bool, "kernels_lib": P|null, "task": P?, "ext_dir": P?,
   "ext_key": K?}
      candidate: import the task's module from task (for get_inputs
      only), import ModelNew from P (its directory first on sys.path,
      $CA_KERNELS_LIB set to kernels_lib, torch extensions built in
      /tmp/ca-ext-K seeded from and copied back to ext_dir, through
      ca-nvcc when the parent names it in $CA_NVCC), build
      ModelNew(*init), load the
      reference's weights strictly; a mismatch lists the keys.
  {"op": "resize", "sizes": {NAME: N, ...} | null, "seed": S, "probe_seed": S,
   "weights_out": P, "init_out": P}                        (reference)
  {"op": "resize", "sizes": {NAME: N, ...} | null, "seed": S, "weights": P,
   "init": P}                                              (candidate)
      the task at other sizes (verify --shapes): set the task module's
      size globals (the "sizes" of the task reply: see size_globals) to
      sizes, so get_inputs() and get_init_inputs() read them. The
      reference then builds Model(*get_init_inputs()) under seed S as
      "task" does, writes its state_dict and init inputs, runs it once on
      the inputs drawn under probe_seed and replies "out_usable" and
      "out_unusable_why" (see _out_usable); the candidate builds
      ModelNew(*init) and loads weights as "candidate" does. The model
      built replaces the current one; sizes null restores the task's own
      sizes and the model loaded first.
  {"op": "run", "inputs": P | "seed": S, "out": P, "trace": bool, "robust": R?}
      run the current model once on the inputs (read from the file
      inputs, or drawn here under seed S, and moved by robust, exactly as
      the reference draws them) under torch.no_grad(), synchronize, write
      the outputs to P.
      Reply adds "digest" of the inputs, "inputs_mutated" (bool),
      "forbidden" (torch operations the fallback policy refused,
      candidate role without allow_torch) and, with trace, "kernels":
      [{"name", "calls", "total_us"}] of the GPU kernels run.
  {"op": "time", "inputs": [P...] | "seeds": [S...], "live": N?, "warmup": W,
   "iters": N, "mode": "eager"|"compile"|"candidate", "compile_mode": M|null,
   "keep": [i...], "keep_after": bool, "keep_prefix": P, "trace": bool}
      time the model (torch.compile'd for "compile") by one method for all
      modes: with seeds, call c (warm-up calls counted) draws its inputs
      under its seed right before it (make_inputs: on the GPU,
      milliseconds), outside the call's time, and digests them; the
      parent gives one seed per call, so no call sees another's data.
      Without live, call c's seed is seeds[c % len(seeds)]. With live
      (N, the timed calls), seeds holds the warm-up calls' and right
      before each timed call's draw the worker writes {"timing": "seed"}
      and reads the call's seed from stdin, one line {"seed": S}: the
      parent answers only after the start line and the ticks of every
      timed call before (else it stops the worker: stage "timing"), so
      no timed call's inputs can be drawn (nor its output computed)
      before the calls before it are done; a bad line fails with stage
      "protocol".
      With inputs (files) and no live, the sets are loaded to the device
      once and before every call the working input tensors are refilled
      from set (call % sets). With inputs and live, the files are the
      warm-up calls' (cycled), and right before each timed call the
      worker writes {"timing": "input"} and reads one line {"input": P}:
      the parent answers, and only then puts the call's file at P, after
      the ticks of every timed call before (as with seeds); the call runs
      on the tensors read from P. Then the L2 cache is flushed by writing a buffer
      twice its size and the device is synchronized. On a GPU a call's time is the device time
      between CUDA events recorded on the current stream just before the
      call and just after it returns, plus its tail: how much longer than
      on an idle device the device-wide synchronize that follows takes
      (work left on side streams or running late is counted). On the CPU
      it is the host clock around the call. Outputs of timed calls listed
      in keep are written to keep_prefix + "<i>.ten". With keep_after, and
      when every timed call's output fits in RETAIN_BYTES together, a
      copy of each is kept instead, the end line is {"timing": "end",
      "ask": N} and the worker reads one line {"keep": [i...]} naming the
      calls to write: the parent chooses them after the loop, so the
      candidate cannot know which calls are checked ("kept_chosen":
      "after"; "before" when keep was used; the copies are allocated
      before the clocked loop, shaped like the last warm-up output). Each
      tick is {"timing": "tick", "d": [sum, sum of magnitudes, sum of
      squares, largest magnitude, signed sums...]}, the float64 digest of
      that call's output (see _out_digest), whose sums an output written
      after the loop must match
      and which, with keep used, the parent compares with the
      reference's on calls it picks after the loop; the kernels the
      digests launch are left out of "kernels" like the flushes (and
      the draws' and their digests' kernels, learnt on one draw before
      the trace starts). Reply adds
      "times_us" (timed calls), "median_us", "cv", "clock"
      ("cupti-window"|"cuda-events"|"host": see Worker._windowed),
      "host_median_us" (the median on the host
      clock from just before the call to after the device-wide
      synchronize), on a GPU "tail_median_us", "idle_sync_us" and
      "launch_median_us" (host time to the call's return), "sets"
      (distinct input sets the loop used), "kept": [{"index", "set",
      "path"}] (set: call % len(seeds or inputs), with live the call),
      "loop_s", "digests"
      (one per call drawn from seeds, one per set loaded from files) and,
      with trace, "kernels" (over the timed calls only).
  {"op": "burst", "seeds": [S...] | "inputs": [P...], "in_digests": bool}
      run the current model once per seed (or tensor file) back to back,
      nothing sent until the last: each call's inputs drawn under its
      seed as "time" draws them (or read from its file) while the call
      before runs, the L2 flushed, the call, the sums of the output
      before (see _out_sums), the next inputs, one synchronize; no line
      and no other wait between calls (see Worker.op_burst). The
      parent clocks the whole request from outside; the reference and the
      candidate run it on the same seeds, so the difference of the two is
      the calls' own (see lib/eval/evaluate_burst.c). Reply adds
      "digests" (one per call, as _out_digest's), "numel" (the elements
      of each call's output) and, with in_digests, "in_digests" (the
      inputs', see digest()).
  {"op": "digests", "seeds": [S...]}
      reference: draw the inputs under each seed, one set at a time, as
      "time" and "inputs" do, without running the model. Reply adds
      "digests" (one per seed) and "gen".
  {"op": "warm", "seed": S, "compile_mode": M?, "lock": P?}
      reference, after "task" while the candidate builds, when a profile
      will time torch.compile: compile the model as "time" does for mode
      "compile" and call it once on the inputs drawn under S, with file P
      (the GPU's lock, see lib/eval/evaluate_slot.c) locked shared around
      the call. The parent reads the reply only before its next request
      (worker_post in lib/eval/evaluate_worker.c), so the compile runs
      beside the build. Reply adds "seconds".
  {"op": "idle", "wait_s": W}
      reference, before and after each of its timed loops: whether the
      GPU is idle, by the median host round trip of five one-element
      kernels, each synchronized (tens of microseconds on an idle GPU;
      while another process's work is queued the GPU shares itself out
      between the contexts in time slices, and the round trip is the
      slice). While busy it probes again every 10 ms, for at most W
      seconds. Reply adds "idle" (the last probe under IDLE_PROBE_US),
      "waited_s" and "probe_us" (the last probe). On the CPU idle, at once.
  {"op": "exit"}
      reply and exit 0.
Any request may carry "cpu": C (ca-profile names it in "time" and
"burst", the same CPU to the reference and the candidate): the worker's
thread runs the request on CPU C alone and gets its CPUs back after it;
a C it cannot move to is ignored. Our clock compares the two processes'
own work around each call, and on a shared host some CPUs ran that work
1.4-1.75x slower than the others for seconds (see lib/eval/evaluate_slot.c).
Any request may carry "mem": true (a request of the reference's asked
again after it failed: lib/eval/evaluate_again.c): on the GPU its reply,
ok or not, adds "gpu_free" (the device's free bytes when the request came,
or when it ended less what it added to this process's reservation,
whichever is more) and "gpu_peak" (the most bytes this process reserved
while it ran).
"""

import argparse
import hashlib
import importlib.util
import json
import os
import re
import struct
import sys
import time
import traceback

import ca_clock

_perf = time.perf_counter
_proto = None
# CUDA event methods, bound when the worker starts, before any task or candidate
# code runs,
# so patching torch.cuda.Event later does not reach the timing loop.
_ev_record = _ev_sync = _ev_elapsed = None


def _span_us(start, end):
    """Device time between two recorded events, in microseconds."""
    return _ev_elapsed(start, end) * 1000.0

# ---------------------------------------------------------------- tensor files

MAGIC = b"CATENSOR"
VERSION = 1
SCALAR = 1
_DTYPES = None


def _dtypes():
    global _DTYPES
    if _DTYPES is None:
        import torch
        _DTYPES = {
            torch.float32: 1, torch.float64: 2, torch.float16: 3, torch.bfloat16: 4,
            torch.int8: 5, torch.int16: 6, torch.int32: 7, torch.int64: 8,
            torch.uint8: 9, torch.bool: 10,
        }
    return _DTYPES


def _flatten(value, prefix, out):
    import torch
    if isinstance(value, torch.Tensor):
        out.append((prefix, value))
    elif isinstance(value, tuple):
        for i, v in enumerate(value):
            _flatten(v, "%s(%d)" % (prefix, i), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _flatten(v, "%s[%d]" % (prefix, i), out)
    elif isinstance(value, dict):
        for k, v in value.items():
            _flatten(v, "%s{%s}" % (prefix, k), out)
    elif value is None or isinstance(value, (bool, int, float)):
        out.append((prefix, value))
    else:
        raise TypeError("cannot store a %s in a tensor file" % type(value).__name__)


def _entry_bytes(name, value):
    import torch
    flags, dims, raw = 0, (), b""
    if value is None:
        code = 0
    elif isinstance(value, torch.Tensor):
        t = value.detach()
        if t.dtype not in _dtypes():
            raise TypeError("%s: unsupported dtype %s" % (name or "output", t.dtype))
        code = _dtypes()[t.dtype]
        dims = tuple(t.shape)
        t = t.to("cpu").contiguous().reshape(-1)
        raw = memoryview(t.view(torch.uint8).numpy()) if t.numel() else b""
    else:
        flags = SCALAR
        if isinstance(value, bool):
            code, raw = 10, struct.pack("<?", value)
        elif isinstance(value, int):
            code, raw = 8, struct.pack("<q", value)
        else:
            code, raw = 2, struct.pack("<d", value)
    nb = name.encode("utf-8")
    head = struct.pack("<I", len(nb)) + nb + struct.pack("<BBH", code, flags, len(dims))
    head += b"".join(struct.pack("<q", d) for d in dims)
    head += struct.pack("<Q", raw.nbytes if isinstance(raw, memoryview) else len(raw))
    return head, raw


_STREAM_BYTES = 64 << 20
_pinned = None


def _write_streamed(f, t):
    """Write a large device tensor's bytes through a pinned host buffer, a
    chunk at a time: no host copy of the whole tensor (they reach gigabytes)."""
    import torch
    global _pinned
    flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
    if _pinned is None:
        try:
            _pinned = torch.empty(_STREAM_BYTES, dtype=torch.uint8, pin_memory=True)
        except Exception:
            _pinned = torch.empty(_STREAM_BYTES, dtype=torch.uint8)
    n = flat.numel()
    for off in range(0, n, _STREAM_BYTES):
        m = min(_STREAM_BYTES, n - off)
        _pinned[:m].copy_(flat[off:off + m])
        f.write(memoryview(_pinned[:m].numpy()))


def write_tensors(path, value, flat=False):
    """Write value (nested tuples/lists/dicts of tensors and numbers) to path.
    With flat=True, value is a dict whose keys are stored as names as they are."""
    import torch
    entries = list(value.items()) if flat else []
    if not flat:
        _flatten(value, "", entries)
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(MAGIC + struct.pack("<II", VERSION, len(entries)))
        for name, v in entries:
            if (isinstance(v, torch.Tensor) and v.is_cuda and v.dtype in _dtypes()
                    and v.numel() * v.element_size() > 2 * _STREAM_BYTES):
                # Its header as _entry_bytes would write it, then the data streamed.
                nb = name.encode("utf-8")
                head = struct.pack("<I", len(nb)) + nb + struct.pack("<BBH", _dtypes()[v.dtype], 0, v.dim())
                head += b"".join(struct.pack("<q", d) for d in v.shape)
                head += struct.pack("<Q", v.numel() * v.element_size())
                f.write(head)
                _write_streamed(f, v)
                continue
            head, raw = _entry_bytes(name, v)
            f.write(head)
            f.write(raw)
    os.replace(tmp, path)


def digest(inputs):
    """A short fingerprint of a list of inputs (dtypes, shapes, float64
    sums), cheap on the device: two processes that drew the same inputs
    give the same string."""
    return _digest_text(_digest_sums(inputs))


def _digest_sums(inputs):
    """digest() in two halves: this one launches the sums on the device
    and reads nothing back; _digest_text reads them and writes the
    string."""
    import torch
    parts = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            try:
                s = x.detach().sum(dtype=torch.float64) if x.numel() else "0"
            except Exception:
                s = "?"
            parts.append(("%s%s:" % (str(x.dtype).replace("torch.", ""), list(x.shape)), s))
        else:
            parts.append((repr(x)[:100], None))
    return parts


def _digest_text(parts):
    out = []
    for head, s in parts:
        if s is not None and not isinstance(s, str):
            try:
                s = repr(float(s))
            except Exception:
                s = "?"
        out.append(head + (s or ""))
    return ";".join(out)


def _read_entries(path):
    import torch
    by_code = {v: k for k, v in _dtypes().items()}
    out = []
    with open(path, "rb") as f:
        def take(n):
            b = f.read(n)
            if len(b) != n:
                raise ValueError("%s: truncated tensor file" % path)
            return b
        head = take(16)
        if head[:8] != MAGIC:
            raise ValueError("%s: not a tensor file" % path)
        version, count = struct.unpack_from("<II", head, 8)
        if version != VERSION:
            raise ValueError("%s: tensor file version %d" % (path, version))
        for _ in range(count):
            (nl,) = struct.unpack("<I", take(4))
            name = take(nl).decode("utf-8")
            code, flags, ndim = struct.unpack("<BBH", take(4))
            dims = struct.unpack("<%dq" % ndim, take(8 * ndim))
            (nbytes,) = struct.unpack("<Q", take(8))
            if code == 0:
                out.append((name, None))
                continue
            if flags & SCALAR:
                raw = take(nbytes)
                if code == 10:
                    out.append((name, struct.unpack("<?", raw)[0]))
                elif code == 8:
                    out.append((name, struct.unpack("<q", raw)[0]))
                else:
                    out.append((name, struct.unpack("<d", raw)[0]))
                continue
            dtype = by_code[code]
            if nbytes:
                buf = bytearray(nbytes)
                if f.readinto(buf) != nbytes:
                    raise ValueError("%s: truncated tensor file" % path)
                t = torch.frombuffer(buf, dtype=torch.uint8).view(dtype)
            else:
                t = torch.empty(0, dtype=dtype)
            out.append((name, t.reshape(dims)))
    return out


def _parse_path(name):
    parts, i = [], 0
    closing = {"(": ")", "[": "]", "{": "}"}
    while i < len(name):
        kind = name[i]
        j = name.index(closing[kind], i + 1)
        key = name[i + 1:j]
        parts.append((kind, key if kind == "{" else int(key)))
        i = j + 1
    return parts


def _build(items):
    """items: list of (parts, value) sharing a prefix already stripped."""
    if len(items) == 1 and not items[0][0]:
        return items[0][1]
    kind = items[0][0][0][0]
    groups, order = {}, []
    for parts, value in items:
        key = parts[0][1]
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append((parts[1:], value))
    children = [(k, _build(groups[k])) for k in order]
    if kind == "{":
        return dict(children)
    seq = [v for _, v in children]
    return tuple(seq) if kind == "(" else seq


def read_tensors(path, flat=False):
    entries = _read_entries(path)
    if flat:
        return dict(entries)
    if not entries:
        return []
    return _build([(_parse_path(n), v) for n, v in entries])


# ---------------------------------------------------------------- fallback policy

# ATen operations a candidate may call while its forward runs: creation,
# views, metadata, copies and conversions. Anything else is compute that
# the candidate's own kernels must do (see ca-verify(1)).
ALLOWED_ATEN = frozenset("""
empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like
ones ones_like full full_like new_zeros new_ones new_full fill fill_ zero_
scalar_tensor arange lift_fresh lift_fresh_copy resize_ set_
view _unsafe_view view_as reshape _reshape_alias as_strided expand expand_as
permute transpose t numpy_T unsqueeze squeeze select slice narrow detach
alias unbind split split_with_sizes chunk unfold diagonal movedim flatten
unflatten view_as_real view_as_complex real imag
clone contiguous copy_ _to_copy to _copy_from _copy_from_and_resize
_local_scalar_dense item size stride sym_size sym_stride sym_numel
sym_storage_offset is_contiguous record_stream _has_compatible_shallow_copy_type
""".split())

# GPU kernel names that mean ATen or torch.compile did the compute. The
# allowed copies and fills launch kernels too; those are let through.
FORBIDDEN_KERNEL_MARKS = ("at::native", "at6native", "at_cuda_detail", "cunn_",
                          "softmax_warp", "triton_")
ALLOWED_KERNEL_MARKS = ("FillFunctor", "fill_kernel", "copy_kernel", "CopyKernel",
                        "direct_copy", "copy_device_to_device")


def forbidden_kernels(kernels):
    bad = []
    for k in kernels:
        n = k["name"]
        if any(m in n for m in FORBIDDEN_KERNEL_MARKS) and not any(m in n for m in ALLOWED_KERNEL_MARKS):
            bad.append(n)
    return bad


class _Violation(RuntimeError):
    pass


def _where(workspace):
    """The candidate's innermost source line on the stack, for messages."""
    for frame in reversed(traceback.extract_stack()):
        if workspace and frame.filename.startswith(workspace):
            return "%s:%d" % (os.path.basename(frame.filename), frame.lineno)
    return None


def make_guard(workspace):
    from torch.utils._python_dispatch import TorchDispatchMode

    class FallbackGuard(TorchDispatchMode):
        """Refuses ATen compute while the candidate's forward runs; every
        refusal is also recorded, so catching the exception does not help."""

        def __init__(self):
            super().__init__()
            self.violations = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
            if name not in ALLOWED_ATEN:
                where = _where(workspace)
                what = "aten::%s%s" % (name, " at " + where if where else "")
                if what not in self.violations:
                    self.violations.append(what)
                raise _Violation("torch fallback refused: %s (the forward must use its own kernels; "
                                 "see ca-verify(1) FALLBACK POLICY)" % what)
            return func(*args, **(kwargs or {}))

    _skip_dynamo_disable(FallbackGuard)
    return FallbackGuard()


def _refuse_compile():
    """torch.compile and torch._dynamo.optimize refused in a candidate. The
    latter is patched when torch._dynamo is first imported (an import hook:
    importing it here would cost seconds of every candidate's start-up)."""
    import torch

    def refused(*args, **kwargs):
        raise _Violation("torch fallback refused: torch.compile is not allowed in a candidate")
    torch.compile = refused
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.optimize = refused
        return

    class _PatchDynamo:
        def find_spec(self, name, path=None, target=None):
            if name != "torch._dynamo":
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    real = spec.loader.exec_module

                    def exec_module(module, real=real):
                        real(module)
                        module.optimize = refused
                    spec.loader.exec_module = exec_module
                    return spec
            return None

    sys.meta_path.insert(0, _PatchDynamo())
    try:
        from torch.utils import _python_dispatch
    except ImportError:
        return
    _skip_dynamo_disable(_python_dispatch.TorchDispatchMode, _python_dispatch)


def _skip_dynamo_disable(*owners):
    """Functions torch wraps in torch._disable_dynamo import torch._dynamo
    at their first call, to build their disabled form: a TorchDispatchMode
    subclass's __torch_dispatch__ among them, so a candidate's first guarded check
    paid that import (about a second from bytecode, with the GIL held, on
    the H200: checks 1.7-1.9 s against 0.7 in a warm worker). With
    torch.compile refused, dynamo never traces in a candidate and the
    disabled form is the function itself, so each wrapper in owners (classes
    or modules) is given that: TorchDispatchMode and its module once, when
    compile is refused; each guard class as it is made."""
    import torch
    wrap = getattr(torch, "_disable_dynamo", None)
    if wrap is None:
        return
    try:
        code = wrap(lambda: None).__code__
    except Exception:
        return
    for owner in owners:
        for f in list(vars(owner).values()):
            raw = getattr(f, "__wrapped__", None)
            if getattr(f, "__code__", None) is code and raw is not None \
                    and getattr(raw, "__dynamo_disable", None) is None:
                try:
                    raw.__dynamo_disable = raw
                except (AttributeError, TypeError):
                    pass


# ---------------------------------------------------------------- kernel tracing

class _CuptiEarly:
    """Loading the CUPTI shim ($CA_CUPTI_LIB) and registering its callbacks
    takes seconds; a candidate starts it in a thread of its own before it
    imports torch (ctypes calls release the interpreter), and its Tracer
    waits for it before CUDA is touched or any candidate code is imported."""

    def __init__(self):
        self.lib = self.error = None
        self.thread = None

    def run(self):
        path = os.environ.get("CA_CUPTI_LIB")
        if not path or not os.path.isfile(path):
            return
        try:
            import ctypes
            lib = ctypes.CDLL(path)
            lib.ca_cupti_name.restype = ctypes.c_char_p
            lib.ca_cupti_calls.restype = ctypes.c_ulonglong
            lib.ca_cupti_total_ns.restype = ctypes.c_ulonglong
            lib.ca_cupti_now.restype = ctypes.c_ulonglong
            lib.ca_cupti_window.restype = ctypes.c_long
            lib.ca_cupti_window.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong,
                                            ctypes.POINTER(ctypes.c_ulonglong),
                                            ctypes.POINTER(ctypes.c_ulonglong)]
            if lib.ca_cupti_init() == 0:
                self.lib = lib
            else:
                self.error = "ca_cupti_init failed"
        except Exception as e:
            self.error = e

    def start(self):
        import threading
        self.thread = threading.Thread(target=self.run, name="ca-cupti", daemon=True)
        self.thread.start()
        return self

    def join(self):
        if self.thread is not None:
            self.thread.join()
            self.thread = None


class Tracer:
    """GPU kernel activity: the CUPTI shim when $CA_CUPTI_LIB loads, else
    torch.profiler (run requests only), else nothing."""

    def __init__(self, device, early=None):
        self.kind = None
        self.lib = None
        self._prof = None
        if device != "cuda":
            return
        if early is None:
            early = _CuptiEarly()
            early.run()
        else:
            early.join()
        if early.lib is not None:
            self.lib, self.kind = early.lib, "cupti"
        elif early.error is not None:
            print("ca_runner: CUPTI shim unusable: %s" % early.error, file=sys.stderr)
        if self.kind is None:
            self.kind = "profiler"

    def start(self, timing=False):
        if self.kind == "cupti":
            self.lib.ca_cupti_start()
        elif self.kind == "profiler" and not timing:
            import torch
            self._prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
            self._prof.__enter__()

    def window(self, t0, t1):
        """After stop: the device's first and last busy moment (ns, on
        the clock of lib.ca_cupti_now, which op_time brackets its calls
        with) between t0 and t1, over kernels, copies and memsets
        on every stream, with how many there were; None when spans were
        lost."""
        import ctypes
        first, last = ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)
        n = self.lib.ca_cupti_window(t0, t1, ctypes.byref(first), ctypes.byref(last))
        return None if n < 0 else (first.value, last.value, n)

    def stop(self):
        if self.kind == "cupti":
            self.lib.ca_cupti_stop()
            out = []
            for i in range(self.lib.ca_cupti_count()):
                out.append({"name": self.lib.ca_cupti_name(i).decode("utf-8", "replace"),
                            "calls": int(self.lib.ca_cupti_calls(i)),
                            "total_us": self.lib.ca_cupti_total_ns(i) / 1000.0})
            return sorted(out, key=lambda k: -k["total_us"])
        if self._prof is not None:
            prof, self._prof = self._prof, None
            prof.__exit__(None, None, None)
            out = []
            for e in prof.key_averages():
                us = 0.0
                for attr in ("self_device_time_total", "self_cuda_time_total", "device_time_total"):
                    if hasattr(e, attr):
                        us = float(getattr(e, attr))
                        break
                if us <= 0:
                    continue
                out.append({"name": e.key, "calls": int(e.count), "total_us": us})
            return sorted(out, key=lambda k: -k["total_us"])
        return None


# ---------------------------------------------------------------- the worker

class Worker:
    def __init__(self, role, device, early=None):
        import torch
        if early is not None:
            early.join()  # the tracer's callbacks in place before CUDA starts
        self.torch = torch
        self.role = role
        self.device = device
        if device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("no CUDA device is available to this process")
        self.dev = torch.device("cuda:0" if device == "cuda" else "cpu")
        self.module = None
        self.task = None         # the module whose get_inputs() draws inputs
        self.gen = None          # "device" or "host": where get_inputs() ran
        self.model = None
        self.compiled = None
        self.workspace = None
        self.allow_torch = True
        self._base = None        # (model, size globals) of the benchmark while resized
        # The candidate's tracer is set up before its code is imported; the
        # reference's when it first times (cached baselines never do).
        self._tracer = Tracer(device, early) if role == "candidate" else None
        self.flush_buffer = None
        self._probe = None       # op_idle's one-element tensor
        if device == "cuda":
            global _ev_record, _ev_sync, _ev_elapsed
            _ev_record = torch.cuda.Event.record
            _ev_sync = torch.cuda.Event.synchronize
            _ev_elapsed = torch.cuda.Event.elapsed_time
            self.flush_buffer = ca_clock.flush_buffer(torch, self.dev)
        if role == "candidate":
            _refuse_compile()

    def hello(self):
        t = self.torch
        return {"ready": True, "pid": os.getpid(), "torch": t.__version__, "device": str(self.dev),
                "gpu": t.cuda.get_device_name(0) if self.device == "cuda" else None,
                "tracer": self._tracer.kind if self._tracer else "lazy"}

    @property
    def tracer(self):
        if self._tracer is None:
            self._tracer = Tracer(self.device)
        return self._tracer

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def seed(self, s):
        import random
        random.seed(s)
        self.torch.manual_seed(s)
        try:
            import numpy
            numpy.random.seed(s % (1 << 32))
        except ImportError:
            pass

    def _import(self, path, name):
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None:
            raise ImportError("cannot import %s" % path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        # A task's or candidate's own module: no bytecode of it kept (see _bytecode).
        keep, sys.dont_write_bytecode = sys.dont_write_bytecode, True
        try:
            spec.loader.exec_module(mod)
        finally:
            sys.dont_write_bytecode = keep
        return mod

    def make_inputs(self, seed):
        """Draw the task's inputs under seed. On a GPU, get_inputs() runs
        with the device as the default device, so its tensors are made
        there (gigabytes of input cost milliseconds, and every process that
        asks with the same seed gets the same values); a get_inputs() that
        cannot run that way runs on the host. Both roles follow the same
        rule, so the reference and the candidate draw the same inputs each
        in its own process; the parent compares their digests."""
        t = self.torch
        if self.task is None:
            raise RuntimeError("no task loaded")
        if self.device == "cuda" and self.gen != "host":
            self.seed(seed)
            try:
                with t.device(self.dev):
                    inputs = list(self.task.get_inputs())
                self.gen = "device"
                return self.to_device(inputs)
            except Exception:
                if self.gen == "device":
                    raise
                self.gen = "host"
        self.seed(seed)
        inputs = list(self.task.get_inputs())
        self.gen = self.gen or "host"
        return self.to_device(inputs)

    def draw(self, seed, robust=None):
        """make_inputs under seed, moved by a robustness check's spec
        (robust_inputs) when one is given."""
        inputs = self.make_inputs(seed)
        return robust_inputs(inputs, robust) if robust else inputs

    def load_inputs(self, req, key, one):
        """Inputs of a run or time request: from tensor files (key names
        them) or drawn here from seeds."""
        if req.get(key):
            paths = [req[key]] if one else req[key]
            sets = [self.to_device(read_tensors(p)) for p in paths]
        else:
            seeds = [req["seed"]] if one else req["seeds"]
            sets = [self.draw(int(s), req.get("robust")) for s in seeds]
        return sets

    def to_device(self, value):
        return _map_tensors(value, lambda x: x.to(self.dev))

    # -- requests

    def op_task(self, req):
        with open(req["path"], "rb") as f:
            source = f.read()
        self.module = self._import(req["path"], "ca_task_%d" % (abs(hash(req["path"])) % 10 ** 8))
        self.task = self.module
        self.gen = None
        self._base = None
        self.seed(int(req.get("seed", 0)))
        init = list(self.module.get_init_inputs())
        self.model = self.module.Model(*init).to(self.dev).eval()
        self.compiled = None
        write_tensors(req["weights_out"], dict(self.model.state_dict()), flat=True)
        write_tensors(req["init_out"], init)
        try:  # for --shapes only: a task it cannot read still loads
            sizes = {k: getattr(self.module, k) for k in size_globals(self.module)}
        except Exception:
            sizes = {}
        return {"parameters": sum(p.numel() for p in self.model.parameters()),
                "sha256": hashlib.sha256(source).hexdigest(), "sizes": sizes}

    def op_inputs(self, req):
        if not (req.get("ref_out") or req.get("ref_digest")):
            _warm_done()  # a draw for the profile's loop: a timed loop comes next
        if req.get("inputs"):
            inputs = self.to_device(read_tensors(req["inputs"]))
        else:
            inputs = self.draw(int(req["seed"]), req.get("robust"))
        reply = {"gen": self.gen, "digest": digest(inputs)}
        if req.get("out"):
            write_tensors(req["out"], inputs)
        if req.get("ref_out"):
            # Run the reference on them at once.
            reply.update(self._run(inputs, req["ref_out"], False, usable=bool(req.get("robust"))))
        elif req.get("ref_digest"):
            # Run the reference and give only its output's digest and size.
            out = self._forward(self.model, inputs)
            self.sync()
            parts = _leaves(out)
            reply["out_digest"] = _out_digest(parts)
            reply["out_numel"] = sum(v.numel() if isinstance(v, self.torch.Tensor) else 1
                                     for _, v in parts if v is not None)
        return reply

    def op_digests(self, req):
        """The digests of the inputs drawn under each seed, one set at a
        time; the model is not run."""
        _warm_done()  # the profile's sets: a timed loop comes next
        return {"digests": [digest(self.make_inputs(int(s))) for s in req["seeds"]], "gen": self.gen}

    def op_candidate(self, req):
        path = os.path.abspath(req["path"])
        self.workspace = os.path.dirname(path) + os.sep
        self.allow_torch = bool(req.get("allow_torch"))
        if req.get("kernels_lib"):
            os.environ["CA_KERNELS_LIB"] = req["kernels_lib"]
        ext = None
        if req.get("ext_dir"):
            # torch extensions built at import (load_inline) are built in a
            # directory whose path is the same in every process of this
            # candidate (ninja rebuilds what moved), seeded from ext_dir
            # where the parent put an earlier build, and copied back there.
            import shutil
            ext = (req["ext_dir"], "/tmp/ca-ext-%s" % req.get("ext_key", "x"))
            if os.listdir(ext[0]):
                _copy_entries(ext[0], ext[1])
            os.makedirs(ext[1], exist_ok=True)
            os.environ["TORCH_EXTENSIONS_DIR"] = ext[1]
            _use_ca_nvcc()
            _light_headers()
        if req.get("task"):
            # The task's module, for its get_inputs() only: inputs are drawn here.
            self.task = self._import(req["task"], "ca_task")
            self.gen = None
        sys.path.insert(0, os.path.dirname(path))
        self.seed(int(req.get("seed", 0)))
        init = read_tensors(req["init"])
        self.module = _loading(lambda: self._import(path, "model_new"))
        self.model = _loading(lambda: self.module.ModelNew(*init))
        if ext is not None and not os.listdir(ext[0]):
            _copy_entries(ext[1], ext[0])
        self.model = self._load_weights(self.model, req["weights"])
        return {}

    def _load_weights(self, model, path):
        """model with the reference's weights from path loaded strictly, on
        the device in eval mode; a mismatch lists the keys (stage weights)."""
        weights = read_tensors(path, flat=True)
        own = model.state_dict()
        missing = [k for k in weights if k not in own]
        extra = [k for k in own if k not in weights]
        shapes = ["%s %s vs %s" % (k, list(own[k].shape), list(weights[k].shape))
                  for k in weights if k in own and own[k].shape != weights[k].shape]
        if missing or extra or shapes:
            parts = []
            if missing:
                parts.append("missing in ModelNew: " + ", ".join(missing[:20]))
            if extra:
                parts.append("not in the reference: " + ", ".join(extra[:20]))
            if shapes:
                parts.append("shapes differ (candidate vs reference): " + ", ".join(shapes[:20]))
            raise _Stage("weights", RuntimeError(
                "ModelNew's state_dict does not match the reference's: " + "; ".join(parts)))
        try:
            model.load_state_dict(weights, strict=True)
            return model.to(self.dev).eval()
        except Exception as e:
            raise _Stage("weights", e)

    def _set_sizes(self, sizes):
        """The task module's size globals set to sizes, or back to the
        benchmark's (and the benchmark's model back) when sizes is None."""
        if self._base is None:
            self._base = (self.model, {k: getattr(self.task, k) for k in size_globals(self.task)})
        model, base = self._base
        if sizes is None:
            for k, v in base.items():
                setattr(self.task, k, v)
            self.model, self._base = model, None
            return False
        for k, v in sizes.items():
            if k not in base:
                raise _Stage("protocol", RuntimeError("%r is not one of the task's size globals" % k))
            setattr(self.task, k, int(v))
        return True

    def op_resize(self, req):
        """The task at other sizes (see "resize" above): the reference
        builds Model at them, writes its weights and init inputs and runs
        it once on a draw; the candidate builds ModelNew with those."""
        if self.task is None:
            raise _Stage("protocol", RuntimeError("no task loaded"))
        if not self._set_sizes(req.get("sizes")):
            return {}
        self.seed(int(req.get("seed", 0)))
        if self.role == "candidate":
            init = read_tensors(req["init"])
            self.model = self._load_weights(_loading(lambda: self.module.ModelNew(*init)), req["weights"])
            return {}
        init = list(self.task.get_init_inputs())
        self.model = self.task.Model(*init).to(self.dev).eval()
        write_tensors(req["weights_out"], dict(self.model.state_dict()), flat=True)
        write_tensors(req["init_out"], init)
        out = self._forward(self.model, self.make_inputs(int(req["probe_seed"])))
        self.sync()
        ok, why, _ = _out_usable(_leaves(out))
        return {"out_usable": ok, "out_unusable_why": why}

    def _forward(self, model, inputs):
        with self.torch.no_grad():
            return model(*inputs)

    def op_run(self, req):
        inputs = self.load_inputs(req, "inputs", True)[0]
        d = digest(inputs)
        reply = self._run(inputs, req["out"], req.get("trace"))
        reply["digest"] = d
        return reply

    def _run(self, inputs, out_path, trace, usable=False):
        t = self.torch
        before = [x.clone() if isinstance(x, t.Tensor) else None for x in inputs]
        self.sync()
        guard = None
        if self.role == "candidate" and not self.allow_torch:
            guard = make_guard(self.workspace)
        if trace:
            self.tracer.start()
        error = None
        try:
            if guard is not None:
                with guard:
                    out = self._forward(self.model, inputs)
            else:
                out = self._forward(self.model, inputs)
            self.sync()
        except Exception as e:
            error = e
        kernels = self.tracer.stop() if trace else None
        reply = {}
        if kernels is not None:
            reply["kernels"] = kernels[:50]
        if guard is not None and guard.violations:
            reply.update({"ok": False, "stage": "policy", "forbidden": guard.violations,
                          "error": "torch fallback refused: " + ", ".join(guard.violations[:5])})
            return reply
        if error is not None:
            raise _Stage("run", error)
        mutated = any(b is not None and not t.equal(b, x) for b, x in zip(before, inputs))
        write_tensors(out_path, out)
        reply.update({"inputs_mutated": mutated, "forbidden": []})
        if usable:
            ok, why, rms = _out_usable(_leaves(out))
            reply.update({"out_usable": ok, "out_unusable_why": why, "out_rms": rms})
        return reply

    def _compiled_model(self, cm):
        """The task's model through torch.compile (mode cm), made once per task."""
        if self.compiled is None:
            self.compiled = self.torch.compile(self.model, mode=None if cm in (None, "default") else cm)
        return self.compiled

    def op_warm(self, req):
        _warm_done()
        start = _perf()
        model = self._compiled_model(req.get("compile_mode"))
        inputs = self.make_inputs(int(req.get("seed", 0)))
        lock = None
        if req.get("lock"):
            import fcntl
            lock = os.open(req["lock"], os.O_RDWR | os.O_CLOEXEC)
            fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            self._forward(model, inputs)
            self.sync()
        finally:
            if lock is not None:
                os.close(lock)
        return {"seconds": _perf() - start}

    def op_time(self, req):
        _warm_done()
        t = self.torch
        mode = req.get("mode", "eager")
        model = self.model
        if mode == "compile":
            model = self._compiled_model(req.get("compile_mode"))
        warmup, iters = int(req.get("warmup", 3)), int(req.get("iters", 20))
        live = int(req.get("live") or 0)
        if live and live != iters:
            raise _Stage("protocol", "live seeds or inputs for %d calls, %d timed" % (live, iters))
        if req.get("inputs"):
            # Shipped sets: loaded once, the working tensors refilled from
            # set (call % sets) before every call. With live, these are the
            # warm-up calls' only, and each timed call's file is named by
            # the parent right before the call (see _live_input), its
            # tensors loaded then and used as they are.
            sets = self.load_inputs(req, "inputs", False)
            digests = [digest(x) for x in sets]
            work = [x.clone() if isinstance(x, t.Tensor) else x for x in sets[0]]
            seeds = None
            distinct = None if live else min(len(sets), warmup + iters)
        else:
            # Drawn here: every call's inputs under its own seed, right
            # before it (one set in memory), so no call sees another's data.
            # With live, the warm-up calls' seeds come in seeds and every
            # timed call's seed is read from the parent right before its
            # draw (see _live_seed), so none can be known before the loop.
            seeds = [int(x) for x in req.get("seeds", [])]
            digests, work = [], None
            distinct = None
        if seeds is not None and not seeds and (warmup or not live):
            raise _Stage("protocol", "no seeds to draw the calls' inputs under")
        used = []
        # The index of call c's inputs among the sets or seeds (with live
        # seeds, the call's own index).
        nsets = warmup + iters if live else (len(sets) if seeds is None else len(seeds))
        keep = set(int(i) for i in req.get("keep", []))
        # keep_after: a copy of every timed call's output is kept (when they
        # fit in RETAIN_BYTES), and the parent names the calls it checks
        # only after the loop, so a candidate cannot know which calls count.
        keep_after = bool(req.get("keep_after"))
        retain = None
        cuda = self.device == "cuda"
        if cuda:
            # The stream the events go on: the current one now, whatever
            # the candidate makes current later (its work elsewhere is
            # counted by the tail, below).
            stream = t.cuda.current_stream()
            starts = [t.cuda.Event(enable_timing=True) for _ in range(iters)]
            ends = [t.cuda.Event(enable_timing=True) for _ in range(iters)]
            spare = (t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True))
        # The device window of each timed call from CUPTI's records (see
        # below), when its shim traces this loop.
        windowed = cuda and bool(req.get("trace")) and self.tracer.kind == "cupti"
        now = self.tracer.lib.ca_cupti_now if windowed else None
        host, tails, launches, brackets, kept, shapes = [], [], [], [], [], []
        out, slots = None, None
        flush_kernels = draw_kernels = {}
        loop_start = None
        idle_us = 0.0
        for i in range(warmup + iters):
            timed = i >= warmup
            if i == warmup:
                if keep_after and i > 0 and _tree_bytes(_leaves(out)) * iters <= RETAIN_BYTES:
                    # The copies of the timed outputs are allocated now, shaped
                    # like the last warm-up output: allocated inside the loop
                    # they take the blocks the caching allocator freed, and the
                    # next call's output needs a fresh cudaMalloc inside its
                    # clocked span (on the H200: +0.3 ms on a 2.7 ms matmul,
                    # and three profiles 5.1% apart instead of 1.4%).
                    retain = True
                    slots = [(x, _leaves(x)) for x in (_alloc_like(out) for _ in range(iters))]
                self.sync()
                if cuda:
                    idle_us = self._idle_sync_us()
                if req.get("trace"):
                    # Set up before the parent's clock starts: the first
                    # start of a tracer is slow, and the parent takes the
                    # reference's untimed time per loop for overhead.
                    flush_kernels = self._flush_kernels()
                    if seeds is not None:
                        # Drawing and digesting a call's inputs is the
                        # loop's own work too (ATen's random kernels).
                        work = None
                        learn_seed = seeds[warmup % len(seeds)] if seeds else 0
                        draw_kernels = self._learn_kernels(
                            lambda: digest(self.make_inputs(learn_seed)))
                    self.tracer.start(timing=True)
                _send({"timing": "start"})
                loop_start = _perf()
            if seeds is None and live and timed:
                work = None
                path = _live_input()
                used.append(path)
                work = self.to_device(read_tensors(path))
            elif seeds is None:
                for w, s in zip(work, sets[i % len(sets)]):
                    if isinstance(w, t.Tensor):
                        w.copy_(s)
            else:
                work = None
                seed = _live_seed() if live and timed else seeds[i % len(seeds)]
                used.append(seed)
                work = self.make_inputs(seed)
                digests.append(digest(work))
            if timed:
                # The inputs are in place: the parent clocks the draw and
                # the call apart (a draw can cost more than the call).
                _send({"timing": "ready"})
            if self.flush_buffer is not None:
                self.flush_buffer.zero_()
            self.sync()
            if cuda:
                # Device clock: events on the stream around the call. The
                # start event fires at once (the device is idle), so the
                # host's launch latency before the first kernel is in the
                # span; the host's wake-up from the final synchronize is
                # not. Then the tail: a device-wide synchronize once the
                # stream is done, which takes as long as work left on
                # other streams keeps the device busy. With CUPTI, the
                # call is also bracketed on CUPTI's clock (c0 before the
                # start event, c1 after the synchronize) for its device
                # window, and the host's time to the call's return
                # (launch) is kept: see the times below.
                a, b = (starts[i - warmup], ends[i - warmup]) if timed else spare
                c0 = now() if windowed else 0
                h0 = _perf()
                _ev_record(a, stream)
                out = self._forward(model, work)
                hl = _perf()
                _ev_record(b, stream)
                _ev_sync(b)
                h1 = _perf()
                self.sync()
                h2 = _perf()
                c1 = now() if windowed else 0
                if timed:
                    host.append((h2 - h0) * 1e6)
                    tails.append((h2 - h1) * 1e6)
                    launches.append((hl - h0) * 1e6)
                    brackets.append((c0, c1))
            else:
                h0 = _perf()
                out = self._forward(model, work)
                h2 = _perf()
                if timed:
                    host.append((h2 - h0) * 1e6)
            # The output's entries, walked once for the copy, the digest and its shape.
            parts = _leaves(out) if timed else None
            if timed and retain is None:
                retain = keep_after and _tree_bytes(parts) * iters <= RETAIN_BYTES
            if timed and (retain or (i - warmup) in keep):
                # A copy on the device now; files after the clocked loop.
                copy = _copy_into(slots[i - warmup], parts) if slots else None
                kept.append((i - warmup, i % nsets, copy if copy is not None else _clone_tree(out)))
            if timed:
                # The parent clocks every call from outside with these. Each
                # carries the output's digest: with checks chosen after the
                # loop the output written later must match it, so the work
                # cannot be left for after the loop; with checks named before
                # it, the parent compares the digests of calls it picks after
                # the loop with the reference's on the same inputs.
                shapes.append(_digest_shape(parts))
                _send({"timing": "tick", "d": _out_digest(parts)})
        self.sync()
        loop_s = _perf() - loop_start if loop_start is not None else 0.0
        if retain:
            # The parent answers with the calls whose outputs it checks.
            _send({"timing": "end", "ask": len(kept)})
            line = sys.stdin.readline()
            try:
                asked = set(int(x) for x in json.loads(line)["keep"])
            except (ValueError, KeyError, TypeError):
                raise _Stage("protocol", "no list of calls to check after the timed loop")
            kept = [k for k in kept if k[0] in asked]
        else:
            _send({"timing": "end"})
        kernels = self.tracer.stop() if req.get("trace") else None
        # The times first: learning the digests' kernels below starts the
        # tracer again, which clears the spans the windows are read from.
        clock = "cuda-events" if cuda else "host"
        if cuda:
            spans = [_span_us(a, b) for a, b in zip(starts, ends)]
            extras = [max(0.0, tail - idle_us) for tail in tails]
            times = [span + extra for span, extra in zip(spans, extras)]
            if windowed:
                times, clock = self._windowed(spans, extras, launches, brackets), "cupti-window"
        else:
            times = host
        if kernels is not None:
            kernels = _without(kernels, flush_kernels, iters)
            kernels = _without(kernels, draw_kernels, iters)
            if shapes:
                # The digests are the loop's own work too: learn what one
                # launches on the last call's output, now that the trace is
                # over, and take it out for every call whose output had its
                # shape.
                last = parts
                digested = sum(1 for x in shapes if x == shapes[-1])
                kernels = _without(kernels, self._learn_kernels(lambda: _out_digest(last)), digested)
        written = []
        for index, set_index, value in kept:
            path = "%s%d.ten" % (req["keep_prefix"], index)
            write_tensors(path, value)
            written.append({"index": index, "set": set_index, "path": path})
        kept = written
        if distinct is None:
            distinct = len(set(used)) + (min(len(sets), warmup) if seeds is None else 0)
        median = _median(times)
        mean = sum(times) / len(times)
        cv = (sum((x - mean) ** 2 for x in times) / len(times)) ** 0.5 / mean if mean > 0 else 0.0
        reply = {"times_us": [round(x, 3) for x in times], "median_us": median, "cv": cv,
                 "host_median_us": _median(host), "sets": distinct, "kept": kept,
                 "kept_chosen": "after" if retain else "before",
                 "loop_s": loop_s, "digests": digests, "clock": clock}
        if cuda:
            reply["tail_median_us"] = _median(tails)
            reply["idle_sync_us"] = idle_us
            reply["launch_median_us"] = _median(launches)
        if kernels is not None:
            reply["kernels"] = kernels[:50]
        return reply

    def op_burst(self, req):
        """The calls of a burst, back to back (see the request above). The
        loop's own work is device work, alike in both roles, launched
        while the call before runs: call i is followed on the current
        stream by the sums of output i - 1 and the draw of inputs i + 1,
        then one synchronize, so every kernel of the call is done (on any
        stream) before its output is read, and no tensor a call could
        still use on a side stream is freed or reused before it. The L2 is
        flushed right before each call, and the host's launch of the call
        overlaps the flush, as the timed loop's device window leaves a
        call's launch latency out."""
        _warm_done()
        t = self.torch
        files = req.get("inputs")
        keys = files if files else [int(s) for s in req.get("seeds", [])]
        if not keys:
            raise _Stage("protocol", "a burst with no seeds or inputs")
        ins, sums, numel = [], [], []

        def load(key):
            work = self.to_device(read_tensors(key)) if files else self.make_inputs(key)
            if req.get("in_digests"):
                ins.append(_digest_sums(work))
            return work

        work, prev = load(keys[0]), None
        self.sync()
        for i in range(len(keys)):
            if self.flush_buffer is not None:
                self.flush_buffer.zero_()
            out = self._forward(self.model, work)
            if prev is not None:
                sums.append(_out_sums(prev))
            following = load(keys[i + 1]) if i + 1 < len(keys) else None
            self.sync()
            prev = _leaves(out)
            numel.append(sum(v.numel() if isinstance(v, t.Tensor) else 1 for _, v in prev if v is not None))
            work, out, following = following, None, None
        sums.append(_out_sums(prev))
        self.sync()
        digests = [[a if a == a and abs(a) != float("inf") else None for a in d.tolist()] for d in sums]
        return {"digests": digests, "numel": numel, "in_digests": [_digest_text(p) for p in ins]}

    def _windowed(self, spans, extras, launches, brackets):
        """Each timed call's time with CUPTI: the device window, from the
        first kernel, copy or memset on any stream to the last one's end
        within the call's bracket, so that the host's launch latency
        before the first kernel (30 to 200 us per call on the H200,
        varying with the host's state from one process to the next) does
        not count; never less than the host's time to the call's return
        (work done on the host, or a synchronize inside the call, counts
        in full).

        The events' time (span, plus extra: the final synchronize's wait
        beyond an idle one) less that host time is device work done after
        the call returned, which the window must hold too, within the end
        event's and a launch's latency (20 us and 5% of the events' time)
        and the synchronize's own cost after real work (up to 50 us on a
        slow host, against 5-9 us idle). Where it does not, CUPTI missed
        work (records lost, or turned off by the candidate around its
        kernels: tests/adversarial/cheat/cupti_off) and the call is the
        events' time, its launch latency included."""
        times = []
        for span, extra, launch, (c0, c1) in zip(spans, extras, launches, brackets):
            ev = span + extra
            w = self.tracer.window(c0, c1) if c1 > c0 else None
            win = (w[1] - w[0]) / 1000.0 if w and w[2] > 0 else 0.0
            after = span + max(0.0, extra - 50.0) - launch
            if w is None or after > win + 20.0 + 0.05 * ev:
                times.append(ev)
            else:
                times.append(max(win, launch))
        return times

    def _flush_kernels(self):
        """The kernels one L2 flush runs, by name, with their device time:
        the loop's own work, taken out of the timed calls' kernel list."""
        if self.flush_buffer is None:
            return {}
        return self._learn_kernels(self.flush_buffer.zero_)

    def _learn_kernels(self, work):
        """The kernels work() runs, traced on its own: {name: (calls,
        total_us)}, as _without takes them; {} without CUPTI."""
        if self.tracer.kind != "cupti":
            return {}
        self.tracer.start(timing=True)
        work()
        self.sync()
        return {k["name"]: (k["calls"], k["total_us"]) for k in self.tracer.stop() or []}

    def op_idle(self, req):
        _warm_done()  # before a timed loop; a thread holding the GIL would slow the probe
        wait = float(req.get("wait_s") or 0)
        if self.device != "cuda":
            return {"idle": True, "waited_s": 0.0, "probe_us": 0.0}
        if self._probe is None:
            self._probe = self.torch.zeros(1, device=self.dev)
        start = _perf()
        while True:
            us = self._probe_us()
            waited = _perf() - start
            if us <= IDLE_PROBE_US or waited >= wait:
                return {"idle": us <= IDLE_PROBE_US, "waited_s": waited, "probe_us": us}
            time.sleep(0.01)

    def memory_start(self):
        """Before a request asked again (ca's reference_again): the GPU's
        free memory, which tells what a candidate killed meanwhile had
        held, and the peak reset, to measure what the request needs."""
        if self.device != "cuda":
            return {}
        try:
            self.torch.cuda.reset_peak_memory_stats(self.dev)
            return {"gpu_free": self.torch.cuda.mem_get_info(self.dev)[0],
                    "reserved": self.torch.cuda.memory_reserved(self.dev)}
        except Exception:
            return {}

    def memory_end(self, start):
        """The reply's share of a request asked again: gpu_free, the bytes
        free when it came or, more, when it ended less what it added to
        this process's reservation (a candidate killed just before it came
        frees its memory while it runs), and gpu_peak (the most bytes this
        process reserved while it ran)."""
        if not start:
            return {}
        try:
            cuda = self.torch.cuda
            end = cuda.mem_get_info(self.dev)[0] - (cuda.memory_reserved(self.dev) - start["reserved"])
            return {"gpu_free": max(start["gpu_free"], end), "gpu_peak": cuda.max_memory_reserved(self.dev)}
        except Exception:
            return {}

    def _probe_us(self):
        """The median host round trip of a one-element kernel, synchronized."""
        self.sync()
        samples = []
        for _ in range(5):
            h0 = _perf()
            self._probe.add_(1)
            self.sync()
            samples.append((_perf() - h0) * 1e6)
        return _median(samples)

    def _idle_sync_us(self):
        """What a device-wide synchronize costs the host when there is
        nothing to wait for: the part of a tail that is no work."""
        samples = []
        for _ in range(9):
            h0 = _perf()
            self.sync()
            samples.append((_perf() - h0) * 1e6)
        return _median(samples)


_clock_worker = None


def time_model(task, model, seeds, warmup, iters, compiled=None):
    """op_time's timed loop for a caller in this process that holds a
    task (anything with get_inputs) and its model on the GPU: ca_synth's
    workload check clocks the eager and the compiled model exactly as
    ca-profile clocks its baselines (each call's inputs drawn under its
    seed right before it, the L2 flushed, CUPTI's window when the shim
    loads). The loop's protocol lines go nowhere. op_time's reply."""
    global _proto, _clock_worker
    if _clock_worker is None:
        _clock_worker = Worker("reference", "cuda")
    w = _clock_worker
    w.task, w.gen, w.model, w.compiled = task, None, model, compiled
    saved, _proto = _proto, open(os.devnull, "w")
    try:
        return w.op_time({"mode": "eager" if compiled is None else "compile", "warmup": warmup,
                          "iters": iters, "seeds": list(seeds), "trace": True})
    finally:
        _proto.close()
        _proto = saved
        w.task = w.model = w.compiled = None


def _without(kernels, flush, iters):
    """kernels less iters L2 flushes (flush as _flush_kernels gives it)."""
    out = []
    for k in kernels:
        if k["name"] in flush:
            calls, us = flush[k["name"]]
            k = dict(k, calls=k["calls"] - calls * iters, total_us=max(0.0, k["total_us"] - us * iters))
            if k["calls"] <= 0:
                continue
        out.append(k)
    return sorted(out, key=lambda k: -k["total_us"])


_median = ca_clock.median


# Most bytes of timed outputs kept for checks chosen after the loop (all
# iterations' outputs, copied on the device); above it the checked calls
# are the ones named before the loop.
RETAIN_BYTES = 4 << 30
# op_idle: a probe's median round trip above this, the GPU is busy with
# work of another context. bench/probe-idle.py on an H100 (session 23):
# 18.8 us idle (at most 21.3), 2374-2381 us beside another process's
# queued kernels (the time slice), whether one or three.
IDLE_PROBE_US = 200.0


# ---------------------------------------------------------------- robustness inputs

# The value distributions of verify's robustness checks, in the order they
# are tried (the parent's --robust N takes the first N the reference is
# defined on). Each is a function of each value alone (see _robust_value),
# so whatever structure the task's draw has -- zeros of a triangular or
# masked input, a symmetric matrix, repeated values -- is kept, while the
# values themselves leave the task's own distribution.
ROBUST_DISTS = ("signed", "spikes", "ties", "shifted", "large", "small")


def _value_hash(x, seed):
    """A 31-bit hash of each element's bits under seed (int64, same shape):
    integer arithmetic only, so every process and device gets the same."""
    import torch
    width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    bits = x.contiguous().view(width).to(torch.int64)
    if x.element_size() == 8:
        bits = bits ^ (bits >> 32)
    mask = 0xFFFFFFFF
    h = (bits & mask) ^ (seed & mask) ^ ((seed >> 32) & mask)
    for _ in range(2):
        h = ((h ^ (h >> 16)) * 0x45D9F3B) & mask
    return (h ^ (h >> 16)) & 0x7FFFFFFF


# Elements per chunk when moving or judging a tensor: full-size KernelBench
# tensors reach billions of elements, and a float64 or int64 temporary of a
# whole one would take gigabytes more of the device's memory.
_CHUNK = 1 << 24


def _chunks(flat):
    for i in range(0, flat.numel(), _CHUNK):
        yield flat[i:i + _CHUNK]


def _robust_value(x, dist, signed, seed):
    """One floating-point tensor of the task's draw moved to dist.
    Zeros stay zeros. The scale is the draw's root mean square rounded
    to a power of two, so it is exact and the same in every process.
    signed: a sign drawn per value (a zero-mean distribution whatever the
    task draws); else the magnitudes alone, for a reference defined only
    on positive values."""
    import math
    import torch
    if not x.is_floating_point() or x.numel() == 0 or x.element_size() not in (2, 4, 8):
        return x
    flat = x.detach().contiguous().reshape(-1)
    total, count = 0.0, 0
    for c in _chunks(flat):
        count += int((c != 0).sum())
        total += float((c.to(torch.float64) ** 2).sum())
    rms = math.sqrt(total / count) if count else 0.0
    scale = 2.0 ** round(math.log2(rms)) if rms > 0 and math.isfinite(rms) else 1.0
    out = torch.empty_like(flat)
    for i, c in enumerate(_chunks(flat)):
        out[i * _CHUNK:i * _CHUNK + c.numel()] = _move(c, dist, signed, seed, scale)
    return out.reshape(x.shape)


def _move(c, dist, signed, seed, scale):
    """A contiguous chunk of values moved to dist (see _robust_value)."""
    import torch
    wide = torch.float64 if c.dtype == torch.float64 else torch.float32
    v = c.to(wide)
    h = _value_hash(c, seed)
    sign = torch.where((h & 1) == 1, -1.0, 1.0).to(wide) if signed else torch.ones_like(v)
    mag = v.abs()
    if dist == "signed":
        y = sign * mag
    elif dist == "spikes":
        # One value in a thousand, at positions only the values decide,
        # fifty times the typical magnitude: a reduction that skips
        # inputs misses them.
        y = sign * torch.where((h >> 1) % 1000 == 0, mag + 50 * scale, mag)
    elif dist == "ties":
        # Magnitudes rounded up to quarters of the scale (many equal
        # values), and one value in four exactly zero.
        y = sign * torch.ceil(mag / scale * 4) / 4 * scale
        y = torch.where((h >> 1) % 4 == 0, torch.zeros_like(y), y)
    elif dist == "shifted":
        y = v + 4 * scale
    elif dist == "large":
        y = sign * mag * 100
    elif dist == "small":
        y = sign * mag / 100
    else:
        raise ValueError("unknown robustness distribution %r" % dist)
    return torch.where(v != 0, y, torch.zeros_like(y)).to(c.dtype)


def robust_inputs(inputs, spec):
    """The task's draw moved to the distribution spec names:
    {"dist": one of ROBUST_DISTS, "signed": bool, "seed": S}. Only
    floating-point tensors change; integers, booleans and Python values
    (indices, sizes, flags) are the task's."""
    dist, signed, seed = spec["dist"], bool(spec.get("signed", True)), int(spec["seed"])
    return _map_tensors(inputs, lambda x: _robust_value(x, dist, signed, seed))


def _out_usable(parts):
    """Whether a reference output can judge a robustness check: every
    value finite and not degenerate (all zero, or every tensor constant).
    Returns (usable, why, rms): rms is the root mean square of its
    floating-point elements, the scale of the check's absolute tolerance."""
    import torch
    total, count, varies, nonzero = 0.0, 0, False, False
    for _, v in parts:
        if isinstance(v, torch.Tensor):
            if not v.numel():
                continue
            flat = v.detach().reshape(-1)
            first = flat[0]
            for x in _chunks(flat):
                if x.is_floating_point() or x.is_complex():
                    if not bool(torch.isfinite(x).all()):
                        return False, "the reference's output is not finite there", None
                    total += float((x.to(torch.float64).abs() ** 2).sum())
                    count += x.numel()
                varies = varies or bool((x != first).any())
                nonzero = nonzero or bool((x != 0).any())
        elif v is not None:
            f = float(v)
            if f != f or abs(f) == float("inf"):
                return False, "the reference's output is not finite there", None
            nonzero = nonzero or f != 0
    if not nonzero:
        return False, "the reference's output is all zero there", None
    if not varies and count > 1:
        return False, "the reference's output is constant there", None
    rms = (total / count) ** 0.5 if count else None
    return True, None, rms


# Globals that shape the operation itself rather than its size: kept as
# the task has them (a kernel specialised to a 3x3 convolution is honest).
_STRUCTURAL = ("kernel", "stride", "pad", "dilation", "group", "head")


def _names_read(code):
    """The global names a function's code reads, nested code (comprehensions,
    lambdas) included."""
    names = set(code.co_names)
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            names |= _names_read(c)
    return names


def size_globals(module):
    """The task's sizes: integer module-level globals greater than 1 that
    get_inputs() or get_init_inputs() read, structural ones left out, in
    the order the module defines them."""
    read = set()
    for fn in ("get_inputs", "get_init_inputs"):
        code = getattr(getattr(module, fn, None), "__code__", None)
        if code is not None:
            read |= _names_read(code)
    return [k for k, v in vars(module).items()
            if k in read and type(v) is int and v > 1 and not any(w in k.lower() for w in _STRUCTURAL)]


def _leaves(value):
    """An output's entries as write_tensors stores them: [(name, tensor or
    number or None)], in order (see _flatten)."""
    parts = []
    _flatten(value, "", parts)
    return parts


def _out_digest(parts):
    """An output's digest: [sum, sum of magnitudes, sum of squares,
    largest magnitude] over every element of its entries (_leaves:
    tensors of any dtype and numbers, widened to float64), then its
    PROJECTIONS signed sums (see _projections); None for a number that is
    not finite. The parent computes the first three from the file written
    later."""
    return [a if a == a and abs(a) != float("inf") else None for a in _out_sums(parts).tolist()]


def _out_sums(parts):
    """_out_digest's numbers as a float64 tensor on the output's device,
    nothing read back and no float64 copy of a floating output made (the
    reductions widen as they read)."""
    import torch
    acc = None
    for leaf, (_, v) in enumerate(parts):
        if isinstance(v, torch.Tensor):
            if not v.numel():
                continue
            x = v.detach().reshape(-1)
            if not x.is_floating_point() or x.device.type == "cpu":
                x = x.to(torch.float64)  # on the CPU the widening reductions are slower than the copy
            got = torch.cat([torch.stack([x.sum(dtype=torch.float64), torch.linalg.vector_norm(x, 1, dtype=torch.float64),
                                          torch.linalg.vector_norm(x, 2, dtype=torch.float64) ** 2,
                                          torch.linalg.vector_norm(x, float("inf"), dtype=torch.float64)]),
                             _projections(x, leaf)])
        elif v is not None:
            f = float(v)
            got = torch.tensor([f, abs(f), f * f, abs(f)] + [f * w for w in _signs(7919 + leaf, 1, PROJECTIONS)[:, 0].tolist()],
                               dtype=torch.float64)
        else:
            continue
        if acc is None:
            acc = got
        else:
            got = got.to(acc.device)
            acc = torch.cat([acc[:3] + got[:3], torch.maximum(acc[3:4], got[3:4]), acc[4:] + got[4:]])
    return acc if acc is not None else torch.zeros(4 + PROJECTIONS, dtype=torch.float64)


# The signed sums of an output's digest. Sums alone do not tell one
# input's output from another's: the outputs of two draws from one
# distribution have sums far closer than the tolerance lets sums of that
# many elements differ (tests/adversarial/cheat/stale_before returned its
# last output for every unchecked call and passed). A sum under
# pseudo-random signs does: an honest output's differs from the
# reference's by about the root of the sum of the squared per-element
# differences, another input's output's by about the output's own spread
# times the root of its size. Element i of an entry, in block
# b = i // PROJECTION_BLOCK at column l, has the sign t[b] * s[k][l] in
# projection k, s and t drawn once from a seeded CPU generator (the same
# in every worker, all running one torch): a projection is one pass over
# the output (a matrix-vector product) and two small tables.
PROJECTIONS = 4
PROJECTION_BLOCK = 4096
_PROJECTION_CHUNK = 1 << 24
_projection_signs = {}


def _signs(key, n, rows=None):
    """n signs (rows x n with rows), +1.0 or -1.0 in float64, drawn under key."""
    import torch
    g = torch.Generator().manual_seed(key)
    shape = (rows, n) if rows else (n,)
    return torch.randint(0, 2, shape, generator=g, dtype=torch.int64).to(torch.float64) * 2 - 1


def _projections(x, leaf):
    """The PROJECTIONS signed sums of x (flat, floating) as float64 on its
    device; leaf (the entry's place in the output) picks the signs. The
    product runs in x's precision (float32 for narrower types, converted
    a chunk at a time), then widens."""
    import torch
    n, width = x.numel(), PROJECTION_BLOCK
    blocks = (n + width - 1) // width
    key = (leaf, blocks, x.device, x.dtype)
    if key not in _projection_signs:
        if len(_projection_signs) > 16:
            _projection_signs.clear()
        mv = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
        s = _signs(7919 + leaf, width, PROJECTIONS).to(x.device)
        t = _signs(104729 + 131 * leaf + blocks, blocks).to(device=x.device, dtype=mv)
        _projection_signs[key] = (s, t, mv)
    s, t, mv = _projection_signs[key]
    full = n // width
    y = torch.zeros(width, dtype=torch.float64, device=x.device)
    rows = max(1, _PROJECTION_CHUNK // width) if mv != x.dtype else max(1, full)
    for r0 in range(0, full, rows):
        r1 = min(full, r0 + rows)
        part = x[r0 * width:r1 * width].view(r1 - r0, width).to(mv)
        y += torch.mv(part.t(), t[r0:r1]).to(torch.float64)
    if n > full * width:
        tail = x[full * width:].to(torch.float64)
        y[:tail.numel()] += tail * t[full].to(torch.float64)
    return torch.mv(s, y)


def _digest_shape(parts):
    """What decides the kernels _out_digest launches on an output's entries."""
    import torch
    return tuple((v.dtype, v.numel(), v.is_contiguous(), v.device.type) if isinstance(v, torch.Tensor)
                 else type(v) for _, v in parts)


def _tree_bytes(parts):
    """Bytes of the tensors among an output's entries (_leaves)."""
    import torch
    return sum(v.numel() * v.element_size() for _, v in parts if isinstance(v, torch.Tensor))


def _use_ca_nvcc():
    """torch's extension builds compile through ca-nvcc (ca-nvcc(1): nvcc's
    objects, cudafe++ and cicc side by side) when the parent named it in
    $CA_NVCC and we may run it; it runs the nvcc torch would have run.
    A PYTORCH_NVCC of the candidate's own is left alone."""
    nvcc = os.environ.get("CA_NVCC")
    if not nvcc or "PYTORCH_NVCC" in os.environ or not os.access(nvcc, os.X_OK):
        return
    try:
        from torch.utils import cpp_extension
        real = cpp_extension._join_cuda_home("bin", "nvcc")
    except Exception:
        return
    os.environ.setdefault("CA_NVCC_REAL", real)
    os.environ["PYTORCH_NVCC"] = nvcc


def _light_headers():
    """torch's extension builds (cpp_extension.load_inline and load) try
    ca's lighter torch/extension.h first and build again with torch's when
    that fails, so a unit that needs what a light one leaves out builds, or
    fails, as it would have; what is shown of a failure is the last
    build's. The lighter headers, in turn, each found through CPATH before
    torch's own: where the sources allow it, one made for them
    (_ops_header); then light/torch/extension.h beside this file. ninja
    keeps what built either way, so a unit that built with a lighter one
    is not compiled again. torch builds a module again only when its
    version moved, so its versions are put back as they were before each
    build after the first. CA_LIGHT_HEADERS=0 turns it off."""
    shim = os.path.join(os.path.dirname(os.path.abspath(__file__)), "light")
    if os.environ.get("CA_LIGHT_HEADERS") == "0" or not os.path.isdir(shim):
        return
    import functools
    from torch.utils import cpp_extension
    versions = getattr(getattr(cpp_extension, "JIT_EXTENSION_VERSIONER", None), "entries", None)
    if not isinstance(versions, dict):
        return

    def light_first(name, build):
        @functools.wraps(build)
        def wrapped(*args, **kwargs):
            before = dict(versions)
            try:
                ops = _ops_header(*_source_texts(name, args, kwargs))
            except Exception:
                ops = None  # ours, not the candidate's: built as before
            for tier in ([ops] if ops else []) + [shim]:
                old = os.environ.get("CPATH")
                os.environ["CPATH"] = tier + (os.pathsep + old if old else "")
                try:
                    return build(*args, **kwargs)
                except _Violation:
                    raise
                except Exception:
                    pass
                finally:
                    if old is None:
                        os.environ.pop("CPATH", None)
                    else:
                        os.environ["CPATH"] = old
                versions.clear()
                versions.update(before)
            return build(*args, **kwargs)
        return wrapped

    for name in ("load_inline", "load"):
        setattr(cpp_extension, name, light_first(name, getattr(cpp_extension, name)))


def _source_texts(name, args, kwargs):
    """The texts of a load_inline (cuda_sources and cpp_sources: a string
    or a list) or load (sources: files) call's sources, as (cuda, cxx)."""
    def listed(v):
        return [v] if isinstance(v, str) else [t for t in v or [] if isinstance(t, str)]

    if name == "load_inline":
        return (listed(kwargs.get("cuda_sources", args[2] if len(args) > 2 else None)),
                listed(kwargs.get("cpp_sources", args[1] if len(args) > 1 else None)))
    cuda, cxx = [], []
    for path in listed(kwargs.get("sources", args[1] if len(args) > 1 else None)):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        (cuda if path.endswith((".cu", ".cuh")) else cxx).append(text)
    return cuda, cxx


_CALL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[^\n]*\n", re.M)
# What an ATen/ops/NAME.h includes for its operators' definitions, not
# their declarations: DeviceGuard.h alone is about 2 s of cudafe++'s 6
# on a load_inline ReLU unit (2-core CPU).
_OPS_HEAVY = re.compile(r"^#include <ATen/(Context|DeviceGuard|TensorUtils|TracerMode)\.h>\n", re.M)


def _ops_header(cuda, cxx):
    """The directory of ca's lightest torch headers for a build whose
    sources are the texts cuda (CUDA units) and cxx (C++ units), or None.
    It declares ATen's Tensor, its dispatch macros, the operators the
    sources call (each identifier before a "(" that names an ATen
    operator: its ATen/ops/NAME.h, here without the four headers it
    includes for its definitions, found before torch's own) and torch's
    names for them (torch/types.h's own text without its includes:
    namespace torch { using namespace at; ... }), where torch's headers
    declare every operator and its whole C++ frontend. A CUDA unit gets
    that as torch/types.h (which load_inline puts before its CUDA
    sources); a C++ unit gets it, with torch's Python bindings
    (torch/csrc/Exceptions.h: pybind11, the Tensor caster,
    wrap_pybind_function), as torch/extension.h. nvcc and g++ compile a
    load_inline ReLU's units in about a third of the time they take with
    ca's light header (2-core CPU). None without sources, or where one
    names requires_grad (torch's factories honour it, ATen's refuse it).
    The directory is named by its content, under the extensions'
    directory, so that the next process finds the same files and ninja
    rebuilds nothing."""
    texts = cuda + cxx
    base = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not texts or not base or any("requires_grad" in t for t in texts):
        return None
    from torch.utils import cpp_extension
    aten = api = None
    for inc in cpp_extension.include_paths():
        if os.path.isdir(os.path.join(inc, "ATen", "ops")):
            aten = inc
        if os.path.isfile(os.path.join(inc, "torch", "types.h")) and os.path.isdir(os.path.join(inc, "torch", "nn")):
            api = inc
    if aten is None or api is None:
        return None

    def read(*path):
        with open(os.path.join(*path), encoding="utf-8") as f:
            return f.read()

    names = sorted({m.group(1) for t in texts for m in _CALL.finditer(t)})
    # torch::tensor is torch's own (its floating values take the default
    # dtype), not at::tensor under torch's name: left to the next header.
    ops = [n for n in names if n != "tensor" and os.path.isfile(os.path.join(aten, "ATen", "ops", n + ".h"))]
    head = "/* ca's lightest %s for this build (ca_runner._ops_header) */\n#pragma once\n"
    decl = ("#include <ATen/core/Tensor.h>\n#include <ATen/Dispatch.h>\n" +
            "".join("#include <ATen/ops/%s.h>\n" % n for n in ops) + "#include <torch/ca-names.h>\n")
    files = {
        "torch/extension.h": head % "torch/extension.h" + "#if defined(__CUDACC__)\n#include <torch/types.h>\n"
                             "#else\n" + decl + "#include <torch/csrc/Exceptions.h>\n#endif\n",
        # load_inline puts torch/types.h before the CUDA sources itself.
        "torch/types.h": head % "torch/types.h" + "#if defined(__CUDACC__)\n" + decl +
                         "#else\n#include_next <torch/types.h>\n#endif\n",
        "torch/ca-names.h": _INCLUDE.sub("", read(api, "torch", "types.h")),
    }
    for n in ops:
        files["ATen/ops/%s.h" % n] = _OPS_HEAVY.sub("", read(aten, "ATen", "ops", n + ".h"))
    key = hashlib.sha256("".join(k + "\0" + files[k] for k in sorted(files)).encode()).hexdigest()[:16]
    where = os.path.join(base, "ca-light-" + key)
    for leaf, text in files.items():
        path = os.path.join(where, leaf)
        if not os.path.isfile(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = "%s.%d" % (path, os.getpid())
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, path)
    return where


def _copy_entries(src, dst):
    """Copy what directory src holds into directory dst (made if missing).
    Not copytree on dst itself: in the sandbox dst is the parent's
    directory, which the candidate's uid may write into but not chmod or
    utime, and copytree's final copystat of dst fails on that."""
    import shutil
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        s, d = os.path.join(src, name), os.path.join(dst, name)
        if os.path.isdir(s) and not os.path.islink(s):
            shutil.copytree(s, d, symlinks=True, dirs_exist_ok=True)
        else:
            if os.path.islink(d):
                os.unlink(d)
            shutil.copy2(s, d, follow_symlinks=False)


def _map_tensors(value, fn):
    """value with fn applied to every tensor of its lists, tuples and dicts
    (other leaves kept)."""
    import torch
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


def _alloc_like(value):
    """Uninitialised tensors shaped like an output's (other leaves kept)."""
    import torch
    return _map_tensors(value, lambda x: torch.empty_like(x.detach()))


def _copy_into(slot, b):
    """Copy an output's entries b (_leaves) into a slot (tree, its _leaves)
    that _alloc_like made; the tree, or None when the output's entries,
    shapes, dtypes or other leaves are not the slot's."""
    import torch
    dst, a = slot
    if len(a) != len(b):
        return None
    for (na, va), (nb, vb) in zip(a, b):
        if na != nb or isinstance(va, torch.Tensor) != isinstance(vb, torch.Tensor):
            return None
        if isinstance(va, torch.Tensor):
            if va.shape != vb.shape or va.dtype != vb.dtype or va.device != vb.device:
                return None
        elif type(va) is not type(vb) or va != vb:
            return None
    for (_, va), (_, vb) in zip(a, b):
        if isinstance(va, torch.Tensor):
            va.copy_(vb.detach())
    return dst


def _clone_tree(value):
    return _map_tensors(value, lambda x: x.detach().clone())


class _Stage(Exception):
    def __init__(self, stage, error):
        super().__init__(str(error))
        self.stage = stage
        self.error = error


def _loading(fn):
    """fn() as loading the candidate: a policy violation stays one (also
    when raised through the candidate's own handler), anything else is
    stage load."""
    try:
        return fn()
    except _Violation:
        raise
    except Exception as e:
        if isinstance(e.__cause__, _Violation) or isinstance(e.__context__, _Violation):
            raise _Violation(str(e.__cause__ or e.__context__))
        raise _Stage("load", e)


def _live_seed():
    """A timed call's seed, asked for with {"timing": "seed"} and read
    from the parent as one line {"seed": S}: it answers only once every
    timed call before this one has ticked, so a candidate cannot draw the
    timed calls' inputs (and compute their outputs) before the loop."""
    _send({"timing": "seed"})
    line = sys.stdin.readline()
    try:
        seed = json.loads(line)["seed"]
        if isinstance(seed, bool) or not isinstance(seed, (int, float)) or seed != int(seed) or seed < 0:
            raise ValueError(seed)
        return int(seed)
    except (ValueError, KeyError, TypeError):
        raise _Stage("protocol", "no seed for the next timed call: %r" % line[:80])


def _live_input():
    """A timed call's shipped inputs, asked for with {"timing": "input"}:
    the parent answers with one line {"input": P} only once every timed
    call before this one has ticked, and only then puts the file at P, so
    no timed call's inputs can be read before the calls before it are
    done."""
    _send({"timing": "input"})
    line = sys.stdin.readline()
    try:
        path = json.loads(line)["input"]
        if not isinstance(path, str) or not path:
            raise ValueError(path)
        return path
    except (ValueError, KeyError, TypeError):
        raise _Stage("protocol", "no inputs for the next timed call: %r" % line[:80])


def _send(obj):
    _proto.write(json.dumps(obj) + "\n")
    _proto.flush()


def _one_line(e):
    text = "%s: %s" % (type(e).__name__, e)
    text = " ".join(text.split())
    return text[:2000]


def _detail(e):
    lines = traceback.format_exception(type(e), e, e.__traceback__)
    return "".join(lines)[-3000:]


def _bytecode(role):
    """Where this process's bytecode goes. A torch installed without
    bytecode of its own (images built with pip --no-compile: the H200's
    has none for its 2,141 modules) is compiled from source by every
    worker, seconds each; then $CA_PYCACHE (set by the C side, read-only
    for a candidate) becomes sys.pycache_prefix: the trusted reference
    writes there, a candidate only reads. Elsewhere nothing changes (no
    bytecode written, as -B asks)."""
    prefix = os.environ.get("CA_PYCACHE")
    if not prefix or not os.path.isdir(prefix):
        return
    try:
        import importlib.util
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.origin:
            return
        cached = importlib.util.cache_from_source(spec.origin)
    except Exception:
        return
    if os.path.exists(cached):
        return
    sys.pycache_prefix = prefix
    sys.dont_write_bytecode = role != "reference"


def _compile_caches(role):
    """torch.compile's own caches (inductor's FX graph and kernel caches,
    triton's) for the reference, which times the torch.compile baseline:
    kept in $CA_CACHE/torch-compile (as ca_paths_cache() finds it) rather
    than below /tmp, so a later process compiling the same graph pays the
    lookup only. inductor and triton key their entries by their own
    versions. A candidate never writes there (it runs as another user, in
    the sandbox); variables already set are left alone."""
    if role != "reference":
        return
    root = os.environ.get("CA_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME") or "/tmp", ".cache"), "ca")
    base = os.path.join(root, "torch-compile")
    for var, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
        if os.environ.get(var):
            continue
        try:
            os.makedirs(os.path.join(base, sub), mode=0o755, exist_ok=True)
        except OSError:
            continue
        os.environ[var] = os.path.join(base, sub)


_warm_thread = None
_robust_thread = None


def _warm_imports(role):
    """The reference imports in a thread, once it said it is ready, what
    its first torch.compile loads: on the H100 a fresh reference spent
    3.5-4.4 s retiming a cached torch.compile baseline (its dynamo and
    inductor imports alone take ~1.8 s on a 2-core CPU) while it had sat
    idle through the candidate's build. With CA_EVAL_WARM_COMPILE=1 (the
    C side sets it when it profiles with torch.compile) that is dynamo,
    inductor and its GPU code generation; otherwise torch._dynamo alone, and only
    when this process writes the bytecode cache and that module's bytecode
    is missing there (seconds from source). Joined (_warm_done) before any
    request that precedes a timed loop. Candidates need no such import
    (see _skip_dynamo_disable)."""
    global _warm_thread
    if role == "candidate":
        return
    if os.environ.get("CA_EVAL_WARM_COMPILE") == "1":
        names = ("torch._dynamo", "torch._inductor.compile_fx", "torch._inductor.codegen.triton",
                 "torch._inductor.runtime.triton_heuristics")
    elif not getattr(sys, "pycache_prefix", None) or sys.dont_write_bytecode:
        return
    else:
        try:
            spec = importlib.util.find_spec("torch._dynamo")
            if spec is None or not spec.origin or os.path.exists(importlib.util.cache_from_source(spec.origin)):
                return
        except Exception:
            return
        names = ("torch._dynamo",)

    def run():
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:
                pass
    import threading
    _warm_thread = threading.Thread(target=run, name="ca-warm", daemon=True)
    _warm_thread.start()


def _warm_robust(device):
    """The reference loads the device kernels of the robustness checks'
    moves and judgement in a thread, once it said it is ready: their
    first use cost 125 ms of a 20 ms move on the H200, on the first
    robustness check's path; here it overlaps the wait for the
    candidate. Not in a candidate: its first check traces every kernel
    the process runs, and these would be taken for its own."""
    global _robust_thread

    def run():
        try:
            import torch
            for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
                x = torch.linspace(-1, 1, 64, device=device).to(dtype)
                for d in ROBUST_DISTS:
                    for signed in (True, False):
                        _out_usable([("", robust_inputs([x], {"dist": d, "signed": signed, "seed": 1})[0])])
        except Exception:
            pass
    import threading
    _robust_thread = threading.Thread(target=run, name="ca-warm-robust", daemon=True)
    _robust_thread.start()


def _warm_done():
    """Before a timed loop, and before the requests that come right before
    a candidate's (the profile's draws and digests, the GPU probes): a
    thread importing modules holds the GIL for most of its time, and a
    loop beside it waits for the GIL between its launches (on the H200 a
    matmul profile's calls spread to cv 0.67); in another process it
    still takes a CPU."""
    global _warm_thread, _robust_thread
    for t in (_warm_thread, _robust_thread):
        if t is not None:
            t.join(60)
    _warm_thread = _robust_thread = None


def _pin(cpu):
    """A request's "cpu": this thread runs it on that CPU alone (see the
    protocol above); the CPUs it had before, to give back, or None."""
    if not isinstance(cpu, int) or isinstance(cpu, bool) or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        was = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {cpu})
        return was
    except (OSError, ValueError):
        return None


def _unpin(was):
    if was is not None:
        try:
            os.sched_setaffinity(0, was)
        except OSError:
            pass


def main():
    global _proto
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=("reference", "candidate"), required=True)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = ap.parse_args()
    _proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    _bytecode(args.role)
    _compile_caches(args.role)
    try:
        # A candidate's tracer loads while torch is imported (see _CuptiEarly).
        early = _CuptiEarly().start() if args.role == "candidate" and args.device == "cuda" else None
        worker = Worker(args.role, args.device, early)
    except Exception as e:
        _send({"ready": False, "error": _one_line(e), "detail": _detail(e)})
        return 4
    _send(worker.hello())
    if args.device == "cuda":
        _warm_imports(args.role)
        if args.role == "reference":
            _warm_robust("cuda")
    ops = {"task": worker.op_task, "inputs": worker.op_inputs, "candidate": worker.op_candidate,
           "run": worker.op_run, "time": worker.op_time, "digests": worker.op_digests,
           "resize": worker.op_resize, "burst": worker.op_burst, "idle": worker.op_idle, "warm": worker.op_warm}
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            op = req.get("op")
        except ValueError as e:
            _send({"ok": False, "stage": "protocol", "error": "bad request: %s" % e})
            continue
        if op is None and isinstance(req, dict) and "seed" in req:
            continue  # a timed call's seed left over from a loop that failed
        if op == "exit":
            _send({"ok": True})
            return 0
        fn = ops.get(op)
        if fn is None:
            _send({"ok": False, "stage": "protocol", "error": "unknown op %r" % op})
            continue
        if args.role == "candidate" and op in ("task", "inputs", "digests", "idle", "warm"):
            _send({"ok": False, "stage": "protocol", "error": "op %r is for the reference role" % op})
            continue
        pinned = _pin(req.get("cpu"))
        mem = worker.memory_start() if req.get("mem") else None
        try:
            reply = fn(req)
            reply.setdefault("ok", True)
        except _Stage as e:
            reply = {"ok": False, "stage": e.stage, "error": _one_line(e.error), "detail": _detail(e.error)}
        except _Violation as e:
            reply = {"ok": False, "stage": "policy", "error": str(e)}
        except Exception as e:
            reply = {"ok": False, "stage": {"time": "time", "candidate": "load"}.get(op, "run"),
                     "error": _one_line(e), "detail": _detail(e)}
        _unpin(pinned)
        if mem is not None:
            reply.update(worker.memory_end(mem))
        _send(reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
