#!/usr/bin/env python3
"""Logit parity between verlpp's decoders and HF transformers (run on a host with torch and
transformers; see run_on_gpu_host.sh and docs/models.md).

For tiny random Qwen2, Qwen3 (explicit head_dim, tied embeddings) and Llama (llama3 rope
scaling, HF-sharded save) causal LMs and a Qwen2 token-classification critic: every parameter
is randomised (biases and norm weights too, so a missing bias or norm cannot hide), the model
is saved with save_pretrained, `verlpp model logits` runs it in each forward mode (padded
batch, packed sequences, prefill + decode over the paged KV cache) on CUDA and on the CPU, and
the logits on real tokens are compared with transformers' (eager attention, fp32). Then
`verlpp model save` writes the checkpoint back (sharded) and transformers loads that and must
give identical logits; finally the embedded tiny config is initialised by verlpp and loaded by
transformers. Exit status 1 if any fp32 figure exceeds 1e-4.
"""
import argparse
import inspect
import json
import os
import subprocess
import sys
import time

import torch
import transformers
from safetensors.torch import load_file

TOL = 1e-4


def rope_kwargs(config_cls, theta, scaling):
    """The rope arguments for this transformers version (5.x: rope_parameters)."""
    params = inspect.signature(config_cls.__init__).parameters
    if "rope_parameters" in params:
        rp = {"rope_type": "default", "rope_theta": theta}
        if scaling:
            rp.update(scaling)
        return {"rope_parameters": rp}
    out = {"rope_theta": theta}
    if scaling:
        out["rope_scaling"] = scaling
    return out


def make_configs():
    common = dict(vocab_size=211, hidden_size=64, intermediate_size=136, num_hidden_layers=3,
                  max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 256}
    return {
        "qwen2": (transformers.Qwen2Config(num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=False,
                                           **rope_kwargs(transformers.Qwen2Config, 1e6, None), **common),
                  "causal", None),
        "qwen3": (transformers.Qwen3Config(num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                                           tie_word_embeddings=True,
                                           **rope_kwargs(transformers.Qwen3Config, 1e6, None), **common),
                  "causal", None),
        "llama3": (transformers.LlamaConfig(num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=False,
                                            **rope_kwargs(transformers.LlamaConfig, 500000.0, llama3), **common),
                   "causal", "100KB"),
        "qwen2_critic": (transformers.Qwen2Config(num_attention_heads=8, num_key_value_heads=2,
                                                  tie_word_embeddings=False, num_labels=1,
                                                  **rope_kwargs(transformers.Qwen2Config, 1e6, None), **common),
                         "token", None),
    }


def build(config, head):
    cls = transformers.AutoModelForCausalLM if head == "causal" else transformers.AutoModelForTokenClassification
    try:
        model = cls.from_config(config, attn_implementation="eager")
    except TypeError:
        model = cls.from_config(config)
    torch.manual_seed(1234)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model.float().eval()


def hf_from_pretrained(head, path):
    cls = transformers.AutoModelForCausalLM if head == "causal" else transformers.AutoModelForTokenClassification
    try:
        return cls.from_pretrained(path, attn_implementation="eager").float().eval()
    except TypeError:
        return cls.from_pretrained(path).float().eval()


def hf_output(model, ids, mask, device, dtype=torch.float32):
    m = model.to(device=device, dtype=dtype)
    with torch.no_grad():
        out = m(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
    model.to(device="cpu", dtype=torch.float32)
    return out.float().cpu()


def verlpp_output(verlpp, path, seqs, mode, device, dtype, work):
    out = os.path.join(work, "out.safetensors")
    cmd = [verlpp, "model", "logits", path, "--out", out, "--mode", mode, "--device", device, "--dtype", dtype]
    for s in seqs:
        cmd += ["--ids", ",".join(str(i) for i in s)]
    t0 = time.time()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:8])} ... failed: {res.stderr.strip()}")
    tensors = load_file(out)
    key = "logits" if "logits" in tensors else "scores"
    return tensors[key], time.time() - t0


