"""ca_hf: the transformers side of the policy engine's tests (issue 6).

Builds tiny random Qwen2/Qwen3/Llama checkpoints and tokenizers, and computes the
reference numbers ca's C engine must reproduce: per-token log-probs,
entropies and values, gradients of a weighted log-prob loss, an AdamW step,
greedy generation, tokenizer encode/decode. Nothing here is used at run
time by the C commands; tests call it as

    python3 lib/py/ca_hf.py COMMAND [options]

Token records (NDJSON, one per line): {"tokens": [ids...], "weights": [w...],
"entropy_weights": [e...]} where weights/entropy_weights are optional and
give the loss L = sum_t w[t]*logp[t] + e[t]*H[t] (logp[t] is the log-prob of
tokens[t] given tokens[:t], so w[0] is ignored; H[t] the entropy of the
distribution that predicts tokens[t]). For a critic L = sum_t w[t]*V[t].

Commands:
  make-model DIR [--tied] [--critic] [--arch qwen2|qwen3|llama] [--layers N]
             [--vocab N] [--seed S] [--dtype float32|bfloat16|float16]
             [--shard-bytes N] [--std X] [--head-dim N]
  logprob DIR < tokens.ndjson        -> {"logprobs": [...], "entropy": [...]}
                                        or {"values": [...]} for a critic
  grad DIR OUT.safetensors < tokens.ndjson   gradients of L, fp32
  adamw DIR OUT_DIR --lr X --wd X --clip X < tokens.ndjson
                                     one torch AdamW step on L, saved
  generate DIR --max-new N < prompts.ndjson  greedy: {"completion": [ids]}
  train-tokenizer DIR CORPUS [--vocab N] [--style qwen2|llama3]
  encode DIR < texts.ndjson          {"text": s} -> {"ids": [...]}
  decode DIR < ids.ndjson            {"ids": [...]} -> {"text": s}
  tokenizer-fixture DIR CORPUS       tokenizers, texts and reference ids
  sample-fixture DIR CORPUS          tokenizer + model + greedy references
  fixture DIR                        all of the make-check references at once
  check-checkpoint DIR < tokens      like logprob (for a checkpoint ca wrote)
  bench DIR TOKENS [--threads N]     PyTorch's time for model_bench's work
  compare A B [--tol X]              per-tensor relative error of two
                                     safetensors files or checkpoint dirs
  unicode-table                      the C tables of \\p{L} and \\p{N} ranges
"""
import json
import sys


def read_records():
    for line in sys.stdin:
        line = line.strip()
        if line:
            yield json.loads(line)


def write(obj):
    sys.stdout.write(json.dumps(obj) + "\n")


def opt(args, name, default=None, kind=str):
    if name in args:
        i = args.index(name)
        value = args[i + 1]
        del args[i:i + 2]
        return kind(value)
    return default


def flag(args, name):
    if name in args:
        args.remove(name)
        return True
    return False


