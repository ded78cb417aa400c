#!/usr/bin/env python3
"""Times PyTorch and ONNX Runtime on the shapes `headcount bench` measured, on the same
thread count, and prints headcount / peer ratios (speedup = peer time / headcount time, so
> 1 means headcount is faster).

Peers, per headcount row (its streaming kernel, status ok):
  attention rows (suites seq, gqa, heads):
    sdpa     torch.nn.functional.scaled_dot_product_attention on q, k, v views
             [B, H, n, d] of [B, n, H, d] memory (the layout a fused QKV projection gives,
             and the one headcount reads); is_causal for causal rows, enable_gqa when
             kv_heads < heads; bf16 rows in torch.bfloat16. The CPU backend that ran is read
             off torch.profiler: the aten op under aten::scaled_dot_product_attention, e.g.
             aten::_scaled_dot_product_flash_attention_for_cpu (the flash kernel) or
             aten::_scaled_dot_product_attention_math (the math path).
    ort_mha  ONNX Runtime's com.microsoft MultiHeadAttention contrib op (CPU EP) on
             [B, n, H*d] inputs, unidirectional=1 for causal rows; when the contrib op cannot
             be built or run, an equivalent MatMul/Softmax graph (the "backend" column says
             which ran). fp32 only (bf16 rows: n/a), kv_heads == heads only.
  layer rows (suite heads):
    torch_mha  torch.nn.MultiheadAttention(d_model, H, batch_first=True), eval, under
             inference_mode, forward(x, x, x, need_weights=False); the ops that ran (the
             native fast path or not) are read off the profiler as for SDPA.
Threads: torch.set_num_threads(N), torch.set_num_interop_threads(1); ORT
intra_op_num_threads=N, inter_op_num_threads=1. Times: two warm-up calls, then up to
--repeats timed calls (fewer when a call is slow, at least one; the count is reported), median.

Each peer set runs twice, in two child processes: "plain" (glibc's default malloc, which
returns big freed blocks to the kernel so every call faults its pages in again: ~11 us per
4 KiB page on this VM) and "keep-freed" (GLIBC_TUNABLES=glibc.malloc.mmap_max=0:
glibc.malloc.trim_threshold=<SIZE_MAX>, so freed memory is kept and reused). Minor page
faults per timed call are reported for both, from getrusage.

Usage:
  peers.py --headcount build/headcount --suites seq,heads,gqa --threads 2
  peers.py --headcount-json results.json            # rows from an earlier --json run
Run it with bench/peers/.venv/bin/python (bench/peers/setup_peers.sh makes it).
"""

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

KEEP_FREED = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=18446744073709551615"
MODES = [("plain", None), ("keep-freed", KEEP_FREED)]
PEER_SUITES = ("seq", "heads", "gqa")


# ---------------------------------------------------------------------------------------
# The worker: runs in a child process so that GLIBC_TUNABLES is read at its start.
# ---------------------------------------------------------------------------------------

def time_calls(fn, repeats, budget):
    fn()  # first call: lazy initialisation, first-touch faults
    start = time.perf_counter()
    fn()
    warm = time.perf_counter() - start
    count = max(1, min(repeats, int(budget / warm))) if warm > 0 else repeats
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    times = []
    for _ in range(count):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    return {"seconds": statistics.median(times), "seconds_min": min(times), "seconds_max": max(times),
            "repeats": count, "warmup_seconds": warm, "minor_faults_per_call": faults / count}


