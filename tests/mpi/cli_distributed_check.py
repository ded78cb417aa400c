#!/usr/bin/env python3
"""`headcount attention --distributed heads|ring` under mpirun against the one-process command.

Usage: cli_distributed_check.py HEADCOUNT MPIEXEC RANKS

  - heads: every output bitwise the one process's (no sum crosses a rank);
  - ring: outputs within the bound derived in tests/mpi/test_ring.cpp (the same formula, here
    in float64 over the same inputs); bitwise with one rank; with --grad-out the gradients
    within tests/mpi/test_ring_backward.cpp's bound plus what the forward's own differences
    (out within bo, lse within bl) carry into them; bitwise with one rank;
  - a job that cannot start (ranks not dividing kv_heads, or 2 x ranks not dividing seq_len)
    exits 2, prints headcount's one-line error once, and writes no file.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

cli, mpiexec, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
U = 2.0 ** -24


def gamma(n):
    return n * U / (1 - n * U)


def run(args, np_ranks=None):
    cmd = ([mpiexec, "--oversubscribe", "-n", str(np_ranks), cli] if np_ranks else [cli]) + ["attention"] + args
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def ring_bound(q, k, v, lse, P):
    """|ring - one| bound of test_ring.cpp, for out and lse."""
    B, n, H, D = q.shape
    group = H // k.shape[2]
    kk = np.repeat(k.astype(np.float64), group, axis=2)
    G = float((np.einsum("bihd,bjhd->bhij", np.abs(q.astype(np.float64)), np.abs(kk)) / np.sqrt(np.float32(D))).max())
    vmax = float(np.abs(v).max())
    finite = lse[np.isfinite(lse)]
    lmax = float(np.abs(finite).max()) if finite.size else 0.0
    eta = 2 * (gamma(D + 1) * G + 2 * U * G) + 4 * U
    eps_o = (2 * eta + gamma(3 * n + 2)) * vmax
    eps_l = eta + gamma(2 * n) + 2 * U * lmax
    K = 1 + (P - 1) * min(8, n // P)  # partials per row: the own block, the others in pieces
    return 2 * eps_o + (2 * eps_l + (2 * K + 4) * U) * vmax, 2 * eps_l + gamma(K + 2) + 2 * U * lmax


def grad_bound(q, k, v, g, o1, l1, causal, key_lengths, P, bo, bl):
    """Per-element bounds on |grad_ring - grad_one| for dq, dk, dv (module docstring)."""
    f = np.float64
    B, n, H, D = q.shape
    Hkv, Dv = k.shape[2], v.shape[3]
    grp = H // Hkv
    scale = 1 / np.sqrt(np.float32(D))
    q64, g64, o64 = q.astype(f), g.astype(f), o1.astype(f)
    kk, vv = np.repeat(k.astype(f), grp, axis=2), np.repeat(v.astype(f), grp, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q64, kk) * scale
    G = float((np.einsum("bihd,bjhd->bhij", np.abs(q64), np.abs(kk)) * scale).max())
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    visible = np.ones((B, 1, n, n), bool)
    if causal:
        visible &= (j <= i)[None, None]
    for b, kl in enumerate(key_lengths):
        visible[b, :, :, kl:] = False
    lse = np.where(np.isfinite(l1), l1, np.inf).astype(f)
    p = np.where(visible, np.exp(s - lse[..., None]), 0.0)
    dp = np.einsum("bihe,bjhe->bhij", g64, vv)
    Di = np.einsum("bihe,bihe->bhi", g64, o64)
    ds = np.abs(p * (dp - Di[..., None]))
    # What the forward's differences carry in: P_ij off by a factor within e^(2 bl) - 1, D_i by
    # sum_e |dO_ie| * bo.
    dds = p * ((np.exp(2 * bl) - 1) * np.abs(dp - Di[..., None]) + (np.abs(g64).sum(-1).transpose(0, 2, 1) * bo)[..., None])
    eta = 2 * (gamma(D + 1) * G + 2 * U * G) + 4 * U
    c = 2 * (gamma(n * grp + P) + eta)

    def per_kv(x):  # [B, n, H, d] summed over each kv head's group
        return x.reshape(B, n, Hkv, grp, x.shape[-1]).sum(3)

    bq = c * scale * np.einsum("bhij,bjhd->bihd", ds, np.abs(kk)) + scale * np.einsum("bhij,bjhd->bihd", dds, np.abs(kk))
    bk = per_kv(c * scale * np.einsum("bhij,bihd->bjhd", ds, np.abs(q64)) + scale * np.einsum("bhij,bihd->bjhd", dds, np.abs(q64)))
    bv = per_kv(c * np.einsum("bhij,bihe->bjhe", p, np.abs(g64)) + (np.exp(2 * bl) - 1) * np.einsum("bhij,bihe->bjhe", p, np.abs(g64)))
    return bq, bk, bv


failures = []


def expect(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


with tempfile.TemporaryDirectory() as tmp:
    rng = np.random.default_rng(5)
    B, H, Hkv, D, Dv = 2, 24, 12, 8, 6
    n = 2 * 2 * 3 * 4  # 2P chunks for P = 1, 2, 3, 4
    paths = {}
    for name, shape in (("q", (B, n, H, D)), ("k", (B, n, Hkv, D)), ("v", (B, n, Hkv, Dv))):
        paths[name] = os.path.join(tmp, name + ".npy")
        np.save(paths[name], rng.uniform(-1, 1, shape).astype(np.float32))
    bias = os.path.join(tmp, "bias.npy")
    np.save(bias, rng.uniform(-1, 1, (1, H, n, n)).astype(np.float32))
    inputs = ["--q", paths["q"], "--k", paths["k"], "--v", paths["v"]]
    q, k, v = (np.load(paths[x]) for x in ("q", "k", "v"))

    cases = [
        ("heads", ["--causal", "--key-lengths", "24,17", "--bias", bias]),
        ("ring", ["--causal", "--key-lengths", "24,17"]),
        ("ring", []),
    ]
    for mode, extra in cases:
        one = [os.path.join(tmp, "one_out.npy"), os.path.join(tmp, "one_lse.npy")]
        dist = [os.path.join(tmp, "p_out.npy"), os.path.join(tmp, "p_lse.npy")]
        r1 = run(inputs + extra + ["--out", one[0], "--lse", one[1]])
        rp = run(inputs + extra + ["--out", dist[0], "--lse", dist[1], "--distributed", mode], ranks)
        expect(r1.returncode == 0, f"one process {extra}: {r1.stderr}")
        expect(rp.returncode == 0, f"{mode} over {ranks} {extra}: rc {rp.returncode} {rp.stderr}")
        if r1.returncode or rp.returncode:
            continue
        expect(f"distributed: {mode} over {ranks}" in rp.stdout, f"{mode}: summary line in {rp.stdout!r}")
        o1, l1, op, lp = (np.load(p) for p in one + dist)
        if mode == "heads" or ranks == 1:
            expect(o1.tobytes() == op.tobytes() and l1.tobytes() == lp.tobytes(), f"{mode} {extra}: not bitwise")
        else:
            bo, bl = ring_bound(q, k, v, l1, ranks)
            expect(np.array_equal(np.isinf(l1), np.isinf(lp)), f"ring {extra}: -inf rows differ")
            fin = np.isfinite(l1)
            expect(float(np.abs(o1.astype(np.float64) - op).max()) <= bo, f"ring {extra}: out beyond {bo}")
            expect(float(np.abs(l1[fin].astype(np.float64) - lp[fin]).max()) <= bl, f"ring {extra}: lse beyond {bl}")

    # Jobs that cannot start: exit 2, headcount's line once, no output file.
    # Ring with --grad-out: gradients against the one-process command.
    grad_out = os.path.join(tmp, "g.npy")
    np.save(grad_out, rng.uniform(-1, 1, (B, n, H, Dv)).astype(np.float32))
    g = np.load(grad_out)
    key_lengths = [24, 17]
    extra = ["--causal", "--key-lengths", "24,17", "--grad-out", grad_out]
    names = ("out", "lse", "dq", "dk", "dv")
    one = [os.path.join(tmp, f"one_{x}.npy") for x in names]
    dist = [os.path.join(tmp, f"p_{x}.npy") for x in names]
    flags = ["--out", "--lse", "--grad-q", "--grad-k", "--grad-v"]
    r1 = run(inputs + extra + [a for pair in zip(flags, one) for a in pair])
    rp = run(inputs + extra + [a for pair in zip(flags, dist) for a in pair] + ["--distributed", "ring"], ranks)
    expect(r1.returncode == 0 and rp.returncode == 0, f"ring --grad-out: {r1.stderr} {rp.stderr}")
    if r1.returncode == 0 and rp.returncode == 0:
        o1, l1, dq1, dk1, dv1 = (np.load(x) for x in one)
        op, lp, dqp, dkp, dvp = (np.load(x) for x in dist)
        if ranks == 1:
            expect(all(a.tobytes() == b.tobytes() for a, b in zip((o1, l1, dq1, dk1, dv1), (op, lp, dqp, dkp, dvp))),
                   "ring --grad-out with one rank: not bitwise")
        else:
            bo, bl = ring_bound(q, k, v, l1, ranks)
            bounds = grad_bound(q, k, v, g, o1, l1, True, key_lengths, ranks, bo, bl)
            for name, a, b, bound in zip(("dq", "dk", "dv"), (dq1, dk1, dv1), (dqp, dkp, dvp), bounds):
                excess = np.abs(a.astype(np.float64) - b) - bound
                expect(float(excess.max()) <= 0, f"ring --grad-out {name}: beyond the bound by {excess.max()}")

    # Heads with --grad-out: each rank's heads' backward, gathered. The forward is bitwise, so
    # dK and dV (a K/V head's query heads all on its rank) are too; dQ's per-chunk partials may
    # be regrouped (the kernel's chunk count follows batch x kv_heads, fewer on a rank): within
    # the ring backward's bound above with the forward exact (bo = bl = 0) and up to n chunks.
    rp = run(inputs + extra + [a for pair in zip(flags, dist) for a in pair] + ["--distributed", "heads"], ranks)
    expect(rp.returncode == 0, f"heads --grad-out: {rp.stderr}")
    if r1.returncode == 0 and rp.returncode == 0:
        o1, l1, dq1, dk1, dv1 = (np.load(x) for x in one)
        op, lp, dqp, dkp, dvp = (np.load(x) for x in dist)
        expect(all(a.tobytes() == b.tobytes() for a, b in zip((o1, l1, dk1, dv1), (op, lp, dkp, dvp))),
               f"heads --grad-out over {ranks} ranks: out, lse, dk, dv not bitwise")
        bq = grad_bound(q, k, v, g, o1, l1, True, key_lengths, n, 0.0, 0.0)[0]
        excess = np.abs(dq1.astype(np.float64) - dqp) - bq
        expect(float(excess.max()) <= 0, f"heads --grad-out dq: beyond the bound by {excess.max()}")
        if ranks == 1:
            expect(dq1.tobytes() == dqp.tobytes(), "heads --grad-out with one rank: dq not bitwise")
        print(f"note: heads --grad-out over {ranks} ranks: dq largest difference "
              f"{float(np.abs(dq1.astype(np.float64) - dqp).max()):.3g}, bitwise {dq1.tobytes() == dqp.tobytes()}")

    bad = []
    if ranks > 1:
        # kv_heads 1 < ranks; with 3 ranks also kv_heads 4, which 3 does not divide.
        for kv, message in ((1, "ranks: expected at most kv_heads = 1"), (4, "ranks: expected a divisor of kv_heads = 4")):
            if kv == 4 and ranks != 3:
                continue
            kb, vb = os.path.join(tmp, f"k{kv}.npy"), os.path.join(tmp, f"v{kv}.npy")
            np.save(kb, rng.uniform(-1, 1, (B, n, kv, D)).astype(np.float32))
            np.save(vb, rng.uniform(-1, 1, (B, n, kv, Dv)).astype(np.float32))
            bad.append(("heads", ["--q", paths["q"], "--k", kb, "--v", vb], message))
    odd = [os.path.join(tmp, x + "_odd.npy") for x in ("q", "k", "v")]
    for path, arr in zip(odd, (q[:, :n - 2], k[:, :n - 2], v[:, :n - 2])):
        np.save(path, arr)
    if ranks > 1:  # seq_len 46: 2 x ranks (4, 6, 8) does not divide it
        bad.append(("ring", ["--q", odd[0], "--k", odd[1], "--v", odd[2]], "seq_len: expected a multiple of"))
    bad.append(("ring", inputs + ["--bias", bias], "--bias: expected none"))
    for mode, args, message in bad:
        out = os.path.join(tmp, "never.npy")
        r = run(args + ["--out", out, "--distributed", mode], ranks)
        expect(r.returncode == 2, f"{mode} {message}: exit {r.returncode}, want 2 ({r.stderr})")
        ours = [line for line in r.stderr.splitlines() if line.startswith("headcount:")]
        expect(len(ours) == 1 and message in ours[0], f"{mode}: headcount's lines {ours}, want one with {message!r}")
        expect(not os.path.exists(out), f"{mode} {message}: wrote {out}")
    r = run(inputs + ["--out", os.path.join(tmp, "x.npy"), "--distributed", "rings"], ranks)
    ours = [line for line in r.stderr.splitlines() if line.startswith("headcount:")]
    expect(r.returncode == 2 and len(ours) == 1 and "--distributed: expected heads or ring" in ours[0],
           f"bad mode: {r.stderr}")

print("cli_distributed_check:", "FAILED" if failures else "ok", f"({ranks} ranks)")
sys.exit(1 if failures else 0)
