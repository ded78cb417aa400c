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

Gradients (--grad-out G --grad-q/--grad-k/--grad-v/--grad-bias): for cases with every mask
(causal both alignments, sliding window, key lengths, a -inf-holding bias broadcast over
batch or per head) the binary's gradients of sum(out * G) are compared with the float64
chain rule written out here (backward() below), which itself is first checked against
central differences of reference() on a tiny case. Tolerance: each gradient within
GRAD_RTOL * max|its float64 value|. Why 1e-5 again: each gradient element is a sum over
<= 200 keys (or queries) of products that are themselves dot products of length <= 64,
with one cancellation (dP - D) whose terms are of the size of the gradients here (unit
normal inputs); the fp32 error is then ~(length)·u relative to the largest terms in the
worst case, ~1e-6, and 1e-5 keeps a 10x margin while a wrong mask, scale, group sum or
missing term moves a gradient by O(1e-2) or more. Keys that no query sees and queries that
see no key must have gradients exactly zero.
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


def visible_mask(b, n, m, causal, window_left, window_right, key_lengths):
    """visible[b, n, m] straight from attention.h's definitions."""
    i = np.arange(n)[:, None] + (m - n)  # the diagonal, bottom-right aligned
    j = np.arange(m)[None, :]
    vis = np.ones((n, m), dtype=bool)
    if causal:
        vis &= j <= i
    if window_left >= 0:
        vis &= j >= i - window_left
    if window_right >= 0:
        vis &= j <= i + window_right
    vis = np.broadcast_to(vis, (b, n, m)).copy()
    if key_lengths is not None:
        for bb, length in enumerate(key_lengths):
            vis[bb, :, length:] = False
    return vis


