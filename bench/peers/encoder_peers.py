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

headcount as an engine (--peers headcount,...; headcount-bf16 and headcount-int8 load with that
dtype): its Python package (build/python, or --headcount-python), in a process of its own like
the peers, timed the same way. With --rounds R
every engine runs R times, the order rotated each round, and a last JSON line per batch gives
headcount's sentences/s over the best fp32 peer's of the same round, round by round, and their
median: ratios of passes minutes apart, not of runs a quarter of an hour apart.

Isolation: by default every engine runs in its OWN Python process (this script re-invoked with
--worker ENGINE), started with OMP_NUM_THREADS = MKL_NUM_THREADS = N and TOKENIZERS_PARALLELISM
as given, and only that engine imported. In one process (--same-process, the old way) PyTorch's
and CTranslate2's OpenMP pools and the tokenizer's rayon pool stay alive and spin for a while
after every call, taking the 2 cores from whichever engine runs next: on a 2-core host that cost
ORT and CTranslate2 2-4x. Each engine's timing includes exactly: the tokenizer's batch call
(same fast tokenizer, truncation at 256), the forward, mean pooling and L2 normalisation
(sentence-transformers: its encode(); ORT and CTranslate2: NumPy), over batches sorted by length.
--ort-optimize also times ORT on the graph onnxruntime.transformers.optimizer writes (fused
Attention, SkipLayerNormalization, BiasGelu), which is what ORT users deploy for BERT models.
ct2-mkl / ct2-int8-mkl: CTranslate2 with CT2_USE_MKL=1; without it, on a CPU that is not
GenuineIntel, CTranslate2 uses oneDNN instead of the MKL it ships (its src/cpu/backend.cc).
Each record carries the engine versions, the CPU, the load average before it, and the
environment.

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


def sts_of_embeddings(embeddings, path):
    """STS-B Spearman/Pearson (x100) of unit embeddings laid out as every sentence1, then every sentence2."""
    import numpy as np
    from scipy.stats import pearsonr, spearmanr
    pairs = read_sts(path)
    n = len(pairs)
    e = embeddings.astype(np.float64)
    cos = (e[:n] * e[n:2 * n]).sum(1) / (np.linalg.norm(e[:n], axis=1) * np.linalg.norm(e[n:2 * n], axis=1))
    gold = [p[0] for p in pairs]
    return {"sts_spearman": 100 * spearmanr(cos, gold).statistic, "sts_pearson": 100 * pearsonr(cos, gold).statistic}


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


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def sorted_order(sentences):
    return sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))  # as sentence-transformers


def pool_normalise(np, hidden, mask):
    pooled = (hidden * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
    return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def engine_torch(args, sentences, batches, record):
    import torch
    torch.set_num_threads(args.threads)
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(str(MODEL), device="cpu").eval()
    for batch in batches:
        def run():
            with torch.inference_mode():
                return model.encode(sentences, batch_size=batch, normalize_embeddings=True, convert_to_numpy=True)
        record("sentence-transformers (PyTorch) " + torch.__version__, batch, run)
    return model


def engine_ort(args, sentences, batches, record, optimize):
    import numpy as np
    import onnxruntime as ort
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(MODEL))
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = pathlib.Path(tmp) / "minilm.onnx"
        export_onnx(MODEL, onnx_path)
        if optimize:
            from onnxruntime.transformers import optimizer
            opt = optimizer.optimize_model(str(onnx_path), model_type="bert", num_heads=12, hidden_size=384,
                                           opt_level=0)
            fused = opt.get_fused_operator_statistics()
            print(f"ort optimizer fused: {json.dumps(fused)}", file=sys.stderr)
            onnx_path = pathlib.Path(tmp) / "minilm-opt.onnx"
            opt.save_model_to_file(str(onnx_path))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = args.threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    order = sorted_order(sentences)
    name = "ONNX Runtime " + ort.__version__ + (" (transformers optimizer)" if optimize else "")
    for batch in batches:
        def run():
            out = np.empty((len(sentences), 384), dtype=np.float32)
            for start in range(0, len(order), batch):
                idx = order[start:start + batch]
                enc = tok([sentences[i] for i in idx], padding=True, truncation=True, max_length=256,
                          return_tensors="np")
                mask = enc["attention_mask"].astype(np.int64)
                hidden = session.run(None, {"input_ids": enc["input_ids"].astype(np.int64), "attention_mask": mask})[0]
                out[idx] = pool_normalise(np, hidden, mask)
            return out
        record(name, batch, run)


