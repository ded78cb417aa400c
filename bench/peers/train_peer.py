#!/usr/bin/env python3
"""Times PyTorch eager training steps of headcount's model (train_model.py) on the nanoGPT CPU
configuration, the peer of `headcount bench --suite train`.

nanoGPT's README CPU run: 4 layers, 4 heads, d_model 128, context 64, batch 12, dropout 0, a
character vocabulary; here pre-LN, causal, d_ff 512, untied head with bias (headcount's model;
the peer runs exactly what headcount runs). Vocabulary and data: the char-lm task's default
text (data/pride-and-prejudice.txt, 76 code points), random windows of 65 characters, unless
--batches DIR gives headcount's dumped batches (tokens.npy / targets.npy). Weights: headcount's
checkpoint with --checkpoint, else headcount's init rule from NumPy (timing does not depend on
the values).

One step = forward, backward, clip_grad_norm_, lr set, AdamW step, zero_grad (the optimizer is
inside the timed region, as in headcount's step). torch.set_num_threads(T),
set_num_interop_threads(1); --warmup untimed steps, then --steps timed ones; the median step
time gives tokens/s = batch * context / median. Attention: F.scaled_dot_product_attention (the
backend that ran is read off the profiler) or --attention math. Prints one JSON object.

--heads H changes the heads at d_model 128 (head_dim 128 / H), as the head-sweep experiment's
series does; `headcount bench --suite train --train-heads H` is its headcount side.

Usage: bench/peers/.venv/bin/python bench/peers/train_peer.py --threads 2 [--steps 30] [--heads H]
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_model  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
NANOGPT_CPU = {"layers": 4, "heads": 4, "d_model": 128, "context": 64, "norm": "pre", "causal": True}
BATCH = 12


def text_batches(path, context, batch, count, seed):
    text = open(path, encoding="utf-8").read()
    vocab = sorted(set(text))
    index = {ch: i for i, ch in enumerate(vocab)}
    split = len(text) - int(len(text) * 0.1)  # the training part, as char-lm splits it
    ids = np.array([index[ch] for ch in text[:split]], dtype=np.int64)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, split - context, size=(count, batch))
    windows = ids[starts[..., None] + np.arange(context + 1)]
    return len(vocab), windows[..., :-1], windows[..., 1:]


def sdpa_backend(model, tokens, targets):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model.loss(tokens, targets).backward()
    names = sorted({e.key for e in prof.key_averages() if "scaled_dot_product" in e.key})
    return [n for n in names if n != "aten::scaled_dot_product_attention"] or names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--steps", type=int, default=30, help="timed steps (default 30)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--text", default=os.path.join(ROOT, "data", "pride-and-prejudice.txt"))
    ap.add_argument("--batches", help="headcount's --dump-batches directory (tokens.npy, targets.npy)")
    ap.add_argument("--checkpoint", help="a headcount checkpoint (directory or .safetensors) to start from")
    ap.add_argument("--attention", choices=["sdpa", "math"], default="sdpa")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--heads", type=int, default=NANOGPT_CPU["heads"],
                    help="heads at d_model 128, head_dim 128/heads (the head-sweep experiment's series)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    total = args.warmup + args.steps

    config = dict(NANOGPT_CPU)
    config["heads"] = args.heads
    optim = None
    if args.checkpoint:
        weights, state = train_model.load_checkpoint(args.checkpoint)
        config, optim, _ = train_model.run_config(state)
        config = dict(config)
    if args.batches:
        tokens, targets = train_model.load_batches(args.batches)
        if tokens.shape[0] < total:
            reps = -(-total // tokens.shape[0])
            tokens, targets = np.tile(tokens, (reps, 1, 1)), np.tile(targets, (reps, 1, 1))
        vocab = int(config.get("vocab") or tokens.max() + 1)
    else:
        vocab, tokens, targets = text_batches(args.text, config["context"], BATCH, total, args.seed)
    config["vocab"] = vocab
    config = train_model.resolve_config(config)
    if not args.checkpoint:
        weights = train_model.random_weights(config, args.seed)

    model = train_model.Model(config, weights, torch.float32, args.attention)
    trainer = train_model.Trainer(model, optim, total)
    backend = sdpa_backend(model, tokens[0], targets[0]) if args.attention == "sdpa" else ["explicit softmax"]
    for p in model.parameters():
        p.grad = None

    times, losses = [], []
    for step in range(total):
        start = time.perf_counter()
        loss, _ = trainer.step(step, tokens[step], targets[step])
        elapsed = time.perf_counter() - start
        losses.append(loss)
        if step >= args.warmup:
            times.append(elapsed)
    median = statistics.median(times)
    batch, context = tokens.shape[1], tokens.shape[2]
    print(json.dumps({
        "peer": "pytorch-eager",
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": platform.machine(),
        "threads": args.threads,
        "config": config,
        "batch": int(batch),
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "attention": args.attention,
        "attention_backend": backend,
        "optimizer": "torch.optim.AdamW (foreach default) + clip_grad_norm_, inside the timed step",
        "warmup_steps": args.warmup,
        "timed_steps": args.steps,
        "median_step_seconds": median,
        "min_step_seconds": min(times),
        "max_step_seconds": max(times),
        "tokens_per_second": batch * context / median,
        "first_loss": losses[0],
        "last_loss": losses[-1],
    }, indent=2))


if __name__ == "__main__":
    main()
