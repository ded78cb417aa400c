"""Decoder from Python: SmolLM2-135M from its GGUF file against transformers' greedy tokens and
float64 logits (tests/testdata/decoder/, the C++ test's fixtures and bound: within 4x
transformers' own float32 error), generation as the CLI's --json, and errors. Needs the model
file scripts/setup.sh fetches."""

import json
import os

import numpy as np
import pytest

import headcount

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TESTDATA = os.path.join(ROOT, "tests", "testdata", "decoder")
needs_model = pytest.mark.skipif(not os.path.isfile(MODEL), reason="no model: run scripts/setup.sh")


@pytest.fixture(scope="module")
def decoder():
    return headcount.Decoder.load(MODEL)


@pytest.fixture(scope="module")
def fixtures():
    with open(os.path.join(TESTDATA, "decoder.json")) as f:
        return json.load(f)["cases"]


@needs_model
def test_logits_and_greedy_tokens_match_transformers(decoder, fixtures):
    assert (decoder.layers, decoder.heads, decoder.kv_heads, decoder.vocab) == (30, 9, 3, 49152)
    ctx = headcount.Context(threads=2)
    case = fixtures[0]
    assert decoder.tokenize(case["text"]) == case["ids"]
    reference = np.load(os.path.join(TESTDATA, "logits_0.npy"))
    full = case["ids"] + case["greedy"][:31]
    logits = decoder.logits(full, context=ctx)
    assert logits.dtype == np.float32 and logits.shape == (len(full), 49152)
    bound = min(0.02, 4 * case["torch_float32_max_abs_error"])
    rows = case["logit_rows"]
    assert np.max(np.abs(logits[rows] - reference)) <= bound
    out = decoder.generate(case["ids"], max_tokens=12, stop_at_eos=False, context=ctx)
    assert out["tokens"] == case["greedy"][:12]
    assert out["prompt_tokens"] == case["ids"]
    assert out["text"] == decoder.detokenize(case["greedy"][:12]).decode()
    assert out["kv_cache_bytes"] == 46080 * (len(case["ids"]) + 11)
    assert out["prefill_tokens_per_second"] > 0 and out["decode_tokens_per_second"] > 0
    chat = decoder.generate("What is gravity?", chat=True, max_tokens=4, context=ctx)
    assert chat["prompt_tokens"] == fixtures[1]["ids"]
    assert chat["tokens"] == fixtures[1]["greedy"][:4]


@needs_model
def test_errors(decoder):
    with pytest.raises(ValueError, match="ids"):
        decoder.logits([])
    with pytest.raises(ValueError, match="kv_dtype"):
        decoder.generate([1, 2], kv_dtype="fp16")
    with pytest.raises(ValueError, match="top_p"):
        decoder.generate([1, 2], temperature=1.0, top_p=0.0)


def test_load_errors():
    with pytest.raises(ValueError, match="weights"):
        headcount.Decoder.load(MODEL, weights="q4")
    with pytest.raises(OSError, match="absent.gguf"):
        headcount.Decoder.load(os.path.join(ROOT, "absent.gguf"))


@needs_model
def test_quantized_weights_keep_the_first_greedy_token(fixtures):
    """weights='quantized' (the file's own Q4_1/Q8_0 blocks): as faithful to the float64
    reference as llama.cpp on the same file, within the C++ test's factor 2."""
    quantized = headcount.Decoder.load(MODEL, weights="quantized")
    with open(os.path.join(TESTDATA, "llama_cpp_logits.json")) as f:
        peer = json.load(f)["cases"]
    case = fixtures[0]
    logits = quantized.logits(case["ids"], context=headcount.Context(threads=2))
    reference = np.load(os.path.join(TESTDATA, "logits_0.npy"))
    assert np.max(np.abs(logits[-1] - reference[0])) <= 2 * peer[0]["max_abs_error"]
    assert int(np.argmax(logits[-1])) == case["greedy"][0]