def engine_ct2(args, sentences, batches, record, compute_type):
    import numpy as np
    import ctranslate2
    from ctranslate2.converters import TransformersConverter
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(MODEL))
    order = sorted_order(sentences)
    with tempfile.TemporaryDirectory() as tmp:
        ct2_dir = pathlib.Path(tmp) / "ct2"
        TransformersConverter(str(MODEL)).convert(str(ct2_dir), quantization=None)
        encoder = ctranslate2.Encoder(str(ct2_dir), device="cpu", compute_type=compute_type,
                                      intra_threads=args.threads, inter_threads=1)
    for batch in batches:
        def run():
            out = np.empty((len(sentences), 384), dtype=np.float32)
            for start in range(0, len(order), batch):
                idx = order[start:start + batch]
                # One batch call of the tokenizer, as for the other engines (no padding: CT2 takes ragged ids).
                batch_ids = tok([sentences[i] for i in idx], truncation=True, max_length=256)["input_ids"]
                hidden = np.array(encoder.forward_batch(batch_ids).last_hidden_state)
                lengths = np.array([len(x) for x in batch_ids])
                mask = (np.arange(hidden.shape[1])[None, :] < lengths[:, None]).astype(np.float32)
                out[idx] = pool_normalise(np, hidden, mask)
            return out
        backend = "MKL" if os.environ.get("CT2_USE_MKL") == "1" else "default backend"
        record(f"CTranslate2 {ctranslate2.__version__} {compute_type} ({backend})", batch, run)


def engine_headcount(args, sentences, batches, record, dtype):
    # headcount itself, through its Python package (the build's build/python, or --headcount-python),
    # timed like the peers in a process of its own: the same sentences, batches, warm-up and passes,
    # so that its ratio to each peer can be taken round by round (--rounds). dtype as `embed --dtype`.
    import headcount
    encoder = headcount.Encoder.load(str(MODEL), dtype=dtype)
    context = headcount.Context(threads=args.threads)
    for batch in batches:
        def run():
            return encoder.embed(sentences, batch_size=batch, context=context)
        record(f"headcount {headcount.__version__} {'float32' if dtype == 'fp32' else dtype}", batch, run)


ENGINES = ("torch", "ort", "ort-opt", "ct2", "ct2-int8", "ct2-mkl", "ct2-int8-mkl", "headcount", "headcount-bf16",
           "headcount-int8")
# The engines whose arithmetic is fp32 (what the fp32 targets compare against).
FP32_PEERS = ("torch", "ort", "ort-opt", "ct2", "ct2-mkl")