def forward(q, k, v, scale, vis, bias):
    """Attention in float64 with a full mask vis [b, n, m] and an optional bias; returns
    out [b, n, h, dv], P [b, h, n, m] and the repeated k, v."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    kr, vr = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    scores = np.einsum("bnhd,bmhd->bhnm", q, kr) * scale
    if bias is not None:
        scores = scores + bias.astype(np.float64)
    scores = np.where(vis[:, None], scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    any_key = np.isfinite(row_max)
    weights = np.exp(scores - np.where(any_key, row_max, 0.0))
    denom = weights.sum(axis=-1, keepdims=True)
    probs = np.where(any_key, weights / np.where(any_key, denom, 1.0), 0.0)
    return np.einsum("bhnm,bmhe->bnhe", probs, vr), probs, kr, vr


def backward(q, k, v, g, scale, vis, bias):
    """Gradients of sum(out * g) by the chain rule through softmax, in float64."""
    out, probs, kr, vr = forward(q, k, v, scale, vis, bias)
    q64, g64 = q.astype(np.float64), g.astype(np.float64)
    hk = k.shape[2]
    group = q.shape[2] // hk
    d_v = np.einsum("bhnm,bnhe->bmhe", probs, g64)
    d_p = np.einsum("bnhe,bmhe->bhnm", g64, vr)
    delta = np.einsum("bnhe,bnhe->bhn", g64, out)[..., None]
    d_s = probs * (d_p - delta)
    d_q = scale * np.einsum("bhnm,bmhd->bnhd", d_s, kr)
    d_k = scale * np.einsum("bhnm,bnhd->bmhd", d_s, q64)
    b, m = k.shape[0], k.shape[1]
    d_k = d_k.reshape(b, m, hk, group, -1).sum(axis=3)
    d_v = d_v.reshape(b, m, hk, group, -1).sum(axis=3)
    d_bias = None
    if bias is not None:
        d_bias = d_s.sum(axis=tuple(ax for ax in (0, 1) if bias.shape[ax] == 1), keepdims=True)
    return d_q, d_k, d_v, d_bias


def check_backward_by_finite_differences(rng):
    """backward() against central differences of forward() on a tiny case."""
    b, n, m, h, hk, d, dv = 2, 4, 5, 4, 2, 3, 2
    q, k, v = rng.standard_normal((b, n, h, d)), rng.standard_normal((b, m, hk, d)), rng.standard_normal((b, m, hk, dv))
    g, bias = rng.standard_normal((b, n, h, dv)), rng.standard_normal((1, h, n, m))
    vis = visible_mask(b, n, m, True, -1, -1, [5, 3])
    grads = backward(q, k, v, g, 0.6, vis, bias)
    step = 1e-6
    for x, grad in zip((q, k, v, bias), grads):
        for idx in np.ndindex(x.shape):
            saved = x[idx]
            x[idx] = saved + step
            plus = (forward(q, k, v, 0.6, vis, bias)[0] * g).sum()
            x[idx] = saved - step
            minus = (forward(q, k, v, 0.6, vis, bias)[0] * g).sum()
            x[idx] = saved
            fd = (plus - minus) / (2 * step)
            if abs(fd - grad[idx]) > 1e-6 * (1 + abs(fd)):
                sys.exit(f"float64 backward disagrees with finite differences at {idx}: {grad[idx]} vs {fd}")


GRAD_RTOL = 1e-5

# name, batch, q_len, kv_len, heads, kv_heads, head_dim, v_head_dim, options
GRAD_CASES = [
    ("grad_mha", 2, 9, 9, 4, 4, 16, 16, {}),
    ("grad_gqa_causal_q_shorter", 2, 5, 12, 4, 2, 16, 24, {"causal": True}),
    ("grad_mqa_causal_q_longer", 2, 12, 5, 4, 1, 32, 32, {"causal": True}),  # 7 rows see no key
    ("grad_window_pad", 2, 70, 70, 3, 1, 59, 37, {"window": (5, 2), "key_lengths": [70, 20]}),
    ("grad_bias_broadcast", 2, 33, 40, 4, 2, 16, 16, {"bias": (1, 1), "causal": True, "scale": 0.37}),
    ("grad_bias_per_head", 2, 17, 65, 4, 4, 8, 8, {"bias": (2, 4), "key_lengths": [65, 0]}),
]


def run_grad_case(binary, workdir, case, kernel, rng, failures):
    name, b, n, m, h, hk, d, dv, opt = case
    tag = f"{name}/{kernel}"
    arrays = {"q": rng.standard_normal((b, n, h, d)), "k": rng.standard_normal((b, m, hk, d)),
              "v": rng.standard_normal((b, m, hk, dv)), "g": rng.standard_normal((b, n, h, dv))}
    bias = None
    if "bias" in opt:
        bias = rng.standard_normal(opt["bias"] + (n, m)).astype(np.float32)
        bias.reshape(-1)[::7] = -np.inf
        arrays["bias"] = bias
    arrays = {key: x.astype(np.float32) for key, x in arrays.items()}
    paths = {x: os.path.join(workdir, f"{name}_{kernel}_{x}.npy")
             for x in ("q", "k", "v", "g", "bias", "out", "dq", "dk", "dv", "dbias")}
    for key, x in arrays.items():
        np.save(paths[key], x)
    args = [binary, "attention", "--q", paths["q"], "--k", paths["k"], "--v", paths["v"], "--out", paths["out"],
            "--grad-out", paths["g"], "--grad-q", paths["dq"], "--grad-k", paths["dk"], "--grad-v", paths["dv"],
            "--kernel", kernel, "--threads", "3"]
    if opt.get("causal"):
        args.append("--causal")
    if "scale" in opt:
        args += ["--scale", repr(opt["scale"])]
    if "window" in opt:
        args += ["--window-left", str(opt["window"][0]), "--window-right", str(opt["window"][1])]
    if "key_lengths" in opt:
        args += ["--key-lengths", ",".join(map(str, opt["key_lengths"]))]
    if bias is not None:
        args += ["--bias", paths["bias"], "--grad-bias", paths["dbias"]]
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        failures.append(f"{tag}: exit code {result.returncode}: {result.stderr.strip()}")
        return
    window = opt.get("window", (-1, -1))
    vis = visible_mask(b, n, m, opt.get("causal", False), window[0], window[1], opt.get("key_lengths"))
    scale = float(np.float32(opt.get("scale", 1.0 / np.sqrt(d))))
    want = backward(arrays["q"], arrays["k"], arrays["v"], arrays["g"], scale, vis, bias)
    ok = True
    worst = 0.0
    for key, ref in zip(("dq", "dk", "dv", "dbias"), want):
        if ref is None:
            continue
        got = np.load(paths[key])
        if got.dtype != np.float32 or got.shape != ref.shape:
            failures.append(f"{tag}: {key} is {got.dtype} {got.shape}, expected float32 {ref.shape}")
            ok = False
            continue
        err = np.abs(got.astype(np.float64) - ref).max()
        bound = GRAD_RTOL * max(np.abs(ref).max(), 1e-30)
        worst = max(worst, err / bound)
        if err > bound:
            failures.append(f"{tag}: max |{key} - ref| = {err:.3e} > {bound:.3e}")
            ok = False
        # Queries that see no key, keys that no query sees: exactly zero, not merely small.
        unseen = {"dq": ~vis.any(axis=2)[:, :, None], "dk": ~vis.any(axis=1)[:, :, None],
                  "dv": ~vis.any(axis=1)[:, :, None]}.get(key)
        if unseen is not None and np.any(np.where(unseen[..., None], got, 0) != 0):
            failures.append(f"{tag}: {key} of a query that sees no key (or a key no query sees) is not exactly 0")
            ok = False
    print(f"{'ok  ' if ok else 'FAIL'} {tag:34s} worst gradient error / bound = {worst:.2f}")


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
        check_backward_by_finite_differences(rng)
        for case in GRAD_CASES:
            for kernel in ("reference", "streaming"):
                run_grad_case(binary, workdir, case, kernel, rng, failures)
    if failures:
        print(f"{len(failures)} check(s) failed:", file=sys.stderr)
        for line in failures:
            print("  " + line, file=sys.stderr)
        sys.exit(1)
    print(f"all {len(CASES) * 2} forward runs match float64 NumPy to {RTOL:.0e}, "
          f"all {len(GRAD_CASES) * 2} gradient runs to {GRAD_RTOL:.0e}")


if __name__ == "__main__":
    main()
