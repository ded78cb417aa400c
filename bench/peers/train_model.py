#!/usr/bin/env python3
"""headcount's trainable model (include/headcount/train/model.h) in PyTorch, for the training
peer benchmark (train_peer.py) and the golden loss fixture (scripts/make_train_golden.py).

The same model, parameter for parameter:
  tokens [B, T] -> tok_emb[token] + pos_emb[t]                          x [B, T, d_model]
  `layers` blocks, pre-LN:  x = x + Attn(LN1(x));  x = x + FFN(LN2(x))
                   post-LN: x = LN1(x + Attn(x));   x = LN2(x + FFN(x))
  (attention_only: no LN2/FFN); pre-LN adds ln_f; logits = x @ head.weight + head.bias.
  loss = mean cross-entropy over the positions whose target is not -1.
Weights are [in, out] (x @ W, the transpose of nn.Linear's), named as headcount names them
(tok_emb, pos_emb, blocks.{i}.ln1.weight, blocks.{i}.attn.w_qkv with Q columns then K then V,
..., head.weight, head.bias), kept in a dict of leaf tensors in headcount's order. Attention:
heads / kv_heads / head_dim from the config; K and V heads repeated (repeat_interleave, so
query head h reads kv head h // group, headcount's mapping); scores scaled by `scale`
(default 1/sqrt(head_dim)); causal or bidirectional. LayerNorm eps 1e-5, erf GELU.
Attention runs either as F.scaled_dot_product_attention ("sdpa": PyTorch's fused CPU kernel,
what eager training would use) or as explicit softmax(QK^T)V ("math": plain, any dtype).

Optimizer: torch.optim.AdamW with headcount's hyperparameters, two groups (matrices and
embeddings decay; vectors, i.e. biases and LayerNorm, do not: headcount's rule, rank >= 2),
nanoGPT's schedule (linear warm-up, cosine to min_lr) set on the groups before each step,
torch.nn.utils.clip_grad_norm_ before it. The step order is headcount's: forward, backward,
clip, lr, step, zero_grad.

Checkpoints are read straight from the safetensors bytes with NumPy (8-byte little-endian
header length, JSON header, data region; headcount keeps the run state as JSON in
__metadata__["headcount.state"]), so no extra package is needed.
"""

import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

LAYER_NORM_EPS = 1e-5


# ---------------------------------------------------------------------------------------
# Checkpoints and batches
# ---------------------------------------------------------------------------------------

def read_safetensors(path):
    """(tensors in file order as {name: np.ndarray float32}, metadata dict)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: truncated (expected at least 8 bytes, got {len(data)})")
    n = int.from_bytes(data[:8], "little")
    if n > len(data) - 8:
        raise ValueError(f"{path}: header length {n} exceeds the file")
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    base = 8 + n
    entries = sorted(header.items(), key=lambda item: item[1]["data_offsets"][0])
    tensors = {}
    for name, e in entries:
        if e["dtype"] != "F32":
            raise ValueError(f"{path}: tensor '{name}' dtype: expected F32, got {e['dtype']}")
        begin, end = e["data_offsets"]
        array = np.frombuffer(data, dtype="<f4", count=(end - begin) // 4, offset=base + begin)
        tensors[name] = array.reshape(e["shape"]).copy()
    return tensors, metadata


def find_checkpoint(path):
    """`path` is a .safetensors file, or a directory holding exactly one headcount checkpoint
    (or one named `initial`)."""
    if os.path.isfile(path):
        return path
    candidates = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if len(candidates) != 1:
        preferred = [f for f in candidates if f.startswith("initial")]
        if len(preferred) != 1:
            raise ValueError(f"{path}: expected one .safetensors checkpoint, found {candidates}")
        candidates = preferred
    return os.path.join(path, candidates[0])


def load_checkpoint(path):
    """(tensors {name: float32 array} in file order, state dict)."""
    file = find_checkpoint(path)
    tensors, metadata = read_safetensors(file)
    if "headcount.state" in metadata:
        state = json.loads(metadata["headcount.state"])
    else:  # a JSON beside it
        with open(file[: -len(".safetensors")] + ".json") as f:
            state = json.load(f)
    return tensors, state


def run_config(state):
    """(model config, optim config, train config) from a checkpoint's state: headcount's trainer
    keeps them under state["config"] = {"model", "task", "optim", "train"}; a bare state with
    "model" / "optim" at the top is accepted too."""
    config = state.get("config", state)
    return config["model"], config.get("optim", {}), config.get("train", {})


def load_batches(directory):
    """tokens, targets as int64 arrays [steps, batch, seq_len] from headcount's --dump-batches
    (float32 .npy files; -1 = ignored target)."""
    tokens = np.load(os.path.join(directory, "tokens.npy"))
    targets = np.load(os.path.join(directory, "targets.npy"))
    for name, a in (("tokens", tokens), ("targets", targets)):
        if not np.all(a == np.round(a)):
            raise ValueError(f"{directory}/{name}.npy: expected whole numbers")
    return tokens.astype(np.int64), targets.astype(np.int64)


# ---------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------

def resolve_config(config):
    """headcount's resolve(): defaults filled the same way."""
    c = dict(config)
    c.setdefault("layers", 1)
    c.setdefault("heads", 1)
    if not c.get("kv_heads"):
        c["kv_heads"] = c["heads"]
    if not c.get("head_dim"):
        c["head_dim"] = c["d_model"] // c["heads"]
    if not c.get("d_ff"):
        c["d_ff"] = 4 * c["d_model"]
    if c.get("scale") is None:
        # headcount computes 1/sqrt(head_dim) in float32.
        c["scale"] = float(np.float32(1.0) / np.sqrt(np.float32(c["head_dim"])))
    c.setdefault("norm", "pre")
    c.setdefault("causal", True)
    c.setdefault("attention_only", False)
    c.setdefault("init_std", 0.02)
    return c