def run_engines(args, engines, sentences, batches):
    """Runs the named engines in this process; returns the records."""
    import numpy as np
    results = []
    ref_holder = {}

    def reference():
        if "ref" not in ref_holder:  # sentence-transformers on the first 64 sentences, for the sanity check
            if args.check:
                from sentence_transformers import SentenceTransformer
                m = SentenceTransformer(str(MODEL), device="cpu").eval()
                ref_holder["ref"] = m.encode(sentences[:64], batch_size=32, normalize_embeddings=True,
                                             convert_to_numpy=True)
            else:
                ref_holder["ref"] = None
        return ref_holder["ref"]

    def record(peer, batch, run):
        load = os.getloadavg()[0]
        median, times = time_passes(run, args.repeats)
        results.append({"peer": peer, "batch": batch, "sentences": len(sentences), "seconds": median,
                        "sentences_per_second": len(sentences) / median, "passes": times,
                        "load_before": load, **environment(args)})
        got = None
        if batch == batches[-1] and not args.limit:
            # The engine's own STS-B quality from the embeddings it just timed (sentences are every
            # sentence1, then every sentence2): what its speed costs in Spearman (int8 above all).
            got = run()
            results[-1].update(sts_of_embeddings(got, args.file))
        print(json.dumps(results[-1]), flush=True)
        if batch == batches[-1]:
            ref = reference()
            if ref is not None:
                got = run() if got is None else got
                print(f"{peer} vs sentence-transformers, first 64 sentences: max |diff| "
                      f"{np.abs(ref - got[:64]).max():.2e}", file=sys.stderr)

    for engine in engines:
        if engine == "torch":
            engine_torch(args, sentences, batches, record)
        elif engine in ("ort", "ort-opt"):
            engine_ort(args, sentences, batches, record, optimize=engine == "ort-opt")
        elif engine.startswith("ct2"):
            if engine.endswith("-mkl"):
                # CTranslate2 reads CT2_USE_MKL once: on a CPU that is not GenuineIntel it picks
                # oneDNN unless told to use MKL (src/cpu/backend.cc).
                if args.same_process:
                    raise SystemExit("--peers: the -mkl engines need their own process (no --same-process)")
                os.environ["CT2_USE_MKL"] = "1"
            engine_ct2(args, sentences, batches, record, "int8" if "int8" in engine else "float32")
        elif engine.startswith("headcount"):
            engine_headcount(args, sentences, batches, record, engine.partition("-")[2] or "fp32")
    return results


def round_ratios(results, batches):
    """Per round and batch: headcount's sentences/s over the best fp32 peer's of the same round.
    Ratios within one round compare passes minutes apart at most; on a shared host whose speed
    drifts 1.3x from one run to the next, their median says more than a ratio of two runs."""
    summary = []
    for batch in batches:
        ratios = []
        for r in sorted({x["round"] for x in results}):
            own = [x for x in results if x["round"] == r and x["batch"] == batch]
            mine = [x["sentences_per_second"] for x in own if x["engine"] == "headcount"]
            peers = [x for x in own if x["engine"] in FP32_PEERS]
            if mine and peers:
                best = max(peers, key=lambda x: x["sentences_per_second"])
                ratios.append({"round": r, "ratio": mine[0] / best["sentences_per_second"], "best_peer": best["peer"],
                               "headcount": mine[0], "peer": best["sentences_per_second"]})
        if ratios:
            values = sorted(x["ratio"] for x in ratios)
            summary.append({"summary": "headcount / best fp32 peer, per round", "batch": batch,
                            "rounds": len(values), "median": statistics.median(values), "min": values[0],
                            "max": values[-1], "per_round": ratios})
    return summary


def environment(args):
    versions = {}
    for mod in ("torch", "onnxruntime", "ctranslate2", "transformers", "sentence_transformers", "numpy"):
        if mod in sys.modules:
            versions[mod] = getattr(sys.modules[mod], "__version__", "?")
    keys = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TOKENIZERS_PARALLELISM", "GLIBC_TUNABLES",
            "OPENBLAS_CORETYPE", "CT2_USE_MKL", "OMP_WAIT_POLICY")
    return {"threads": args.threads, "process": "shared" if args.same_process else "own",
            "cpu": cpu_model(), "versions": versions, "env": {k: os.environ.get(k, "") for k in keys}}


