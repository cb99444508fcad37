"""ca_rl_ref: the PyTorch side of the training steps (owner: RL steps, issue 7).

The same step as ca-sft-step, ca-value-step and ca-ppo-step, written with
torch and transformers from verl's definitions (policy loss with
asymmetric and dual clip, value loss with optional clipping, the
aggregation modes of verl's agg_loss), so that

  * a test can check ca's loss, clip fractions, KL and gradient norm
    against an independent implementation on the same checkpoint and batch;
  * a benchmark can time ca's step against the equivalent PyTorch step in
    the same run (steps/s, tokens/s, peak memory) on a GPU.

    python3 ca_rl_ref.py KINDS POLICY BATCH.ndjson [--critic DIR] [options]
    python3 ca_rl_ref.py init DIR [--critic] [--shape small|0.5b] [--dtype D]
    python3 ca_rl_ref.py whiten BATCH.ndjson

KINDS is a comma-separated list of sft, value and ppo (value trains the
--critic checkpoint), --agg a comma-separated list of aggregation modes;
each kind under each mode prints one JSON object, in that order, with the
stats of the first update (the names of the commands' stats records) and
the timing of --repeat updates. One process serves all, since importing
transformers costs seconds. "whiten" prints verl's masked_whiten of the
records' advantages over the whole batch (what ca-gae --whiten adds).
Records follow ca-records(5): entry i of a per-token array belongs to
tokens[i], scored by the model's output at position i - 1; the first
token is never trained on.
"""

import argparse
import json
import sys
import time

import torch


def read_batch(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def per_token(records, key, device, dtype=torch.float64):
    """A [B, L-1] tensor of entries 1.. of a per-token field (nulls as 0)."""
    n = max(len(r["tokens"]) for r in records)
    out = torch.zeros(len(records), n - 1, dtype=dtype, device=device)
    for b, r in enumerate(records):
        vals = [0.0 if v is None else float(v) for v in r[key][1:]]
        out[b, : len(vals)] = torch.tensor(vals, dtype=dtype)
    return out


def pack(records, device):
    """Right-padded ids, attention mask, and the [B, L-1] loss mask."""
    n = max(len(r["tokens"]) for r in records)
    ids = torch.zeros(len(records), n, dtype=torch.long, device=device)
    attn = torch.zeros(len(records), n, dtype=torch.long, device=device)
    mask = torch.zeros(len(records), n - 1, dtype=torch.float64, device=device)
    for b, r in enumerate(records):
        t = r["tokens"]
        ids[b, : len(t)] = torch.tensor(t)
        attn[b, : len(t)] = 1
        m = r.get("mask") or [1] * len(t)
        mask[b, : len(t) - 1] = torch.tensor([float(x) for x in m[1:]], dtype=torch.float64)
    return ids, attn, mask


def agg(loss, mask, a):
    """verl's agg_loss on one rank, in our words; a.agg is the mode.

    Matched against verl-project/verl verl/trainer/ppo/core_algos.py
    (agg_loss with dp_size 1 and the default denominators): token-mean is
    the masked sum over the mask's count, no epsilon; the seq-mean modes
    average over the rows that have a mask-1 token only, a row's mean
    being its masked sum over its count + 1e-8; seq-mean-token-sum-norm
    divides seq-mean-token-sum by a.loss_scale_factor, by default the
    padded width mask.shape[-1]. A batch without tokens divides 0 by 0,
    as verl's does (ca gives 0 there).
    """
    tokens = mask.sum(-1)
    if a.agg == "token-mean":
        return (loss * mask).sum() / tokens.sum()
    rows = (loss * mask).sum(-1)
    if a.agg == "seq-mean-token-mean":
        rows = rows / (tokens + 1e-8)
    elif a.agg not in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        raise ValueError("unknown aggregation mode %r" % a.agg)
    present = (tokens > 0).to(rows.dtype)
    loss = (rows * present).sum() / present.sum()
    if a.agg == "seq-mean-token-sum-norm":
        loss = loss / (a.loss_scale_factor or mask.shape[-1])
    return loss


def masked_mean(x, mask):
    return (x * mask).sum() / (mask.sum() + 1e-8)


def masked_whiten(x, mask):
    """verl's masked_whiten (verl/utils/torch_functional.py), in our words.

    The mean is masked_mean's (count + 1e-8); the variance is the masked
    mean of the squared deviations from that mean, times count / (count - 1)
    (masked_var, unbiased), and verl raises when count is below 2; the
    result is (x - mean) / sqrt(var + 1e-8) at every position, masked ones
    included.
    """
    count = mask.sum()
    if count < 2:
        raise ValueError("whitening needs at least two masked elements, got %d" % int(count))
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask) * (count / (count - 1))
    return (x - mean) * torch.rsqrt(var + 1e-8)


