"""ca_synth: the torch side of task synthesis (ca-crawl, ca-filter).

Run by the interpreter from ca_paths_python(); the C commands own the
record streams, this file only introspects and executes PyTorch.

  python3 ca_synth.py crawl [--jobs N] [--no-functions] [--no-transformers] [--families a,b,...]
      One seed record per line on stdout (see ca-crawl(1)): torch.nn module
      classes, torch.nn.functional functions, torch functions that are also
      Tensor methods, and transformers' self-contained building blocks.

  python3 ca_synth.py worker [--warm]
      The rubric's torch checks (see ca-filter(1)), one task at a time.
      First line out: {"hello": {"torch": V, "cuda": bool, "gpu": NAME|null}},
      written after a first torch.compile on the GPU with --warm ("warm_s").
      Then for each request line in, one result line out:
        in:  {"code": TEXT, "device": "cpu"|"cuda", "compile": bool,
              "seed": N, "atol": X, "rtol": X, "timing": bool,
              "warmup": N, "iters": N}
        out: {"checks": {...}, "reasons": [...], "eager_ms": x|null,
              "compile_ms": x|null, "output_shape": [...]}
      The task's own prints go to stderr so they cannot corrupt the protocol.
"""
import inspect
import json
import os
import re
import sys
import time
import types
import warnings

import ca_runner

warnings.filterwarnings("ignore")

# ---------------------------------------------------------------- crawl

# Constructor parameters ca-crawl fills in when they have no default, by
# name. Every size is 16 so channel, feature and sequence dimensions agree.
SIZE = 16
FILL = {
    "in_features": SIZE, "out_features": SIZE, "in1_features": SIZE,
    "in2_features": SIZE, "in_channels": SIZE, "out_channels": SIZE,
    "kernel_size": 3, "num_features": SIZE, "normalized_shape": SIZE,
    "num_groups": 4, "num_channels": SIZE, "embed_dim": SIZE,
    "num_heads": 4, "d_model": SIZE, "nhead": 4, "hidden_size": SIZE,
    "input_size": SIZE, "num_embeddings": SIZE, "embedding_dim": SIZE,
    "output_size": 4, "upscale_factor": 2, "downscale_factor": 2,
    "scale_factor": 2, "size": 8, "dim": 1, "dims": (0, 1),
    "padding": 1, "stride": 1, "lambd": 0.5, "alpha": 1.0,
    "threshold": 0.1, "value": 0.0, "min_val": -1.0, "max_val": 1.0,
    "shifts": 1, "chunks": 2, "sections": 2, "k": 2, "n": 2,
    "out_size": 4, "proj_size": 0, "num_layers": 1, "bias": True,
    "cutoffs": [4, 8], "n_classes": SIZE,
}

STOCHASTIC_NAME = re.compile(r"(?i)dropout|rrelu|^rand|bernoulli|multinomial|normal|gumbel|poisson")

CONTAINERS = {"Module", "Sequential", "ModuleList", "ModuleDict",
              "ParameterList", "ParameterDict", "Container"}


def qualname(obj, public):
    return public


def signature_text(fn, drop_self=False):
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if drop_self:
        params = list(sig.parameters.values())[1:]
        sig = sig.replace(parameters=params)
    # default values print with their address ("<function relu at 0x7f...>"): not the same twice
    return re.sub(r" at 0x[0-9a-f]+>", ">", str(sig))


def doc_shapes(doc):
    """Lines of a docstring's "Shape:" section (Input/Output descriptions)."""
    if not doc:
        return []
    out = []
    m = re.search(r"\n\s*Shape[s]?:\s*\n(.*?)(\n\s*\n\s*\S[^\n]*:\s*\n|\Z)", doc, re.S)
    if not m:
        return []
    for line in m.group(1).splitlines():
        line = line.strip()
        if line.startswith("- ") or line.startswith("* "):
            out.append(re.sub(r"\s+", " ", line[2:]))
    return out[:8]


def source_file(obj):
    try:
        return inspect.getsourcefile(obj)
    except (TypeError, OSError):
        return None


