#!/usr/bin/env python3
"""Writes examples/tiny/tokenizer.json and tokenizer_config.json: the small byte-level BPE
tokenizer verlpp uses when no model is downloaded (the arithmetic GRPO job).

Ids 0-255 are the 256 bytes (GPT-2's byte-to-character alphabet, in byte order), then merges
learned by a plain BPE count over a fixed arithmetic corpus, then the special tokens. The
pre-tokenizer and decoder are Qwen2's, without NFC, so every UTF-8 text round-trips exactly.
Deterministic: running it again gives the same files. Standard library only.
"""
import collections
import json
import os
import random
import re

NUM_MERGES = 120
SPECIALS = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
            ("<think>", False), ("</think>", False)]
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CHATML_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                   "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
                   "{{ '<|im_start|>assistant\\n' }}{% endif %}")


def byte_alphabet():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def training_text():
    rng = random.Random(1234)
    lines = []
    for _ in range(3000):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        op, word, value = rng.choice([("+", "plus", a + b), ("-", "minus", a - b), ("*", "times", a * b)])
        lines.append(f"What is {a} {op} {b}? Let me think step by step. {a} {word} {b} equals {value}. "
                     f"The answer is {value}.\nAnswer: {value}\n")
    lines.append("You are a helpful assistant. Solve the problem and put the final answer after 'Answer:'.\n")
    return "".join(lines)


def pre_tokenize(text):
    # An ASCII stand-in for the Qwen2 pattern: merges only need to be consistent, not faithful.
    return re.findall(r"'s|'t|'re|'ve|'m|'ll|'d|[^\r\n\w]?[A-Za-z]+|\d| ?[^\s\w]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
                      text)


def learn_merges(words, alphabet):
    counts = collections.Counter(words)
    seqs = {w: [alphabet[b] for b in w.encode()] for w in counts}
    merges = []
    for _ in range(NUM_MERGES):
        pairs = collections.Counter()
        for w, n in counts.items():
            s = seqs[w]
            for i in range(len(s) - 1):
                pairs[(s[i], s[i + 1])] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        for w in counts:
            s, out, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return merges


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    alphabet = byte_alphabet()
    vocab = {alphabet[b]: b for b in range(256)}
    merges = learn_merges(pre_tokenize(training_text()), alphabet)
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    added = []
    for content, special in SPECIALS:
        added.append({"id": len(vocab) + len(added), "content": content, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": special})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[l, r] for l, r in merges]},
    }
    config = {
        "add_bos_token": False, "add_prefix_space": False, "bos_token": None, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "unk_token": None, "model_max_length": 4096, "errors": "replace",
        "clean_up_tokenization_spaces": False, "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
        "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added},
        "chat_template": CHATML_TEMPLATE,
    }
    with open(os.path.join(here, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(here, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")
    print(f"vocab {len(vocab)} + {len(added)} added tokens, {len(merges)} merges")


if __name__ == "__main__":
    main()