def profiled_ops(torch, fn, wanted):
    """The aten ops whose names contain one of `wanted`, from one profiled call."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    names = sorted({e.key for e in prof.key_averages() if any(w in e.key for w in wanted)})
    return names


def sdpa_backend(names):
    inner = [n for n in names if n not in ("aten::scaled_dot_product_attention",)]
    for key, label in (("flash_attention_for_cpu", "flash (CPU)"), ("attention_math", "math"),
                       ("efficient_attention", "mem-efficient"), ("cudnn", "cudnn")):
        if any(key in n for n in inner):
            return label
    return "unknown"


def run_sdpa(torch, shape, repeats, budget):
    F = torch.nn.functional
    b, n, h, hkv, d = shape["batch"], shape["q_len"], shape["heads"], shape["kv_heads"], shape["head_dim"]
    dtype = torch.bfloat16 if shape["dtype"] == "bf16" else torch.float32
    gen = torch.Generator().manual_seed(0)

    def tensor(heads):
        return (torch.rand(b, n, heads, d, generator=gen) * 4 - 2).to(dtype).transpose(1, 2)

    q, k, v = tensor(h), tensor(hkv), tensor(hkv)
    kwargs = {"is_causal": bool(shape["causal"])}
    if hkv != h:
        kwargs["enable_gqa"] = True

    def call():
        with torch.inference_mode():
            return F.scaled_dot_product_attention(q, k, v, **kwargs)

    result = time_calls(call, repeats, budget)
    ops = profiled_ops(torch, call, ("scaled_dot_product",))
    result.update({"backend": sdpa_backend(ops), "ops": ops})
    return result


def run_torch_mha(torch, shape, repeats, budget):
    b, n, h, d_model = shape["batch"], shape["q_len"], shape["heads"], shape["d_model"]
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(d_model, h, batch_first=True).eval()
    x = torch.rand(b, n, d_model) * 4 - 2

    def call():
        with torch.inference_mode():
            return mha(x, x, x, need_weights=False)

    result = time_calls(call, repeats, budget)
    ops = profiled_ops(torch, call, ("multi_head_attention", "scaled_dot_product", "attention",
                                     "aten::bmm", "aten::_softmax"))
    path = "native fast path" if any("_native_multi_head_attention" in o for o in ops) else "python path"
    if any("scaled_dot_product" in o for o in ops):
        inner = "SDPA " + sdpa_backend(ops)
    elif any("bmm" in o for o in ops):
        inner = "bmm + softmax, scores materialised"
    else:
        inner = "unknown"
    result.update({"backend": f"{path}, {inner}", "ops": ops})
    return result


def ort_contrib_model(onnx, shape):
    from onnx import TensorProto, helper
    b, n, h, d = shape["batch"], shape["q_len"], shape["heads"], shape["head_dim"]
    attrs = {"num_heads": h}
    if shape["causal"]:
        attrs["unidirectional"] = 1
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["o"], domain="com.microsoft", **attrs)
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [b, n, h * d]) for x in "qkv"]
    output = helper.make_tensor_value_info("o", TensorProto.FLOAT, [b, n, h * d])
    graph = helper.make_graph([node], "mha", inputs, [output])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


def ort_fallback_model(onnx, shape):
    """softmax(Q·K^T·scale + mask)·V with standard ops; the causal mask is an input."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    b, n, h, d = shape["batch"], shape["q_len"], shape["heads"], shape["head_dim"]
    split = numpy_helper.from_array(np.array([b, n, h, d], dtype=np.int64), "split")
    merge = numpy_helper.from_array(np.array([b, n, h * d], dtype=np.int64), "merge")
    scale = numpy_helper.from_array(np.array(1.0 / d ** 0.5, dtype=np.float32), "scale")
    nodes = [
        helper.make_node("Reshape", ["q", "split"], ["q4"]),
        helper.make_node("Reshape", ["k", "split"], ["k4"]),
        helper.make_node("Reshape", ["v", "split"], ["v4"]),
        helper.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["qt", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
    ]
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [b, n, h * d]) for x in "qkv"]
    scores = "ss"
    if shape["causal"]:
        nodes.append(helper.make_node("Add", ["ss", "mask"], ["sm"]))
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [n, n]))
        scores = "sm"
    nodes += [
        helper.make_node("Softmax", [scores], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vt"], ["o4"]),
        helper.make_node("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ot", "merge"], ["o"]),
    ]
    output = helper.make_tensor_value_info("o", TensorProto.FLOAT, [b, n, h * d])
    graph = helper.make_graph(nodes, "attention", inputs, [output], initializer=[split, merge, scale])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run_ort(ort, onnx, shape, threads, repeats, budget):
    import numpy as np
    b, n, h, d = shape["batch"], shape["q_len"], shape["heads"], shape["head_dim"]
    rng = np.random.default_rng(0)
    feeds = {x: (rng.random((b, n, h * d), dtype=np.float32) * 4 - 2) for x in "qkv"}
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    errors = []
    for label, build in (("contrib MultiHeadAttention", ort_contrib_model),
                         ("MatMul/Softmax graph", ort_fallback_model)):
        try:
            session = ort.InferenceSession(build(onnx, shape).SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
            run_feeds = dict(feeds)
            if label != "contrib MultiHeadAttention" and shape["causal"]:
                run_feeds["mask"] = np.triu(np.full((n, n), -np.inf, dtype=np.float32), 1)
            result = time_calls(lambda: session.run(None, run_feeds), repeats, budget)
            result["backend"] = label + (" (after: " + "; ".join(errors) + ")" if errors else "")
            return result
        except Exception as e:  # noqa: BLE001 - the next graph is the fallback
            errors.append(f"{label}: {str(e).splitlines()[0][:200]}")
    raise RuntimeError("; ".join(errors))


def worker(args):
    import onnx
    import onnxruntime as ort
    import torch
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    with open(args.worker) as f:
        shapes = json.load(f)
    info = {"torch": torch.__version__, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads(), "onnxruntime": ort.__version__, "onnx": onnx.__version__,
            "GLIBC_TUNABLES": os.environ.get("GLIBC_TUNABLES", ""),
            "mkldnn": torch.backends.mkldnn.is_available()}
    results = []
    for i, shape in enumerate(shapes):
        for peer in shape["peers"]:
            print(f"peers[{args.mode}]: {i + 1}/{len(shapes)} {peer} {shape['suite']} {shape['op']} "
                  f"{shape['dtype']} heads {shape['heads']} kv {shape['kv_heads']} n {shape['q_len']}"
                  f"{' causal' if shape['causal'] else ''}", file=sys.stderr, flush=True)
            entry = {"key": shape["key"], "peer": peer}
            try:
                if peer == "sdpa":
                    entry.update(run_sdpa(torch, shape, args.repeats, args.row_seconds))
                elif peer == "torch_mha":
                    entry.update(run_torch_mha(torch, shape, args.repeats, args.row_seconds))
                elif peer == "ort_mha":
                    if shape["dtype"] != "f32":
                        raise RuntimeError("fp32 only (the contrib op's CPU kernel takes float)")
                    entry.update(run_ort(ort, onnx, shape, args.threads, args.repeats, args.row_seconds))
                entry["status"] = "ok"
            except Exception as e:  # noqa: BLE001 - one failed peer does not stop the rest
                entry.update({"status": "n/a", "error": str(e).splitlines()[0][:300] if str(e) else repr(e)})
            results.append(entry)
    json.dump({"info": info, "results": results}, sys.stdout)


# ---------------------------------------------------------------------------------------
# The parent: headcount's rows, the two worker runs, the table.
# ---------------------------------------------------------------------------------------

def row_key(r):
    return "|".join(str(r[k]) for k in ("suite", "op", "dtype", "batch", "heads", "kv_heads",
                                        "head_dim", "q_len", "kv_len", "causal"))


def headcount_data(args):
    """headcount's whole `bench --json` object (rows of several suites merged)."""
    if args.headcount_json:
        with open(args.headcount_json) as f:
            return json.load(f)
    merged = None
    for suite in args.suites:
        command = [args.headcount, "bench", "--suite", suite, "--json", "--threads", str(args.threads),
                   "--repeats", str(args.repeats)]
        if args.quick:
            command.append("--quick")
        print("peers: running " + " ".join(command), file=sys.stderr, flush=True)
        data = json.loads(subprocess.run(command, check=True, stdout=subprocess.PIPE).stdout)
        if merged is None:
            merged = data
        else:
            for key in ("rows", "heads_spread", "heads_memory", "targets"):
                merged[key] += data.get(key, [])
            merged["notes"].update(data.get("notes", {}))
    return merged


def headcount_md(data):
    """headcount's own rows and summaries as Markdown."""
    h = data["header"]
    best = h.get("sgemm_best") or {}
    conf = h["sgemm_as_configured"]
    lines = [f"# headcount bench --suite {h['suite']} --threads {h['threads']} ({h['date']})", "",
             f"- CPU: {h['cpu_model']} ({h['cpu_flags']})",
             f"- sgemm {conf['size']}^3: as configured (OPENBLAS_CORETYPE={conf['OPENBLAS_CORETYPE'] or 'unset'}, "
             f"core {conf['corename']}) {conf['gflops']:.1f} GFLOP/s; with OPENBLAS_CORETYPE="
             f"{best.get('OPENBLAS_CORETYPE', '?')} (core {best.get('corename', '?')}, child process) "
             f"{best.get('gflops', float('nan')):.1f} GFLOP/s; %sgemm uses {h['sgemm_gflops']:.1f} "
             f"({h['pct_of_sgemm_basis']})"]
    lines += [f"- {k}: {v}" for k, v in h["methods"].items()]
    lines += [f"- suite {k}: " + "; ".join(v) for k, v in data.get("notes", {}).items()]
    lines += ["", "| suite | op | kernel | dtype | batch | heads | kv | hd | n | causal | median ms | GFLOP/s | "
              "%sgemm | peak MiB | reps |", "|" + "---|" * 15]
    for r in data["rows"]:
        head = (f"| {r['suite']} | {r['op']} | {r['kernel']} | {r['dtype']} | {r['batch']} | {r['heads']} | "
                f"{r['kv_heads']} | {r['head_dim']} | {r['q_len']} | {'yes' if r['causal'] else 'no'} |")
        if r["status"] != "ok":
            lines.append(head + f" {r['status']}: {r.get('error', '')} | | | | |")
            continue
        peak = "n/a" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**20:.1f}"
        lines.append(head + f" {r['seconds'] * 1e3:.3f} | {r['gflops']:.1f} | {r['pct_of_sgemm']:.1f} | "
                            f"{peak} | {r['repeats']} |")
    if data.get("heads_spread"):
        lines += ["", "| heads spread: op | kernel | mean ms | max/mean-1 | min/mean-1 | within +/-15% |",
                  "|---|---|---|---|---|---|"]
        for s in data["heads_spread"]:
            lines.append(f"| {s['op']} | {s['kernel']} | {s['mean_seconds'] * 1e3:.3f} | "
                         f"{100 * s['max_over_mean_minus_1']:+.1f}% | {100 * s['min_over_mean_minus_1']:+.1f}% | "
                         f"{'yes' if s['within_15_percent'] else 'no'} |")
    if data.get("heads_memory"):
        mib = lambda b: "n/a" if b is None else f"{b / 2**20:.1f}"  # noqa: E731
        lines += ["", "| heads | reference peak MiB | cost model h*n^2*8 MiB | streaming peak MiB |",
                  "|---|---|---|---|"]
        for m in data["heads_memory"]:
            lines.append(f"| {m['heads']} | {mib(m['reference_peak_bytes'])} | "
                         f"{mib(m['cost_model_reference_score_bytes'])} | {mib(m['streaming_peak_bytes'])} |")
    if data.get("targets"):
        lines += ["", "Targets (issue 3):", ""]
        lines += [f"- [{'met' if t['met'] else 'NOT met'}] {t['target']}: {t['value']}" for t in data["targets"]]
    return "\n".join(lines) + "\n"


