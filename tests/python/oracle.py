"""Independent float64 attention (forward and backward) in numpy, for the Python tests.

Shares no code with headcount: plain loops over heads, the whole score matrix, masks written
out from their definitions (attention.h). Also a plain float32 implementation of the same
arithmetic, whose error against float64 sets the streaming kernel's bound (FlashAttention's
rule: at most twice the error of a plain implementation in the same precision, plus one ulp
of max|v|).
"""

import numpy as np

U32 = 2.0 ** -24  # unit roundoff of float32


def visible_mask(q_len, kv_len, batch, causal=False, window=None, key_lengths=None):
    """[batch, q_len, kv_len] booleans: key j visible to query i (attention.h's rules)."""
    i = np.arange(q_len)[:, None]
    j = np.arange(kv_len)[None, :]
    off = kv_len - q_len
    m = np.ones((q_len, kv_len), dtype=bool)
    if causal:
        m &= j <= i + off
    if window is not None:
        left, right = window
        if left is not None and left >= 0:
            m &= j >= i + off - left
        if right is not None and right >= 0:
            m &= j <= i + off + right
    mask = np.broadcast_to(m, (batch, q_len, kv_len)).copy()
    if key_lengths is not None:
        for b, length in enumerate(key_lengths):
            mask[b, :, length:] = False
    return mask


def forward(q, k, v, dtype=np.float64, causal=False, scale=None, window=None, key_lengths=None, bias=None):
    """out [B, n, H, Dv] and lse [B, H, n] computed in `dtype`."""
    q, k, v = (np.asarray(x, dtype=dtype) for x in (q, k, v))
    B, n, H, D = q.shape
    m, Hkv = k.shape[1], k.shape[2]
    group = H // Hkv
    # The kernels take the scale as a float32 (default 1/sqrt(head_dim) rounded to float32),
    # so the oracle starts from the same number.
    scale = dtype(np.float32(1.0 / np.sqrt(D) if scale is None else scale))
    mask = visible_mask(n, m, B, causal, window, key_lengths)
    out = np.zeros((B, n, H, v.shape[3]), dtype=dtype)
    lse = np.full((B, H, n), -np.inf, dtype=dtype)
    for b in range(B):
        for h in range(H):
            s = (q[b, :, h, :] @ k[b, :, h // group, :].T) * scale
            if bias is not None:
                s = s + np.asarray(bias, dtype=dtype)[min(b, bias.shape[0] - 1), min(h, bias.shape[1] - 1)]
            s = np.where(mask[b], s, -np.inf)
            mx = s.max(axis=1, keepdims=True)
            seen = np.isfinite(mx[:, 0])
            mx = np.where(np.isfinite(mx), mx, 0)
            e = np.exp(s - mx)
            total = e.sum(axis=1, keepdims=True)
            p = np.where(seen[:, None], e / np.where(total > 0, total, 1), 0)
            out[b, :, h, :] = p @ v[b, :, h // group, :]
            with np.errstate(divide="ignore"):
                lse[b, h] = np.where(seen, mx[:, 0] + np.log(np.where(total[:, 0] > 0, total[:, 0], 1)), -np.inf)
    return out, lse


def backward(q, k, v, d_out, dtype=np.float64, causal=False, scale=None, window=None, key_lengths=None,
             bias=None):
    """d_q, d_k, d_v, d_bias (full [B, H, n, m]) and the condition terms of each gradient:
    the sums of absolute products whose rounding bounds an fp32 implementation's error."""
    q, k, v, d_out = (np.asarray(x, dtype=dtype) for x in (q, k, v, d_out))
    B, n, H, D = q.shape
    m, Hkv = k.shape[1], k.shape[2]
    group = H // Hkv
    # The kernels take the scale as a float32 (default 1/sqrt(head_dim) rounded to float32),
    # so the oracle starts from the same number.
    scale = dtype(np.float32(1.0 / np.sqrt(D) if scale is None else scale))
    mask = visible_mask(n, m, B, causal, window, key_lengths)
    d_q, d_k, d_v = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    c_q, c_k, c_v = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    d_bias = np.zeros((B, H, n, m), dtype=dtype)
    for b in range(B):
        for h in range(H):
            g = h // group
            s = (q[b, :, h, :] @ k[b, :, g, :].T) * scale
            if bias is not None:
                s = s + np.asarray(bias, dtype=dtype)[min(b, bias.shape[0] - 1), min(h, bias.shape[1] - 1)]
            s = np.where(mask[b], s, -np.inf)
            mx = s.max(axis=1, keepdims=True)
            mx = np.where(np.isfinite(mx), mx, 0)
            e = np.exp(s - mx)
            total = e.sum(axis=1, keepdims=True)
            p = e / np.where(total > 0, total, 1)
            do = d_out[b, :, h, :]
            dp = do @ v[b, :, g, :].T
            dd = (do * (p @ v[b, :, g, :])).sum(axis=1, keepdims=True)
            ds = p * (dp - dd)
            d_v[b, :, g, :] += p.T @ do
            d_q[b, :, h, :] = scale * ds @ k[b, :, g, :]
            d_k[b, :, g, :] += scale * ds.T @ q[b, :, h, :]
            d_bias[b, h] = ds
            # Condition: what each product sums in absolute value (incl. dS's own terms).
            ads = p * (np.abs(do) @ np.abs(v[b, :, g, :]).T + np.abs(dd))
            c_v[b, :, g, :] += p.T @ np.abs(do)
            c_q[b, :, h, :] = scale * ads @ np.abs(k[b, :, g, :])
            c_k[b, :, g, :] += scale * ads.T @ np.abs(q[b, :, h, :])
    return (d_q, d_k, d_v, d_bias), (c_q, c_k, c_v)


def streaming_forward_bound(q, k, v, **masks):
    """max|error| allowed for a fp32 forward: 2 x the plain float32 implementation's error
    against float64 on the same inputs, plus one ulp of max|v|."""
    exact, _ = forward(q, k, v, np.float64, **masks)
    plain, _ = forward(q, k, v, np.float32, **masks)
    return exact, 2 * np.max(np.abs(plain - exact)) + np.spacing(np.float32(np.max(np.abs(v))))


def random_case(rng, batch, q_len, kv_len, heads, kv_heads, head_dim, v_head_dim=None):
    v_head_dim = v_head_dim or head_dim
    q = rng.standard_normal((batch, q_len, heads, head_dim)).astype(np.float32)
    k = rng.standard_normal((batch, kv_len, kv_heads, head_dim)).astype(np.float32)
    v = rng.standard_normal((batch, kv_len, kv_heads, v_head_dim)).astype(np.float32)
    return q, k, v
