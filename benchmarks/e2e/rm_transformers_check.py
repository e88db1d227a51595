#!/usr/bin/env python3
"""A verlpp-trained reward model read by Hugging Face transformers (GPU host; docs/models.md).

Loads <rm_model> with AutoModelForSequenceClassification, scores both sides of each held-out
preference pair (the texts verlpp scores: the prompt's messages plus the response as the
assistant's turn, rendered by the tokenizer's chat template without a generation prompt), and
compares with `verlpp model logits` on the same token ids (the score at the last token):
prints the largest difference and both pairwise accuracies as one JSON line.

  python3 rm_transformers_check.py VERLPP_BIN RM_MODEL PAIRS.jsonl [MAX_PAIRS]
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer


def main():
    verlpp, model_dir, pairs_path = sys.argv[1:4]
    limit = int(sys.argv[4]) if len(sys.argv) > 4 else 64  # pairs read (the file's first)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    pairs = [json.loads(line) for line in open(pairs_path) if line.strip()][:limit]
    texts = []
    for p in pairs:
        prompt = p["prompt"] if isinstance(p["prompt"], list) else [{"role": "user", "content": p["prompt"]}]
        for side in ("chosen", "rejected"):
            chat = prompt + [{"role": "assistant", "content": p[side]}]
            texts.append(tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=False))
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    # transformers, one batch right-padded with pad_token_id (its last non-pad token pooling)
    width = max(len(x) for x in ids)
    pad = model.config.pad_token_id
    batch = torch.tensor([x + [pad] * (width - len(x)) for x in ids])
    mask = (batch != pad).long()
    with torch.no_grad():
        hf = model(input_ids=batch, attention_mask=mask).logits[:, 0].double()
    # verlpp, the same ids
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "scores.safetensors")
        args = [verlpp, "model", "logits", model_dir, "--device", "cpu", "--out", out]
        for x in ids:
            args += ["--ids", ",".join(str(i) for i in x)]
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        scores = load_file(out)["scores"]  # [B, T, 1]
    ours = torch.tensor([scores[i, len(x) - 1, 0].item() for i, x in enumerate(ids)], dtype=torch.float64)
    diff = (hf - ours).abs().max().item()
    acc = lambda s: float(((s[0::2] - s[1::2]) > 0).double().mean())
    # verlpp's pairwise accuracy by the pair's extra_info.mistake, where the pairs name one
    by_kind = {}
    for k, p in enumerate(pairs):
        kind = (p.get("extra_info") or {}).get("mistake", "-")
        right, total = by_kind.get(kind, (0, 0))
        by_kind[kind] = (right + int(ours[2 * k] > ours[2 * k + 1]), total + 1)
    print(json.dumps({"pairs": len(pairs), "texts": len(texts), "architecture": model.config.architectures,
                      "max_abs_score_diff": diff, "hf_pairwise_accuracy": acc(hf),
                      "verlpp_pairwise_accuracy": acc(ours),
                      "accuracy_by_mistake": {k: round(r / t, 3) for k, (r, t) in by_kind.items()}, "score_range": [ours.min().item(), ours.max().item()]}))


if __name__ == "__main__":
    main()