def policy_forward(model, ids, attn):
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].double()
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(-1, ids[:, 1:, None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def ppo_loss(logp, old, adv, mask, a):
    neg_kl = torch.clamp(logp - old, -20.0, 20.0)
    ratio = torch.exp(neg_kl)
    l1 = -adv * ratio
    l2 = -adv * torch.clamp(ratio, 1 - a.clip_low, 1 + a.clip_high)
    clipped = torch.maximum(l1, l2)
    stats = {
        "pg_clipfrac": masked_mean((l2 > l1).double(), mask).item(),
        "approx_kl": masked_mean(-neg_kl, mask).item(),
    }
    if a.dual_clip is not None:
        l3 = -adv * a.dual_clip
        losses = torch.where(adv < 0, torch.minimum(l3, clipped), clipped)
        stats["pg_clipfrac_lower"] = masked_mean(((clipped > l3) & (adv < 0)).double(), mask).item()
    else:
        losses = clipped
        stats["pg_clipfrac_lower"] = 0.0
    on = mask > 0
    stats["ratio_min"] = ratio[on].min().item() if on.any() else 1.0
    stats["ratio_max"] = ratio[on].max().item() if on.any() else 1.0
    return agg(losses, mask, a), stats


def step(kind, a, records, device):
    import transformers

    dtype = getattr(torch, a.dtype)
    if kind == "value":
        model = transformers.AutoModelForTokenClassification.from_pretrained(a.critic, torch_dtype=dtype)
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=dtype)
    # Gradients as in training, but no dropout: the classification head of
    # transformers' token classifiers drops 10% by default, ca has none.
    model.to(device).eval()
    ids, attn, mask = pack(records, device)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    first = None
    import contextlib

    def cast():
        if a.autocast:
            return torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # On a GPU one untimed update first (cuBLAS handles, kernel loading); the
    # stats are those of the first timed update.
    warm = 1 if device.startswith("cuda") else 0
    if warm:
        torch.cuda.reset_peak_memory_stats()
    start = None
    for i in range(warm + a.repeat):
        if i == warm:
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        stats = {"kind": kind}
        ctx = cast()
        ctx.__enter__()
        if kind == "value":
            v = model(input_ids=ids, attention_mask=attn).logits[:, :-1, 0].double()
            ret = per_token(records, "returns", device)
            l1 = (v - ret) ** 2
            if a.clip_value is not None:
                old = per_token(records, "values", device)
                vc = torch.max(torch.min(v, old + a.clip_value), old - a.clip_value)
                l2 = (vc - ret) ** 2
                loss = 0.5 * agg(torch.max(l1, l2), mask, a)
                stats["vf_clipfrac"] = masked_mean((l2 > l1).double(), mask).item()
            else:
                loss = 0.5 * agg(l1, mask, a)
                stats["vf_clipfrac"] = 0.0
            stats["vf_loss"] = loss.item()
        else:
            logp, entropy = policy_forward(model, ids, attn)
            ent = agg(entropy, mask, a)
            stats["entropy"] = ent.item()
            if kind == "sft":
                loss = -agg(logp, mask, a)
            else:
                old = per_token(records, "logprobs", device)
                adv = per_token(records, "advantages", device)
                if a.whiten:
                    adv = masked_whiten(adv, mask)
                pg, more = ppo_loss(logp, old, adv, mask, a)
                stats.update(more)
                stats["pg_loss"] = pg.item()
                loss = pg - a.entropy_coef * ent
            stats["loss"] = loss.item()
        ctx.__exit__(None, None, None)
        loss.backward()
        limit = a.max_grad_norm if a.max_grad_norm > 0 else float("inf")
        stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), limit))
        opt.step()
        if first is None and i >= warm:
            first = stats
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    tokens = int(sum(len(r["tokens"]) for r in records))
    first["tokens"] = int(mask.sum().item())
    first["seconds_per_step"] = seconds / a.repeat
    first["tokens_per_s"] = tokens * a.repeat / seconds if seconds > 0 else None
    if device.startswith("cuda"):
        first["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
    return first


SHAPES = {
    # Qwen2-0.5B's shape, random weights: what the benchmark times.
    "0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True,
                 max_position_embeddings=32768, rope_theta=1000000.0),
    # Small enough for a CPU in seconds.
    "small": dict(vocab_size=4096, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                  max_position_embeddings=4096, rope_theta=1000000.0),
}