def input_candidates(torch):
    b = 8
    shapes = [(b, SIZE, SIZE, SIZE), (b, SIZE, SIZE), (b, SIZE),
              (b, SIZE, 8, SIZE, SIZE), (SIZE, b, SIZE)]
    return shapes


def tensors_of(x):
    import torch
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        r = []
        for y in x:
            r += tensors_of(y)
        return r
    if hasattr(x, "to_tuple"):
        return tensors_of(x.to_tuple())
    if isinstance(x, dict):
        r = []
        for y in x.values():
            r += tensors_of(y)
        return r
    return []


def bitwise_equal(x, y):
    """Equal bit for bit, NaN included (torch.equal says NaN != NaN)."""
    import torch
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if x.is_floating_point() or x.is_complex():
        nx, ny = torch.isnan(x), torch.isnan(y)
        return torch.equal(nx, ny) and torch.equal(torch.where(nx, 0, x), torch.where(ny, 0, y))
    return torch.equal(x, y)


def same_outputs(a, b):
    ta, tb = tensors_of(a), tensors_of(b)
    if len(ta) != len(tb) or not ta:
        return False
    return all(bitwise_equal(x, y) for x, y in zip(ta, tb))


def buffers_snapshot(m):
    return [b.detach().clone() for b in m.buffers()]


def input_code(shape, integer):
    dims = ", ".join(str(d) for d in shape)
    if integer:
        return "torch.randint(0, %d, (%s,))" % (SIZE, dims) if len(shape) == 1 else \
            "torch.randint(0, %d, (%s))" % (SIZE, dims)
    return "torch.randn(%s)" % dims


def try_module(torch, cls, public):
    """Find constructor arguments and inputs that run; returns (init_kwargs, shapes, integer, stoch, stateful) or a reason."""
    sig = inspect.signature(cls.__init__)
    kwargs = {}
    for p in list(sig.parameters.values())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is not p.empty:
            continue
        if p.name in FILL:
            kwargs[p.name] = FILL[p.name]
        else:
            return "constructor needs '%s', which ca-crawl cannot choose" % p.name
    try:
        fsig = inspect.signature(cls.forward)
        nin = sum(1 for p in list(fsig.parameters.values())[1:]
                  if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    except (TypeError, ValueError):
        nin = 1
    nin = max(nin, 1)
    last = None
    for integer in (False, True):
        for shape in input_candidates(torch):
            try:
                torch.manual_seed(0)
                m = cls(**kwargs)
                if integer:
                    xs = [torch.randint(0, SIZE, shape) for _ in range(nin)]
                else:
                    xs = [torch.randn(*shape) for _ in range(nin)]
                before = buffers_snapshot(m)
                with torch.no_grad():
                    y1 = m(*xs)
                    y2 = m(*xs)
                if not tensors_of(y1):
                    last = "forward returns no tensor"
                    continue
                after = buffers_snapshot(m)
                stateful = any(not torch.equal(a, b) for a, b in zip(before, after))
                stochastic = not same_outputs(y1, y2)
                return kwargs, [shape] * nin, integer, stochastic, stateful
            except Exception as e:  # noqa: BLE001 - any failure means "try the next shape"
                last = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:160] if str(e) else "")
    return "no input shape ca-crawl tried runs (last error: %s)" % last


def try_function(torch, fn):
    last = None
    for shape in input_candidates(torch):
        try:
            torch.manual_seed(0)
            x = torch.randn(*shape)
            with torch.no_grad():
                y1 = fn(x)
                y2 = fn(x)
            if not tensors_of(y1):
                return "returns no tensor for a tensor argument"
            return shape, not same_outputs(y1, y2)
        except Exception as e:  # noqa: BLE001
            last = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:160] if str(e) else "")
    return "does not run on one tensor argument (last error: %s)" % last


