#!/usr/bin/env python3
"""What the Python package adds to one attention call: headcount.attention (zero-copy, out= given)
timed exactly as bench/attention_time.cpp times the C++ call, on the same shape, one after the
other, so that a shared host's drift between them is minutes smaller than between two runs.

Usage (after the build; build/attention_time as in bench/README.md):
  PYTHONPATH=build/python .venv/bin/python bench/peers/binding_overhead.py [N HEADS HEAD_DIM THREADS CALLS]
Prints the Python median and fastest ms, then build/attention_time's line for the same shape."""
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import headcount


def main():
    given = sys.argv[1:]
    defaults = ["1000", "8", "64", "2", "40"]
    try:
        n, heads, head_dim, threads, calls = (int(x) for x in given + defaults[len(given):])
        if len(given) > 5 or min(n, heads, head_dim, threads, calls) < 1:
            raise ValueError
    except ValueError:
        print(f"binding_overhead: expected up to five integers >= 1 (N HEADS HEAD_DIM THREADS CALLS), got {given}",
              file=sys.stderr)
        sys.exit(2)
    rng = np.random.default_rng(0)
    q, k, v = (rng.random((1, n, heads, head_dim), dtype=np.float32) * 4 - 2 for _ in range(3))
    ctx = headcount.Context(threads=threads)
    out = np.empty_like(q)
    for _ in range(5):
        headcount.attention(q, k, v, out=out, context=ctx)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        headcount.attention(q, k, v, out=out, context=ctx)
        times.append(time.perf_counter() - t0)
    print(f"python  n {n} heads {heads} head_dim {head_dim} threads {threads}: median {statistics.median(times) * 1e3:.3f} ms, "
          f"fastest {min(times) * 1e3:.3f} ms")
    driver = os.path.join(os.path.dirname(__file__), "..", "..", "build", "attention_time")
    if os.path.exists(driver):
        line = subprocess.run([driver, str(n), str(heads), str(head_dim), str(threads), str(calls), "0"],
                              capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        print("c++     " + line)
    else:
        print(f"c++     (no {os.path.normpath(driver)}: build it as bench/README.md says)")


if __name__ == "__main__":
    main()
