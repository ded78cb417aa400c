#!/usr/bin/env python3
"""Writes the PyTorch autograd fixtures of the attention backward, tests/testdata/golden_backward/.

For every case F.scaled_dot_product_attention runs in float32 and in float64 with autograd;
the loss is sum(out * g) for a random g, so the saved gradients are those headcount's
attention_backward computes for d_out = g. Both precisions are saved: float32 is what the
kernels are compared against; float64 is the (near) exact value, which the C++ test uses to
check its own float64 backward and to bound the float32 results; the manifest records how
far PyTorch's float32 gradients are from its float64 ones.

Layouts (headcount's): q, k, v, g and the gradients token-major [batch, len, heads, dim];
PyTorch computes them head-major and the script transposes before saving. Masks:
  * float additive attn_mask (requires_grad: its gradient is d_bias), saved as given
    ([L, S] broadcasts over batch and heads -> headcount bias [1, 1, L, S]);
  * boolean attn_mask, True = allowed, saved as float 0/1: key padding [B, 1, 1, S] (a
    suffix -> key_lengths), or a causal pattern;
  * causal: is_causal=True with L == S; bottom-right via torch.nn.attention.bias.
    causal_lower_right (headcount's causal flag); is_causal=True with L < S aligns TOP LEFT
    in PyTorch, which the test maps to a -inf bias.

The scale is always passed explicitly, rounded to fp32 (as headcount's is).
Deterministic (fixed seeds; inputs drawn in float64 and rounded to float32).
Run: bench/peers/.venv/bin/python scripts/make_golden_backward.py
"""

import json
import os
import shutil

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "testdata", "golden_backward")


