#!/usr/bin/env python3
"""Embeddings over HTTP against the offline command, on the same sentences and threads (issue 52's
target: at concurrency 16, single-sentence requests reach >= 75% of `headcount embed --batch 16`'s
sentences/s).

It starts `headcount serve --port 0 --threads T` on loopback. C client threads, each with its own
keep-alive connection, then send one sentence per POST /v1/embeddings request (base64, as the
openai client asks by default) until every sentence has been sent once, after one untimed warm-up
pass. Every answer is checked bitwise against `headcount embed --format npy` of the same sentences.
The offline command is timed on the same sentences (wall time of the whole process, its model load
subtracted as `embed` of one sentence measures it). Each round runs the offline command and then
one HTTP pass (with its own server, after a warm-up pass), so both sides see the same host; each
side's fastest round is reported beside every round's time, since on a shared host the slow rounds
measure the other tenants. The load generator's own CPU seconds are reported: it shares the host's
cores with the server.

Usage: .venv/bin/python bench/serve_load.py [--cli build/headcount] [--sts ../shared/data/stsb/sts-test.tsv]
       [--threads 2] [--concurrency 16] [--rounds 3] [--max-sentences N] [--json]
Standard library and numpy only.
"""

import argparse
import base64
import http.client
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def read_sentences(path, limit):
    out = []
    for line in open(path, encoding="utf-8"):
        fields = line.rstrip("\n").split("\t")
        if len(fields) >= 7:
            out += [fields[5], fields[6]]
    return out[:limit] if limit else out


def offline(cli, sentences, threads, batch):
    """(embeddings, seconds of `embed` less the model load) on a file of the sentences."""
    with tempfile.TemporaryDirectory() as d:
        src, out, one = os.path.join(d, "in.txt"), os.path.join(d, "out.npy"), os.path.join(d, "one.txt")
        with open(src, "w", encoding="utf-8") as f:
            f.write("\n".join(sentences) + "\n")
        with open(one, "w", encoding="utf-8") as f:
            f.write(sentences[0] + "\n")

        def run(path):
            start = time.perf_counter()
            subprocess.run([cli, "embed", path, "--format", "npy", "--out", out, "--batch", str(batch),
                            "--threads", str(threads)], check=True, capture_output=True)
            return time.perf_counter() - start

        load_seconds = run(one)
        seconds = run(src) - load_seconds
        return np.load(out), seconds


def load(cli, sentences, reference, threads, concurrency):
    proc = subprocess.Popen([cli, "serve", "--port", "0", "--threads", str(threads), "--max-connections",
                             str(max(128, concurrency))], stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        host, port = re.search(r"http://([0-9.]+):(\d+)", line).groups()
        threading.Thread(target=lambda: proc.stderr.read(), daemon=True).start()
        model = None
        while model is None:
            c = http.client.HTTPConnection(host, int(port))
            c.request("GET", "/v1/models")
            r = c.getresponse()
            body = r.read()
            if r.status == 200:
                model = json.loads(body)["data"][0]["id"]
            else:
                time.sleep(0.01)

        def pass_once():
            latencies = [None] * len(sentences)
            next_index = [0]
            lock = threading.Lock()
            errors = []

            def client():
                conn = http.client.HTTPConnection(host, int(port), timeout=120)
                while True:
                    with lock:
                        i = next_index[0]
                        next_index[0] += 1
                    if i >= len(sentences):
                        return
                    body = json.dumps({"input": sentences[i], "model": model, "encoding_format": "base64"})
                    start = time.perf_counter()
                    conn.request("POST", "/v1/embeddings", body=body, headers={"Content-Type": "application/json"})
                    r = conn.getresponse()
                    data = r.read()
                    latencies[i] = time.perf_counter() - start
                    if r.status != 200:
                        errors.append((i, r.status, data[:200]))
                        continue
                    row = np.frombuffer(base64.b64decode(json.loads(data)["data"][0]["embedding"]), dtype="<f4")
                    if not np.array_equal(row.view(np.uint32), reference[i].view(np.uint32)):
                        errors.append((i, "bits differ", sentences[i]))

            workers = [threading.Thread(target=client) for _ in range(concurrency)]
            cpu0, start = time.process_time(), time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            return time.perf_counter() - start, time.process_time() - cpu0, latencies, errors

        pass_once()  # warm-up: connections, the scheduler's workspaces
        seconds, cpu, latencies, errors = pass_once()
        c = http.client.HTTPConnection(host, int(port))
        c.request("GET", "/metrics")
        metrics = c.getresponse().read().decode()
        return seconds, cpu, latencies, errors, metrics
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "headcount"))
    ap.add_argument("--sts", default=os.path.join(ROOT, "..", "shared", "data", "stsb", "sts-test.tsv"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--batch", type=int, default=16, help="embed --batch of the offline run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-sentences", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sentences = read_sentences(args.sts, args.max_sentences)
    offline_times, runs = [], []
    for _ in range(args.rounds):
        reference, t = offline(args.cli, sentences, args.threads, args.batch)
        offline_times.append(t)
        runs.append(load(args.cli, sentences, reference, args.threads, args.concurrency))
    errors = [e for r in runs for e in r[3]]
    offline_seconds = min(offline_times)
    seconds, cpu, latencies, _, metrics = min(runs, key=lambda r: r[0])  # the fastest pass
    steps = int(re.search(r"^headcount_embed_batch_sentences_count (\d+)$", metrics, re.M).group(1))
    lat = np.array(latencies) * 1000
    result = {
        "sentences": len(sentences), "threads": args.threads, "concurrency": args.concurrency,
        "offline_batch": args.batch, "offline_sentences_per_second": len(sentences) / offline_seconds,
        "offline_seconds_per_round": [round(t, 3) for t in offline_times],
        "http_sentences_per_second": len(sentences) / seconds,
        "http_seconds_per_pass": [round(r[0], 3) for r in runs],
        "ratio": (len(sentences) / seconds) / (len(sentences) / offline_seconds),
        "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
        "load_generator_cpu_seconds": cpu, "scheduler_steps_both_passes": steps,
        "bitwise_errors": len(errors), "host_load_average": os.getloadavg(),
        "self_rusage_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for k, v in result.items():
            print(f"{k:34s} {v}")
    if errors:
        print("errors:", errors[:5], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