def peer_shapes(rows, suites, max_n):
    shapes = []
    for r in rows:
        if r["suite"] not in suites or r["kernel"] != "streaming" or r["status"] != "ok":
            continue
        if r["q_len"] > max_n:
            continue
        if r["op"] == "attention":
            peers = ["sdpa"] + (["ort_mha"] if r["kv_heads"] == r["heads"] else [])
        elif r["op"] == "layer" and r["suite"] == "heads":
            peers = ["torch_mha"]
        else:
            continue
        shape = {k: r[k] for k in ("suite", "op", "dtype", "batch", "heads", "kv_heads", "head_dim",
                                   "d_model", "q_len", "kv_len", "causal")}
        shape.update({"key": row_key(r), "peers": peers, "headcount_seconds": r["seconds"]})
        shapes.append(shape)
    return shapes


def run_workers(args, shapes):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(shapes, f)
        path = f.name
    runs = {}
    try:
        for mode, tunables in MODES:
            env = dict(os.environ)
            env.pop("GLIBC_TUNABLES", None)
            if tunables:
                env["GLIBC_TUNABLES"] = tunables
            command = [sys.executable, os.path.abspath(__file__), "--worker", path, "--mode", mode,
                       "--threads", str(args.threads), "--repeats", str(args.repeats),
                       "--row-seconds", str(args.row_seconds)]
            out = subprocess.run(command, check=True, env=env, stdout=subprocess.PIPE).stdout
            runs[mode] = json.loads(out)
    finally:
        os.unlink(path)
    return runs