def draw(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(torch.float32)


def bshd(t):
    return t.transpose(1, 2).contiguous()


def case(cases, name, seed, *, batch=2, heads=4, kv_heads=None, q_len=7, kv_len=9, head_dim=16,
         v_head_dim=None, scale=None, causal=None, mask=None, notes=""):
    """causal: None, "square" (is_causal, L == S), "top_left" (is_causal, L != S) or
    "bottom_right" (causal_lower_right). mask: None, ("float", shape, neg_inf_entries) or
    ("key_padding", lengths)."""
    kv_heads = kv_heads or heads
    v_head_dim = v_head_dim or head_dim
    # headcount's scale is an fp32 number (default 1/sqrt(head_dim) rounded to fp32): both
    # precisions get that same value, so the float64 gradients are of the same function.
    scale = float(np.float32(scale if scale is not None else 1.0 / np.sqrt(head_dim)))
    gen = torch.Generator().manual_seed(seed)
    q = draw(gen, batch, heads, q_len, head_dim)
    k = draw(gen, batch, kv_heads, kv_len, head_dim)
    v = draw(gen, batch, kv_heads, kv_len, v_head_dim)
    g = draw(gen, batch, heads, q_len, v_head_dim)
    attn_mask, mask_kind = None, None
    if mask is not None and mask[0] == "float":
        attn_mask = draw(gen, *mask[1])
        for idx in mask[2]:
            attn_mask[idx] = -float("inf")
        mask_kind = "float_additive"
    elif mask is not None and mask[0] == "key_padding":
        attn_mask = (torch.arange(kv_len)[None, :] < torch.tensor(mask[1])[:, None])[:, None, None, :]
        mask_kind = "bool_true_allows"

    def run(dtype):
        leaves = [x.detach().to(dtype).clone().requires_grad_() for x in (q, k, v)]
        m = None
        if attn_mask is not None:
            m = attn_mask.detach().to(dtype).clone().requires_grad_() if mask_kind == "float_additive" else attn_mask
        is_causal = causal in ("square", "top_left")
        if causal == "bottom_right":
            from torch.nn.attention.bias import causal_lower_right
            m = causal_lower_right(q_len, kv_len)
        out = F.scaled_dot_product_attention(*leaves, attn_mask=m, is_causal=is_causal, scale=scale,
                                             enable_gqa=kv_heads != heads)
        (out * g.to(dtype)).sum().backward()
        grads = [x.grad for x in leaves]
        d_mask = m.grad if mask_kind == "float_additive" else None
        return out.detach(), grads, d_mask

    _, grads32, dmask32 = run(torch.float32)
    _, grads64, dmask64 = run(torch.float64)

    arrays = {}

    def save(key, tensor, dtype=np.float32):
        array = np.ascontiguousarray(tensor.detach().numpy().astype(dtype))
        file = f"{name}.{key}.npy"
        np.save(os.path.join(OUT_DIR, file), array)
        arrays[key] = file

    for key, t in (("q", q), ("k", k), ("v", v), ("g", g)):
        save(key, bshd(t))
    errors = {}
    for key, t32, t64 in zip(("d_q", "d_k", "d_v"), grads32, grads64):
        save(key, bshd(t32))
        save(key + "_fp64", bshd(t64), np.float64)
        errors[key] = float((t32.double() - t64).abs().max())
    if attn_mask is not None:
        save("attn_mask", attn_mask.to(torch.float32))
    if dmask32 is not None:
        save("d_bias", dmask32)
        save("d_bias_fp64", dmask64, np.float64)
        errors["d_bias"] = float((dmask32.double() - dmask64).abs().max())
    cases.append({
        "name": name,
        "config": {"batch": batch, "heads": heads, "kv_heads": kv_heads, "q_len": q_len, "kv_len": kv_len,
                   "head_dim": head_dim, "v_head_dim": v_head_dim, "seed": seed},
        "flags": {"scale": scale, "causal": causal, "enable_gqa": kv_heads != heads, "attn_mask_type": mask_kind,
                  "attn_mask_shape": list(attn_mask.shape) if attn_mask is not None else None},
        "arrays": arrays,
        "torch_fp32_max_abs_err_vs_fp64": errors,
        "notes": notes,
    })


def main():
    shutil.rmtree(OUT_DIR, ignore_errors=True)
    os.makedirs(OUT_DIR)
    cases = []
    case(cases, "bw_plain", 301, notes="no mask, default scale")
    case(cases, "bw_causal_square", 302, q_len=8, kv_len=8, causal="square", notes="is_causal, L == S")
    case(cases, "bw_causal_bottom_right", 303, q_len=5, kv_len=9, causal="bottom_right",
         notes="causal_lower_right, L < S: headcount's causal flag")
    case(cases, "bw_causal_top_left", 304, q_len=5, kv_len=9, causal="top_left",
         notes="is_causal with L < S aligns top left in PyTorch: a -inf bias for headcount")
    case(cases, "bw_scale", 305, scale=0.3, notes="scale 0.3")
    case(cases, "bw_gqa", 306, heads=8, kv_heads=2, q_len=6, kv_len=10, notes="enable_gqa, group 4")
    case(cases, "bw_mqa", 307, heads=8, kv_heads=1, q_len=6, kv_len=10, notes="enable_gqa, one kv head")
    case(cases, "bw_odd_head_dim", 308, heads=3, q_len=13, kv_len=17, head_dim=59, notes="head_dim 59")
    case(cases, "bw_v_head_dim", 309, heads=2, q_len=4, kv_len=6, head_dim=24, v_head_dim=40,
         notes="v_head_dim 40 != head_dim 24")
    case(cases, "bw_float_mask_broadcast", 310, q_len=6, kv_len=8,
         mask=("float", (6, 8), [(0, 7), (3, 0), (5, 5)]),
         notes="float attn_mask [L, S] with -inf entries: d_bias summed over batch and heads")
    case(cases, "bw_float_mask_per_head", 311, heads=2, q_len=6, kv_len=8,
         mask=("float", (2, 2, 6, 8), [(0, 0, 1, 2), (1, 1, 4, 7)]), scale=0.5,
         notes="float attn_mask [B, H, L, S], scale 0.5")
    case(cases, "bw_key_padding_gqa", 312, heads=4, kv_heads=2, q_len=7, kv_len=9,
         mask=("key_padding", [9, 4]), notes="bool attn_mask [B, 1, 1, S], True = allowed: key_lengths 9, 4")
    with open(os.path.join(OUT_DIR, "manifest.json"), "w") as f:
        json.dump({"generator": "scripts/make_golden_backward.py", "torch": torch.__version__,
                   "loss": "sum(out * g)", "cases": cases}, f, indent=1)
    total = sum(os.path.getsize(os.path.join(OUT_DIR, x)) for x in os.listdir(OUT_DIR))
    print(f"{len(cases)} cases, {total / 1024:.0f} KiB in {OUT_DIR}")


if __name__ == "__main__":
    main()