def module_task(import_line, ctor, kwargs, shapes, integer):
    args = ", ".join("%s=%r" % (k, v) for k, v in kwargs.items())
    names = ["x%d" % i for i in range(len(shapes))]
    lines = [
        "import torch",
        "import torch.nn as nn",
    ]
    if import_line:
        lines.append(import_line)
    lines += [
        "",
        "",
        "class Model(nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        "        self.op = %s(%s)" % (ctor, args),
        "",
        "    def forward(self, %s):" % ", ".join(names),
        "        return self.op(%s)" % ", ".join(names),
        "",
        "",
        "def get_inputs():",
        "    return [%s]" % ", ".join(input_code(s, integer) for s in shapes),
        "",
        "",
        "def get_init_inputs():",
        "    return []",
        "",
    ]
    return "\n".join(lines)


def function_task(call, shape):
    return "\n".join([
        "import torch",
        "import torch.nn as nn",
        "import torch.nn.functional as F",
        "",
        "",
        "class Model(nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        "",
        "    def forward(self, x):",
        "        return %s(x)" % call,
        "",
        "",
        "def get_inputs():",
        "    return [%s]" % input_code(shape, False),
        "",
        "",
        "def get_init_inputs():",
        "    return []",
        "",
    ])


def emit(rec):
    sys.stdout.write(json.dumps(rec) + "\n")


def seed_record(name, short, kind, library, version, obj, init_sig, fwd_sig, doc, code, reason,
                stochastic, stateful):
    seed = {
        "name": name, "kind": kind, "library": library, "version": version,
        "module": getattr(obj, "__module__", None), "source_file": source_file(obj),
        "init_signature": init_sig, "forward_signature": fwd_sig,
        "shapes": doc_shapes(doc), "stochastic": bool(stochastic), "stateful": bool(stateful),
        "concrete": code is not None, "reason": reason,
    }
    rec = {"id": "seed/" + name, "source": "seed:" + library, "ops": [short], "seed": seed}
    if code is not None:
        rec["code"] = code
    return rec


def crawl_torch(torch, functions=True):
    import torch.nn as nn
    import torch.nn.functional as F
    version = torch.__version__
    for name in sorted(dir(nn)):
        cls = getattr(nn, name)
        if name.startswith("_") or not inspect.isclass(cls) or not issubclass(cls, nn.Module):
            continue
        if not mine():
            continue
        reason = code = None
        stoch = bool(STOCHASTIC_NAME.search(name))
        stateful = False
        if name in CONTAINERS:
            reason = "container, not an operator"
        elif name.startswith("Lazy"):
            reason = "lazy module: shapes are inferred on first call"
        else:
            r = try_module(torch, cls, "nn." + name)
            if isinstance(r, str):
                reason = r
            else:
                kwargs, shapes, integer, s2, stateful = r
                stoch = stoch or s2
                code = module_task(None, "nn." + name, kwargs, shapes, integer)
        emit(seed_record("torch.nn." + name, "nn." + name, "module", "torch", version, cls,
                         signature_text(cls.__init__, True), signature_text(cls.forward, True),
                         cls.__doc__, code, reason, stoch, stateful))
    if not functions:
        return
    for name in sorted(dir(F)):
        fn = getattr(F, name)
        if name.startswith("_") or not callable(fn) or inspect.isclass(fn) or inspect.ismodule(fn):
            continue
        if getattr(fn, "__module__", "") not in ("torch.nn.functional", "torch._C._nn", "torch",
                                                  "torch._C._VariableFunctions", None) and \
                not str(getattr(fn, "__module__", "")).startswith("torch"):
            continue
        if not mine():
            continue
        yield_fn("torch.nn.functional." + name, "F." + name, fn, version, torch)
    for name in sorted(dir(torch)):
        if name.startswith("_") or name.endswith("_") or not hasattr(torch.Tensor, name):
            continue
        fn = getattr(torch, name)
        if not callable(fn) or inspect.isclass(fn) or inspect.ismodule(fn):
            continue
        if not mine():
            continue
        yield_fn("torch." + name, "torch." + name, fn, version, torch)