def parse_engines(text):
    engines = [e for e in text.split(",") if e]
    # Old spelling: "ct2" once meant fp32 and int8.
    for e in engines:
        if e not in ENGINES:
            raise SystemExit(f"--peers: expected a comma list of {','.join(ENGINES)}, got {e!r}")
    return engines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--file", default=str(STS_TEST))
    parser.add_argument("--limit", type=int, default=0, help="only the first LIMIT sentences (quick looks)")
    parser.add_argument("--peers", default="torch,ort,ort-opt,ct2,ct2-int8")
    parser.add_argument("--same-process", action="store_true",
                        help="run every engine in this one process (the old way; for the before/after evidence)")
    parser.add_argument("--tokenizers-parallelism", default="false", choices=("true", "false"),
                        help="TOKENIZERS_PARALLELISM for every engine (false: the tokenizer's rayon pool stays "
                             "off, as headcount's tokenizer is single-threaded)")
    parser.add_argument("--no-check", dest="check", action="store_false",
                        help="skip the max |diff| check against sentence-transformers")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every engine this many times, the order rotated each round; with 'headcount' "
                             "among --peers, prints its ratio to the best fp32 peer per round and their median")
    parser.add_argument("--headcount-python", default=str(ROOT / "build" / "python"),
                        help="directory holding the built headcount package, put first on PYTHONPATH "
                             "(default: build/python)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--sts", metavar="FILE", help="only print sentence-transformers' STS-B scores for FILE")
    args = parser.parse_args()

    if args.sts:
        import torch
        torch.set_num_threads(args.threads)
        from sentence_transformers import SentenceTransformer
        model = SentenceTransformer(str(MODEL), device="cpu").eval()
        print(json.dumps({"peer": "sentence-transformers", **sts_score(model, args.sts)}))
        return

    pairs = read_sts(args.file)
    sentences = [p[1] for p in pairs] + [p[2] for p in pairs]
    if args.limit:
        sentences = sentences[:args.limit]
    batches = [int(b) for b in args.batches.split(",")]
    engines = parse_engines(args.peers)

    if args.rounds < 1:
        raise SystemExit(f"--rounds: expected >= 1, got {args.rounds}")
    if args.rounds > 1 and args.same_process:
        raise SystemExit("--rounds: needs every engine in its own process (no --same-process)")
    if any(e.startswith("headcount") for e in engines):
        sys.path.insert(0, args.headcount_python)
    if args.worker or args.same_process:
        results = run_engines(args, [args.worker] if args.worker else engines, sentences, batches)
        if args.worker:
            return
    else:
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
                   TOKENIZERS_PARALLELISM=args.tokenizers_parallelism, HF_HUB_OFFLINE="1")
        if any(e.startswith("headcount") for e in engines):
            env["PYTHONPATH"] = os.pathsep.join(x for x in (args.headcount_python, os.environ.get("PYTHONPATH")) if x)
        results = []
        for r in range(args.rounds):
            order = engines[r % len(engines):] + engines[:r % len(engines)]
            for engine in order:
                for record in run_worker(args, engine, env):
                    record.update(round=r, engine=engine)
                    results.append(record)
                    print(json.dumps(record), flush=True)
        for line in round_ratios(results, batches):
            print(json.dumps(line), flush=True)
            print(f"headcount / best fp32 peer, batch {line['batch']:>3}: median {line['median']:.2f}x over "
                  f"{line['rounds']} rounds (min {line['min']:.2f}, max {line['max']:.2f})", file=sys.stderr)

    for r in results:
        print(f"{r['peer']:<48} batch {r['batch']:>3}  {r['sentences_per_second']:9.1f} sentences/s"
              f"  (load {r['load_before']:.2f}, {r['process']} process)", file=sys.stderr)


def run_worker(args, engine, env):
    """One engine in a Python process of its own; returns its records."""
    import subprocess
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", engine,
           "--threads", str(args.threads), "--repeats", str(args.repeats), "--batches", args.batches,
           "--file", args.file, "--limit", str(args.limit),
           "--tokenizers-parallelism", args.tokenizers_parallelism, "--headcount-python", args.headcount_python]
    if not args.check:
        cmd.append("--no-check")
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


if __name__ == "__main__":
    main()
