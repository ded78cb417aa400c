#!/usr/bin/env python3
"""Peers for headcount's encoder: sentence-transformers (PyTorch), ONNX Runtime and CTranslate2
(fp32 and int8) running all-MiniLM-L6-v2 on the STS-B test sentences, and the reference STS-B
score.

Needs a venv with sentence-transformers, onnxruntime, onnx and ctranslate2 (never CI;
bench/peers/setup_peers.sh makes one):

    HF_HUB_OFFLINE=1 .venv-torch/bin/python bench/peers/encoder_peers.py --threads 2
    HF_HUB_OFFLINE=1 .venv-torch/bin/python bench/peers/encoder_peers.py --sts ../shared/data/stsb/sts-test.tsv

Throughput: sentences per second over all 2758 sentences of the file (sentence1 and sentence2 of
each line), at batch 1 and 32, median of --repeats passes after one warm-up pass. Every peer
does the whole job headcount's `embed` does: tokenisation, forward, mean pooling, L2
normalisation. Batches are sorted by length as sentence-transformers' encode() does, for ORT too.
Threads: torch.set_num_threads(N), ORT intra_op_num_threads = N and inter_op 1, CTranslate2
intra_threads = N and inter_threads 1. CTranslate2 runs the model its own converter
(TransformersConverter, in a temporary directory) writes from the same model directory, as an
Encoder, on the same token ids as the other peers, with the same mean pooling and L2
normalisation in NumPy; int8 is its compute_type="int8" on those fp32 weights (weights
quantised when loaded).
Prints one JSON object per measurement (and a table on stderr).

Note for comparisons: PyTorch spends measurable time faulting fresh pages unless glibc's malloc
keeps freed memory (GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=...);
the numbers are reported as measured, with the environment printed.
"""
import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "all-MiniLM-L6-v2"
STS_TEST = ROOT.parent / "shared" / "data" / "stsb" / "sts-test.tsv"


def read_sts(path):
    pairs = []
    with open(path, encoding="utf-8", newline="\n") as f:
        for line in f:
            line = line.rstrip("\n").rstrip("\r")
            if not line:
                continue
            fields = line.split("\t")  # no quote processing
            pairs.append((float(fields[4]), fields[5], fields[6]))
    return pairs