def fmt_ms(seconds):
    return f"{seconds * 1e3:.2f}" if seconds is not None else "n/a"


def build_report(header, shapes, runs, args):
    by_mode = {mode: {(e["key"], e["peer"]): e for e in run["results"]} for mode, run in runs.items()}
    lines = []
    info = runs["plain"]["info"]
    sg = header.get("sgemm_gflops")
    lines.append(f"# headcount vs PyTorch / ONNX Runtime ({args.threads} threads; headcount rows from "
                 f"{header.get('date')})")
    lines.append("")
    lines.append(f"- CPU: {header.get('cpu_model')} ({header.get('cpu_flags')})")
    lines.append(f"- headcount: sgemm {sg:.1f} GFLOP/s ({header.get('pct_of_sgemm_basis')}); OpenBLAS core "
                 f"as configured: {header.get('corename')}")
    lines.append(f"- torch {info['torch']} (CPU capability {info['torch_cpu_capability']}, "
                 f"{info['torch_threads']} threads, interop 1), onnxruntime {info['onnxruntime']} "
                 f"(intra_op {args.threads}, inter_op 1)")
    lines.append("- speedup = peer time / headcount time (median each); > 1: headcount is faster")
    lines.append("- plain: glibc's default malloc; keep-freed: GLIBC_TUNABLES=" + KEEP_FREED +
                 " (freed memory kept, so a peer does not fault its buffers in again on every call)")
    lines.append("- faults: minor page faults per timed call (getrusage), plain / keep-freed")
    lines.append("")
    lines.append("| suite | op | dtype | heads | kv | hd | n | causal | headcount ms | peer | backend | "
                 "peer ms plain | speedup plain | peer ms keep-freed | speedup keep-freed | faults/call |")
    lines.append("|" + "---|" * 16)
    summary = []
    for s in shapes:
        for peer in s["peers"]:
            cells = {}
            for mode, _ in MODES:
                e = by_mode[mode].get((s["key"], peer), {"status": "missing"})
                cells[mode] = e
            p, k = cells["plain"], cells["keep-freed"]
            backend = p.get("backend") or k.get("backend") or p.get("error", "n/a")

            def ms(e):
                return fmt_ms(e["seconds"]) if e["status"] == "ok" else "n/a"

            def speed(e):
                return f"{e['seconds'] / s['headcount_seconds']:.2f}x" if e["status"] == "ok" else "n/a"

            def faults(e):
                return f"{e['minor_faults_per_call']:.0f}" if e["status"] == "ok" else "-"

            lines.append(f"| {s['suite']} | {s['op']} | {s['dtype']} | {s['heads']} | {s['kv_heads']} | "
                         f"{s['head_dim']} | {s['q_len']} | {'yes' if s['causal'] else 'no'} | "
                         f"{fmt_ms(s['headcount_seconds'])} | {peer} | {backend} | {ms(p)} | {speed(p)} | "
                         f"{ms(k)} | {speed(k)} | {faults(p)} / {faults(k)} |")
            summary.append((s, peer, cells))
    lines.append("")
    lines += targets(summary)
    return "\n".join(lines) + "\n"


