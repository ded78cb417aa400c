#!/usr/bin/env python3
"""The Python call overhead of headcount.attention: the same kernel call timed in C++ inside the
extension (views ready, output preallocated, warm context) against the whole Python call
(argument parsing, array import, output allocation, GIL release) on one input, in one process.

Usage: PYTHONPATH=build/python .venv/bin/python bench/python_overhead.py [--shape 1,16,8,64]
       [--repeats 2000] [--rounds 7] [--torch]   (--torch: torch tensors as inputs; needs torch)
Prints medians over rounds of the per-call median, and the difference (target: <= 20 us).
"""

import argparse
import statistics
import time

import numpy as np

import headcount


def python_call_seconds(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1,16,8,64", help="batch,len,heads,head_dim")
    ap.add_argument("--repeats", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--kernel", default="streaming")
    ap.add_argument("--torch", action="store_true")
    args = ap.parse_args()
    shape = tuple(int(x) for x in args.shape.split(","))
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    if args.torch:
        import torch
        q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    ctx = headcount.Context(threads=1)
    out = np.empty(shape[:3] + (shape[3],), dtype=np.float32)

    rows = {"C++ call": [], "Python, new output": [], "Python, out=": []}
    for _ in range(args.rounds):  # interleaved, so drift on a shared machine hits all three alike
        rows["C++ call"].append(statistics.median(headcount._headcount._time_attention_cpp(q, k, v, args.repeats, args.kernel, ctx)))
        rows["Python, new output"].append(python_call_seconds(lambda: headcount.attention(q, k, v, kernel=args.kernel, context=ctx), args.repeats))
        rows["Python, out="].append(python_call_seconds(lambda: headcount.attention(q, k, v, kernel=args.kernel, context=ctx, out=out), args.repeats))
    cpp = statistics.median(rows["C++ call"])
    print(f"attention {args.kernel}, shape {shape}, inputs {'torch' if args.torch else 'numpy'}, 1 thread; "
          f"medians of {args.rounds} rounds x {args.repeats} calls")
    for name, values in rows.items():
        m = statistics.median(values)
        extra = "" if name == "C++ call" else f"   overhead {1e6 * (m - cpp):6.2f} us"
        print(f"  {name:20s} {1e6 * m:8.2f} us{extra}")


if __name__ == "__main__":
    main()
