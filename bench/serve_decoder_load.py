#!/usr/bin/env python3
"""Completions over HTTP: continuous batching measured from the client's side (issue 52's decoder
targets), on loopback, bounded in count and time.

It starts `headcount serve --model FILE.gguf --parallel P --prefill-chunk K --threads T --port 0`.
For each concurrency C in --concurrency, C client threads each send streamed greedy completion
requests (POST /v1/completions, stream true, ignore_eos so every request makes --tokens tokens,
prompts of about 20 tokens) until
--requests-per-client each have finished; every answer's text is checked against `headcount
generate --ignore-eos --json` of the same prompt (the offline bits). Reported per C: aggregate generated
tokens/s (all tokens / wall time of the pass), time to first token (p50, p99), inter-token
latency (p50, p99: the gaps between a stream's events), and the load generator's CPU seconds
(it shares the host's cores with the server).

Then the prefill interference: P - 1 streams decode while one request with a --long-prompt-tokens
prompt arrives; the running streams' longest inter-token gap while it prefills, against their
idle p99. (The server prefills a new prompt whole between two decode steps; a chunked prefill
would bound the gap.)

Usage: .venv/bin/python bench/serve_decoder_load.py [--cli build/headcount] [--model FILE.gguf]
       [--threads 2] [--parallel 4] [--concurrency 1 4 16] [--tokens 128] [--json]
Standard library only.
"""

import argparse
import http.client
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROMPTS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle on a stormy night.",
    "Explain in simple words how a refrigerator keeps food cold, step by step, for a curious child.",
    "List the main causes of the French Revolution and describe each of them in one or two sentences.",
    "Describe a walk through a busy market in the morning: the smells, the sounds and the people.",
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg",
    "A recipe for a simple tomato soup: first, chop two onions and three cloves of garlic, then",
    "In mathematics, a prime number is a natural number greater than one that has no divisors other",
    "Dear hiring manager, I am writing to apply for the position of junior software engineer at your",
]


