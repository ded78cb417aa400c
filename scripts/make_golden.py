#!/usr/bin/env python3
"""Writes the PyTorch parity fixtures in tests/testdata/golden/.

Every case is run through PyTorch in float32 (what we compare against) and, for the record,
in float64 (to measure how far PyTorch's own float32 result is from the exact one; the
manifest keeps that number so the C++ test's tolerance can be checked against it).

Layouts, so the C++ test reads every array as headcount expects it:
  * q, k, v, out of the scaled_dot_product_attention cases are saved token-major,
    [batch, q_len or kv_len, heads, head_dim] (headcount's BSHD); PyTorch computes them
    head-major, [batch, heads, len, head_dim], and the script transposes before saving.
  * nn.MultiheadAttention weights are saved [in, out] (x @ W), the transpose of nn.Linear:
    w_q = in_proj_weight[:E].T (or q_proj_weight.T when kdim != embed_dim), and so on;
    w_o = out_proj.weight.T.
  * Boolean masks are saved as float32 0/1 exactly as PyTorch received them; the manifest says
    which value means "masked" (nn.MultiheadAttention: True masks; SDPA: True allows).

Causal alignment: PyTorch's is_causal=True aligns the diagonal to the TOP LEFT when
q_len != kv_len (query i sees keys j <= i); headcount aligns it to the BOTTOM RIGHT, as
FlashAttention >= 2.1 does (query i sees keys j <= i + kv_len - q_len). The bottom-right
reference is produced with torch.nn.attention.bias.causal_lower_right.

Deterministic: fixed seeds; inputs are drawn in float64 and rounded to float32.
Run: .venv-torch/bin/python scripts/make_golden.py   (or scripts/make_golden.sh)
"""

import json
import math
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "testdata", "golden")


def draw(gen, *shape, low=None, high=None):
    """float64 draw (normal, or uniform in [low, high)), rounded to float32."""
    if low is None:
        values = torch.randn(*shape, generator=gen, dtype=torch.float64)
    else:
        values = low + (high - low) * torch.rand(*shape, generator=gen, dtype=torch.float64)
    return values.to(torch.float32)


class Writer:
    def __init__(self, out_dir):
        self.out_dir = out_dir
        self.cases = []

    def save(self, case, key, tensor):
        array = tensor.detach().cpu()
        if array.dtype == torch.bool:
            array = array.to(torch.float32)
        array = np.ascontiguousarray(array.numpy().astype(np.float32))
        name = f"{case}.{key}.npy"
        np.save(os.path.join(self.out_dir, name), array)
        return name


def max_abs_err(fp32, fp64):
    return float((fp32.double() - fp64).abs().max())


def bshd(t):
    """[B, H, L, D] (PyTorch SDPA) -> [B, L, H, D] (headcount)."""
    return t.transpose(1, 2)


# ---------------------------------------------------------------------------------------
# nn.MultiheadAttention cases
# ---------------------------------------------------------------------------------------