def sts_score(model, path):
    import numpy as np
    from scipy.stats import pearsonr, spearmanr
    pairs = read_sts(path)
    a = model.encode([p[1] for p in pairs], batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    b = model.encode([p[2] for p in pairs], batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    cos = (a.astype(np.float64) * b.astype(np.float64)).sum(1)
    gold = [p[0] for p in pairs]
    return {"spearman": 100 * spearmanr(cos, gold).statistic, "pearson": 100 * pearsonr(cos, gold).statistic,
            "pairs": len(pairs)}


def time_passes(run, repeats):
    run()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def export_onnx(model_dir, path):
    import torch
    from transformers import AutoModel
    hf = AutoModel.from_pretrained(str(model_dir)).eval()
    ids = torch.ones(2, 8, dtype=torch.int64)
    mask = torch.ones(2, 8, dtype=torch.int64)

    class Wrapper(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=torch.zeros_like(input_ids)).last_hidden_state

    torch.onnx.export(Wrapper(hf), (ids, mask), str(path), input_names=["input_ids", "attention_mask"],
                      output_names=["hidden"], opset_version=17, dynamo=False,
                      dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                                    "hidden": {0: "batch", 1: "seq"}})


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--file", default=str(STS_TEST))
    parser.add_argument("--peers", default="torch,ort,ct2")
    parser.add_argument("--sts", metavar="FILE", help="only print sentence-transformers' STS-B scores for FILE")
    args = parser.parse_args()

    import numpy as np
    import torch
    torch.set_num_threads(args.threads)
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(str(MODEL), device="cpu").eval()

    if args.sts:
        print(json.dumps({"peer": "sentence-transformers", **sts_score(model, args.sts)}))
        return

    pairs = read_sts(args.file)
    sentences = [p[1] for p in pairs] + [p[2] for p in pairs]
    batches = [int(b) for b in args.batches.split(",")]
    env = {"threads": args.threads, "torch": torch.__version__, "GLIBC_TUNABLES": os.environ.get("GLIBC_TUNABLES", ""),
           "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "")}
    results = []

    if "torch" in args.peers:
        for batch in batches:
            def run():
                with torch.inference_mode():
                    model.encode(sentences, batch_size=batch, normalize_embeddings=True, convert_to_numpy=True)
            median, times = time_passes(run, args.repeats)
            results.append({"peer": "sentence-transformers (PyTorch)", "batch": batch, "sentences": len(sentences),
                            "seconds": median, "sentences_per_second": len(sentences) / median, "passes": times, **env})
            print(json.dumps(results[-1]), flush=True)

    if "ort" in args.peers:
        import onnxruntime as ort
        tok = model.tokenizer
        with tempfile.TemporaryDirectory() as tmp:
            onnx_path = pathlib.Path(tmp) / "minilm.onnx"
            export_onnx(MODEL, onnx_path)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = args.threads
            opts.inter_op_num_threads = 1
            opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            session = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
        order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))  # as sentence-transformers
        for batch in batches:
            def run():
                out = np.empty((len(sentences), 384), dtype=np.float32)
                for start in range(0, len(order), batch):
                    idx = order[start:start + batch]
                    enc = tok([sentences[i] for i in idx], padding=True, truncation=True, max_length=256,
                              return_tensors="np")
                    mask = enc["attention_mask"].astype(np.int64)
                    hidden = session.run(None, {"input_ids": enc["input_ids"].astype(np.int64), "attention_mask": mask})[0]
                    pooled = (hidden * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
                    out[idx] = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
                return out
            median, times = time_passes(run, args.repeats)
            results.append({"peer": "ONNX Runtime " + ort.__version__, "batch": batch, "sentences": len(sentences),
                            "seconds": median, "sentences_per_second": len(sentences) / median, "passes": times, **env})
            print(json.dumps(results[-1]), flush=True)
        # Sanity: ORT agrees with sentence-transformers.
        ref = model.encode(sentences[:64], batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
        got = run()[:64]
        print(f"ort vs sentence-transformers, first 64 sentences: max |diff| {np.abs(ref - got).max():.2e}",
              file=sys.stderr)

    if "ct2" in args.peers:
        import ctranslate2
        from ctranslate2.converters import TransformersConverter
        tok = model.tokenizer
        order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))  # as sentence-transformers
        with tempfile.TemporaryDirectory() as tmp:
            ct2_dir = pathlib.Path(tmp) / "ct2"
            TransformersConverter(str(MODEL)).convert(str(ct2_dir), quantization=None)
            for compute_type in ("float32", "int8"):
                encoder = ctranslate2.Encoder(str(ct2_dir), device="cpu", compute_type=compute_type,
                                              intra_threads=args.threads, inter_threads=1)

                def run():
                    out = np.empty((len(sentences), 384), dtype=np.float32)
                    for start in range(0, len(order), batch):
                        idx = order[start:start + batch]
                        # Tokenisation is timed, as for the other peers.
                        batch_ids = [tok(sentences[i], truncation=True, max_length=256)["input_ids"] for i in idx]
                        hidden = np.array(encoder.forward_batch(batch_ids).last_hidden_state)
                        lengths = np.array([len(x) for x in batch_ids])
                        mask = (np.arange(hidden.shape[1])[None, :] < lengths[:, None]).astype(np.float32)
                        pooled = (hidden * mask[:, :, None]).sum(1) / lengths[:, None]
                        out[idx] = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
                    return out

                for batch in batches:
                    median, times = time_passes(run, args.repeats)
                    results.append({"peer": f"CTranslate2 {ctranslate2.__version__} {compute_type}", "batch": batch,
                                    "sentences": len(sentences), "seconds": median,
                                    "sentences_per_second": len(sentences) / median, "passes": times, **env})
                    print(json.dumps(results[-1]), flush=True)
                ref = model.encode(sentences[:64], batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
                batch = 32
                got = run()[:64]
                print(f"ct2 {compute_type} vs sentence-transformers, first 64 sentences: max |diff| "
                      f"{np.abs(ref - got).max():.2e}", file=sys.stderr)

    for r in results:
        print(f"{r['peer']:<36} batch {r['batch']:>3}  {r['sentences_per_second']:9.1f} sentences/s", file=sys.stderr)


if __name__ == "__main__":
    main()