def percentile(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def offline_text(cli, model, prompt, tokens, threads, ignore_eos=True):
    """`headcount generate --json` of the prompt: the offline bits a served completion must have.
    ignore_eos as the requests: serve_peers.py's stop at EOS (llama-cpp-python has no ignore_eos)."""
    out = subprocess.run([cli, "generate", "--model", model, "--prompt", prompt, "--max-tokens", str(tokens),
                          "--threads", str(threads), "--json"] + (["--ignore-eos"] if ignore_eos else []),
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def stream_completion(host, port, model, prompt, tokens, **fields):
    """One streamed greedy POST /v1/completions (plus `fields`, e.g. ignore_eos=True), read as its
    server-sent events arrive: (text, completion tokens, where they were counted: "usage", or
    "events" for a server that sends no usage, event times from the request, total seconds).
    The one client of this script and of serve_peers.py, for every server."""
    c = http.client.HTTPConnection(host, port, timeout=600)
    body = {"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, **fields}
    start = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    text, times, usage, counted, events = [], [], None, "usage", 0
    while True:
        line = r.fp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[len(b"data: "):]
        if data == b"[DONE]":
            break
        event = json.loads(data)
        if event.get("usage"):
            usage = event["usage"]["completion_tokens"]
        for choice in event.get("choices") or []:
            if choice.get("text"):
                text.append(choice["text"])
                times.append(time.perf_counter() - start)
                events += 1
    total = time.perf_counter() - start
    c.close()
    if usage is None:
        usage, counted = events, "events"
    return "".join(text), usage, counted, times, total


class ServerProcess:
    def __init__(self, cli, model, threads, parallel, prefill_chunk):
        self.proc = subprocess.Popen([cli, "serve", "--model", model, "--port", "0", "--threads", str(threads),
                                      "--parallel", str(parallel), "--prefill-chunk", str(prefill_chunk),
                                      "--max-queue", "1024"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        m = re.search(r"listening on http://([0-9.]+):(\d+)", self.proc.stderr.readline())
        self.host, self.port = m.group(1), int(m.group(2))
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()
        for _ in range(600):
            c = http.client.HTTPConnection(self.host, self.port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                break
            time.sleep(0.05)
        self.name = os.path.basename(model)[:-len(".gguf")]

    def stream(self, prompt, tokens):
        """(text, completion tokens, event times) of one streamed greedy completion to max_tokens."""
        text, usage, _, times, _ = stream_completion(self.host, self.port, self.name, prompt, tokens, ignore_eos=True)
        return text, usage, times

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def run_pass(server, concurrency, per_client, tokens, references):
    results, lock = [], threading.Lock()

    def client(k):
        for i in range(per_client):
            p = PROMPTS[(k * per_client + i) % len(PROMPTS)]
            text, n, times = server.stream(p, tokens)
            with lock:
                results.append((p, text, n, times))

    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    wrong = sum(text != references[p]["text"] for p, text, _, _ in results)
    generated = sum(n for _, _, n, _ in results)
    ttft = [times[0] for _, _, _, times in results if times]
    gaps = [b - a for _, _, _, times in results for a, b in zip(times, times[1:])]
    return {"concurrency": concurrency, "requests": len(results), "wrong": wrong, "generated": generated,
            "seconds": wall, "tokens_per_second": generated / wall,
            "ttft_p50": percentile(ttft, 50), "ttft_p99": percentile(ttft, 99),
            "itl_p50": percentile(gaps, 50), "itl_p99": percentile(gaps, 99),
            "client_cpu_seconds": cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime}


def prefill_interference(server, parallel, long_tokens):
    """The inter-token gaps of parallel - 1 running streams: before a long prompt arrives (idle),
    and those that overlap its prefill (from its arrival to its first token)."""
    long_prompt = " ".join(["word"] * long_tokens)
    streams = []

    def run(p):
        began = time.perf_counter()
        _, _, times = server.stream(p, 400)
        streams.append([began + t for t in times])

    background = [threading.Thread(target=run, args=(PROMPTS[k],)) for k in range(parallel - 1)]
    for t in background:
        t.start()
    time.sleep(1.0)
    arrival = time.perf_counter()
    _, _, times = server.stream(long_prompt, 4)
    first = arrival + times[0]
    for t in background:
        t.join()
    idle, during = [], []
    for times in streams:
        for a, b in zip(times, times[1:]):
            if b <= arrival:
                idle.append(b - a)
            elif a < first:
                during.append(b - a)
    return {"long_prompt_tokens": long_tokens, "long_ttft": first - arrival,
            "idle_itl_p50": percentile(idle, 50), "idle_itl_p99": percentile(idle, 99),
            "during_prefill_gaps": len(during),
            "during_prefill_itl_p99": percentile(during, 99),
            "during_prefill_itl_max": max(during) if during else float("nan")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "headcount"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--prefill-chunk", type=int, default=32)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--long-prompt-tokens", type=int, default=512)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    references = {p: offline_text(a.cli, a.model, p, a.tokens, a.threads) for p in PROMPTS}
    one_stream = statistics.median(r["decode_tokens_per_second"] for r in references.values())
    server = ServerProcess(a.cli, a.model, a.threads, a.parallel, a.prefill_chunk)
    try:
        server.stream(PROMPTS[0], 8)  # warm-up
        passes = [run_pass(server, c, a.requests_per_client, a.tokens, references) for c in a.concurrency]
        interference = prefill_interference(server, a.parallel, a.long_prompt_tokens)
    finally:
        server.stop()
    report = {"model": os.path.basename(a.model), "threads": a.threads, "parallel": a.parallel,
              "prefill_chunk": a.prefill_chunk, "tokens": a.tokens,
              "offline_one_stream_decode_tokens_per_second": one_stream, "passes": passes,
              "prefill_interference": interference}
    if a.json:
        print(json.dumps(report, indent=1))
        return
    print(f"offline generate, one stream: {one_stream:.1f} decode tokens/s (median over {len(PROMPTS)} prompts)")
    print("| concurrency | requests | wrong | tokens/s (aggregate) | x one stream offline | TTFT p50 / p99 (s) "
          "| inter-token p50 / p99 (ms) | client CPU s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in passes:
        print(f"| {p['concurrency']} | {p['requests']} | {p['wrong']} | {p['tokens_per_second']:.1f} | "
              f"{p['tokens_per_second'] / one_stream:.2f} | {p['ttft_p50']:.3f} / {p['ttft_p99']:.3f} | "
              f"{1e3 * p['itl_p50']:.1f} / {1e3 * p['itl_p99']:.1f} | {p['client_cpu_seconds']:.1f} |")
    i = interference
    print(f"prefill interference: a {i['long_prompt_tokens']}-token prompt arriving while {a.parallel - 1} streams run: "
          f"its first token after {i['long_ttft']:.3f} s; the streams' inter-token gap idle p50 "
          f"{1e3 * i['idle_itl_p50']:.1f} ms, p99 {1e3 * i['idle_itl_p99']:.1f} ms; over the prefill "
          f"({i['during_prefill_gaps']} gaps) p99 {1e3 * i['during_prefill_itl_p99']:.1f} ms "
          f"({i['during_prefill_itl_p99'] / i['idle_itl_p99']:.1f}x idle p99), max {1e3 * i['during_prefill_itl_max']:.1f} ms")
    sys.exit(1 if any(p["wrong"] for p in passes) else 0)


if __name__ == "__main__":
    main()
