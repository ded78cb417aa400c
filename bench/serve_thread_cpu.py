#!/usr/bin/env python3
"""Where `headcount serve`'s CPU goes under an embeddings load: each of its threads' CPU seconds
(/proc/PID/task/*/stat) over --seconds of C clients sending one sentence per POST /v1/embeddings
on keep-alive connections. The model's worker pool shows as the busiest threads; the HTTP threads
as the many small ones. Standard library only; loopback only; bounded by --seconds.

Usage: .venv/bin/python bench/serve_thread_cpu.py [--cli build/headcount] [--sts FILE]
       [--threads 2] [--concurrency 16] [--seconds 10]
"""

import argparse
import http.client
import json
import os
import re
import subprocess
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def thread_ticks(pid):
    """{thread id: (name, user + system clock ticks)}."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[tid] = (name, int(fields[11]) + int(fields[12]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "headcount"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--sts", default=os.path.join(ROOT, "..", "shared", "data", "stsb", "sts-test.tsv"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10)
    a = ap.parse_args()
    if not os.path.isfile(a.sts):
        a.sts = os.path.join(ROOT, "tests", "testdata", "heads", "sts-pairs.tsv")
    sentences = [f[5] for f in (line.rstrip("\n").split("\t") for line in open(a.sts, encoding="utf-8"))
                 if len(f) >= 7]
    name = os.path.basename(os.path.normpath(a.model))
    proc = subprocess.Popen([a.cli, "serve", "--embedding-model", a.model, "--port", "0", "--threads",
                             str(a.threads)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = int(re.search(r"127\.0\.0\.1:(\d+)", proc.stderr.readline()).group(1))
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
        for _ in range(600):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                break
            time.sleep(0.05)
        sent, lock = [0], threading.Lock()
        end = time.time() + a.seconds

        def client(k):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            i = k
            while time.time() < end:
                conn.request("POST", "/v1/embeddings", json.dumps({"input": sentences[i % len(sentences)], "model": name,
                                                                   "encoding_format": "base64"}),
                             {"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                assert r.status == 200
                with lock:
                    sent[0] += 1
                i += a.concurrency

        before, cpu0, t0 = thread_ticks(proc.pid), time.process_time(), time.perf_counter()
        workers = [threading.Thread(target=client, args=(k,)) for k in range(a.concurrency)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        wall, after = time.perf_counter() - t0, thread_ticks(proc.pid)
        hz = os.sysconf("SC_CLK_TCK")
        used = sorted(((after[t][1] - before.get(t, ("", 0))[1]) / hz, t) for t in after)[::-1]
        total = sum(s for s, _ in used)
        print(f"{sent[0] / wall:.1f} requests/s over {wall:.1f} s, {a.concurrency} clients, "
              f"{a.threads} model threads; client CPU {time.process_time() - cpu0:.2f} s")
        print(f"server CPU {total:.2f} s of {wall * os.cpu_count():.1f} core-seconds; per thread:")
        busy = [(s, t) for s, t in used if s > 0]
        for s, t in busy[:6]:
            print(f"  thread {t} ({after[t][0]}): {s:.2f} s")
        rest = busy[6:]
        print(f"  the other {len(rest)} threads with any CPU: {sum(s for s, _ in rest):.2f} s")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
