#!/usr/bin/env python3
"""The peer of verlpp-bench-train: one training step in PyTorch + HF transformers.

The same workload: Qwen2.5-0.5B's shape with random weights (benchmarks/rollout/hf_generate.py's
config), B x T random tokens, loss = -mean log p(token | prefix) over every position but the
first with log-probs from fp32 logits (verl's logits.float()), backward, gradient clipping at
1.0 and AdamW(fused=True). The model's parameters are in --dtype (bf16: "plain PyTorch eager",
the figure issue 7 quotes); attn_implementation="sdpa". --compile wraps the forward + loss in
torch.compile. Reports the median step time after warm-up, tokens/s and
torch.cuda.max_memory_allocated over the timed steps; writes one JSON line with the fields
verlpp-bench-train writes.

  python3 hf_train_step.py --batch 16 --seq 512 [--compile] --json hf_train.json
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "rollout"))
from hf_generate import qwen25_05b_config  # noqa: E402  (the one definition of the shape)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("hf_train_step.py: no CUDA device visible to torch")
    torch.manual_seed(1)
    config = qwen25_05b_config()
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model = model.to(device="cuda", dtype=getattr(torch, args.dtype)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01, fused=True)
    ids = torch.randint(config.vocab_size, (args.batch, args.seq), device="cuda")

    def loss_of(input_ids):
        logits = model(input_ids=input_ids).logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        return -logp.mean()

    loss_fn = torch.compile(loss_of) if args.compile else loss_of

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(ids)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    seconds = []
    for _ in range(args.steps):
        start = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    tokens = args.batch * args.seq
    peak = torch.cuda.max_memory_allocated()
    impl = "hf-compile" if args.compile else "hf-eager"
    print(f"{impl}: {args.batch} x {args.seq} tokens, {args.dtype}: step min {min(seconds):.4f} s, median {median:.4f} s, "
          f"{tokens / median:.0f} tokens/s (median); peak {peak / 2**30:.2f} GiB; loss {loss.item():.4f} "
          f"(transformers {transformers.__version__}, torch {torch.__version__})", flush=True)
    if args.json:
        row = {"impl": impl, "shape": "qwen2.5-0.5b", "device": "cuda", "param_dtype": args.dtype, "batch": args.batch,
               "seq": args.seq, "steps": args.steps, "seconds": seconds, "median_s": median,
               "tokens_per_s": tokens / median, "peak_bytes": peak, "loss": loss.item(),
               "transformers": transformers.__version__, "torch": torch.__version__}
        with open(args.json, "w") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
