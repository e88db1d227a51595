#!/usr/bin/env python3
"""The peer of verlpp-bench-rollout: HF transformers `generate` tokens/s on the same shapes.

Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads, 2 KV heads, intermediate 4864, vocab
151936, tied embeddings) with random weights, attn_implementation="sdpa", every sample running
exactly R new tokens (min_new_tokens = max_new_tokens), greedy unless --temperature > 0 (then
plain sampling over the whole vocabulary: top_k 0, top_p 1, as verlpp's bench). The prompts are
verlpp's (id = (b * 131 + t * 17) % vocab), all of one length, so no padding. One warm-up run
per shape is excluded; the best of --repeat runs is reported, timed between
torch.cuda.synchronize() calls. Writes one JSON object per shape with the fields the C++ bench
writes, and prints a table.

  python3 hf_generate.py --shapes 1:128:128,32:128:128 --json hf.json [--dtype bfloat16]
"""
import argparse
import json
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, Qwen2Config


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            sys.exit(f"hf_generate.py: --shapes: '{item}' is not batch:prompt:response (e.g. 32:128:128)")
        shapes.append(tuple(int(p) for p in parts))
    return shapes


def qwen25_05b_config():
    # Qwen/Qwen2.5-0.5B's config.json, shape-defining fields. rope_theta is passed the 4.x way;
    # transformers 5.x folds it into rope_parameters.
    return Qwen2Config(
        vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
        num_attention_heads=14, num_key_value_heads=2, hidden_act="silu",
        max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0,
        tie_word_embeddings=True, use_sliding_window=False, bos_token_id=151643,
        eos_token_id=151643, initializer_range=0.02)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="1:128:128,32:128:128")
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    shapes = parse_shapes(args.shapes)
    if not torch.cuda.is_available():
        sys.exit("hf_generate.py: no CUDA device visible to torch")
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(args.seed)
    config = qwen25_05b_config()
    # Built directly on the GPU (random init there is seconds, not a minute on the CPU).
    try:
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    except Exception as e:  # an older/newer transformers that refuses a device context: build on the CPU
        print(f"hf_generate.py: init under torch.device('cuda') failed ({e}); building on the CPU", flush=True)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model = model.to(device="cuda", dtype=dtype).eval()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name(0)}, attn {model.config._attn_implementation}, {args.dtype}", flush=True)

    out = open(args.json, "w") if args.json else None
    print(f"{'batch':>6} {'prompt':>7} {'response':>9} {'tokens/s':>12} {'seconds':>10}", flush=True)
    for batch, prompt, response in shapes:
        b = torch.arange(batch, device="cuda").unsqueeze(1)
        t = torch.arange(prompt, device="cuda").unsqueeze(0)
        input_ids = (b * 131 + t * 17) % config.vocab_size
        attention_mask = torch.ones_like(input_ids)
        kwargs = dict(max_new_tokens=response, min_new_tokens=response, pad_token_id=0)
        if args.temperature > 0:
            kwargs.update(do_sample=True, temperature=args.temperature, top_k=0, top_p=1.0)
        else:
            kwargs.update(do_sample=False)

        def once():
            torch.cuda.synchronize()
            start = time.perf_counter()
            with torch.inference_mode():
                ids = model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            generated = ids.shape[1] - prompt
            if generated != response:
                sys.exit(f"hf_generate.py: generated {generated} tokens per sample, expected {response}")
            return seconds

        once()  # warm-up
        best = min(once() for _ in range(args.repeat))
        tokens = batch * response
        tps = tokens / best
        print(f"{batch:>6} {prompt:>7} {response:>9} {tps:>12.1f} {best:>10.3f}", flush=True)
        row = {"bench": "rollout", "impl": "hf", "kernels": "sdpa", "model": "qwen2.5-0.5b", "device": "cuda",
               "dtype": args.dtype, "temperature": args.temperature, "batch": batch, "prompt": prompt,
               "response": response, "generated_tokens": tokens, "tokens_per_s": tps, "seconds": best,
               "repeat": args.repeat, "transformers": transformers.__version__, "torch": torch.__version__}
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