def mha_case(w, name, seed, *, embed_dim=16, num_heads=4, kdim=None, batch=2, q_len=5,
             kv_len=None, bias=True, key_lengths=None, attn_mask=None, attn_mask_type=None,
             need_weights=True, average_attn_weights=True, notes=""):
    """attn_mask: None, or a callable gen -> tensor (float additive, or bool True = masked)."""
    kdim = kdim or embed_dim
    cross = kdim != embed_dim or kv_len is not None
    kv_len = kv_len or q_len
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)

    mha = torch.nn.MultiheadAttention(embed_dim, num_heads, bias=bias, batch_first=True,
                                      kdim=kdim, vdim=kdim)
    mha.eval()
    # PyTorch initialises the biases to zero; random ones make the test check their mapping.
    if bias:
        with torch.no_grad():
            mha.in_proj_bias.copy_(draw(gen, 3 * embed_dim, low=-0.5, high=0.5))
            mha.out_proj.bias.copy_(draw(gen, embed_dim, low=-0.5, high=0.5))

    x_q = draw(gen, batch, q_len, embed_dim)
    if cross:
        x_k = draw(gen, batch, kv_len, kdim)
        x_v = draw(gen, batch, kv_len, kdim)
    else:
        x_k = x_v = x_q

    kpm = None
    if key_lengths is not None:
        kpm = torch.arange(kv_len)[None, :] >= torch.tensor(key_lengths)[:, None]  # True = pad
    mask = attn_mask(gen) if attn_mask is not None else None

    def run(dtype):
        module = mha.to(dtype)  # in place; float32 -> float64 -> float32 is exact
        with torch.no_grad():
            m = mask
            if m is not None and m.dtype != torch.bool:
                m = m.to(dtype)
            out, weights = module(x_q.to(dtype), x_k.to(dtype), x_v.to(dtype),
                                  key_padding_mask=kpm, need_weights=need_weights, attn_mask=m,
                                  average_attn_weights=average_attn_weights)
        return out, weights

    out64, weights64 = run(torch.float64)
    out, weights = run(torch.float32)

    E = embed_dim
    if mha._qkv_same_embed_dim:
        w_q, w_k, w_v = (mha.in_proj_weight[i * E:(i + 1) * E].T for i in range(3))
    else:
        w_q, w_k, w_v = mha.q_proj_weight.T, mha.k_proj_weight.T, mha.v_proj_weight.T

    arrays = {"w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": mha.out_proj.weight.T}
    if bias:
        arrays.update(b_q=mha.in_proj_bias[:E], b_k=mha.in_proj_bias[E:2 * E],
                      b_v=mha.in_proj_bias[2 * E:], b_o=mha.out_proj.bias)
    arrays["x_q"] = x_q
    if cross:
        arrays["x_k"] = x_k
        arrays["x_v"] = x_v
    if kpm is not None:
        arrays["key_padding_mask"] = kpm
    if mask is not None:
        arrays["attn_mask"] = mask
    arrays["out"] = out
    if need_weights:
        arrays["attn_weights"] = weights

    err = {"out": max_abs_err(out, out64)}
    if need_weights:
        err["attn_weights"] = max_abs_err(weights, weights64)

    w.cases.append({
        "name": name,
        "kind": "mha_cross" if cross else "mha_self",
        "config": {"embed_dim": embed_dim, "num_heads": num_heads, "kdim": kdim, "vdim": kdim,
                   "bias": bias, "batch_first": True, "batch": batch, "q_len": q_len,
                   "kv_len": kv_len, "seed": seed},
        "flags": {"need_weights": need_weights,
                  "average_attn_weights": average_attn_weights,
                  "key_padding_lengths": key_lengths,
                  "attn_mask_type": attn_mask_type,
                  "attn_mask_shape": list(mask.shape) if mask is not None else None},
        "arrays": {k: w.save(name, k, v) for k, v in arrays.items()},
        "torch_fp32_max_abs_err_vs_fp64": err,
        "notes": notes,
    })


def float_mask_2d(L, S, neg_inf_rows):
    def make(gen):
        m = draw(gen, L, S)
        for row, col in neg_inf_rows:
            m[row, col] = -math.inf
        return m
    return make


def float_mask_3d(n, L, S, neg_inf_entries):
    def make(gen):
        m = draw(gen, n, L, S)
        for idx in neg_inf_entries:
            m[idx] = -math.inf
        return m
    return make


def mha_cases(w):
    mha_case(w, "mha_plain", 101, need_weights=True, average_attn_weights=True,
             notes="self-attention, no masks, head-averaged weights")
    mha_case(w, "mha_key_padding", 102, key_lengths=[5, 3], need_weights=True,
             average_attn_weights=False,
             notes="key_padding_mask (True = padding, a suffix) -> key_lengths; per-head weights")
    mha_case(w, "mha_float_mask_2d", 103,
             attn_mask=float_mask_2d(5, 5, [(0, 3), (2, 0), (4, 4)]),
             attn_mask_type="float_additive",
             notes="float additive attn_mask [L, S] with one -inf in rows 0, 2, 4 -> bias [1, 1, L, S]")
    mha_case(w, "mha_float_mask_3d", 104,
             attn_mask=float_mask_3d(8, 5, 5, [(0, 1, 2), (3, 0, 4), (5, 4, 0), (7, 2, 2)]),
             attn_mask_type="float_additive",
             notes="float additive attn_mask [B*heads, L, S] (index b*heads + h) -> bias [B, heads, L, S]")
    mha_case(w, "mha_no_bias", 105, bias=False, notes="bias=False: no projection biases")
    mha_case(w, "mha_causal", 106,
             attn_mask=lambda gen: torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1),
             attn_mask_type="bool_true_masks",
             notes="boolean causal attn_mask (True = masked) -> causal flag, or -inf bias")
    mha_case(w, "mha_cross_kdim12", 107, kdim=12, q_len=5, kv_len=7, key_lengths=[7, 4],
             need_weights=True, average_attn_weights=True,
             notes="cross-attention, kdim = vdim = 12 (q/k/v_proj_weight), distinct key and "
                   "value inputs, key_padding_mask, head-averaged weights")


# ---------------------------------------------------------------------------------------
# F.scaled_dot_product_attention cases
# ---------------------------------------------------------------------------------------