def yield_fn(name, short, fn, version, torch):
    r = try_function(torch, fn)
    stoch = bool(STOCHASTIC_NAME.search(name.rsplit(".", 1)[1]))
    if isinstance(r, str):
        code, reason = None, r
    else:
        shape, s2 = r
        stoch = stoch or s2
        code, reason = function_task(short, shape), None
    emit(seed_record(name, short, "function", "torch", version, fn, None, signature_text(fn),
                     getattr(fn, "__doc__", None), code, reason, stoch, False))


# transformers: which blocks qualify. Activations (transformers.activations)
# are self-contained; from each modeling family, classes whose names end in
# one of BLOCK_SUFFIXES and that can be built from the family's config (or
# from (hidden_size, eps)) and called with hidden states alone.
DEFAULT_FAMILIES = "llama,mistral,qwen2,gemma,phi3,gpt2,gpt_neox,bert,t5,mixtral"
BLOCK_SUFFIXES = ("RMSNorm", "LayerNorm", "MLP", "Attention", "RotaryEmbedding", "Gate",
                  "SparseMoeBlock", "Experts", "DenseActDense", "Intermediate", "Output", "SelfOutput")


def tf_config(transformers, family):
    cfg_cls = None
    for name in dir(transformers):
        if name.lower() == family.replace("_", "") + "config":
            cfg_cls = getattr(transformers, name)
    if cfg_cls is None:
        return None, None
    kw = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=4,
              num_hidden_layers=1, vocab_size=128, max_position_embeddings=256, head_dim=16,
              n_embd=64, n_head=4, n_layer=1, d_model=64, d_ff=128, num_heads=4, d_kv=16,
              num_local_experts=4, num_experts_per_tok=2)
    try:
        sig = inspect.signature(cfg_cls.__init__)
        accepted = {k: v for k, v in kw.items() if k in sig.parameters}
        if not any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
            kw = accepted
        cfg = cfg_cls(**kw)
        return cfg_cls, (cfg, kw)
    except Exception:  # noqa: BLE001
        return None, None


def tf_block_task(modpath, clsname, ctor_args, cfg_name, cfg_kw, shape, pass_position_ids):
    lines = ["import torch", "import torch.nn as nn"]
    if cfg_name:
        lines.append("from transformers import %s" % cfg_name)
    lines.append("from %s import %s" % (modpath, clsname))
    lines += ["", "", "class Model(nn.Module):", "    def __init__(self):", "        super().__init__()"]
    if cfg_name:
        args = ", ".join("%s=%r" % kv for kv in sorted(cfg_kw.items()))
        lines.append("        config = %s(%s)" % (cfg_name, args))
    lines.append("        self.op = %s(%s)" % (clsname, ctor_args))
    lines += ["", "    def forward(self, x):"]
    if pass_position_ids:
        lines.append("        position_ids = torch.arange(x.shape[1], device=x.device).unsqueeze(0)")
        lines.append("        return self.op(x, position_ids)")
    else:
        lines.append("        out = self.op(x)")
        lines.append("        return out[0] if isinstance(out, tuple) else out")
    dims = ", ".join(str(d) for d in shape)
    lines += ["", "", "batch_size = %d" % shape[0], "", "",
              "def get_inputs():", "    return [torch.randn(batch_size, %s)]" % ", ".join(str(d) for d in shape[1:]),
              "", "", "def get_init_inputs():", "    return []", ""]
    del dims
    return "\n".join(lines)


