#!/usr/bin/env python3
"""Times PyTorch's CPU scaled_dot_product_attention BACKWARD on the shapes of
`headcount bench --suite backward`, on the same thread count, and prints headcount / peer
ratios (speedup = PyTorch time / headcount time: > 1 means headcount is faster).

What is timed on each side is the backward alone, given the forward:
  headcount  attention_backward (streaming) from the forward's out and lse: dq, dk, dv.
  PyTorch    torch.autograd.grad(out, (q, k, v), g, retain_graph=True) on
             out = F.scaled_dot_product_attention(q, k, v, is_causal=...), fp32, where q, k, v
             are [B, H, n, d] views of [B, n, H, d] memory (headcount's layout) that require
             grad. The forward runs once, untimed; each timed call reruns only the backward
             graph. The backend that ran is read off torch.profiler: the aten backward op, e.g.
             aten::_scaled_dot_product_flash_attention_for_cpu_backward (the flash kernel) or
             the math path's matmul/softmax backward ops.
Threads: torch.set_num_threads(N), torch.set_num_interop_threads(1). Times: two warm-up
calls, then up to --repeats timed calls within --row-seconds (at least one), median.

Usage:
  backward_peer.py --headcount build/headcount --threads 2            # runs the suite
  backward_peer.py --headcount-json bench.json --threads 2            # rows of an earlier --json run
Run it with bench/peers/.venv/bin/python.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time


def time_calls(fn, repeats, budget):
    fn()
    start = time.perf_counter()
    fn()
    warm = time.perf_counter() - start
    count = max(1, min(repeats, int(budget / warm))) if warm > 0 else repeats
    times = []
    for _ in range(count):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return {"seconds": statistics.median(times), "repeats": count, "warmup_seconds": warm}


def backend_of(torch, fn):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    names = sorted({e.key for e in prof.key_averages()})
    if any("flash_attention_for_cpu_backward" in n for n in names):
        label = "flash (CPU) backward"
    elif any("attention_math" in n or "softmax_backward" in n for n in names):
        label = "math path backward"
    else:
        label = "unknown"
    return label, [n for n in names if "attention" in n or "softmax" in n or n in ("aten::bmm", "aten::matmul")]


def run_peer(torch, row, repeats, budget):
    F = torch.nn.functional
    b, n, h, hkv, d = row["batch"], row["q_len"], row["heads"], row["kv_heads"], row["head_dim"]
    gen = torch.Generator().manual_seed(0)

    def tensor(heads):
        return (torch.rand(b, n, heads, d, generator=gen) * 4 - 2).transpose(1, 2).requires_grad_()

    q, k, v = tensor(h), tensor(hkv), tensor(hkv)
    g = torch.rand(b, h, n, d, generator=gen) * 4 - 2
    kwargs = {"is_causal": bool(row["causal"])}
    if hkv != h:
        kwargs["enable_gqa"] = True
    out = F.scaled_dot_product_attention(q, k, v, **kwargs)

    def call():
        return torch.autograd.grad(out, (q, k, v), g, retain_graph=True)

    result = time_calls(call, repeats, budget)
    result["backend"], result["ops"] = backend_of(torch, call)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--headcount", help="the headcount binary: runs `bench --suite backward --json`")
    parser.add_argument("--headcount-json", help="an earlier `headcount bench --suite backward --json` output")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--row-seconds", type=float, default=10.0)
    parser.add_argument("--max-n", type=int, default=8192, help="skip longer rows on the peer side")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if bool(args.headcount) == bool(args.headcount_json):
        sys.exit("give exactly one of --headcount and --headcount-json")
    if args.headcount:
        text = subprocess.run([args.headcount, "bench", "--suite", "backward", "--json", "--threads",
                               str(args.threads), "--repeats", str(args.repeats)],
                              check=True, capture_output=True, text=True).stdout
    else:
        with open(args.headcount_json) as f:
            text = f.read()
    data = json.loads(text)
    if data["header"]["threads"] != args.threads:
        sys.exit(f"headcount ran on {data['header']['threads']} threads, the peer would run on {args.threads}")

    import torch
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    rows = []
    for r in data["rows"]:
        if r["status"] != "ok" or r["op"] != "backward" or r["q_len"] > args.max_n:
            continue
        print(f"peer: n {r['q_len']}{' causal' if r['causal'] else ''}...", file=sys.stderr)
        peer = run_peer(torch, r, args.repeats, args.row_seconds)
        rows.append({"q_len": r["q_len"], "causal": r["causal"], "heads": r["heads"], "head_dim": r["head_dim"],
                     "headcount_seconds": r["seconds"], "headcount_gflops": r["gflops"],
                     "headcount_pct_of_sgemm": r["pct_of_sgemm"], "torch_seconds": peer["seconds"],
                     "torch_repeats": peer["repeats"], "torch_backend": peer["backend"], "torch_ops": peer["ops"],
                     "speedup": peer["seconds"] / r["seconds"]})
    report = {"threads": args.threads, "torch": torch.__version__,
              "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "sgemm_gflops": data["header"]["sgemm_gflops"], "date": data["header"]["date"], "rows": rows}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"attention backward, fp32, heads 8 x 64, batch 1, {args.threads} threads; torch {torch.__version__} "
          f"({report['torch_cpu_capability']}); sgemm {report['sgemm_gflops']:.1f} GFLOP/s")
    print(f"{'n':>6} {'causal':>6} {'headcount ms':>13} {'%sgemm':>7} {'torch ms':>10} {'speedup':>8}  torch backend")
    for r in rows:
        print(f"{r['q_len']:>6} {'yes' if r['causal'] else 'no':>6} {1e3 * r['headcount_seconds']:>13.1f} "
              f"{r['headcount_pct_of_sgemm']:>7.1f} {1e3 * r['torch_seconds']:>10.1f} {r['speedup']:>7.2f}x  "
              f"{r['torch_backend']}")


if __name__ == "__main__":
    main()
