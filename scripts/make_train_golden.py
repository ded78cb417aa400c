#!/usr/bin/env python3
"""Makes tests/testdata/train_golden/nanogpt_50.json: the losses of the first 50 training steps
of headcount's model in PyTorch, from headcount's own initial weights and batches, in float64
(the reference) and float32, and the bound headcount's float32 losses must meet against the
float64 ones.

Inputs, both written by headcount:
  headcount train --preset nanogpt-cpu --steps 0 --out CKPT          (the initial checkpoint)
  headcount train --preset nanogpt-cpu --steps 50 --dump-batches B  (tokens.npy, targets.npy)
Usage:
  bench/peers/.venv/bin/python scripts/make_train_golden.py --checkpoint CKPT --batches B \\
      [--out tests/testdata/train_golden/nanogpt_50.json]

The runs (bench/peers/train_model.py: the same model, AdamW, schedule and clipping; the
hyperparameters are the checkpoint's):
  fp64        float64 throughout, explicit softmax attention: the reference trajectory.
  fp32        float32, explicit softmax attention.
  fp32_sdpa   float32, F.scaled_dot_product_attention (PyTorch's fused CPU kernel): the same
              arithmetic summed in other orders.
  fp32_ulp    float32 from weights each moved by +-1 ulp at random: how far one rounding of
              every weight carries through 50 steps of AdamW.
The bound. An fp32 implementation's loss at step s differs from the fp64 loss by the rounding
of its forward at s plus the drift that rounding in steps < s has put into the weights; AdamW
divides each update by sqrt(v), so a rounding-level difference in a small gradient component
becomes an lr-sized difference in its update, and the drift grows with s. How large it is
depends on the arithmetic's precision and on the trajectory, not on the order of the sums, so
the three fp32 runs above, which round differently, measure it: D(s) = the largest
|loss_fp32run(s') - loss_fp64(s')| over the three runs and s' <= s (a running maximum, since
drift does not shrink). headcount's float32 losses must satisfy, at every step,
  |loss_headcount(s) - loss_fp64(s)| <= 4 D(s) + 1e-6,
4 because headcount rounds differently again (its own blocking, its own reductions) and the
fp32 runs' spread is a sample of three, not a maximum; 1e-6 (about two ulps of a loss near
4.3, where one ulp is 4.8e-7) so that step 0, where the three runs can agree to the ulp,
is not held to less than rounding the final mean itself can cause. "bound" is 4 max_s D(s) +
1e-6, the loosest per-step value.
What it measured for nanogpt-cpu (seed 1, threads 1): the three fp32 runs stay within 6.2e-7,
6.2e-7 and 9.2e-7 of fp64 over the 50 steps, about one ulp of a float32 loss near 4 (4.8e-7):
at this length the drift is still at the level of the loss's own rounding; bound = 4.7e-6 at
its loosest. headcount's losses (2 threads) stay within 3.2e-7 of fp64, 10% of the per-step
bound at worst (step 2); --compare prints these.
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "peers"))
import train_model  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def run(weights, config, optim, tokens, targets, steps, dtype, attention):
    model = train_model.Model(config, weights, dtype, attention)
    trainer = train_model.Trainer(model, optim, steps, foreach=False)
    losses, norms = [], []
    for s in range(steps):
        loss, norm = trainer.step(s, tokens[s], targets[s])
        losses.append(loss)
        norms.append(norm)
    return losses, norms


def perturbed(weights, seed):
    """Each weight moved one ulp up or down at random (zeros stay zero: biases start at 0)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, w in weights.items():
        direction = np.where(rng.random(w.shape) < 0.5, np.float32(-np.inf), np.float32(np.inf))
        moved = np.nextafter(w, direction).astype(np.float32)
        out[name] = np.where(w == 0, w, moved)
    return out


