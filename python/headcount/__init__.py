"""headcount: exact multi-head attention on the CPU, from Python.

The C++ library (kernels, the attention layer, the BERT encoder, the cost model) through a
thin nanobind extension, ``headcount._headcount``:

- ``attention`` / ``attention_backward``: the reference and streaming kernels on numpy arrays
  or any DLPack tensor (PyTorch), read in place when float32/bfloat16;
- ``cost``: the cost model as a dict (what ``headcount cost --json`` prints);
- ``MultiHeadAttention``, ``KvCache``: the layer, with prefill / decode_step;
- ``Encoder``: all-MiniLM-L6-v2 embeddings and per-head statistics;
- ``Decoder``: SmolLM2-135M (a grouped-query Llama decoder) from its GGUF file: generate, logits;
- ``Context``: threads and scratch; ``headcount.torch.attention``: an autograd Function.

Errors: the library's one-line message as ValueError; files as OSError.
"""

import json as _json

from ._headcount import (  # noqa: F401
    Context,
    Decoder,
    Encoder,
    KvCache,
    MultiHeadAttention,
    __version__,
    attention,
    attention_backward,
)
from ._headcount import cost_json as _cost_json

__all__ = [
    "Context",
    "Decoder",
    "Encoder",
    "KvCache",
    "MultiHeadAttention",
    "__version__",
    "attention",
    "attention_backward",
    "cost",
]


def cost(d_model, heads, kv_heads=None, seq_len=1, *, kv_len=None, head_dim=None, v_head_dim=None,
         batch=1, d_ff=None, dtype="f32", threads=1, context=0, layers=1):
    """The cost model of one layer as a dict, exactly what ``headcount cost --json`` prints.

    ``cost(512, 8, seq_len=1000)["projections"]["macs"]`` is the seeds' 4 x 1,000 x 512 x 512
    = 1,048,576,000 multiply-adds; ``stages`` lists Q/K/V projection, scores, weighted sum,
    O projection, attention block, feed-forward and layer with weights, macs, activation bytes
    and the score entries the reference and streaming kernels hold at once. ``context`` > 0
    adds the KV cache of ``layers`` layers for MHA, GQA and MQA.
    """
    return _json.loads(_cost_json(d_model, heads, kv_heads=kv_heads, seq_len=seq_len, kv_len=kv_len,
                                  head_dim=head_dim, v_head_dim=v_head_dim, batch=batch, d_ff=d_ff,
                                  dtype=dtype, threads=threads, context=context, layers=layers))
