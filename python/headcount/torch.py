"""headcount's kernels as a PyTorch autograd Function.

``headcount.torch.attention(q, k, v, ...)`` takes CPU tensors in the kernels' layout
[batch, len, heads, dim] (not SDPA's [batch, heads, len, dim]: transpose(1, 2) gives a view,
which headcount reads in place through its strides). The forward runs headcount's forward
kernel and keeps (out, lse); the backward runs the matching backward kernel (FlashAttention-2's
algorithm for ``kernel="streaming"``). float32 and bfloat16 inputs are read without a copy;
the result is float32, and gradients come back in each input's dtype.
"""

import torch as _torch

from . import _headcount


class AttentionFunction(_torch.autograd.Function):
    """autograd.Function over headcount.attention / headcount.attention_backward."""

    @staticmethod
    def forward(ctx, q, k, v, bias, causal, scale, window, key_lengths, kernel, context):
        detached = [t.detach() if t is not None else None for t in (q, k, v, bias)]
        out, lse = _headcount.attention(*detached[:3], causal=causal, scale=scale, window=window,
                                        key_lengths=key_lengths, bias=detached[3], kernel=kernel,
                                        return_lse=True, context=context)
        out = _torch.from_numpy(out)
        lse = _torch.from_numpy(lse)
        ctx.save_for_backward(*detached[:3], out, lse, *( [detached[3]] if bias is not None else []))
        ctx.options = dict(causal=causal, scale=scale, window=window, key_lengths=key_lengths,
                           kernel=kernel, context=context)
        ctx.has_bias = bias is not None
        ctx.dtypes = [t.dtype if t is not None else None for t in (q, k, v, bias)]
        return out

    @staticmethod
    def backward(ctx, d_out):
        saved = ctx.saved_tensors
        q, k, v, out, lse = saved[:5]
        bias = saved[5] if ctx.has_bias else None
        want_bias = ctx.has_bias and ctx.needs_input_grad[3]
        grads = _headcount.attention_backward(q, k, v, out, lse, d_out.contiguous(), bias=bias,
                                              return_d_bias=want_bias, **ctx.options)
        grads = [_torch.from_numpy(g) for g in grads]
        d_q, d_k, d_v = (g.to(dt) for g, dt in zip(grads[:3], ctx.dtypes[:3]))
        d_bias = grads[3] if want_bias else None
        return d_q, d_k, d_v, d_bias, None, None, None, None, None, None


def attention(q, k, v, *, causal=False, scale=None, window=None, key_lengths=None, bias=None,
              kernel="streaming", context=None):
    """softmax(scale * q k^T + bias) v with autograd: q [B, n, H, Dk], k [B, m, Hkv, Dk],
    v [B, m, Hkv, Dv] -> [B, n, H, Dv] float32. Masks and options as headcount.attention."""
    return AttentionFunction.apply(q, k, v, bias, causal, scale, window, key_lengths, kernel, context)
