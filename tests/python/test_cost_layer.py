"""headcount.cost (the seeds' table from Python, identical to `headcount cost --json`) and
MultiHeadAttention (weights in and out, forward, cross-attention, prefill + decode_step)
against float64 numpy.

Layer bound: the layer's fp32 GEMMs and kernel against the same layer computed in float64
must err at most twice as much as the same layer computed plainly in float32 (numpy), plus
one ulp of max|out| (the kernels' rule, applied to the whole layer).
"""

import json
import os
import subprocess

import numpy as np
import pytest

import headcount
import oracle


def test_seeds_cost_table():
    one, eight = headcount.cost(512, 1, seq_len=1000), headcount.cost(512, 8, seq_len=1000)
    assert one["projections"]["macs"] == 4 * 1000 * 512 * 512 == 1_048_576_000
    assert one["projections"]["weights"] == 4 * 512 * 512
    for a, b in zip(one["stages"], eight["stages"]):
        assert (a["stage"], a["weights"], a["macs"]) == (b["stage"], b["weights"], b["macs"])
    scores = {s["stage"]: s for s in eight["stages"]}["scores"]
    assert scores["reference_score_entries"] == 8 * 1000 * 1000
    gqa = headcount.cost(4096, 32, 8, seq_len=1, context=32768, layers=32)
    layouts = {l["layout"]: l["bytes"]["f32"] for l in gqa["kv_cache_context"]["layouts"]}
    assert layouts["MHA"] == 4 * layouts["GQA"]
    with pytest.raises(ValueError, match="kv_heads"):
        headcount.cost(512, 8, 3)


@pytest.mark.skipif(not os.environ.get("HEADCOUNT_CLI"), reason="HEADCOUNT_CLI (the built CLI) not set")
def test_cost_equals_the_cli_json():
    for args, kwargs in [((512, 8), {"seq_len": 1000}), ((768, 12, 4), {"seq_len": 97, "batch": 3, "context": 64})]:
        cli = [os.environ["HEADCOUNT_CLI"], "cost", "--d-model", str(args[0]), "--heads", str(args[1]), "--json"]
        if len(args) > 2:
            cli += ["--kv-heads", str(args[2])]
        for key, value in kwargs.items():
            cli += ["--" + key.replace("_", "-"), str(value)]
        assert json.loads(subprocess.run(cli, check=True, capture_output=True, text=True).stdout) == \
            headcount.cost(*args, **kwargs)


def layer_float(x, w, dtype, causal=False, key=None, value=None):
    """The layer in numpy: projections, the oracle's attention per head, output projection."""
    x = x.astype(dtype)
    kx = x if key is None else key.astype(dtype)
    vx = x if value is None else value.astype(dtype)
    W = {name: a.astype(dtype) for name, a in w.items()}
    B, n, _ = x.shape
    m = kx.shape[1]
    hd = W["w_q"].shape[1] // HEADS
    q = (x @ W["w_q"] + W["b_q"]).reshape(B, n, HEADS, hd)
    k = (kx @ W["w_k"] + W["b_k"]).reshape(B, m, KV_HEADS, hd)
    v = (vx @ W["w_v"] + W["b_v"]).reshape(B, m, KV_HEADS, hd)
    out, _ = oracle.forward(q, k, v, dtype=dtype, causal=causal)
    return out.reshape(B, n, HEADS * hd) @ W["w_o"] + W["b_o"]


D_MODEL, HEADS, KV_HEADS = 32, 4, 2


def check_layer(got, x, w, **kwargs):
    exact = layer_float(x, w, np.float64, **kwargs)
    plain = layer_float(x, w, np.float32, **kwargs)
    bound = 2 * np.max(np.abs(plain - exact)) + np.spacing(np.float32(np.max(np.abs(exact))))
    assert np.max(np.abs(got - exact)) <= bound


def test_layer_forward_and_weights_round_trip():
    rng = np.random.default_rng(10)
    layer = headcount.MultiHeadAttention(D_MODEL, HEADS, kv_heads=KV_HEADS, seed=3)
    w = layer.weights
    assert w["w_q"].shape == (32, 32) and w["w_k"].shape == (32, 16) and w["b_o"].shape == (32,)
    x = rng.standard_normal((2, 9, D_MODEL)).astype(np.float32)
    check_layer(layer.forward(x), x, w)
    check_layer(layer.forward(x, causal=True), x, w, causal=True)
    # Weights in: the same arrays give a layer with the same outputs, bitwise.
    again = headcount.MultiHeadAttention(D_MODEL, HEADS, kv_heads=KV_HEADS, weights=w)
    assert np.array_equal(again.forward(x), layer.forward(x))
    kv = rng.standard_normal((2, 5, D_MODEL)).astype(np.float32)
    check_layer(layer.forward(x, kv, kv), x, w, key=kv, value=kv)
    with pytest.raises(ValueError, match="w_q"):
        headcount.MultiHeadAttention(D_MODEL, HEADS, weights={**w, "w_q": w["w_q"][:, :8]})
    with pytest.raises(ValueError, match="x shape"):
        layer.forward(x[:, :, :16])


def test_prefill_then_decode_equals_causal_forward():
    rng = np.random.default_rng(11)
    layer = headcount.MultiHeadAttention(D_MODEL, HEADS, kv_heads=KV_HEADS, seed=4)
    x = rng.standard_normal((2, 12, D_MODEL)).astype(np.float32)
    cache = layer.new_cache(batch=2, capacity=16)
    steps = [layer.prefill(x[:, :8], cache)]
    for t in range(8, 12):
        steps.append(layer.decode_step(x[:, t:t + 1], cache))
    assert cache.lengths() == [12, 12]
    check_layer(np.concatenate(steps, axis=1), x, layer.weights, causal=True)
    with pytest.raises(ValueError, match="capacity"):
        for _ in range(5):
            layer.decode_step(x[:, :1], cache)
