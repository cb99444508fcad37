"""ca_sample_ref: the transformers side of the GPU sampler's checks and benchmark.

Used by tests/gpu/t0506-ca-sample-cuda.sh and bench/bench-policy.sh; nothing
here runs in the C commands.

    python3 ca_sample_ref.py margins DIR < records
        For token records (tokens, mask) whose mask-1 tokens were chosen
        greedily by ca: the fp32 model's logit margin max(logits) -
        logits[chosen] at each, on the GPU when there is one. A greedy token
        is right when its margin is 0; bf16 rounding may pick a token whose
        margin is small. Prints {"positions", "exact", "max_margin"}.

    python3 ca_sample_ref.py bench DIR --batch B --prompt P --new N [--dtype bfloat16]
        transformers' generate on the GPU: B prompts of P pseudo-random
        tokens, exactly N new tokens each (greedy, no end token), after a
        warm-up. Prints {"tokens", "seconds", "tokens_per_s", "peak_memory_bytes"}.
"""
import json
import sys
import time

from ca_hf import opt  # this script's directory is first on sys.path


def device():
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def margins(args):
    import torch
    from transformers import AutoModelForCausalLM
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = device()
    model = AutoModelForCausalLM.from_pretrained(args[0], dtype=torch.float32, attn_implementation="eager")
    model.to(dev).eval()
    positions = exact = 0
    worst = 0.0
    with torch.no_grad():
        for line in sys.stdin:
            if not line.strip():
                continue
            rec = json.loads(line)
            toks = rec["tokens"]
            mask = rec.get("mask") or [1] * len(toks)
            logits = model(input_ids=torch.tensor([toks], device=dev)).logits[0].float()
            for i in range(1, len(toks)):
                if not mask[i]:
                    continue
                row = logits[i - 1]
                m = float(row.max() - row[toks[i]])
                positions += 1
                exact += m == 0.0
                worst = max(worst, m)
    print(json.dumps({"positions": positions, "exact": exact, "max_margin": worst}))


def bench(args):
    import torch
    from transformers import AutoModelForCausalLM
    batch = opt(args, "--batch", 64, int)
    prompt = opt(args, "--prompt", 32, int)
    new = opt(args, "--new", 128, int)
    dtype = opt(args, "--dtype", "bfloat16")
    dev = device()
    model = AutoModelForCausalLM.from_pretrained(args[0], dtype=getattr(torch, dtype))
    model.to(dev).eval()
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (batch, prompt), generator=g).to(dev)
    kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        model.generate(ids[:2], attention_mask=torch.ones_like(ids[:2]), max_new_tokens=4, min_new_tokens=4, **kw)
        if dev == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new, **kw)
        if dev == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    tokens = int(out.shape[0] * (out.shape[1] - prompt))
    res = {"batch": batch, "prompt": prompt, "new": new, "dtype": dtype, "tokens": tokens,
           "seconds": seconds, "tokens_per_s": tokens / seconds}
    if dev == "cuda":
        res["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
    print(json.dumps(res))


def main():
    cmds = {"margins": margins, "bench": bench}
    if len(sys.argv) < 3 or sys.argv[1] not in cmds:
        sys.stderr.write(__doc__)
        sys.exit(2)
    cmds[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