def crawl_transformers(torch, families):
    try:
        import transformers
        import transformers.activations as acts
    except Exception:  # noqa: BLE001
        return
    version = transformers.__version__
    import torch.nn as nn
    for name in sorted(dir(acts)):
        cls = getattr(acts, name)
        if not inspect.isclass(cls) or not issubclass(cls, nn.Module) or cls.__module__ != acts.__name__:
            continue
        if not mine():
            continue
        code = reason = None
        stoch = stateful = False
        r = try_module(torch, cls, name)
        if isinstance(r, str):
            reason = r
        else:
            kwargs, shapes, integer, stoch, stateful = r
            code = module_task("from transformers.activations import %s" % name, name, kwargs, shapes, integer)
        emit(seed_record("transformers.activations." + name, name, "module", "transformers", version, cls,
                         signature_text(cls.__init__, True), signature_text(cls.forward, True),
                         cls.__doc__, code, reason, stoch, stateful))
    import importlib
    for fam in families:
        if not mine():
            continue
        modpath = "transformers.models.%s.modeling_%s" % (fam, fam)
        try:
            mod = importlib.import_module(modpath)
        except Exception:  # noqa: BLE001
            continue
        cfg_cls, cfg = tf_config(transformers, fam)
        for name in sorted(dir(mod)):
            cls = getattr(mod, name)
            if not inspect.isclass(cls) or cls.__module__ != modpath or not issubclass(cls, nn.Module):
                continue
            if not name.endswith(BLOCK_SUFFIXES):
                continue
            code = reason = None
            stoch = bool(STOCHASTIC_NAME.search(name))
            stateful = False
            shape = (8, 32, 64)
            attempts = []
            if cfg is not None:
                for ctor in ("config", "config, layer_idx=0"):
                    attempts.append((ctor, cfg_cls.__name__, cfg[1], False))
                    attempts.append((ctor, cfg_cls.__name__, cfg[1], True))
            attempts.append(("64", None, None, False))
            last = None
            for ctor_args, cfg_name, cfg_kw, pos in attempts:
                try:
                    torch.manual_seed(0)
                    if ctor_args == "config":
                        m = cls(cfg[0])
                    elif ctor_args.startswith("config,"):
                        m = cls(cfg[0], layer_idx=0)
                    else:
                        m = cls(64)
                    m.train()
                    x = torch.randn(*shape)
                    with torch.no_grad():
                        if pos:
                            p = torch.arange(shape[1]).unsqueeze(0)
                            y1, y2 = m(x, p), m(x, p)
                        else:
                            y1, y2 = m(x), m(x)
                    if not tensors_of(y1):
                        last = "forward returns no tensor"
                        continue
                    stoch = stoch or not same_outputs(y1, y2)
                    code = tf_block_task(modpath, name, ctor_args, cfg_name, cfg_kw, shape, pos)
                    break
                except Exception as e:  # noqa: BLE001
                    last = "%s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:160])
            if code is None:
                reason = "cannot be called with hidden states alone (last error: %s)" % last
            emit(seed_record("%s.%s" % (modpath, name), name, "module", "transformers", version, cls,
                             signature_text(cls.__init__, True), signature_text(cls.forward, True),
                             cls.__doc__, code, reason, stoch, stateful))


# Sharding: every operator (and every transformers family) is one item,
# numbered in crawl order; shard K of N probes the items numbered K mod N
# and tags its records with the item number, so the parent can put the
# shards' records back in the order one process would have written them.
SHARD = [0, 1]
ITEM = [-1]


def mine():
    ITEM[0] += 1
    return ITEM[0] % SHARD[1] == SHARD[0]


def limit_memory():
    """Cap the heap so a probe whose output explodes (torch.diagflat of a
    large tensor, say) fails with an error, a reason, instead of exhausting
    the machine. CA_CRAWL_MEM_MB, 4096 by default; 0 for no cap."""
    try:
        import resource
        mb = int(os.environ.get("CA_CRAWL_MEM_MB", "4096"))
        if mb > 0:
            lim = mb << 20
            soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
            if hard != resource.RLIM_INFINITY:
                lim = min(lim, hard)
            resource.setrlimit(resource.RLIMIT_DATA, (lim, hard))
    except (ImportError, ValueError, OSError):
        pass