def sha256_arrays(arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="headcount's initial checkpoint (directory or file)")
    ap.add_argument("--batches", required=True, help="headcount's --dump-batches directory")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--decay-steps", type=int, default=0,
                    help="override the checkpoint's decay_steps (a --steps 0 checkpoint resolved it for 0 steps)")
    ap.add_argument("--compare", help="a headcount checkpoint after the same steps: check its curve against the bound")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "testdata", "train_golden", "nanogpt_50.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    weights, state = train_model.load_checkpoint(args.checkpoint)
    tokens, targets = train_model.load_batches(args.batches)
    if tokens.shape[0] < args.steps:
        sys.exit(f"{args.batches}: expected at least {args.steps} steps of batches, got {tokens.shape[0]}")
    tokens, targets = tokens[: args.steps], targets[: args.steps]
    model_config, optim_config, train_config = train_model.run_config(state)
    config = train_model.resolve_config(model_config)
    optim = train_model.resolve_optim(optim_config, args.steps)
    if args.decay_steps:
        optim["decay_steps"] = args.decay_steps

    runs = {}
    runs["fp64"] = run(weights, config, optim, tokens, targets, args.steps, torch.float64, "math")
    runs["fp32"] = run(weights, config, optim, tokens, targets, args.steps, torch.float32, "math")
    runs["fp32_sdpa"] = run(weights, config, optim, tokens, targets, args.steps, torch.float32, "sdpa")
    runs["fp32_ulp"] = run(perturbed(weights, 1), config, optim, tokens, targets, args.steps, torch.float32, "math")

    reference = np.array(runs["fp64"][0])
    deviation = {k: np.abs(np.array(v[0]) - reference) for k, v in runs.items() if k != "fp64"}
    spread = np.maximum.accumulate(np.max(np.stack(list(deviation.values())), axis=0))
    bound_per_step = 4 * spread + 1e-6

    fixture = {
        "what": "losses of the first steps of headcount's model in PyTorch from headcount's initial weights and "
                "batches; headcount's fp32 losses must meet |loss - losses_fp64[s]| <= bound_per_step[s]",
        "made_by": "scripts/make_train_golden.py (see its docstring for the runs and the bound)",
        "torch": torch.__version__,
        "threads": args.threads,
        "steps": args.steps,
        "seed": train_config.get("seed", state.get("seed")),
        "preset": state.get("preset"),
        "train": train_config,
        "model": config,
        "optim": optim,
        "task": state.get("config", state).get("task"),
        "batch": int(tokens.shape[1]),
        "seq_len": int(tokens.shape[2]),
        "initial_weights_sha256": sha256_arrays(weights.values()),
        "batches_sha256": sha256_arrays([tokens.astype(np.int32), targets.astype(np.int32)]),
        "losses_fp64": runs["fp64"][0],
        "losses_fp32": runs["fp32"][0],
        "losses_fp32_sdpa": runs["fp32_sdpa"][0],
        "losses_fp32_ulp": runs["fp32_ulp"][0],
        "grad_norms_fp64": runs["fp64"][1],
        "max_deviation_from_fp64": {k: float(v.max()) for k, v in deviation.items()},
        "bound_rule": "bound_per_step[s] = 4 * max over the fp32 runs and s' <= s of |loss(s') - loss_fp64(s')| + 1e-6",
        "bound_per_step": bound_per_step.tolist(),
        "bound": float(bound_per_step.max()),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")
    summary = {}
    if args.compare:
        _, other = train_model.load_checkpoint(args.compare)
        losses = np.array(other["curve"]["loss"][: args.steps])
        gap = np.abs(losses - reference[: len(losses)])
        summary = {"headcount_max_deviation_from_fp64": float(gap.max()),
                   "headcount_worst_step": int(gap.argmax()),
                   "headcount_within_bound": bool(np.all(gap <= bound_per_step[: len(losses)])),
                   "headcount_max_deviation_over_bound": float(np.max(gap / bound_per_step[: len(losses)]))}
    print(json.dumps({**summary, "out": args.out, "first_loss_fp64": runs["fp64"][0][0], "last_loss_fp64": runs["fp64"][0][-1],
                      "max_deviation_from_fp64": fixture["max_deviation_from_fp64"], "bound": fixture["bound"]},
                     indent=1))


if __name__ == "__main__":
    main()