def targets(summary):
    """Issue 3: >= 2x SDPA and ORT on seq n >= 1024; faster than both on every heads row."""
    out = ["## Targets (issue 3), judged under both malloc settings", ""]
    for mode, _ in MODES:
        for peer in ("sdpa", "ort_mha"):
            sp = [c[mode]["seconds"] / s["headcount_seconds"] for s, p, c in summary
                  if p == peer and s["suite"] == "seq" and s["q_len"] >= 1024 and c[mode]["status"] == "ok"]
            if sp:
                out.append(f"- [{'met' if min(sp) >= 2 else 'NOT met'}] seq n >= 1024, >= 2x {peer} ({mode}): "
                           f"min {min(sp):.2f}x, median {statistics.median(sp):.2f}x over {len(sp)} rows")
        sp = [c[mode]["seconds"] / s["headcount_seconds"] for s, p, c in summary
              if s["suite"] == "heads" and c[mode]["status"] == "ok"]
        if sp:
            out.append(f"- [{'met' if min(sp) > 1 else 'NOT met'}] heads suite, faster than every peer ({mode}): "
                       f"min {min(sp):.2f}x over {len(sp)} row-peer pairs")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--headcount", default=os.path.join(os.path.dirname(__file__), "..", "..", "build", "headcount"),
                        help="the headcount binary (run for each suite unless --headcount-json)")
    parser.add_argument("--headcount-json", help="take headcount's rows from this `bench --json` output")
    parser.add_argument("--suites", default="seq,heads,gqa", help="comma-separated, of seq, heads, gqa")
    parser.add_argument("--threads", type=int, default=None, help="default: headcount's, else 2")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--row-seconds", type=float, default=10.0, help="time budget of one row's timed calls")
    parser.add_argument("--max-n", type=int, default=16384, help="skip peer rows longer than this")
    parser.add_argument("--quick", action="store_true", help="headcount's --quick shapes")
    parser.add_argument("--no-peers", action="store_true", help="only render headcount's rows")
    parser.add_argument("--out-json", help="write headcount's rows, the peers' results and the table here")
    parser.add_argument("--out-md", help="write the table (Markdown) here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="plain", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.suites = [s for s in args.suites.split(",") if s]
    for s in args.suites:
        if s not in PEER_SUITES:
            parser.error(f"--suites: expected seq, heads or gqa, got {s}")

    if args.worker:
        args.threads = args.threads or 2
        return worker(args)

    if args.threads is None and args.headcount_json:
        with open(args.headcount_json) as f:
            args.threads = json.load(f)["header"]["threads"]
    args.threads = args.threads or 2
    data = headcount_data(args)
    header, rows = data["header"], data["rows"]
    if header["threads"] != args.threads:
        sys.exit(f"peers.py: headcount ran on {header['threads']} threads, peers asked for {args.threads}")
    report = headcount_md(data) + "\n"
    runs = None
    if not args.no_peers:
        shapes = peer_shapes(rows, args.suites, args.max_n)
        if not shapes:
            sys.exit("peers.py: no headcount streaming rows of suites " + ",".join(args.suites))
        runs = run_workers(args, shapes)
        report += build_report(header, shapes, runs, args)
    sys.stdout.write(report)
    if args.out_md:
        with open(args.out_md, "w") as f:
            f.write(report)
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                       "host": platform.node(), "headcount": data, "peers": runs}, f, indent=1)

if __name__ == "__main__":
    main()