def sdpa_case(w, name, seed, *, batch=2, heads=4, kv_heads=None, q_len=7, kv_len=9, head_dim=16,
              v_head_dim=None, scale=None, is_causal=False, mask=None, mask_type=None,
              mask_shape_note=None, causal_alignment=None, notes=""):
    """mask: None, or a callable gen -> tensor (float additive, bool True = allowed, or a
    torch.nn.attention.bias.CausalBias)."""
    kv_heads = kv_heads or heads
    v_head_dim = v_head_dim or head_dim
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    q = draw(gen, batch, heads, q_len, head_dim)
    k = draw(gen, batch, kv_heads, kv_len, head_dim)
    v = draw(gen, batch, kv_heads, kv_len, v_head_dim)
    m = mask(gen) if mask is not None else None
    gqa = kv_heads != heads

    def run(dtype):
        mm = m
        if type(mm) is torch.Tensor and mm.dtype != torch.bool:  # CausalBias is a Tensor subclass
            mm = mm.to(dtype)
        with torch.no_grad():
            return F.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype),
                                                  attn_mask=mm, dropout_p=0.0,
                                                  is_causal=is_causal, scale=scale,
                                                  enable_gqa=gqa)

    out64 = run(torch.float64)
    out = run(torch.float32)

    arrays = {"q": bshd(q), "k": bshd(k), "v": bshd(v)}
    saved_mask = None
    if m is not None:
        if type(m) is torch.Tensor:
            saved_mask = m
        else:  # a CausalBias: save the explicit bottom-right mask it stands for
            saved_mask = torch.tril(torch.ones(q_len, kv_len, dtype=torch.bool),
                                    diagonal=kv_len - q_len)
            assert torch.equal(saved_mask, m._materialize()), "causal_lower_right changed meaning"

        arrays["attn_mask"] = saved_mask
    arrays["out"] = bshd(out)

    w.cases.append({
        "name": name,
        "kind": "sdpa",
        "config": {"batch": batch, "heads": heads, "kv_heads": kv_heads, "q_len": q_len,
                   "kv_len": kv_len, "head_dim": head_dim, "v_head_dim": v_head_dim,
                   "seed": seed},
        "flags": {"scale": scale, "is_causal": is_causal, "enable_gqa": gqa,
                  "attn_mask_type": mask_type,
                  "attn_mask_shape": list(saved_mask.shape) if saved_mask is not None else None,
                  "attn_mask_broadcast": mask_shape_note,
                  "causal_alignment": causal_alignment},
        "arrays": {k: w.save(name, k, v) for k, v in arrays.items()},
        "torch_fp32_max_abs_err_vs_fp64": {"out": max_abs_err(out, out64)},
        "notes": notes,
    })


def lower_right(L, S):
    """Bottom-right causal mask (True = allowed), the headcount / FlashAttention >= 2.1 rule."""
    try:
        from torch.nn.attention.bias import causal_lower_right
        return lambda gen: causal_lower_right(L, S)
    except ImportError:
        return lambda gen: torch.tril(torch.ones(L, S, dtype=torch.bool), diagonal=S - L)


