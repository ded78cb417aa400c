#!/usr/bin/env python3
"""The claims protocol's E-G MiniLM report: does pruning all-MiniLM-L6-v2's heads cost STS-B?

For each ranking of the committed prune curve (bench/results/2026-12-01b-prune-curve.json:
ablation, gradient, iterative) and each of 30 / 40 / 50 % of the 72 heads, the model is pruned
with `headcount prune --heads` (the ranking's first k heads, k as in the curve), the 1,379 STS-B
test pairs are embedded with `headcount embed`, and a paired bootstrap (2,000 resamples of the
pairs, the same resamples for every model) gives Spearman(pruned) - Spearman(full) in points
with its 95 % percentile interval. The protocol's reading: "no loss" iff the lower end > -1.0.

The full model's Spearman here must equal the curve's (82.03) to 0.01 point: the check that this
pipeline scores as `headcount sts` does.

  .venv/bin/python scripts/minilm_prune_bootstrap.py --out bench/results/<date>-minilm-prune-bootstrap.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRACTIONS = (0.3, 0.4, 0.5)
RANKINGS = {"ablation": "ablation_order", "gradient": "gradient_order", "iterative": "iterative_order"}
RESAMPLES = 2000
SEED = 20261207
NO_LOSS_POINTS = -1.0


def ranks(x):
    """Average ranks (ties share the mean of their positions), as Spearman's rho needs."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    first = np.cumsum(counts) - counts
    return (first + (counts - 1) / 2.0)[inverse]


def spearman_rows(pred, gold, index):
    """Spearman's rho (in points) for each row of `index` (resamples x pairs), vectorised."""
    out = np.empty(index.shape[0])
    for b in range(index.shape[0]):
        p, g = pred[index[b]], gold[index[b]]
        rp, rg = ranks(p), ranks(g)
        rp -= rp.mean()
        rg -= rg.mean()
        out[b] = 100.0 * (rp @ rg) / np.sqrt((rp @ rp) * (rg @ rg))
    return out


def read_sts(path):
    gold, first, second = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 7:
                continue
            gold.append(float(fields[4]))
            first.append(fields[5])
            second.append(fields[6])
    return np.array(gold), first, second


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"minilm_prune_bootstrap: {' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def cosines(binary, model, sentences, first, second, workdir, threads):
    text = os.path.join(workdir, "sentences.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write("\n".join(sentences) + "\n")
    npy = os.path.join(workdir, "embeddings.npy")
    run([binary, "embed", text, "--model", model, "--format", "npy", "--out", npy, "--threads", str(threads)])
    e = np.load(npy).astype(np.float64)
    if e.shape[0] != len(sentences):
        sys.exit(f"minilm_prune_bootstrap: {e.shape[0]} embeddings for {len(sentences)} sentences")
    row = {s: i for i, s in enumerate(sentences)}
    a = e[[row[s] for s in first]]
    b = e[[row[s] for s in second]]
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.path.join(REPO, "build", "headcount"))
    ap.add_argument("--model", default=os.path.join(REPO, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--sts", default=os.path.join(REPO, "..", "shared", "data", "stsb", "sts-test.tsv"))
    ap.add_argument("--curve", default=os.path.join(REPO, "bench", "results", "2026-12-01b-prune-curve.json"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    for name, path in (("--binary", args.binary), ("--model", args.model), ("--sts", args.sts), ("--curve", args.curve)):
        if not os.path.exists(path):
            sys.exit(f"minilm_prune_bootstrap: {name}: {path} does not exist")

    curve = json.load(open(args.curve))
    gold, first, second = read_sts(args.sts)
    sentences = sorted(set(first) | set(second))
    rng = np.random.default_rng(SEED)
    index = rng.integers(0, len(gold), size=(RESAMPLES, len(gold)))
    everything = np.arange(len(gold))[None, :]

    with tempfile.TemporaryDirectory() as work:
        full = cosines(args.binary, args.model, sentences, first, second, work, args.threads)
        full_rho = spearman_rows(full, gold, everything)[0]
        curve_full = curve["points"][0]["ablation"]
        if abs(full_rho - curve_full) > 0.01:
            sys.exit(f"minilm_prune_bootstrap: full model Spearman {full_rho:.4f} is not the curve's {curve_full:.4f}")
        full_boot = spearman_rows(full, gold, index)
        rows = []
        for ranking, key in RANKINGS.items():
            order = curve[key]
            for fraction in FRACTIONS:
                point = next(p for p in curve["points"] if abs(p["fraction"] - fraction) < 1e-9)
                k = point["heads_removed"]
                heads = ",".join(f"{h['layer']}:{h['head']}" for h in order[:k])
                pruned_dir = os.path.join(work, f"{ranking}-{fraction}")
                run([args.binary, "prune", "--model", args.model, "--heads", heads, "--out", pruned_dir])
                pred = cosines(args.binary, pruned_dir, sentences, first, second, work, args.threads)
                rho = spearman_rows(pred, gold, everything)[0]
                diff = spearman_rows(pred, gold, index) - full_boot
                low, high = np.percentile(diff, [2.5, 97.5])
                row = {
                    "ranking": ranking,
                    "fraction": fraction,
                    "heads_removed": k,
                    "spearman": rho,
                    "curve_spearman": point[ranking],
                    "difference": rho - full_rho,
                    "interval_95": [low, high],
                    "no_loss": bool(low > NO_LOSS_POINTS),
                }
                rows.append(row)
                print(f"{ranking:9s} {fraction:.0%} ({k} heads): {rho:.2f} ({rho - full_rho:+.2f} [{low:+.2f}, {high:+.2f}])"
                      f" {'no loss' if row['no_loss'] else 'loss not excluded'}")

    json.dump(
        {
            "format": "headcount-minilm-prune-bootstrap-v1",
            "command": ".venv/bin/python scripts/minilm_prune_bootstrap.py --out " + os.path.relpath(args.out, REPO),
            "rule": "paired bootstrap over STS-B test pairs, 2,000 resamples (the same for every model), "
            "95 % percentile interval of Spearman(pruned) - Spearman(full) in points; no loss iff the lower end > -1.0",
            "sts_pairs": int(len(gold)),
            "resamples": RESAMPLES,
            "seed": SEED,
            "full_spearman": full_rho,
            "curve": os.path.relpath(args.curve, REPO),
            "rows": rows,
        },
        open(args.out, "w"),
        indent=1,
    )


if __name__ == "__main__":
    main()
