#!/usr/bin/env python3
"""What one engine's call does to the next in the same process, the reason for
attention_ab.py's --isolate mode and its 100 ms gap. Two measurements, n 1000 x 8 heads of 64
(fp32, the arrays attention_ab uses), THREADS threads:

1. CPU time each thread of the process burns during 1 s of idle sleep right after 10 ONNX
   Runtime MultiHeadAttention runs (per-thread utime + stime from /proc/self/task/*/stat, in
   ms): a thread that is not headcount's and not the main one, burning CPU while nothing runs,
   is ORT's worker spinning.
2. headcount's call time (median of 15) after sleeping 0, 5 and 100 ms before each call, with
   no other engine in the process.

Usage: PYTHONPATH=build/python bench/peers/.venv/bin/python bench/peers/interference_probe.py [THREADS]
"""

import glob
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention_ab import ort_session  # noqa: E402


def thread_cpu_ms():
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in glob.glob("/proc/self/task/*"):
        fields = open(task + "/stat").read().rsplit(")", 1)[1].split()
        out[task.rsplit("/", 1)[1]] = (int(fields[11]) + int(fields[12])) * 1000 / ticks
    return out


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    import headcount
    import onnxruntime as ort
    n, heads, head_dim = 1000, 8, 64
    rng = np.random.default_rng(0)
    q, k, v = (rng.random((1, n, heads, head_dim), dtype=np.float32) * 4 - 2 for _ in range(3))
    out = np.empty_like(q)
    ctx = headcount.Context(threads=threads)
    call = lambda: headcount.attention(q, k, v, out=out, context=ctx)  # noqa: E731
    call()

    session = ort_session(ort, n, heads, head_dim, False, threads)
    feeds = {"q": q.reshape(1, n, -1), "k": k.reshape(1, n, -1), "v": v.reshape(1, n, -1)}
    for _ in range(10):
        session.run(None, feeds)
    before = thread_cpu_ms()
    time.sleep(1.0)
    after = thread_cpu_ms()
    busy = {tid: after[tid] - before.get(tid, 0) for tid in after if after[tid] - before.get(tid, 0) > 0}
    print(f"CPU ms per thread during 1 s of sleep after 10 ORT runs ({threads} threads): {busy or 'none'}")

    for gap_ms in (0, 5, 100):
        times = []
        for _ in range(15):
            time.sleep(gap_ms / 1e3)
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        print(f"headcount alone, {gap_ms:3d} ms before each call: median {statistics.median(times) * 1e3:.2f} ms, "
              f"fastest {min(times) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
