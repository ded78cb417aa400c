#!/usr/bin/python3
"""Checks `headcount attention` against an independent float64 NumPy implementation.

Usage: /usr/bin/python3 attention_float64_check.py path/to/headcount

For each case (MHA, GQA, MQA, causal with q_len < kv_len and q_len > kv_len, odd sizes,
a custom scale) and each kernel, random float32 inputs are written as .npy, the binary
is run, and its out (and lse; probs for the reference kernel) are compared with
attention computed here in float64 with einsum, explicit masks and a softmax. This file
shares no code with headcount, so a bug common to both kernels still shows up.

Tolerance rule, for out:  max |o - ref| <= 1e-5 * max(max |ref|, 1e-30).
Why 1e-5: float32 has unit roundoff u = 6e-8. A dot product of length <= 128 and a
softmax/weighted sum over <= 200 keys accumulate errors of about (length * u) in the
worst case and sqrt(length) * u typically, i.e. ~1e-6 relative; 1e-5 leaves a 10x margin
while still catching any real mistake (a wrong mask, scale or head mapping moves the
output by O(1e-2) or more). Rows that see no key must be exactly zero.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

RTOL = 1e-5


def reference(q, k, v, scale, causal):
    """Attention in float64. q [b, n, h, d], k [b, m, hk, d], v [b, m, hk, dv]."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    n, m, h, hk = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    group = h // hk
    # Query head i reads kv head i // group; np.repeat lays the kv heads out that way.
    k = np.repeat(k, group, axis=2)
    v = np.repeat(v, group, axis=2)
    scores = np.einsum("bnhd,bmhd->bhnm", q, k) * scale
    visible = np.ones((n, m), dtype=bool)
    if causal:  # bottom-right aligned: query i sees key j iff j <= i + (m - n)
        visible = np.arange(m)[None, :] <= np.arange(n)[:, None] + (m - n)
    scores = np.where(visible, scores, -np.inf)
    any_key = visible.any(axis=1)[None, None, :, None]  # [1, 1, n, 1]
    row_max = np.where(any_key, scores.max(axis=-1, keepdims=True, initial=-np.inf), 0.0)
    weights = np.exp(scores - row_max)
    denom = weights.sum(axis=-1, keepdims=True)
    probs = np.where(any_key, weights / np.where(any_key, denom, 1.0), 0.0)
    out = np.einsum("bhnm,bmhe->bnhe", probs, v)
    lse = np.where(any_key, np.log(np.where(any_key, denom, 1.0)) + row_max, -np.inf)[..., 0]
    empty_rows = ~visible.any(axis=1)
    return out, lse, probs, empty_rows


# name, batch, q_len, kv_len, heads, kv_heads, head_dim, v_head_dim, causal, scale
CASES = [
    ("mha", 2, 7, 7, 4, 4, 32, 32, False, None),
    ("gqa", 2, 9, 11, 8, 2, 16, 24, False, None),
    ("mqa", 1, 6, 10, 4, 1, 32, 32, False, None),
    ("causal_q_shorter", 2, 5, 12, 4, 2, 16, 16, True, None),
    ("causal_q_longer", 2, 12, 5, 4, 2, 16, 16, True, None),  # first 7 rows see no key
    ("odd", 2, 97, 33, 3, 1, 59, 59, False, None),
    ("odd_causal", 1, 33, 97, 3, 3, 59, 37, True, None),
    ("custom_scale", 1, 8, 8, 2, 2, 16, 16, True, 0.37),
]


def run_case(binary, workdir, case, kernel, rng, failures):
    name, b, n, m, h, hk, d, dv, causal, scale = case
    tag = f"{name}/{kernel}"
    q = rng.standard_normal((b, n, h, d)).astype(np.float32)
    k = rng.standard_normal((b, m, hk, d)).astype(np.float32)
    v = rng.standard_normal((b, m, hk, dv)).astype(np.float32)
    paths = {x: os.path.join(workdir, f"{name}_{kernel}_{x}.npy") for x in ("q", "k", "v", "out", "lse", "probs")}
    np.save(paths["q"], q)
    # One input as float64 exercises the CLI's conversion; the values are float32-exact.
    np.save(paths["k"], k.astype(np.float64) if name == "gqa" else k)
    np.save(paths["v"], v)
    args = [binary, "attention", "--q", paths["q"], "--k", paths["k"], "--v", paths["v"],
            "--out", paths["out"], "--lse", paths["lse"], "--kernel", kernel, "--threads", "3"]
    if causal:
        args.append("--causal")
    if scale is not None:
        args += ["--scale", repr(scale)]
    if kernel == "reference":
        args += ["--probs", paths["probs"]]
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        failures.append(f"{tag}: exit code {result.returncode}: {result.stderr.strip()}")
        return

    used_scale = scale if scale is not None else 1.0 / np.sqrt(d)
    # The binary computes with the float32 scale; use the same value so only arithmetic differs.
    ref_out, ref_lse, ref_probs, empty_rows = reference(q, k, v, float(np.float32(used_scale)), causal)
    out = np.load(paths["out"])
    lse = np.load(paths["lse"])
    if out.dtype != np.float32 or out.shape != ref_out.shape:
        failures.append(f"{tag}: out is {out.dtype} {out.shape}, expected float32 {ref_out.shape}")
        return

    err = np.abs(out.astype(np.float64) - ref_out).max()
    bound = RTOL * max(np.abs(ref_out).max(), 1e-30)
    ok = err <= bound
    if not ok:
        failures.append(f"{tag}: max |out - ref| = {err:.3e} > {bound:.3e}")
    if empty_rows.any() and np.any(out[:, empty_rows] != 0):
        failures.append(f"{tag}: rows that see no key are not all zeros")
        ok = False

    # lse: -inf exactly on empty rows, elsewhere within RTOL relative to max(1, |lse|).
    finite = np.isfinite(ref_lse)
    if not np.array_equal(np.isfinite(lse), finite) or np.any(lse[~finite] != -np.inf):
        failures.append(f"{tag}: lse is not -inf exactly on the rows that see no key")
        ok = False
    elif finite.any():
        lse_err = (np.abs(lse[finite] - ref_lse[finite]) / np.maximum(1.0, np.abs(ref_lse[finite]))).max()
        if lse_err > RTOL:
            failures.append(f"{tag}: lse relative error {lse_err:.3e} > {RTOL:.0e}")
            ok = False

    if kernel == "reference":  # probabilities lie in [0, 1]: an absolute bound is the relative one
        probs = np.load(paths["probs"])
        probs_err = np.abs(probs.astype(np.float64) - ref_probs).max() if probs.shape == ref_probs.shape else np.inf
        if probs_err > RTOL:
            failures.append(f"{tag}: probs {probs.shape} max error {probs_err:.3e} > {RTOL:.0e}")
            ok = False

    print(f"{'ok  ' if ok else 'FAIL'} {tag:28s} max|out-ref| = {err:.2e} (bound {bound:.2e})")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: attention_float64_check.py path/to/headcount")
    binary = sys.argv[1]
    rng = np.random.default_rng(20240601)
    failures = []
    with tempfile.TemporaryDirectory(prefix="headcount_f64_") as workdir:
        for case in CASES:
            for kernel in ("reference", "streaming"):
                run_case(binary, workdir, case, kernel, rng, failures)
    if failures:
        print(f"{len(failures)} check(s) failed:", file=sys.stderr)
        for line in failures:
            print("  " + line, file=sys.stderr)
        sys.exit(1)
    print(f"all {len(CASES) * 2} runs match float64 NumPy to {RTOL:.0e}")


if __name__ == "__main__":
    main()
