#!/usr/bin/env python3
"""Do Hugging Face transformers' BertModel and headcount give the same embeddings for a pruned
(or K/V-repeated) model directory written by `headcount prune` / `headcount convert --repeat-kv`?

    bench/peers/.venv/bin/python scripts/check_pruned_transformers.py --headcount build/headcount \
        --model DIR [--headcount-model DIR2] [--sentences FILE] [--min-cosine 0.99999]

transformers loads --model; headcount embeds --headcount-model (default: the same directory; give
the GQA directory there and its --repeat-kv export as --model to check the GQA path). Both pipelines
are sentence-transformers' for all-MiniLM-L6-v2: BERT, mean pooling over the attention mask, L2
normalisation. Exits 1 if any sentence's cosine is below --min-cosine.

How the pruned directory is loaded. transformers 4.x applied config.json's "pruned_heads" itself
(PreTrainedModel.init_weights -> prune_heads). Head pruning was removed from transformers
(PR #41076), so in versions without PreTrainedModel.prune_heads this script applies the same
convention: a fresh BertModel from the config, each layer's query/key/value Linear made
(heads left x head_dim) wide and its attention.output.dense (heads left x head_dim) -> hidden
(head_dim = hidden_size / num_attention_heads, unchanged, so the scale 1/sqrt(head_dim) is the
same), then the safetensors state dict loaded strictly. The script prints which path it took.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np
import torch
import transformers
from safetensors.torch import load_file
from transformers import AutoTokenizer, BertConfig, BertModel


def load_bert(model_dir: pathlib.Path):
    config = BertConfig.from_pretrained(model_dir)
    if hasattr(transformers.PreTrainedModel, "prune_heads"):
        return BertModel.from_pretrained(model_dir, add_pooling_layer=False), "transformers applied pruned_heads itself"
    pruned = {int(k): sorted(set(v)) for k, v in (getattr(config, "pruned_heads", None) or {}).items()}
    raw = json.loads((model_dir / "config.json").read_text())
    if "headcount_kv_heads" in raw:
        sys.exit("a grouped model: give its --repeat-kv export as --model")
    model = BertModel(config, add_pooling_layer=False)
    d, head_dim = config.hidden_size, config.hidden_size // config.num_attention_heads
    for index, layer in enumerate(model.encoder.layer):
        heads = config.num_attention_heads - len(pruned.get(index, []))
        width = heads * head_dim
        attention = layer.attention
        attention.self.query = torch.nn.Linear(d, width)
        attention.self.key = torch.nn.Linear(d, width)
        attention.self.value = torch.nn.Linear(d, width)
        attention.self.num_attention_heads = heads
        attention.self.all_head_size = width
        attention.output.dense = torch.nn.Linear(width, d)
    state = {k.removeprefix("bert."): v for k, v in load_file(model_dir / "model.safetensors").items()}
    state = {k: v for k, v in state.items() if not k.startswith("pooler.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k != "embeddings.position_ids"]
    unexpected = [k for k in unexpected if k != "embeddings.position_ids"]
    if missing or unexpected:
        sys.exit(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    removed = sum(len(v) for v in pruned.values())
    return model, (f"transformers {transformers.__version__} has no head pruning: the model built by this script "
                   f"with pruned_heads applied ({removed} heads removed)")


def main() -> int:
    root = pathlib.Path(__file__).resolve().parent.parent
    p = argparse.ArgumentParser()
    p.add_argument("--headcount", required=True)
    p.add_argument("--model", required=True, type=pathlib.Path)
    p.add_argument("--headcount-model", type=pathlib.Path)
    p.add_argument("--sentences", type=pathlib.Path, default=root / "data" / "pride-and-prejudice.txt")
    p.add_argument("--max-sentences", type=int, default=64)
    p.add_argument("--min-cosine", type=float, default=0.99999)
    a = p.parse_args()
    texts = [t for t in a.sentences.read_text(encoding="utf-8").splitlines() if t.strip()][: a.max_sentences]

    # What this transformers does with the directory as it stands.
    try:
        BertModel.from_pretrained(a.model, add_pooling_layer=False)
        plain = "loads"
    except Exception as e:  # noqa: BLE001 - reported, not handled
        plain = f"fails ({type(e).__name__}: {str(e).splitlines()[0][:160]})"
    print(f"transformers {transformers.__version__}: BertModel.from_pretrained on {a.model}: {plain}")

    model, how = load_bert(a.model)
    print(how)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(a.model)
    max_len = json.loads((a.model / "sentence_bert_config.json").read_text()).get("max_seq_length", 256)
    with torch.no_grad():
        batch = tokenizer(texts, padding=True, truncation=True, max_length=max_len, return_tensors="pt")
        hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1)
        ref = torch.nn.functional.normalize(pooled, dim=1).numpy().astype(np.float64)

    with tempfile.TemporaryDirectory() as tmp:
        src, out = pathlib.Path(tmp) / "in.txt", pathlib.Path(tmp) / "out.npy"
        src.write_text("\n".join(texts) + "\n", encoding="utf-8")
        subprocess.run([a.headcount, "embed", "--model", str(a.headcount_model or a.model), "--format", "npy",
                        "--out", str(out), str(src)], check=True)
        ours = np.load(out).astype(np.float64)
    cos = (ours * ref).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(ref, axis=1))
    print(f"{len(texts)} sentences: min cosine {cos.min():.9f}, max |diff| {np.abs(ours - ref).max():.3g}")
    return 0 if cos.min() >= a.min_cosine else 1


if __name__ == "__main__":
    sys.exit(main())
