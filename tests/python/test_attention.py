"""headcount.attention / attention_backward against the tests' own float64 numpy attention
(oracle.py), on MHA, GQA, MQA and every mask; arrays read in place; errors as ValueError.

Bounds (the C++ tests' rules, tests/test_kernels.cpp):
- reference kernel: double accumulation, one rounding to fp32:  |err| <= u*|x| + 1e-12*max|v|
  (u = 2^-24; the second term covers the two double computations' different summation orders);
- streaming kernel: at most twice the error of a plain fp32 implementation on the same inputs,
  plus one ulp of max|v| (FlashAttention's rule; oracle.streaming_forward_bound);
- backward, reference: u*|x| + 1e-10*max|x|; streaming: 3x the plain fp32 backward's error
  (2x inherited from out and lse, 1x its own) plus u times each element's condition.
"""

import sys
import threading
import time

import numpy as np
import pytest

import headcount
import oracle

CASES = [
    # batch, q_len, kv_len, heads, kv_heads, head_dim, masks
    (1, 7, 7, 2, 2, 8, {}),
    (2, 5, 9, 4, 2, 16, {"causal": True}),  # GQA, causal bottom-right aligned
    (1, 9, 5, 3, 1, 8, {"causal": True}),  # MQA, first queries see no key
    (2, 8, 8, 2, 1, 59, {"window": (2, 1)}),
    (2, 6, 10, 2, 2, 8, {"key_lengths": [10, 3]}),
    (1, 4, 6, 2, 2, 8, {"window": (None, 0), "scale": 0.3}),
]


def bias_for(rng, batch, heads, q_len, kv_len):
    bias = rng.standard_normal((batch, 1, q_len, kv_len)).astype(np.float32)
    bias[:, :, 0, :] = -np.inf  # a fully masked row: zeros and lse = -inf
    bias[:, :, 1, 2] = -np.inf
    return bias


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kernel", ["reference", "streaming"])
def test_forward_matches_float64(case, kernel):
    rng = np.random.default_rng(1)
    batch, n, m, h, hkv, d, masks = case
    q, k, v = oracle.random_case(rng, batch, n, m, h, hkv, d)
    out, lse = headcount.attention(q, k, v, kernel=kernel, return_lse=True, **masks)
    assert out.dtype == np.float32 and out.shape == (batch, n, h, d)
    exact, exact_lse = oracle.forward(q, k, v, **masks)
    if kernel == "reference":
        bound = oracle.U32 * np.abs(exact) + 1e-12 * np.max(np.abs(v))
        assert np.all(np.abs(out - exact) <= bound)
    else:
        exact, bound = oracle.streaming_forward_bound(q, k, v, **masks)
        assert np.max(np.abs(out - exact)) <= bound
    seen = np.isfinite(exact_lse)
    assert np.array_equal(np.isfinite(lse), seen)
    assert np.all(out[np.transpose(~seen, (0, 2, 1))] == 0)
    # lse: the log of a sum of exponentials of fp32 scores; scores err by ~d*u*|q||k|.
    np.testing.assert_allclose(lse[seen], exact_lse[seen], rtol=0, atol=1e-5 * max(1.0, np.max(np.abs(exact_lse[seen]))))


@pytest.mark.parametrize("kernel", ["reference", "streaming"])
def test_bias_and_masked_rows(kernel):
    rng = np.random.default_rng(2)
    q, k, v = oracle.random_case(rng, 2, 5, 6, 2, 2, 8)
    bias = bias_for(rng, 2, 2, 5, 6)
    out, lse = headcount.attention(q, k, v, bias=bias, kernel=kernel, return_lse=True)
    exact, bound = oracle.streaming_forward_bound(q, k, v, bias=bias)
    assert np.max(np.abs(out - exact)) <= bound
    assert np.all(out[:, 0] == 0) and np.all(lse[:, :, 0] == -np.inf)


def test_strided_float64_and_out():
    rng = np.random.default_rng(3)
    q, k, v = oracle.random_case(rng, 1, 6, 6, 2, 2, 8)
    expected = headcount.attention(q, k, v)
    # A head-major array transposed to [batch, len, heads, dim]: read through its strides.
    qt = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    assert not qt.flags.c_contiguous
    assert np.array_equal(headcount.attention(qt, k, v), expected)
    # float64 is converted once; the same float32 values give the same result.
    assert np.array_equal(headcount.attention(q.astype(np.float64), k, v), expected)
    out = np.full((1, 6, 2, 8), np.nan, dtype=np.float32)
    returned = headcount.attention(q, k, v, out=out)
    assert returned is out and np.array_equal(out, expected)


def test_inputs_read_in_place():
    rng = np.random.default_rng(4)
    q, _, _ = oracle.random_case(rng, 1, 4, 4, 2, 2, 8)
    pointer, copied = headcount._headcount._input_pointer(q)
    assert pointer == q.ctypes.data and not copied
    view = q[:, ::2]
    pointer, copied = headcount._headcount._input_pointer(view)
    assert pointer == view.ctypes.data and not copied
    pointer, copied = headcount._headcount._input_pointer(q.astype(np.float64))
    assert copied


