"""PyTorch comparisons: tensors read in place (by pointer), SDPA, nn.MultiheadAttention and
headcount.torch.attention's gradients (torch.autograd.gradcheck). Skipped when torch is not
importable; run them with the peers' environment, which has PyTorch:

    HEADCOUNT_PYTHON=bench/peers/.venv/bin/python scripts/check_python.sh build
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import headcount  # noqa: E402
import headcount.torch as htorch  # noqa: E402
import oracle  # noqa: E402


def sdpa_layout(t):
    return t.transpose(1, 2)  # [B, n, H, D] <-> [B, H, n, D], a view either way


def test_torch_tensors_are_read_in_place():
    q = torch.randn(1, 16, 8, 64)
    pointer, copied = headcount._headcount._input_pointer(q)
    assert pointer == q.data_ptr() and not copied
    # SDPA's layout, transposed to headcount's: a strided view, still no copy.
    head_major = torch.randn(1, 8, 16, 64)
    view = sdpa_layout(head_major)
    pointer, copied = headcount._headcount._input_pointer(view)
    assert pointer == head_major.data_ptr() and not copied
    bf = q.to(torch.bfloat16)
    assert headcount._headcount._input_pointer(bf) == (bf.data_ptr(), False)
    assert headcount._headcount._input_pointer(q.double())[1]


@pytest.mark.parametrize("causal,gqa", [(False, False), (True, False), (True, True)])
def test_matches_sdpa(causal, gqa):
    g = torch.Generator().manual_seed(1)
    kv_heads = 2 if gqa else 4
    q = torch.randn(2, 9, 4, 16, generator=g)
    k = torch.randn(2, 9, kv_heads, 16, generator=g)
    v = torch.randn(2, 9, kv_heads, 16, generator=g)
    out = torch.from_numpy(headcount.attention(q, k, v, causal=causal))
    want64 = sdpa_layout(F.scaled_dot_product_attention(*(sdpa_layout(t.double()) for t in (q, k, v)),
                                                        is_causal=causal, enable_gqa=gqa))
    want32 = sdpa_layout(F.scaled_dot_product_attention(*(sdpa_layout(t) for t in (q, k, v)),
                                                        is_causal=causal, enable_gqa=gqa))
    # Twice PyTorch's own fp32 error on the same inputs plus one ulp of max|v|.
    bound = 2 * (want32.double() - want64).abs().max() + np.spacing(np.float32(v.abs().max()))
    assert (out.double() - want64).abs().max() <= bound


def test_matches_nn_multihead_attention():
    torch.manual_seed(2)
    d, h = 32, 4
    mha = torch.nn.MultiheadAttention(d, h, batch_first=True).eval()
    w_q, w_k, w_v = mha.in_proj_weight.detach().chunk(3)
    b_q, b_k, b_v = mha.in_proj_bias.detach().chunk(3)
    weights = {"w_q": w_q.T, "w_k": w_k.T, "w_v": w_v.T, "w_o": mha.out_proj.weight.detach().T,
               "b_q": b_q, "b_k": b_k, "b_v": b_v, "b_o": mha.out_proj.bias.detach()}
    layer = headcount.MultiHeadAttention(d, h, weights=weights)
    x = torch.randn(2, 7, d)
    got = torch.from_numpy(layer.forward(x))
    with torch.no_grad():
        want32 = mha(x, x, x, need_weights=False)[0]
        want64 = mha.double()(x.double(), x.double(), x.double(), need_weights=False)[0]
    bound = 2 * (want32.double() - want64).abs().max() + np.spacing(np.float32(want64.abs().max()))
    assert (got.double() - want64).abs().max() <= bound


def grid_inputs(shape, generator):
    """Values on a grid of 2^-12 in [-1, 1]: x +- 2^-6 is exact in float32, so converting the
    perturbed double inputs to float32 loses nothing."""
    return (torch.randint(-4096, 4097, shape, generator=generator).double() / 4096).requires_grad_()


def central_jacobian(f, inputs, eps):
    """d f / d inputs by central differences, in float64 (for the truncation term)."""
    columns = []
    for which, x in enumerate(inputs):
        for i in range(x.numel()):
            plus = [t.detach().clone() for t in inputs]
            minus = [t.detach().clone() for t in inputs]
            plus[which].view(-1)[i] += eps
            minus[which].view(-1)[i] -= eps
            columns.append(((f(*plus) - f(*minus)) / (2 * eps)).reshape(-1))
    return torch.stack(columns, 1)


@pytest.mark.parametrize("kernel", ["reference", "streaming"])
@pytest.mark.parametrize("causal", [False, True])
def test_autograd_gradcheck(kernel, causal):
    """gradcheck compares headcount's backward (the analytic Jacobian) with central differences
    of headcount's forward. Its tolerance, derived term by term (eps = 2^-6, u = 2^-24):
      rounding: the forward errs by at most E per element, so a difference quotient by
        2E / (2 eps) = E / eps; E = u max|out| + 1e-12 max|v| for the reference kernel, and
        2x a plain fp32 forward's measured error + ulp(max|v|) for the streaming one;
      truncation: central differences err by eps^2/6 |f'''|, measured exactly as the gap
        between float64 SDPA's central differences and its autograd Jacobian at this eps;
      the backward: u x max|J| (reference) / the streaming bound of test_attention (3x plain).
    """
    g = torch.Generator().manual_seed(3)
    q = grid_inputs((1, 4, 2, 4), g)
    k = grid_inputs((1, 5, 1, 4), g)
    v = grid_inputs((1, 5, 1, 4), g)
    eps = 2.0 ** -6

    def ours(q, k, v):
        return htorch.attention(q, k, v, causal=causal, kernel=kernel).double()

    def exact(q, k, v):
        return sdpa_layout(F.scaled_dot_product_attention(*(sdpa_layout(t) for t in (q, k, v)), enable_gqa=True,
                                                          attn_mask=causal_mask(causal)))

    inputs = [q, k, v]
    jac = torch.cat([j.reshape(exact(q, k, v).numel(), -1) for j in
                     torch.autograd.functional.jacobian(exact, tuple(t.detach() for t in inputs))], 1)
    truncation = (central_jacobian(exact, [t.detach() for t in inputs], eps) - jac).abs().max().item()
    qa, ka, va = (t.detach().float().numpy() for t in inputs)
    max_v = float(np.max(np.abs(va)))
    out_shape = (1, 4, 2, 4)
    if kernel == "reference":
        forward_error = oracle.U32 * float(np.max(np.abs(oracle.forward(qa, ka, va, causal=causal)[0]))) + 1e-12 * max_v
    else:
        forward_error = float(oracle.streaming_forward_bound(qa, ka, va, causal=causal)[1])
    # Each row of the analytic Jacobian is one backward call with d_out = a unit vector.
    backward_error = 0.0
    for i in range(int(np.prod(out_shape))):
        d_out = np.zeros(out_shape, dtype=np.float32)
        d_out.reshape(-1)[i] = 1
        want, cond = oracle.backward(qa, ka, va, d_out, causal=causal)
        plain, _ = oracle.backward(qa, ka, va, d_out, dtype=np.float32, causal=causal)
        for w, p, c in zip(want, plain, cond):
            if kernel == "reference":
                bound = oracle.U32 * np.abs(w) + 1e-10 * np.max(np.abs(w))
            else:
                bound = 3 * np.max(np.abs(p - w)) + oracle.U32 * c
            backward_error = max(backward_error, float(np.max(bound)))
    atol = forward_error / eps + truncation + backward_error
    print(f"gradcheck {kernel} causal={causal}: atol {atol:.3g} (rounding {forward_error / eps:.3g}, truncation {truncation:.3g}, backward {backward_error:.3g})")
    assert atol < 1e-4  # so a wrong gradient (an O(1e-2) term or more) cannot pass
    assert torch.autograd.gradcheck(ours, tuple(inputs), eps=eps, atol=atol, rtol=0, fast_mode=False)


def causal_mask(causal):
    if not causal:
        return None
    # headcount's causal with q_len 4, kv_len 5 is bottom-right aligned: query i sees j <= i + 1.
    i = torch.arange(4)[:, None]
    j = torch.arange(5)[None, :]
    return j <= i + 1


def test_gradients_flow_into_torch():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 6, 2, 8, generator=g, requires_grad=True) for _ in range(3))
    out = htorch.attention(q, k, v, causal=True)
    (out * out).sum().backward()
    # d(sum out^2)/d out = 2 out: the oracle's float64 backward with that d_out, and the
    # streaming backward's bound (3x a plain fp32 backward's error + u x condition).
    qa, ka, va = (t.detach().numpy() for t in (q, k, v))
    d_out = 2 * out.detach().numpy()
    want, cond = oracle.backward(qa, ka, va, d_out, causal=True)
    plain, _ = oracle.backward(qa, ka, va, d_out, dtype=np.float32, causal=True)
    for t, w, p, c in zip((q, k, v), want, plain, cond):
        assert np.all(np.abs(t.grad.numpy() - w) <= 3 * np.max(np.abs(p - w)) + oracle.U32 * c)


def test_out_may_be_a_torch_tensor():
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 4, 2, 8, generator=g)
    out = torch.full((1, 4, 2, 8), float("nan"))
    returned = headcount.attention(q, q, q, out=out)
    assert returned is out
    assert np.array_equal(out.numpy(), headcount.attention(q.numpy(), q.numpy(), q.numpy()))
    # A tensor that requires grad is read too (no gradient flows: that is headcount.torch's job).
    assert np.array_equal(headcount.attention(q.clone().requires_grad_(), q, q), out.numpy())