def max_diff(a, b, mask):
    m = mask.bool()
    return (a[m].double() - b[m].double()).abs().max().item(), b[m].abs().max().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--verlpp", required=True, help="path to the verlpp binary")
    ap.add_argument("--work", required=True, help="scratch folder")
    ap.add_argument("--tiny", default="examples/tiny", help="the embedded tiny model folder")
    ap.add_argument("--json", default="", help="write the figures here")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    cuda = torch.cuda.is_available()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, cuda {cuda}"
          + (f" ({torch.cuda.get_device_name(0)})" if cuda else ""), flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    g = torch.Generator().manual_seed(7)
    lengths = [17, 9, 1]
    seqs = [torch.randint(3, 211, (n,), generator=g).tolist() for n in lengths]
    T = max(lengths)
    ids = torch.zeros(len(seqs), T, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(s)
        mask[b, :len(s)] = 1

    rows, failures = [], []
    hf_device = "cuda" if cuda else "cpu"

    def record(model_name, what, diff, scale, limit, seconds=None):
        ok = limit is None or diff <= limit
        rows.append({"model": model_name, "check": what, "max_abs_diff": diff, "max_abs_ref": scale,
                     "limit": limit, "ok": ok, "seconds": seconds})
        print(f"  {model_name:13s} {what:42s} max|diff| {diff:.3e}  (max|ref| {scale:.3g})"
              f"{'' if limit is None else ('  ok' if ok else '  FAIL > %g' % limit)}", flush=True)
        if not ok:
            failures.append(f"{model_name} {what}")

    for name, (config, head, shard) in make_configs().items():
        print(f"{name}: {type(config).__name__}, head {head}", flush=True)
        try:
            path = os.path.join(args.work, name)
            model = build(config, head)
            if shard:
                model.save_pretrained(path, max_shard_size=shard)
            else:
                model.save_pretrained(path)
            ref = hf_output(model, ids, mask, hf_device)
            runs = [(m, "cuda") for m in ("padded", "packed", "cached")] if cuda else []
            runs += [(m, "cpu") for m in (("padded",) if cuda else ("padded", "packed", "cached"))]
            for mode, device in runs:
                try:
                    ours, secs = verlpp_output(args.verlpp, path, seqs, mode, device, "float32", args.work)
                except Exception as e:  # e.g. no CUDA in verlpp's LibTorch: say so, keep the CPU figures
                    print(f"  {name}: ERROR {mode} {device}: {e}", flush=True)
                    failures.append(f"{name} {mode} {device}: {e}")
                    continue
                record(name, f"fp32 {mode:6s} {device:4s} vs HF fp32 {hf_device}", *max_diff(ours, ref, mask),
                       TOL, secs)
            if cuda:
                for dtype, torch_dtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16)):
                    try:
                        low_ref = hf_output(model, ids, mask, "cuda", torch_dtype)
                        ours, secs = verlpp_output(args.verlpp, path, seqs, "padded", "cuda", dtype, args.work)
                        record(name, f"{dtype} padded cuda vs HF {dtype} (info)", *max_diff(ours, low_ref, mask),
                               None, secs)
                    except Exception as e:
                        print(f"  {name}: ERROR {dtype}: {e}", flush=True)
            # verlpp writes the checkpoint back (sharded); transformers must load it unchanged.
            back = os.path.join(args.work, name + "_verlpp_saved")
            res = subprocess.run([args.verlpp, "model", "save", path, back, "--max-shard-mb", "0.05"],
                                 capture_output=True, text=True)
            if res.returncode != 0:
                raise RuntimeError(f"verlpp model save failed: {res.stderr.strip()}")
            reloaded = hf_output(hf_from_pretrained(head, back), ids, mask, hf_device)
            record(name, "HF loads verlpp's save: logits vs original", *max_diff(reloaded, ref, mask), 0.0)
        except Exception as e:  # keep going: one broken model should not hide the others' figures
            print(f"  {name}: ERROR {type(e).__name__}: {e}", flush=True)
            failures.append(f"{name}: {e}")

    # The embedded tiny model: verlpp initialises it from a seed, transformers loads it.
    try:
        tiny = os.path.join(args.work, "tiny_seed1")
        res = subprocess.run([args.verlpp, "model", "save", args.tiny, tiny, "--init-seed", "1"],
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"verlpp model save --init-seed failed: {res.stderr.strip()}")
        tiny_cfg = json.load(open(os.path.join(tiny, "config.json")))
        tseqs = [[t % tiny_cfg["vocab_size"] for t in s] for s in seqs]
        tids = ids % tiny_cfg["vocab_size"]
        ref = hf_output(hf_from_pretrained("causal", tiny), tids, mask, hf_device)
        ours, secs = verlpp_output(args.verlpp, tiny, tseqs, "padded", "cuda" if cuda else "cpu", "float32", args.work)
        record("tiny", "verlpp init --seed 1, HF loads it: logits", *max_diff(ours, ref, mask), TOL, secs)
    except Exception as e:
        print(f"  tiny: ERROR {type(e).__name__}: {e}", flush=True)
        failures.append(f"tiny: {e}")

    summary = {"torch": torch.__version__, "transformers": transformers.__version__,
               "device": torch.cuda.get_device_name(0) if cuda else "cpu", "rows": rows, "failures": failures}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    print(f"{len(rows)} figures, {len(failures)} failures" + (": " + "; ".join(failures) if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