def test_errors_are_value_errors_with_the_library_message():
    rng = np.random.default_rng(5)
    q, k, v = oracle.random_case(rng, 1, 4, 4, 3, 2, 8)
    with pytest.raises(ValueError, match=r"heads"):
        headcount.attention(q, k, v)  # 2 kv heads do not divide 3 heads
    with pytest.raises(ValueError, match=r"^q: dimensions: expected 4, got 3$"):
        headcount.attention(q[0], k, v)
    with pytest.raises(ValueError, match=r"dtype: expected float32, bfloat16, float16 or float64, got int64"):
        headcount.attention(np.zeros((1, 4, 2, 8), dtype=np.int64), k, v)
    with pytest.raises(ValueError, match=r"^kernel: expected reference or streaming, got fast$"):
        headcount.attention(q, k, v, kernel="fast")
    with pytest.raises(ValueError, match=r"^scale: expected a finite number"):
        headcount.attention(q, k, v, scale=float("nan"))
    with pytest.raises(ValueError, match=r"expected a numpy array or a DLPack tensor"):
        headcount.attention([1, 2], k, v)
    with pytest.raises(ValueError, match=r"^out: dtype: expected float32, got float64$"):
        headcount.attention(q, k, v, out=np.zeros((1, 4, 3, 8)))


CASES_BACKWARD = [
    (1, 6, 6, 2, 2, 8, {}),
    (2, 5, 7, 4, 2, 16, {"causal": True}),
    (1, 7, 5, 2, 1, 8, {"key_lengths": [4], "window": (3, 1)}),
]


@pytest.mark.parametrize("case", CASES_BACKWARD)
@pytest.mark.parametrize("kernel", ["reference", "streaming"])
def test_backward_matches_float64(case, kernel):
    rng = np.random.default_rng(6)
    batch, n, m, h, hkv, d, masks = case
    q, k, v = oracle.random_case(rng, batch, n, m, h, hkv, d)
    d_out = rng.standard_normal((batch, n, h, d)).astype(np.float32)
    out, lse = headcount.attention(q, k, v, kernel=kernel, return_lse=True, **masks)
    grads = headcount.attention_backward(q, k, v, out, lse, d_out, kernel=kernel, **masks)
    exact, cond = oracle.backward(q, k, v, d_out, **masks)
    plain, _ = oracle.backward(q, k, v, d_out, dtype=np.float32, **masks)
    for name, got, want, fp32, c in zip("qkv", grads, exact, plain, cond):
        assert got.shape == want.shape and got.dtype == np.float32
        if kernel == "reference":
            bound = oracle.U32 * np.abs(want) + 1e-10 * np.max(np.abs(want))
        else:
            bound = 3 * np.max(np.abs(fp32 - want)) + oracle.U32 * c
        assert np.all(np.abs(got - want) <= bound), name


def test_backward_d_bias_and_reference_without_out():
    rng = np.random.default_rng(7)
    q, k, v = oracle.random_case(rng, 1, 4, 5, 2, 2, 8)
    bias = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    d_out = rng.standard_normal((1, 4, 2, 8)).astype(np.float32)
    d_q, d_k, d_v, d_bias = headcount.attention_backward(q, k, v, None, None, d_out, bias=bias,
                                                         kernel="reference", return_d_bias=True)
    exact, _ = oracle.backward(q, k, v, d_out, bias=bias)
    for got, want in zip((d_q, d_k, d_v, d_bias), exact):
        assert np.all(np.abs(got - want) <= oracle.U32 * np.abs(want) + 1e-10 * np.max(np.abs(want)))
    with pytest.raises(ValueError, match=r"^out, lse: expected the forward's out and lse"):
        headcount.attention_backward(q, k, v, None, None, d_out)


def test_threads_give_bitwise_equal_results():
    rng = np.random.default_rng(8)
    q, k, v = oracle.random_case(rng, 2, 300, 300, 4, 2, 32)
    one = headcount.attention(q, k, v, causal=True, context=headcount.Context(threads=1))
    two = headcount.attention(q, k, v, causal=True, context=headcount.Context(threads=2))
    assert np.array_equal(one, two)
    assert headcount.Context(threads=2).threads == 2
    with pytest.raises(ValueError, match="isa"):
        headcount.Context(isa="sse9")


def test_gil_is_released_while_computing():
    rng = np.random.default_rng(9)
    # 4096 x 4096 keys, 8 heads of 64: ~0.2 s a call on one Zen 5 core (2048 took 47 ms there
    # when idle, too close to the scheduler's noise; this test failed on that host).
    q, k, v = oracle.random_case(rng, 1, 4096, 4096, 8, 8, 64)
    context = headcount.Context(threads=1)
    headcount.attention(q[:, :64], k, v, context=context)  # warm
    done = threading.Event()
    durations = []
    calls = 2

    def work():
        start = time.perf_counter()
        for _ in range(calls):
            headcount.attention(q, k, v, kernel="streaming", context=context)
        durations.append(time.perf_counter() - start)
        done.set()

    thread = threading.Thread(target=work)
    ticks = []
    thread.start()
    while not done.is_set():
        ticks.append(time.perf_counter())
    thread.join()
    # With the GIL held for a call, this loop would stall for a whole call; released, it only
    # waits for the interpreter's switch interval (5 ms) and the scheduler. A call must be long
    # against that interval for the check to tell the two apart.
    gaps = np.diff(ticks)
    per_call = durations[0] / calls
    assert per_call > 8 * sys.getswitchinterval()
    assert gaps.max() < per_call