def parameter_shapes(c):
    """Names and shapes in headcount's order."""
    D, V = c["d_model"], c["vocab"]
    W = (c["heads"] + 2 * c["kv_heads"]) * c["head_dim"]
    C = c["heads"] * c["head_dim"]
    shapes = [("tok_emb", [V, D]), ("pos_emb", [c["context"], D])]
    for i in range(c["layers"]):
        p = f"blocks.{i}."
        shapes += [(p + "ln1.weight", [D]), (p + "ln1.bias", [D]),
                   (p + "attn.w_qkv", [D, W]), (p + "attn.b_qkv", [W]),
                   (p + "attn.w_o", [C, D]), (p + "attn.b_o", [D])]
        if not c["attention_only"]:
            shapes += [(p + "ln2.weight", [D]), (p + "ln2.bias", [D]),
                       (p + "ffn.w_up", [D, c["d_ff"]]), (p + "ffn.b_up", [c["d_ff"]]),
                       (p + "ffn.w_down", [c["d_ff"], D]), (p + "ffn.b_down", [D])]
    if c["norm"] == "pre":
        shapes += [("ln_f.weight", [D]), ("ln_f.bias", [D])]
    shapes += [("head.weight", [D, V]), ("head.bias", [V])]
    return shapes


def random_weights(c, seed):
    """headcount's init rule (matrices N(0, init_std), LayerNorm weights 1, biases 0), from
    NumPy's generator: the same distribution, not headcount's values (for benchmarks only)."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in parameter_shapes(c):
        if len(shape) >= 2:
            weights[name] = (rng.standard_normal(shape) * c["init_std"]).astype(np.float32)
        elif "ln" in name and name.endswith(".weight"):
            weights[name] = np.ones(shape, np.float32)
        else:
            weights[name] = np.zeros(shape, np.float32)
    return weights


class Model:
    def __init__(self, config, weights, dtype=torch.float32, attention="sdpa"):
        self.c = resolve_config(config)
        self.dtype = dtype
        self.attention = attention
        self.params = {}
        for name, shape in parameter_shapes(self.c):
            if name not in weights:
                raise ValueError(f"weights: tensor '{name}' missing")
            w = np.asarray(weights[name])
            if list(w.shape) != shape:
                raise ValueError(f"weights: tensor '{name}' shape: expected {shape}, got {list(w.shape)}")
            # float32 values widen exactly to float64: both runs start from the same numbers.
            self.params[name] = torch.tensor(w, dtype=dtype).requires_grad_(True)

    def parameters(self):
        return list(self.params.values())

    def _attend(self, x, i):
        c, P = self.c, self.params
        B, T, _ = x.shape
        H, KV, hd = c["heads"], c["kv_heads"], c["head_dim"]
        qkv = x @ P[f"blocks.{i}.attn.w_qkv"] + P[f"blocks.{i}.attn.b_qkv"]
        q = qkv[..., : H * hd].view(B, T, H, hd).transpose(1, 2)
        k = qkv[..., H * hd:(H + KV) * hd].view(B, T, KV, hd).transpose(1, 2)
        v = qkv[..., (H + KV) * hd:].view(B, T, KV, hd).transpose(1, 2)
        if KV != H:
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
        if self.attention == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=c["causal"], scale=c["scale"])
        else:
            scores = (q @ k.transpose(-1, -2)) * c["scale"]
            if c["causal"]:
                mask = torch.ones(T, T, dtype=torch.bool).triu(1)
                scores = scores.masked_fill(mask, float("-inf"))
            out = scores.softmax(dim=-1) @ v
        out = out.transpose(1, 2).reshape(B, T, H * hd)
        return out @ P[f"blocks.{i}.attn.w_o"] + P[f"blocks.{i}.attn.b_o"]

    def _ffn(self, x, i):
        P = self.params
        h = F.gelu(x @ P[f"blocks.{i}.ffn.w_up"] + P[f"blocks.{i}.ffn.b_up"])  # erf GELU
        return h @ P[f"blocks.{i}.ffn.w_down"] + P[f"blocks.{i}.ffn.b_down"]

    def _ln(self, x, name):
        return F.layer_norm(x, (x.shape[-1],), self.params[name + ".weight"], self.params[name + ".bias"],
                            LAYER_NORM_EPS)

    def logits(self, tokens):
        c, P = self.c, self.params
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        T = tokens.shape[1]
        x = P["tok_emb"][tokens] + P["pos_emb"][:T]
        for i in range(c["layers"]):
            p = f"blocks.{i}."
            if c["norm"] == "pre":
                x = x + self._attend(self._ln(x, p + "ln1"), i)
                if not c["attention_only"]:
                    x = x + self._ffn(self._ln(x, p + "ln2"), i)
            else:
                x = self._ln(x + self._attend(x, i), p + "ln1")
                if not c["attention_only"]:
                    x = self._ln(x + self._ffn(x, i), p + "ln2")
        if c["norm"] == "pre":
            x = self._ln(x, "ln_f")
        return x @ P["head.weight"] + P["head.bias"]

    def loss(self, tokens, targets):
        logits = self.logits(tokens)
        targets = torch.as_tensor(targets, dtype=torch.long)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1)


# ---------------------------------------------------------------------------------------
# Optimizer and schedule
# ---------------------------------------------------------------------------------------

DEFAULT_OPTIM = {"lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 100, "decay_steps": 0, "beta1": 0.9,
                 "beta2": 0.99, "eps": 1e-8, "weight_decay": 0.1, "grad_clip": 1.0}


def resolve_optim(optim, steps):
    o = dict(DEFAULT_OPTIM)
    o.update(optim or {})
    if not o["decay_steps"]:
        o["decay_steps"] = max(steps, o["warmup_steps"] + 1)
    return o


def learning_rate(o, step):
    """nanoGPT's get_lr for the 0-based step, as headcount's learning_rate()."""
    if step < o["warmup_steps"]:
        return o["lr"] * (step + 1) / (o["warmup_steps"] + 1)
    if step > o["decay_steps"]:
        return o["min_lr"]
    ratio = (step - o["warmup_steps"]) / (o["decay_steps"] - o["warmup_steps"])
    return o["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (o["lr"] - o["min_lr"])


class Trainer:
    def __init__(self, model, optim, steps, foreach=None):
        self.model = model
        self.o = resolve_optim(optim, steps)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.o["weight_decay"]},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=self.o["lr"], betas=(self.o["beta1"], self.o["beta2"]), eps=self.o["eps"], foreach=foreach)

    def step(self, step, tokens, targets):
        """One training step; returns (loss, gradient norm before clipping) as floats."""
        loss = self.model.loss(tokens, targets)
        loss.backward()
        clip = self.o["grad_clip"]
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip if clip > 0 else float("inf"))
        lr = learning_rate(self.o, step)
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return float(loss.detach()), float(norm)