def sdpa_cases(w):
    sdpa_case(w, "sdpa_plain", 201, notes="no mask, default scale 1/sqrt(head_dim)")
    sdpa_case(w, "sdpa_causal_square", 202, q_len=8, kv_len=8, is_causal=True,
              causal_alignment="q_len == kv_len: top-left and bottom-right agree",
              notes="is_causal=True with L == S -> causal flag")
    sdpa_case(w, "sdpa_causal_lower_right", 203, q_len=5, kv_len=9, mask=lower_right(5, 9),
              mask_type="bool_true_allows", causal_alignment="bottom_right",
              notes="causal with L < S, aligned BOTTOM RIGHT (torch.nn.attention.bias."
                    "causal_lower_right; the saved mask is its materialisation) -> headcount's "
                    "causal flag. PyTorch's is_causal=True would align TOP LEFT instead.")
    sdpa_case(w, "sdpa_causal_top_left", 204, q_len=5, kv_len=9, is_causal=True,
              mask=None, causal_alignment="top_left",
              notes="PyTorch is_causal=True with L < S: query i sees keys j <= i (TOP LEFT). "
                    "NOT headcount's causal flag; the test maps it to a -inf bias "
                    "(tril(ones(L, S)) allowed).")
    sdpa_case(w, "sdpa_scale", 205, scale=0.3, notes="custom scale 0.3")
    sdpa_case(w, "sdpa_gqa", 206, heads=8, kv_heads=2, q_len=6, kv_len=10,
              notes="enable_gqa=True, 8 query heads, 2 kv heads (group 4; head h reads kv head h // 4)")
    sdpa_case(w, "sdpa_mqa", 207, heads=8, kv_heads=1, q_len=6, kv_len=10,
              notes="enable_gqa=True, 8 query heads, 1 kv head (multi-query)")

    def broadcast_mask(shape, neg_inf):
        def make(gen):
            m = draw(gen, *shape)
            for idx in neg_inf:
                m[idx] = -math.inf
            return m
        return make

    sdpa_case(w, "sdpa_float_mask_broadcast", 208, q_len=6, kv_len=8,
              mask=broadcast_mask((6, 8), [(0, 7), (3, 0), (5, 5)]),
              mask_type="float_additive", mask_shape_note="[L, S] broadcast over batch and heads",
              notes="float additive attn_mask [L, S] -> bias [1, 1, L, S]")
    sdpa_case(w, "sdpa_float_mask_per_batch", 209, q_len=6, kv_len=8,
              mask=broadcast_mask((2, 1, 6, 8), [(0, 0, 1, 2), (1, 0, 4, 7)]),
              mask_type="float_additive", mask_shape_note="[B, 1, L, S] broadcast over heads",
              notes="float additive attn_mask [B, 1, L, S] -> bias [B, 1, L, S]")
    sdpa_case(w, "sdpa_odd_head_dim", 210, heads=3, q_len=13, kv_len=17, head_dim=59,
              notes="odd head_dim 59, L = 13, S = 17")
    sdpa_case(w, "sdpa_v_head_dim", 211, heads=2, q_len=4, kv_len=6, head_dim=24, v_head_dim=40,
              notes="value head_dim (40) != query/key head_dim (24)")


# ---------------------------------------------------------------------------------------
# Self-check: re-derive every saved output from the saved arrays alone, in float64 numpy,
# with headcount's conventions (layouts, [in, out] weights, bottom-right causal, key_lengths
# from the padding suffix). This is the mapping the C++ test uses; if the fixtures or the
# notes in the manifest were wrong, this fails before anything is committed.
# ---------------------------------------------------------------------------------------

def np_attention(q, k, v, scale, bias=None, causal=False, key_lengths=None):
    """q [B, L, H, D], k [B, S, KVH, D], v [B, S, KVH, Dv] -> out [B, L, H, Dv], probs [B, H, L, S]."""
    B, L, H, _ = q.shape
    S, KVH = k.shape[1], k.shape[2]
    group = H // KVH
    kk = np.repeat(k, group, axis=2)  # query head h reads kv head h // group
    vv = np.repeat(v, group, axis=2)
    s = np.einsum("blhd,bshd->bhls", q, kk) * scale
    if bias is not None:
        s = s + bias
    if causal:
        i = np.arange(L)[:, None]
        j = np.arange(S)[None, :]
        s = np.where(j <= i + (S - L), s, -np.inf)
    if key_lengths is not None:
        for b, n in enumerate(key_lengths):
            s[b, :, :, n:] = -np.inf
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p = p / p.sum(axis=-1, keepdims=True)
    return np.einsum("bhls,bshd->blhd", p, vv), p


def lengths_from_padding(kpm):
    lengths = (kpm == 0).sum(axis=1).astype(np.int64)
    for row, n in zip(kpm, lengths):
        assert not row[:n].any() and row[n:].all(), "key padding is not a suffix"
    return lengths