def init(argv):
    """A random Qwen2-shaped checkpoint (policy, or critic with --critic)."""
    import transformers

    p = argparse.ArgumentParser(prog="ca_rl_ref.py init")
    p.add_argument("dir")
    p.add_argument("--critic", action="store_true")
    p.add_argument("--shape", default="small", choices=sorted(SHAPES))
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    torch.manual_seed(a.seed)
    cfg = transformers.Qwen2Config(initializer_range=0.02, rms_norm_eps=1e-6, **SHAPES[a.shape])
    if a.critic:
        cfg.num_labels = 1
        cfg.tie_word_embeddings = False
        model = transformers.Qwen2ForTokenClassification(cfg)
    else:
        model = transformers.Qwen2ForCausalLM(cfg)
    model.to(getattr(torch, a.dtype)).save_pretrained(a.dir)


def whiten(argv):
    """ca-gae --whiten's numbers: advantages_whitened over a whole batch of records.

    Entry i of "advantages" and "mask" belong together (ca-gae's records, no
    shift); one JSON object per record, verl's values at every position.
    """
    p = argparse.ArgumentParser(prog="ca_rl_ref.py whiten")
    p.add_argument("batch")
    a = p.parse_args(argv)
    records = read_batch(a.batch)
    n = max(len(r["advantages"]) for r in records)
    adv = torch.zeros(len(records), n, dtype=torch.float64)
    mask = torch.zeros(len(records), n, dtype=torch.float64)
    for b, r in enumerate(records):
        k = len(r["advantages"])
        adv[b, :k] = torch.tensor(r["advantages"], dtype=torch.float64)
        mask[b, :k] = torch.tensor([float(x) for x in (r.get("mask") or [1] * k)], dtype=torch.float64)
    out = masked_whiten(adv, mask)
    for b, r in enumerate(records):
        json.dump({"advantages_whitened": out[b, : len(r["advantages"])].tolist()}, sys.stdout)
        sys.stdout.write("\n")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "init":
        init(sys.argv[2:])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "whiten":
        whiten(sys.argv[2:])
        return
    p = argparse.ArgumentParser()
    p.add_argument("kinds")
    p.add_argument("model")
    p.add_argument("batch")
    p.add_argument("--critic", default=None)
    p.add_argument("--agg", default="token-mean")
    p.add_argument("--clip-low", type=float, default=0.2)
    p.add_argument("--clip-high", type=float, default=0.28)
    p.add_argument("--dual-clip", type=float, default=None)
    p.add_argument("--whiten", action="store_true", help="verl's masked_whiten of the advantages first (ppo)")
    p.add_argument("--entropy-coef", type=float, default=0.0)
    p.add_argument("--clip-value", type=float, default=None)
    p.add_argument("--loss-scale-factor", type=float, default=None,
                   help="seq-mean-token-sum-norm's horizon (default: the padded width)")
    p.add_argument("--lr", type=float, default=3e-6)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    # bf16 compute over fp32 parameters, as ca's CUDA engine keeps fp32 master weights.
    p.add_argument("--autocast", action="store_true")
    a = p.parse_args()
    kinds = a.kinds.split(",")
    for k in kinds:
        if k not in ("sft", "value", "ppo"):
            p.error("unknown kind %r (sft, value, ppo)" % k)
    if "value" in kinds and not a.critic:
        p.error("value needs --critic DIR")
    records = read_batch(a.batch)
    for mode in a.agg.split(","):
        a.agg = mode
        for k in kinds:
            out = step(k, a, records, a.device)
            out["agg"] = mode
            json.dump(out, sys.stdout)
            sys.stdout.write("\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