def crawl_parallel(argv, jobs):
    """Run jobs shards of the crawl at once and merge them in crawl order."""
    import subprocess
    import tempfile
    rest = [a for a in argv]
    procs = []
    for k in range(jobs):
        f = tempfile.TemporaryFile()
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "crawl", "--shard", "%d/%d" % (k, jobs)] + rest,
                             stdout=f)
        procs.append((p, f))
    status = 0
    tagged = []
    for p, f in procs:
        rc = p.wait()
        status = status or rc
        f.seek(0)
        for n, line in enumerate(f.read().decode().splitlines()):
            item, _, rec = line.partition("\t")
            if rec:
                tagged.append((int(item), n, rec))
        f.close()
    tagged.sort(key=lambda t: (t[0], t[1]))
    for _, _, rec in tagged:
        sys.stdout.write(rec + "\n")
    sys.stdout.flush()
    return status


def crawl(argv):
    families = DEFAULT_FAMILIES.split(",")
    use_tf = True
    functions = True
    jobs = 1
    shard = None
    passed = []
    i = 0
    while i < len(argv):
        if argv[i] == "--no-transformers":
            use_tf = False
            passed.append(argv[i])
        elif argv[i] == "--no-functions":
            functions = False
            passed.append(argv[i])
        elif argv[i] == "--families" and i + 1 < len(argv):
            i += 1
            families = [f for f in argv[i].split(",") if f]
            passed += ["--families", argv[i]]
        elif argv[i] == "--jobs" and i + 1 < len(argv):
            i += 1
            jobs = max(1, int(argv[i]))
        elif argv[i] == "--shard" and i + 1 < len(argv):
            i += 1
            k, n = argv[i].split("/")
            shard = [int(k), int(n)]
        i += 1
    if jobs > 1 and shard is None:
        return crawl_parallel(passed, jobs)
    import torch
    torch.set_num_threads(1)
    limit_memory()
    real_stdout = sys.stdout
    # Modules may print while being probed; keep stdout for records.
    sys.stdout = sys.stderr
    global emit
    if shard is None:
        def emit(rec):  # noqa: F811
            real_stdout.write(json.dumps(rec) + "\n")
    else:
        SHARD[:] = shard

        def emit(rec):  # noqa: F811
            real_stdout.write("%d\t%s\n" % (ITEM[0], json.dumps(rec)))
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    crawl_torch(torch, functions)
    if use_tf:
        crawl_transformers(torch, families)
    real_stdout.flush()
    return 0


# ---------------------------------------------------------------- worker

def flat_tensors(out):
    return tensors_of(out)


