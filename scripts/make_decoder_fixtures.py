#!/usr/bin/env python3
"""Writes tests/testdata/decoder/ from models/SmolLM2-135M-Instruct.Q4_1.gguf with transformers
(run it through scripts/make_decoder_fixtures.sh, which makes the venv):

  decoder.json    for each prompt: its text, its ids (transformers' tokenizer from the GGUF), the
                  32-token greedy continuation of the float64 model, the smallest gap between the
                  two largest float64 logits over those 32 choices (how far greedy is from a tie),
                  whether the float32 model's greedy continuation is the same, and the largest
                  |float32 - float64| logit difference of transformers' own float32 run on the
                  rows stored (the error a plain fp32 implementation makes: the test's bound is
                  derived from it).
  logits_<i>.npy  float32 [2, 49152]: the float64 model's logits (rounded to float32, a relative
                  change of at most 2^-24) at the last prompt position and at the position that
                  chooses the 32nd greedy token (prompt + 31 tokens in, the decode path's).

The float64 model is transformers' LlamaForCausalLM loaded from the GGUF (weights dequantized to
float32 by the `gguf` package, exactly representable in float64) and cast to float64: the
reference arithmetic. The float32 model is the same load left in float32.
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "models")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = os.path.join(ROOT, "tests", "testdata", "decoder")
NEW_TOKENS = 32
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
PROMPTS = [
    "The capital of France is",
    "<|im_start|>system\n" + SYSTEM + "<|im_end|>\n<|im_start|>user\nWhat is gravity?<|im_end|>\n"
    "<|im_start|>assistant\n",
    "def fibonacci(n):\n",
]


def greedy(model, ids, steps):
    """Greedy continuation with the full sequence re-run each step (no cache): the tokens and
    the smallest top-1 / top-2 logit gap."""
    seq = list(ids)
    gap = float("inf")
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([seq])).logits[0, -1]
            top = torch.topk(logits, 2).values
            gap = min(gap, float(top[0] - top[1]))
            seq.append(int(torch.argmax(logits)))
    return seq[len(ids):], gap


def main():
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    tokenizer = AutoTokenizer.from_pretrained(MODELS, gguf_file=GGUF)
    f32 = AutoModelForCausalLM.from_pretrained(MODELS, gguf_file=GGUF, dtype=torch.float32).eval()
    f64 = AutoModelForCausalLM.from_pretrained(MODELS, gguf_file=GGUF, dtype=torch.float32).eval()
    f64 = f64.to(torch.float64)
    os.makedirs(OUT, exist_ok=True)
    cases = []
    for i, text in enumerate(PROMPTS):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        tokens, gap = greedy(f64, ids, NEW_TOKENS)
        tokens32, _ = greedy(f32, ids, NEW_TOKENS)
        full = ids + tokens[: NEW_TOKENS - 1]
        rows = [len(ids) - 1, len(full) - 1]
        with torch.no_grad():
            l64 = f64(torch.tensor([full])).logits[0, rows].numpy()
            l32 = f32(torch.tensor([full])).logits[0, rows].double().numpy()
        np.save(os.path.join(OUT, f"logits_{i}.npy"), l64.astype(np.float32))
        cases.append({
            "text": text,
            "ids": ids,
            "greedy": tokens,
            "greedy_min_gap": gap,
            "float32_greedy_same": tokens32 == tokens,
            "logit_rows": rows,
            "torch_float32_max_abs_error": float(np.max(np.abs(l32 - l64))),
            "logits_max_abs": float(np.max(np.abs(l64))),
        })
        print(f"prompt {i}: {len(ids)} ids, gap {gap:.4f}, fp32 greedy same {tokens32 == tokens}, "
              f"torch fp32 max err {cases[-1]['torch_float32_max_abs_error']:.3g}: "
              f"{tokenizer.decode(tokens)!r}", file=sys.stderr)
    with open(os.path.join(OUT, "decoder.json"), "w") as f:
        json.dump({"model": GGUF, "new_tokens": NEW_TOKENS,
                   "transformers": transformers.__version__, "torch": torch.__version__,
                   "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
