"""ca_bench_train: the PyTorch side of bench-train-cuda (bench/bench-train-cuda.c).

    python3 lib/py/ca_bench_train.py DIR TOKENS SEQ_LEN STEPS [MODE ...]

Loads the checkpoint DIR with transformers (sdpa attention) and times the step
bench-train-cuda times: a batch of TOKENS tokens as TOKENS/SEQ_LEN sequences of
SEQ_LEN, forward, backward of the mean next-token negative log-likelihood,
gradient clipping to 1 and AdamW. One untimed step, then STEPS timed ones; one
JSON line per MODE:
  autocast  fp32 parameters (the master weights) under torch.autocast(bfloat16),
            as the CUDA backend keeps fp32 masters and computes in bf16
  bf16      parameters and optimizer state in bfloat16
"""
import json
import sys
import time

import torch
import transformers


def bench(path, tokens, seq_len, steps, mode):
    dtype = torch.float32 if mode == "autocast" else torch.bfloat16
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa").cuda()
    model.train()
    cfg = model.config
    nseq = tokens // seq_len
    ids = (torch.arange(nseq * seq_len, device="cuda", dtype=torch.int64) * 2654435761 % cfg.vocab_size)
    ids = ids.view(nseq, seq_len)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fb = step = 0.0
    for i in range(steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "autocast"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if i > 0:
            fb += t1 - t0
            step += t2 - t0
    fb /= steps
    step /= steps
    T = nseq * seq_len
    C, L, V = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
    D = getattr(cfg, "head_dim", None) or C // cfg.num_attention_heads
    QD, KD = cfg.num_attention_heads * D, cfg.num_key_value_heads * D
    matmul = V * C + L * (2 * C * QD + 2 * C * KD + 3 * C * cfg.intermediate_size)
    pairs = nseq * seq_len * (seq_len + 1) / 2
    flops = 6 * matmul * T + 12 * D * cfg.num_attention_heads * L * pairs
    out = {"backend": "torch-" + mode, "torch": torch.__version__, "transformers": transformers.__version__,
           "tokens": T, "seq_len": seq_len, "sequences": nseq, "steps": steps,
           "fwd_bwd_s": round(fb, 4), "step_s": round(step, 4),
           "fwd_bwd_tokens_per_s": round(T / fb), "step_tokens_per_s": round(T / step),
           "flops_per_step": flops, "mfu": round(flops / fb / 989e12, 4),
           "peak_bytes": torch.cuda.max_memory_allocated(), "loss": float(loss)}
    print(json.dumps(out), flush=True)
    del model, opt
    torch.cuda.empty_cache()


def main():
    if len(sys.argv) < 5:
        sys.exit("usage: ca_bench_train.py DIR TOKENS SEQ_LEN STEPS [MODE ...]")
    path, tokens, seq_len, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    for mode in sys.argv[5:] or ["autocast"]:
        bench(path, tokens, seq_len, steps, mode)


if __name__ == "__main__":
    main()