def run_check(req, torch, hello):
    res = {"checks": {}, "reasons": [], "eager_ms": None, "compile_ms": None, "output_shape": None}
    checks, reasons = res["checks"], res["reasons"]
    dev = req.get("device", "cpu")
    seed = int(req.get("seed", 0))
    atol, rtol = float(req.get("atol", 1e-2)), float(req.get("rtol", 1e-2))
    ns = {"__name__": "ca_task"}
    try:
        exec(compile(req["code"], "<task>", "exec"), ns)
        for need in ("Model", "get_inputs", "get_init_inputs"):
            if need not in ns:
                raise NameError("task defines no %s" % need)
    except Exception as e:  # noqa: BLE001
        checks["executable"] = False
        reasons.append("load: %s: %s" % (type(e).__name__, short(e)))
        return res

    def build(model_seed, input_seed):
        # Made on the device directly: a GB of torch.randn on the CPU per
        # build would cost more than the checks.
        with torch.device(dev):
            torch.manual_seed(model_seed)
            init = ns["get_init_inputs"]()
            m = ns["Model"](*init).to(dev)
            torch.manual_seed(input_seed)
            xs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in ns["get_inputs"]()]
        return m, xs

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    # Each comparison is made as soon as its outputs exist and what it
    # needed is let go: at most two sets of inputs live at once, which
    # matters for problems with inputs of many GB.
    try:
        with torch.no_grad():
            m, xs = build(seed, seed + 1)
            o1 = m(*xs)
            o2 = m(*xs)
            sync()
            same_calls = same_outputs(o1, o2)
            del o2
            m3, xs3 = build(seed, seed + 1)
            o3 = m3(*xs3)
            sync()
            same_seed = same_outputs(o1, o3)
            del m3, xs3, o3
            m4, xs4 = build(seed, seed + 2)
            o4 = m4(*xs4)
            sync()
    except Exception as e:  # noqa: BLE001
        checks["executable"] = False
        reasons.append("eager: %s: %s" % (type(e).__name__, short(e)))
        return res
    t1 = flat_tensors(o1)
    if not t1:
        checks["executable"] = False
        reasons.append("eager: forward returns no tensor")
        return res
    checks["executable"] = True
    res["output_shape"] = list(t1[0].shape)
    # Deterministic: same seed, fresh model and inputs, bitwise equal; and a
    # second call on the same inputs must equal the first (no randomness, no state).
    if not same_calls:
        checks["deterministic"] = False
        reasons.append("stochastic or stateful: two calls on the same inputs differ")
    elif not same_seed:
        checks["deterministic"] = False
        reasons.append("nondeterministic: the same seed gives different outputs")
    else:
        checks["deterministic"] = True
    # Not degenerate.
    degenerate = None
    fl = [t.detach().float() for t in t1 if t.numel() > 0]
    # A single number (a loss, a norm) is constant by itself: for it only
    # the dependence on the inputs says whether it is degenerate.
    scalar = sum(t.numel() for t in fl) == 1
    if not fl:
        degenerate = "output is empty"
    elif not all(bool(torch.isfinite(t).all()) for t in fl):
        degenerate = "output has NaN or Inf"
    elif not scalar and all(bool((t == 0).all()) for t in fl):
        degenerate = "output is all zeros"
    else:
        lo = min(float(t.min()) for t in fl)
        hi = max(float(t.max()) for t in fl)
        if not scalar and hi - lo <= 1e-6 * max(1.0, abs(hi), abs(lo)):
            degenerate = "output is constant (%.6g)" % hi
        else:
            t4 = [t.detach().float() for t in flat_tensors(o4) if t.numel() > 0]
            if len(t4) == len(fl) and all(a.shape == b.shape for a, b in zip(fl, t4)):
                diff = max(float((a - b).abs().max()) for a, b in zip(fl, t4))
                if diff <= 1e-6 * max(1.0, abs(hi), abs(lo)):
                    degenerate = "output does not depend on the inputs"
    del o4, m4, xs4
    checks["non_degenerate"] = degenerate is None
    if degenerate:
        reasons.append("degenerate: " + degenerate)
    warmup, iters = int(req.get("warmup", 3)), int(req.get("iters", 10))
    skipped = res.setdefault("skipped", [])
    timing = bool(req.get("timing")) and dev == "cuda"
    # A task already rejected needs no compile: torch.compile is the
    # expensive check, so it runs last and only when it can still matter.
    if reasons:
        if req.get("compile", True):
            skipped.append("compile: the task was already rejected")
        return res
    # Timed as ca-profile times its baselines: evaluation mode, each call's
    # inputs drawn under a seed of its own.
    task = types.SimpleNamespace(get_inputs=ns["get_inputs"])
    del xs
    seeds = [seed + 1 + i for i in range(warmup + iters)]
    if timing:
        try:
            res["eager_ms"] = time_ms(task, m.eval(), seeds, warmup, iters)
        except Exception as e:  # noqa: BLE001
            reasons.append("eager timing: %s: %s" % (type(e).__name__, short(e)))
            return res
        lo, hi = req.get("min_ms"), req.get("max_ms")
        if lo is not None and hi is not None and not (lo <= res["eager_ms"] <= hi):
            if req.get("compile", True):
                skipped.append("compile: the workload check failed")
            return res
    del o1, t1
    # Compiled agrees with eager (compared with a fresh eager run, so the
    # eager outputs need not be kept while compiling).
    if req.get("compile", True):
        try:
            torch._dynamo.reset()
            with torch.no_grad():
                mc, xsc = build(seed, seed + 1)
                t1 = flat_tensors(mc(*xsc))
                cm = torch.compile(mc)
                tc = flat_tensors(cm(*xsc))
                sync()
            if len(tc) != len(t1) or any(a.shape != b.shape for a, b in zip(t1, tc)):
                checks["compile"] = False
                reasons.append("compile: output shapes differ from eager")
            else:
                err = max(float(((a.float() - b.float()).abs() - rtol * b.float().abs()).max()) for a, b in zip(tc, t1))
                ok = err <= atol
                checks["compile"] = ok
                if not ok:
                    reasons.append("compile: output differs from eager beyond atol %g rtol %g" % (atol, rtol))
            del t1, tc
            del xsc
            if timing and checks["compile"]:
                # evaluation mode, as ca-profile compiles it: dynamo
                # recompiles in the warm-up calls
                res["compile_ms"] = time_ms(task, mc.eval(), seeds, warmup, iters, cm)
        except Exception as e:  # noqa: BLE001
            checks["compile"] = False
            reasons.append("compile: %s: %s" % (type(e).__name__, short(e)))
    else:
        checks["compile"] = None
    return res