def make_model(args):
    import torch
    from transformers import (LlamaConfig, LlamaForCausalLM, LlamaForTokenClassification,
                              Qwen2Config, Qwen2ForCausalLM, Qwen2ForTokenClassification)
    tied = flag(args, "--tied")
    critic = flag(args, "--critic")
    arch = opt(args, "--arch", "qwen2")
    layers = opt(args, "--layers", 2, int)
    vocab = opt(args, "--vocab", 300, int)
    seed = opt(args, "--seed", 1, int)
    dtype = opt(args, "--dtype", "float32")
    shard = opt(args, "--shard-bytes", None, int)
    std = opt(args, "--std", 0.1, float)
    hidden = opt(args, "--hidden", 64, int)
    head_dim = opt(args, "--head-dim", None, int)
    out = args[0]
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                  num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=512, tie_word_embeddings=tied, rms_norm_eps=1e-6,
                  initializer_range=std, eos_token_id=vocab - 1, bos_token_id=None)
    if head_dim:
        common["head_dim"] = head_dim
    if arch == "qwen2":
        cfg = Qwen2Config(rope_theta=1000000.0, **common)
        cls = Qwen2ForTokenClassification if critic else Qwen2ForCausalLM
    elif arch == "qwen3":
        from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3ForTokenClassification
        # Qwen3Config's head_dim defaults to 128; the tiny model keeps hidden / heads unless told.
        common.setdefault("head_dim", hidden // common["num_attention_heads"])
        cfg = Qwen3Config(rope_theta=1000000.0, **common)
        cls = Qwen3ForTokenClassification if critic else Qwen3ForCausalLM
    else:
        cfg = LlamaConfig(rope_theta=500000.0, attention_bias=True, **common)
        cls = LlamaForTokenClassification if critic else LlamaForCausalLM
    if critic:
        cfg.num_labels = 1
    model = cls(cfg)
    with torch.no_grad():
        # Norm weights away from 1 and biases away from 0, so mistakes show.
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
    model = model.to(getattr(torch, dtype))
    kw = {}
    if shard:
        kw["max_shard_size"] = shard
    model.save_pretrained(out, **kw)


def load(path):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification
    cfg = AutoConfig.from_pretrained(path)
    critic = any(a.endswith("ForTokenClassification") for a in (cfg.architectures or []))
    cls = AutoModelForTokenClassification if critic else AutoModelForCausalLM
    model = cls.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return model, critic


def loss_terms(model, critic, rec):
    """Per-record outputs and the loss L as a torch scalar."""
    import torch
    ids = torch.tensor([rec["tokens"]])
    n = ids.shape[1]
    out = model(input_ids=ids)
    if critic:
        values = out.logits[0, :, 0]
        w = torch.tensor(rec.get("weights", [0.0] * n), dtype=torch.float32)
        return {"values": values}, (w * values).sum()
    logp_all = torch.log_softmax(out.logits[0].float(), dim=-1)  # [n, V]
    logp = torch.zeros(n)
    ent = torch.zeros(n)
    logp[1:] = logp_all[:-1].gather(1, ids[0, 1:, None])[:, 0]
    ent[1:] = -(logp_all[:-1].exp() * logp_all[:-1]).sum(-1)
    w = torch.tensor(rec.get("weights", [0.0] * n), dtype=torch.float32)
    e = torch.tensor(rec.get("entropy_weights", [0.0] * n), dtype=torch.float32)
    loss = (w[1:] * logp[1:]).sum() + (e[1:] * ent[1:]).sum()
    return {"logprobs": logp, "entropy": ent}, loss


def logprob(args):
    import torch
    model, critic = load(args[0])
    with torch.no_grad():
        for rec in read_records():
            outs, _ = loss_terms(model, critic, rec)
            res = {k: v.tolist() for k, v in outs.items()}
            if "logprobs" in res:
                res["logprobs"][0] = None
                res["entropy"][0] = None
            write(res)


def accumulate_grads(model, critic):
    total = None
    for rec in read_records():
        _, loss = loss_terms(model, critic, rec)
        total = loss if total is None else total + loss
    total.backward()


def grad(args):
    from safetensors.torch import save_file
    model, critic = load(args[0])
    accumulate_grads(model, critic)
    grads = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            grads[name] = p.grad.detach().float().contiguous()
    save_file(grads, args[1])


def adamw(args):
    import torch
    lr = opt(args, "--lr", 1e-3, float)
    wd = opt(args, "--wd", 0.0, float)
    clip = opt(args, "--clip", 0.0, float)
    steps = opt(args, "--steps", 1, int)
    model, critic = load(args[0])
    recs = list(read_records())
    params = [p for p in model.parameters()]
    optim = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd,
                              foreach=False)
    for _ in range(steps):
        optim.zero_grad()
        total = None
        for rec in recs:
            _, loss = loss_terms(model, critic, rec)
            total = loss if total is None else total + loss
        total.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip, foreach=False)
        optim.step()
    model.save_pretrained(args[1])


def generate(args):
    import torch
    max_new = opt(args, "--max-new", 16, int)
    model, _ = load(args[0])
    for rec in read_records():
        ids = torch.tensor([rec["tokens"]])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                             do_sample=False, eos_token_id=rec.get("eos"), pad_token_id=0)
        write({"completion": out[0, ids.shape[1]:].tolist()})


QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def train_tokenizer(args):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    vocab = opt(args, "--vocab", 400, int)
    style = opt(args, "--style", "qwen2")
    out, corpus = args[0], args[1]
    pattern = QWEN2_PATTERN if style == "qwen2" else LLAMA3_PATTERN
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    if style == "qwen2":
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    else:
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                    "<|end_header_id|>", "<|eot_id|>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    with open(corpus, encoding="utf-8") as f:
        lines = f.read().split("\n\n")
    tok.train_from_iterator(lines, trainer)
    import os
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))


def encode(args):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(args[0] + "/tokenizer.json")
    for rec in read_records():
        write({"ids": tok.encode(rec["text"], add_special_tokens=False).ids})


def decode(args):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(args[0] + "/tokenizer.json")
    for rec in read_records():
        write({"text": tok.decode(rec["ids"], skip_special_tokens=False)})


def unicode_table(args):
    """Print C range tables of the Unicode letter and number categories."""
    import unicodedata
    def ranges(pred):
        out, start = [], None
        for cp in range(0x110000 + 1):
            ok = cp < 0x110000 and pred(unicodedata.category(chr(cp)))
            if ok and start is None:
                start = cp
            elif not ok and start is not None:
                out.append((start, cp - 1))
                start = None
        return out
    print("/* Generated by lib/py/ca_hf.py unicode-table from Python %s's unicodedata %s. */"
          % (sys.version.split()[0], unicodedata.unidata_version))
    for name, pred in (("letter", lambda c: c.startswith("L")), ("number", lambda c: c.startswith("N"))):
        rs = ranges(pred)
        print("static const uint32_t %s_ranges[][2] = {" % name)
        for i in range(0, len(rs), 4):
            print("\t" + " ".join("{0x%x, 0x%x}," % r for r in rs[i:i + 4]))
        print("};")


def load_tensors(path):
    import glob
    import os
    from safetensors.torch import load_file
    if os.path.isdir(path):
        out = {}
        for f in sorted(glob.glob(os.path.join(path, "*.safetensors"))):
            out.update(load_file(f))
        return out
    return load_file(path)


def compare(args):
    """Relative error ||a - b|| / ||b|| per tensor; exit 1 above --tol."""
    tol = opt(args, "--tol", 1e-4, float)
    a, b = load_tensors(args[0]), load_tensors(args[1])
    worst = 0.0
    bad = []
    if set(a) != set(b):
        bad.append("tensor names differ: %s" % sorted(set(a) ^ set(b)))
    for name in sorted(set(a) & set(b)):
        x, y = a[name].double(), b[name].double()
        if x.shape != y.shape:
            bad.append("%s: shape %s vs %s" % (name, list(x.shape), list(y.shape)))
            continue
        den = y.norm().item()
        rel = (x - y).norm().item() / den if den > 0 else (x - y).norm().item()
        worst = max(worst, rel)
        write({"tensor": name, "rel_err": rel, "max_abs_err": (x - y).abs().max().item()})
        if not rel <= tol:
            bad.append("%s: relative error %.3g" % (name, rel))
    write({"worst_rel_err": worst, "tensors": len(b)})
    for line in bad:
        sys.stderr.write("ca_hf.py: %s\n" % line)
    sys.exit(1 if bad else 0)


