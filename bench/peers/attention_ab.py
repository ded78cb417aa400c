#!/usr/bin/env python3
"""headcount's streaming attention against ONNX Runtime's MultiHeadAttention and PyTorch's SDPA,
call by call in one process, so that a noisy host moves both sides of every ratio alike.

peers.py times all of headcount's rows first and the peers minutes later; on a shared VM whose
speed drifts by 10-30% over minutes that spreads a ratio over 0.7-1.3x for the same code. Here
each round times one call of every engine back to back (the order rotates each round), after a
100 ms sleep before every call (--gap-ms) so that no engine's spinning workers from the call
before compete; the figure is the median over rounds of each round's ratio (peer time / headcount
time, > 1: headcount faster), with the spread of those per-round ratios beside it.

Same inputs for every engine: one float32 array [1, n, H, d] per q, k, v, uniform in [-2, 2)
(peers.py's distribution); ORT reads it as [1, n, H*d], SDPA as a [1, H, n, d] view of the same
memory; headcount runs through its Python package (zero-copy, out= given). Threads: headcount
Context(threads=N), ORT intra_op N / inter_op 1, torch.set_num_threads(N). Outputs are checked
against each other (max |diff| printed) before timing.

Usage (the headcount package from a build tree configured with -DHEADCOUNT_PYTHON=ON):
  PYTHONPATH=build/python bench/peers/.venv/bin/python bench/peers/attention_ab.py --threads 2
  ... --rows seq            n 1024, 2048, 4096, 8192; 8 heads of 64; non-causal
  ... --rows heads          n 1000, d_model 512, heads 1 ... 64
  ... --causal              the same rows causal (unidirectional=1 for ORT)
  ... --isolate             each engine in its own process, calls back to back (isolate() says why)
Prints a table on stderr and one JSON object per row on stdout.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

SEQ_ROWS = [(n, 8, 64) for n in (1024, 2048, 4096, 8192)]
HEADS_ROWS = [(1000, h, 512 // h) for h in (1, 2, 4, 8, 16, 32, 64)]


def ort_session(ort, n, heads, head_dim, causal, threads):
    from onnx import TensorProto, helper
    attrs = {"num_heads": heads}
    if causal:
        attrs["unidirectional"] = 1
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["o"], domain="com.microsoft", **attrs)
    width = heads * head_dim
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, n, width]) for x in "qkv"]
    output = helper.make_tensor_value_info("o", TensorProto.FLOAT, [1, n, width])
    model = helper.make_model(helper.make_graph([node], "mha", inputs, [output]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", default="seq,heads", help="seq, heads or both (comma-separated)")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per row (default 15)")
    parser.add_argument("--peers", default="ort,sdpa", help="ort, sdpa or both")
    # ONNX Runtime's intra-op workers spin after a run: bench/peers/interference_probe.py saw one
    # of them burn 30-50 ms of CPU in the second after 10 runs (Intel host, 2026-12-03,
    # bench/results/2026-12-03-intel-interference-probe.txt). A 100 ms gap outlasts that.
    parser.add_argument("--gap-ms", type=float, default=100.0,
                        help="sleep before every call, so the previous engine's idle workers stop spinning (default 100)")
    parser.add_argument("--row-seconds", type=float, default=30.0,
                        help="fewer rounds (at least 3) when one round would overrun this budget")
    parser.add_argument("--isolate", action="store_true",
                        help="each engine in its own process per round, its calls back to back (see isolate())")
    parser.add_argument("--calls", type=int, default=10, help="--isolate: timed back-to-back calls per row (median)")
    parser.add_argument("--engine", help=argparse.SUPPRESS)  # the per-process worker of --isolate
    args = parser.parse_args()
    if args.threads < 1 or args.rounds < 1:
        parser.error(f"--threads and --rounds must be >= 1, got {args.threads} and {args.rounds}")
    peers = [p for p in args.peers.split(",") if p]
    for p in peers:
        if p not in ("ort", "sdpa"):
            parser.error(f"--peers: expected ort and/or sdpa, got {p!r}")
    rows = []
    for name in args.rows.split(","):
        if name not in ("seq", "heads"):
            parser.error(f"--rows: expected seq and/or heads, got {name!r}")
        rows += [("seq" if name == "seq" else "heads",) + r for r in (SEQ_ROWS if name == "seq" else HEADS_ROWS)]
    if args.engine:
        return engine_worker(args, rows)
    if args.isolate:
        return isolate(args, rows, peers)

    import numpy as np
    import headcount
    engines_version = {"headcount": getattr(headcount, "__version__", "?"), "numpy": np.__version__}
    ort = torch = None
    if "ort" in peers:
        import onnxruntime as ort
        engines_version["onnxruntime"] = ort.__version__
    if "sdpa" in peers:
        import torch
        torch.set_num_threads(args.threads)
        torch.set_num_interop_threads(1)
        engines_version["torch"] = torch.__version__
    ctx = headcount.Context(threads=args.threads)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    print(f"attention_ab: {cpu}, {args.threads} threads, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')}, "
          f"{engines_version}", file=sys.stderr)
    print(f"{'rows':6} {'n':>6} {'H':>3} {'d':>4} {'causal':>6} {'headcount ms':>13}  "
          + "  ".join(f"{p + ' ms':>9} {'ratio':>6} {'(q1-q3)':>13}" for p in peers) + "  rounds", file=sys.stderr)

    for suite, n, heads, head_dim in rows:
        rng = np.random.default_rng(0)
        q, k, v = (rng.random((1, n, heads, head_dim), dtype=np.float32) * 4 - 2 for _ in range(3))
        out = np.empty_like(q)
        calls = {"headcount": lambda: headcount.attention(q, k, v, causal=args.causal, out=out, context=ctx)}
        results = {"headcount": None}
        if ort is not None:
            session = ort_session(ort, n, heads, head_dim, args.causal, args.threads)
            feeds = {"q": q.reshape(1, n, -1), "k": k.reshape(1, n, -1), "v": v.reshape(1, n, -1)}
            calls["ort"] = lambda: session.run(None, feeds)[0]
        if torch is not None:
            tq, tk, tv = (torch.from_numpy(x).transpose(1, 2) for x in (q, k, v))
            calls["sdpa"] = lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=args.causal)
        # Agreement first: every peer's output against headcount's.
        calls["headcount"]()
        mine = out.copy()
        for name in peers:
            theirs = calls[name]()
            theirs = theirs.transpose(1, 2).contiguous().numpy() if name == "sdpa" else theirs.reshape(mine.shape)
            results[name] = float(np.abs(theirs - mine).max())
        for name in calls:  # warm-up
            calls[name]()
        start = time.perf_counter()
        times = {name: [] for name in calls}
        order = list(calls)
        rounds = args.rounds
        r = 0
        while r < rounds:
            for name in order[r % len(order):] + order[:r % len(order)]:
                time.sleep(args.gap_ms / 1e3)
                t0 = time.perf_counter()
                calls[name]()
                times[name].append(time.perf_counter() - t0)
            r += 1
            if r == 1:
                per_round = time.perf_counter() - start
                rounds = max(3, min(args.rounds, int(args.row_seconds / max(per_round, 1e-9))))
        hc = statistics.median(times["headcount"])
        record = {"suite": suite, "n": n, "heads": heads, "head_dim": head_dim, "causal": args.causal,
                  "threads": args.threads, "rounds": rounds, "headcount_ms": hc * 1e3,
                  "cpu": cpu, "versions": engines_version,
                  "env": {k: os.environ.get(k, "") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}}
        cells = []
        for name in peers:
            ratios = sorted(p / h for p, h in zip(times[name], times["headcount"]))
            q1, med, q3 = (statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3)
            med = statistics.median(ratios)
            record[name] = {"ms": statistics.median(times[name]) * 1e3, "ratio_median": med,
                            "ratio_q1": q1, "ratio_q3": q3, "max_abs_diff": results[name]}
            cells.append(f"{record[name]['ms']:9.2f} {med:5.2f}x ({q1:4.2f}-{q3:4.2f}x)")
        print(f"{suite:6} {n:6d} {heads:3d} {head_dim:4d} {('yes' if args.causal else 'no'):>6} {hc * 1e3:13.2f}  "
              + "  ".join(cells) + f"  {rounds}", file=sys.stderr, flush=True)
        print(json.dumps(record), flush=True)


def engine_calls(engine, threads):
    """A function (q, k, v, n, heads, head_dim, causal) -> a no-argument call of `engine`."""
    import numpy as np
    if engine == "headcount":
        import headcount
        ctx = headcount.Context(threads=threads)

        def make(q, k, v, n, heads, head_dim, causal):
            out = np.empty_like(q)
            return lambda: headcount.attention(q, k, v, causal=causal, out=out, context=ctx)
        return make
    if engine == "ort":
        import onnxruntime as ort

        def make(q, k, v, n, heads, head_dim, causal):
            session = ort_session(ort, n, heads, head_dim, causal, threads)
            feeds = {"q": q.reshape(1, n, -1), "k": k.reshape(1, n, -1), "v": v.reshape(1, n, -1)}
            return lambda: session.run(None, feeds)[0]
        return make
    import torch
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)

    def make(q, k, v, n, heads, head_dim, causal):
        tq, tk, tv = (torch.from_numpy(x).transpose(1, 2) for x in (q, k, v))
        return lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    return make


def engine_worker(args, rows):
    """--isolate's child: one engine, every row, --calls back-to-back calls after a warm-up;
    one JSON line per row with the median ms."""
    import numpy as np
    make = engine_calls(args.engine, args.threads)
    for index, (suite, n, heads, head_dim) in enumerate(rows):
        rng = np.random.default_rng(0)
        q, k, v = (rng.random((1, n, heads, head_dim), dtype=np.float32) * 4 - 2 for _ in range(3))
        call = make(q, k, v, n, heads, head_dim, args.causal)
        # Warm-up: at least two calls and 0.3 s, so the process's first row (its buffers'
        # first touch, idle vCPUs waking) does not run slower than the rest for every engine.
        start = time.perf_counter()
        for warm in range(1000):
            call()
            if warm >= 1 and time.perf_counter() - start > 0.3:
                break
        times = []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        print(json.dumps({"row": index, "ms": statistics.median(times) * 1e3}), flush=True)


def isolate(args, rows, peers):
    """Each engine in its own process, its calls back to back, the engines' processes
    alternating (the order rotates each round): what a user who calls one engine in a loop
    gets. In one process (the default mode) an engine's call depends on the one before it:
    ONNX Runtime's workers spin for 30-50 ms after a run and take a core from whatever follows,
    and a call after a long pause may start on idle vCPUs: bench/peers/interference_probe.py on
    the Intel host of 2026-12-03 had headcount alone (n 1000, 8 x 64) at a median 10.9-15.5 ms
    with 100 ms pauses against 8.2-12.6 ms with 5 ms ones, slower in three runs of four.
    Ratios are per round (peer / headcount), so the host's drift between rounds cancels."""
    import subprocess
    engines = ["headcount"] + peers
    times = {e: {i: [] for i in range(len(rows))} for e in engines}
    base = [sys.executable, os.path.abspath(__file__), "--threads", str(args.threads), "--rows", args.rows,
            "--calls", str(args.calls)] + (["--causal"] if args.causal else [])
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    print(f"attention_ab --isolate: {cpu}, {args.threads} threads, {args.rounds} rounds of {args.calls} calls, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')}", file=sys.stderr)
    for r in range(args.rounds):
        for engine in engines[r % len(engines):] + engines[:r % len(engines)]:
            done = subprocess.run(base + ["--engine", engine], capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"attention_ab: the {engine} process failed:\n{done.stderr}")
            for line in done.stdout.splitlines():
                record = json.loads(line)
                times[engine][record["row"]].append(record["ms"])
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"{'rows':6} {'n':>6} {'H':>3} {'d':>4} {'causal':>6} {'headcount ms':>13}  "
          + "  ".join(f"{p + ' ms':>9} {'ratio':>6} {'(q1-q3)':>13}" for p in peers), file=sys.stderr)
    for index, (suite, n, heads, head_dim) in enumerate(rows):
        hc = times["headcount"][index]
        record = {"suite": suite, "n": n, "heads": heads, "head_dim": head_dim, "causal": args.causal,
                  "threads": args.threads, "rounds": args.rounds, "calls": args.calls, "mode": "isolate",
                  "headcount_ms": statistics.median(hc), "cpu": cpu}
        cells = []
        for name in peers:
            ratios = sorted(p / h for p, h in zip(times[name][index], hc))
            q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
            med = statistics.median(ratios)
            record[name] = {"ms": statistics.median(times[name][index]), "ratio_median": med,
                            "ratio_q1": q1, "ratio_q3": q3}
            cells.append(f"{record[name]['ms']:9.2f} {med:5.2f}x ({q1:4.2f}-{q3:4.2f}x)")
        print(f"{suite:6} {n:6d} {heads:3d} {head_dim:4d} {('yes' if args.causal else 'no'):>6} "
              f"{statistics.median(hc):13.2f}  " + "  ".join(cells), file=sys.stderr, flush=True)
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