def self_check(out_dir, case):
    a = {k: np.load(os.path.join(out_dir, f)).astype(np.float64) for k, f in case["arrays"].items()}
    c, fl = case["config"], case["flags"]
    bias, causal, key_lengths = None, False, None
    mask_type = fl.get("attn_mask_type")
    if "attn_mask" in a:
        m = a["attn_mask"]
        if mask_type == "float_additive":
            bias = m
        elif mask_type == "bool_true_masks":
            bias = np.where(m != 0, -np.inf, 0.0)
        elif mask_type == "bool_true_allows":
            bias = np.where(m != 0, 0.0, -np.inf)
    if "key_padding_mask" in a:
        key_lengths = lengths_from_padding(a["key_padding_mask"])
    if case["kind"] == "sdpa":
        if fl["is_causal"] and c["q_len"] != c["kv_len"]:
            L, S = c["q_len"], c["kv_len"]
            bias = np.where(np.tril(np.ones((L, S)), 0) != 0, 0.0, -np.inf)  # top left
        else:
            causal = fl["is_causal"]
        if bias is not None and bias.ndim == 2:
            bias = bias[None, None]
        scale = fl["scale"] if fl["scale"] is not None else 1 / math.sqrt(c["head_dim"])
        out, _ = np_attention(a["q"], a["k"], a["v"], scale, bias, causal)
        checks = {"out": (out, a["out"])}
    else:
        E, H = c["embed_dim"], c["num_heads"]
        D = E // H
        B, L, S = c["batch"], c["q_len"], c["kv_len"]
        x_q = a["x_q"]
        x_k = a.get("x_k", x_q)
        x_v = a.get("x_v", x_q)
        zero = np.zeros(E)
        q = (x_q @ a["w_q"] + a.get("b_q", zero)).reshape(B, L, H, D)
        k = (x_k @ a["w_k"] + a.get("b_k", zero)).reshape(B, S, H, D)
        v = (x_v @ a["w_v"] + a.get("b_v", zero)).reshape(B, S, H, D)
        if bias is not None:
            bias = bias[None, None] if bias.ndim == 2 else bias.reshape(B, H, L, S)
        concat, p = np_attention(q, k, v, 1 / math.sqrt(D), bias, False, key_lengths)
        out = concat.reshape(B, L, E) @ a["w_o"] + a.get("b_o", zero)
        checks = {"out": (out, a["out"])}
        if "attn_weights" in a:
            checks["attn_weights"] = (p.mean(axis=1) if fl["average_attn_weights"] else p,
                                      a["attn_weights"])
    for key, (mine, theirs) in checks.items():
        err = float(np.abs(mine - theirs).max())
        assert err < 1e-5, f"{case['name']}.{key}: float64 re-derivation differs by {err}"


def main():
    if os.path.isdir(OUT_DIR):
        shutil.rmtree(OUT_DIR)
    os.makedirs(OUT_DIR)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    w = Writer(OUT_DIR)
    mha_cases(w)
    sdpa_cases(w)
    manifest = {
        "generator": "scripts/make_golden.py",
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "python_version": sys.version.split()[0],
        "dtype": "float32, C order (np.save); booleans saved as 0.0 / 1.0",
        "layout": {
            "sdpa": "q [B, L, H, D], k [B, S, KVH, D], v [B, S, KVH, Dv], out [B, L, H, Dv]: "
                    "headcount's token-major layout; PyTorch's [B, H, L, D] transposed before saving",
            "sdpa_attn_mask": "saved with PyTorch's shape ([L, S], [B, 1, L, S], ...)",
            "mha_weights": "[in, out] (x @ W): w_q = in_proj_weight[:E].T, w_k = in_proj_weight[E:2E].T, "
                           "w_v = in_proj_weight[2E:].T (q/k/v_proj_weight.T when kdim != embed_dim), "
                           "w_o = out_proj.weight.T; b_q/b_k/b_v slices of in_proj_bias, b_o = out_proj.bias "
                           "(biases randomised: PyTorch initialises them to zero)",
            "mha_inputs": "x_q [B, L, E]; cross-attention also x_k, x_v [B, S, kdim]; out [B, L, E]; "
                          "attn_weights [B, L, S] (averaged) or [B, heads, L, S] (per head)",
            "mha_attn_mask_3d": "[B*heads, L, S], index b*heads + h",
        },
        "mask_semantics": {
            "key_padding_mask": "1.0 = padding (True in PyTorch), a suffix of each row",
            "bool_true_masks": "nn.MultiheadAttention boolean attn_mask: 1.0 = NOT allowed",
            "bool_true_allows": "SDPA boolean attn_mask: 1.0 = allowed to attend",
            "float_additive": "added to the scaled scores; -inf masks a key",
        },
        "causal_alignment": "PyTorch is_causal=True aligns the diagonal TOP LEFT when L != S "
                            "(query i sees keys j <= i); headcount aligns it BOTTOM RIGHT like "
                            "FlashAttention >= 2.1 (j <= i + S - L). The bottom-right reference "
                            "comes from torch.nn.attention.bias.causal_lower_right(L, S).",
        "error_record": "torch_fp32_max_abs_err_vs_fp64: max |PyTorch fp32 - PyTorch fp64| per output",
        "cases": w.cases,
    }
    for case in w.cases:
        self_check(OUT_DIR, case)
    with open(os.path.join(OUT_DIR, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(OUT_DIR, n)) for n in os.listdir(OUT_DIR))
    print(f"wrote {len(w.cases)} cases, {len(os.listdir(OUT_DIR))} files, {total} bytes to {OUT_DIR}")
    for case in w.cases:
        print(f"  {case['name']:28s} fp32 vs fp64: {case['torch_fp32_max_abs_err_vs_fp64']}")


if __name__ == "__main__":
    main()