def fixture(args):
    """Everything the make-check test needs from transformers, in one process
    (starting torch costs seconds): models, reference outputs, tokenizer."""
    import os
    import random
    import torch
    out = args[0]
    os.makedirs(out, exist_ok=True)
    rnd = random.Random(5)
    recs = []
    for n in (6, 23, 1, 40, 3):
        recs.append({"id": "r%d" % n, "tokens": [rnd.randrange(300) for _ in range(n)],
                     "weights": [rnd.gauss(0, 1) for _ in range(n)],
                     "entropy_weights": [rnd.gauss(0, 0.3) for _ in range(n)]})
    with open(os.path.join(out, "tokens.ndjson"), "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    models = {
        "qwen2-untied-bf16": ["--dtype", "bfloat16", "--shard-bytes", "60000"],
        "qwen2-tied": ["--tied", "--seed", "2"],
        "llama": ["--arch", "llama", "--layers", "3", "--seed", "3"],
        "critic": ["--critic", "--seed", "4"],
        # Qwen3: heads of 24 dims over a hidden size of 64 (4 heads), and tied in bf16.
        "qwen3": ["--arch", "qwen3", "--head-dim", "24", "--seed", "6"],
        "qwen3-tied-bf16": ["--arch", "qwen3", "--tied", "--dtype", "bfloat16", "--seed", "7"],
    }
    for name, opts in models.items():
        path = os.path.join(out, name)
        make_model(opts + [path])
        model, critic = load(path)
        with open(os.path.join(path, "ref-logprob.ndjson"), "w") as f, torch.no_grad():
            for rec in recs:
                outs, _ = loss_terms(model, critic, rec)
                res = {k: v.tolist() for k, v in outs.items()}
                if "logprobs" in res:
                    res["logprobs"][0] = None
                    res["entropy"][0] = None
                f.write(json.dumps(res) + "\n")
        total = sum(loss_terms(model, critic, rec)[1] for rec in recs)
        total.backward()
        from safetensors.torch import save_file
        save_file({k: p.grad.float().contiguous() for k, p in model.named_parameters()
                   if p.grad is not None}, os.path.join(path, "ref-grad.safetensors"))
        if name == "qwen3":
            model, _ = load(path)
            write_generate(model, recs[:3], os.path.join(path, "ref-generate.ndjson"))
        if name == "qwen2-tied":
            # Three AdamW steps with weight decay and clipping, as ca's test does.
            model, critic = load(path)
            params = list(model.parameters())
            optim = torch.optim.AdamW(params, lr=1e-2, betas=(0.9, 0.999), eps=1e-8,
                                      weight_decay=0.1, foreach=False)
            for _ in range(3):
                optim.zero_grad()
                sum(loss_terms(model, critic, rec)[1] for rec in recs).backward()
                torch.nn.utils.clip_grad_norm_(params, 0.5, foreach=False)
                optim.step()
            model.save_pretrained(os.path.join(out, "ref-adamw"))
            model, _ = load(path)
            write_generate(model, recs[:3], os.path.join(path, "ref-generate.ndjson"))


def write_generate(model, recs, path):
    """Greedy continuations of 12 tokens of the records' tokens, as
    {"prompt_tokens": [...], "completion": [...]}."""
    import torch
    with open(path, "w") as f, torch.no_grad():
        for rec in recs:
            ids = torch.tensor([rec["tokens"]])
            g = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12,
                               do_sample=False, eos_token_id=None, pad_token_id=0)
            f.write(json.dumps({"prompt_tokens": rec["tokens"],
                                "completion": g[0, ids.shape[1]:].tolist()}) + "\n")


def tokenizer_fixture(out, corpus):
    """Tokenizers of both styles trained on the corpus, texts to encode
    (the corpus by lines, whole, and random strings of awkward characters)
    and the ids the tokenizers library gives them."""
    import os
    import random
    from tokenizers import Tokenizer
    if not corpus:
        return
    os.makedirs(out, exist_ok=True)
    text = open(corpus, encoding="utf-8", newline="").read()
    rnd = random.Random(7)
    alphabet = (list(" \t\n\r'sStTdlLrevVmMaZ09_.,;:!?()[]{}<>=+-*/\\\"#@$%^&|~`") +
                ["\u00e9", "\u00df", "\u0301", "\u00a0", "\u3000", "\u2028", "\u017f", "\u4e2d",
                 "\u0663", "\u00bd", "\U0001f680", "\u0416", "<|im_end|>", "<|eot_id|>", "\u0085"])
    texts = [line + "\n" for line in text.split("\n")] + [text]
    for _ in range(300):
        texts.append("".join(rnd.choice(alphabet) for _ in range(rnd.randrange(1, 30))))
    with open(os.path.join(out, "texts.ndjson"), "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    for style in ("qwen2", "llama3"):
        d = os.path.join(out, "tok-" + style)
        train_tokenizer([d, corpus, "--vocab", "600", "--style", style])
        if style == "llama3":  # as Meta's tokenizer.json
            path = os.path.join(d, "tokenizer.json")
            j = json.load(open(path))
            j["model"]["ignore_merges"] = True
            json.dump(j, open(path, "w"))
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "ref-ids.ndjson"), "w") as f:
            for t in texts:
                enc = tok.encode(t, add_special_tokens=False).ids
                f.write(json.dumps({"ids": enc, "text": tok.decode(enc, skip_special_tokens=False)}) + "\n")