def time_ms(task, model, seeds, warmup, iters, compiled=None):
    # Workers share the GPU: the timed part runs alone, under a lock file
    # ca-filter names, so one task's timing is not another's compile.
    path = os.environ.get("CA_SYNTH_TIMING_LOCK")
    if not path:
        return time_ms_unlocked(task, model, seeds, warmup, iters, compiled)
    import fcntl
    try:
        # read-only is enough for flock, and all a sandboxed worker gets
        lock = open(path, "r")
    except OSError:
        return time_ms_unlocked(task, model, seeds, warmup, iters, compiled)
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return time_ms_unlocked(task, model, seeds, warmup, iters, compiled)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def time_ms_unlocked(task, model, seeds, warmup, iters, compiled=None):
    # ca-profile's own timed loop (ca_runner.time_model): one clock for the
    # workload check and the baselines the reward divides by.
    return ca_runner.time_model(task, model, seeds, warmup, iters, compiled)["median_us"] / 1000.0


def short(e):
    s = str(e).strip().splitlines()
    return (s[0] if s else "")[:300]


def warm_up(torch, dev="cuda", limit_s=90):
    """Pay torch.compile's first-use cost (inductor, triton, cuBLAS) before the hello.
    Bounded: a warm-up that hangs is abandoned after limit_s seconds."""
    import signal

    class Late(Exception):
        pass

    def late(signum, frame):
        raise Late()
    t0 = time.time()
    old = signal.signal(signal.SIGALRM, late)
    signal.alarm(limit_s)
    try:
        with torch.no_grad():
            x = torch.randn(256, 256, device=dev)
            (x @ x).sum().item()
            f = torch.compile(lambda a: torch.relu(a) * 2 + 1)
            f(x)
            if dev == "cuda":
                torch.cuda.synchronize()
        torch._dynamo.reset()
    except Exception:  # noqa: BLE001 - a failed warm-up only costs the first task the time
        pass
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return round(time.time() - t0, 3)


def worker(argv):
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import torch
    threads = os.environ.get("CA_SYNTH_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    cuda = torch.cuda.is_available()
    hello = {"torch": torch.__version__, "cuda": cuda,
             "gpu": torch.cuda.get_device_name(0) if cuda else None}
    if "--warm" in argv and cuda:
        hello["warm_s"] = warm_up(torch)
    out.write(json.dumps({"hello": hello}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        t0 = time.time()
        try:
            req = json.loads(line)
            res = run_check(req, torch, hello)
        except Exception as e:  # noqa: BLE001
            res = {"checks": {}, "reasons": ["checker: %s: %s" % (type(e).__name__, short(e))]}
        res["check_s"] = round(time.time() - t0, 3)
        out.write(json.dumps(res) + "\n")
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return 0


def main():
    if len(sys.argv) < 2:
        sys.stderr.write("usage: ca_synth.py crawl|worker [args]\n")
        return 2
    if sys.argv[1] == "crawl":
        return crawl(sys.argv[2:])
    if sys.argv[1] == "worker":
        return worker(sys.argv[2:])
    sys.stderr.write("ca_synth.py: unknown verb %s\n" % sys.argv[1])
    return 2


if __name__ == "__main__":
    sys.exit(main())