def sample_fixture(args):
    """A Qwen2 tokenizer trained on the corpus, a tiny model over its
    vocabulary (tokenizer.json beside it), and transformers' greedy
    continuations of token prompts and of a chat prompt."""
    import os
    import torch
    from tokenizers import Tokenizer
    out, corpus = args[0], args[1]
    train_tokenizer([out, corpus, "--vocab", "400", "--style", "qwen2"])
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    make_model([out, "--vocab", str(tok.get_vocab_size()), "--tied", "--seed", "9", "--std", "0.2"])
    cfg_path = os.path.join(out, "config.json")
    cfg = json.load(open(cfg_path))
    cfg["eos_token_id"] = tok.token_to_id("<|endoftext|>")
    json.dump(cfg, open(cfg_path, "w"), indent=2)
    gen_path = os.path.join(out, "generation_config.json")
    gen = json.load(open(gen_path))
    gen["eos_token_id"] = cfg["eos_token_id"]
    json.dump(gen, open(gen_path, "w"), indent=2)
    model, _ = load(out)
    prompts = [tok.encode(t).ids for t in ("def forward(self, x):", "The policy", "12345")]
    chat = "<|im_start|>user\nWrite a CUDA kernel.<|im_end|>\n<|im_start|>assistant\n"
    prompts.append(tok.encode(chat).ids)
    stop = [cfg["eos_token_id"], tok.token_to_id("<|im_end|>")]
    with open(os.path.join(out, "ref-generate.ndjson"), "w") as f:
        for p in prompts:
            ids = torch.tensor([p])
            g = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20,
                               do_sample=False, eos_token_id=stop, pad_token_id=0)
            f.write(json.dumps({"prompt_tokens": p, "completion": g[0, len(p):].tolist()}) + "\n")


def bench(args):
    """The same work as tests/unit/model_bench.c in PyTorch (fp32, CPU time,
    one thread unless --threads): forward with log-probs, forward+backward,
    greedy generation of 32 tokens after 32."""
    import time
    import torch
    threads = opt(args, "--threads", 1, int)
    torch.set_num_threads(threads)
    path, T = args[0], int(args[1])
    model, _ = load(path)
    V = model.config.vocab_size
    tokens = torch.tensor([(t * 2654435761) % (1 << 32) % V for t in range(T)])
    lens = [T // 4] * 3 + [T - 3 * (T // 4)]
    seqs = list(torch.split(tokens, lens))

    def step(train):
        total = 0
        for s in seqs:
            logits = model(input_ids=s[None]).logits[0]
            lp = torch.log_softmax(logits.float(), -1)[:-1].gather(1, s[1:, None])
            total = total + lp.sum()
        if train:
            (-total / T).backward()
        return total

    t0 = time.process_time()
    with torch.no_grad():
        step(False)
    fwd = time.process_time() - t0
    t0 = time.process_time()
    step(True)
    train = time.process_time() - t0
    t0 = time.process_time()
    with torch.no_grad():
        g = model.generate(tokens[None, :32], attention_mask=torch.ones(1, 32, dtype=torch.long),
                           max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)
    gen = time.process_time() - t0
    write({"torch": torch.__version__, "threads": threads, "tokens": T,
           "forward_tokens_per_s": T / fwd, "train_tokens_per_s": T / train,
           "sample_tokens_per_s": (g.shape[1] - 32) / gen})


def main():
    if len(sys.argv) < 2:
        sys.stderr.write(__doc__)
        sys.exit(2)
    cmd, args = sys.argv[1], sys.argv[2:]
    table = {"make-model": make_model, "logprob": logprob, "grad": grad, "adamw": adamw,
             "generate": generate, "train-tokenizer": train_tokenizer, "encode": encode,
             "decode": decode, "unicode-table": unicode_table, "compare": compare,
             "fixture": fixture, "sample-fixture": sample_fixture, "bench": bench,
             "tokenizer-fixture": lambda a: tokenizer_fixture(a[0], a[1]), "check-checkpoint": logprob}
    if cmd not in table:
        sys.stderr.write("ca_hf.py: unknown command %s\n" % cmd)
        sys.exit(2)
    table[cmd](args)


if __name__ == "__main__":
    main()
