#!/usr/bin/env python3
"""headcount serve against the serving peers (issue 52, item 4): the same client code and the same
request list sent to each server in turn, in one run, on loopback, bounded in count and time.

Servers (each started by this script on a free 127.0.0.1 port, measured, then stopped; the peers
come from bench/peers/setup_serve_peers.sh, and a peer that is not there is reported as skipped):
  decoder     headcount serve --model GGUF --parallel P --threads T
              llama-server -m GGUF -np P -t T      (llama.cpp inside llama-cpp-python 0.3.36's sdist)
              python -m llama_cpp.server --n_threads T  (llama-cpp-python[server] on that build's libllama)
  embeddings  headcount serve --embedding-model DIR --threads T
              infinity_emb v2 --engine torch       (OMP_NUM_THREADS=T, HF_HUB_OFFLINE=1)
              infinity_emb v2 --engine optimum     (the same weights exported to ONNX by setup)

For each concurrency C (1 4 16 64), C client threads take requests from one shared list until it
is empty:
  decoder     streamed greedy completions (POST /v1/completions, temperature 0, max_tokens
              --tokens, serve_decoder_load.py's eight prompts in turn; max(C, 8) requests), after
              one untimed request. Reported: aggregate generated tokens/s (the completion tokens of
              each server's usage field over the pass's wall time), time to first token and request
              latency (p50, p99), inter-token gap p50. Every text is compared with `headcount
              generate --json` of its prompt: headcount's must match (it is bitwise by design), the
              peers' matches are counted as an aside.
  embeddings  one STS-B test sentence per POST /v1/embeddings request (base64), each client on its
              own keep-alive connection, --sentences sentences per pass after an untimed warm-up of
              64. Reported: sentences/s and request latency (p50, p99). headcount's vectors are
              checked bitwise against `headcount embed`, the peers' by cosine against them.
The load generator's CPU seconds are reported per pass: it shares the host's cores with the server.

Usage: .venv/bin/python bench/serve_peers.py [--cli build/headcount] [--part decoder embeddings]
         [--servers NAME ...] [--concurrency 1 4 16 64] [--json-out F.json] [--svg F.svg]
       .venv/bin/python bench/serve_peers.py --report A.json [B.json ...] [--svg F.svg]
Standard library and numpy only (the peers run in their own processes).
"""

import argparse
import base64
import http.client
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_decoder_load import PROMPTS, offline_text, percentile  # noqa: E402
from serve_decoder_load import stream_completion as shared_stream_completion  # noqa: E402
from serve_load import read_sentences  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PEERS = os.path.join(ROOT, "bench", "peers")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process on a free loopback port; ready once GET `health` answers 200."""

    def __init__(self, name, argv, env=None, ready_s=300, health="/health", cwd=None):
        self.name, self.host, self.port = name, "127.0.0.1", free_port()
        argv = [a.replace("{port}", str(self.port)) for a in argv]
        self.log = tempfile.NamedTemporaryFile("w+", prefix="serve_peers-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     cwd=cwd, start_new_session=True)
        t0 = time.perf_counter()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({self.proc.returncode}): {self.tail()}")
            if time.perf_counter() - t0 > ready_s:
                self.stop()
                raise RuntimeError(f"{name} not ready after {ready_s} s: {self.tail()}")
            try:
                status, _ = self.get(health)
                if status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        self.ready_s = time.perf_counter() - t0
        status, body = self.get("/v1/models")
        self.model = json.loads(body)["data"][0]["id"]

    def tail(self):
        self.log.flush()
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()[-1500:]

    def get(self, path):
        c = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def rss_mib(self):
        """Resident memory of the server's process group (infinity runs workers), MiB."""
        total = 0
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                if os.getpgid(int(p)) != self.proc.pid:
                    continue
                with open(f"/proc/{p}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1])
            except (OSError, ProcessLookupError):
                pass
        return total / 1024

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass
        os.unlink(self.log.name)


# ---- the one client, for every server (serve_decoder_load.py's) ------------------------------

def stream_completion(server, prompt, tokens):
    """(text, completion tokens, where they were counted, event times, total seconds)."""
    try:
        return shared_stream_completion(server.host, server.port, server.model, prompt, tokens)
    except RuntimeError as e:
        raise RuntimeError(f"{server.name}: {e}") from None


def decoder_pass(server, concurrency, requests, tokens, references):
    todo = [PROMPTS[i % len(PROMPTS)] for i in range(requests)]
    results, lock = [], threading.Lock()

    def client():
        while True:
            with lock:
                if not todo:
                    return
                p = todo.pop(0)
            out = stream_completion(server, p, tokens)
            with lock:
                results.append((p,) + out)

    cpu0, start = time.process_time(), time.perf_counter()
    workers = [threading.Thread(target=client) for _ in range(concurrency)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    generated = sum(r[2] for r in results)
    ttft = [r[4][0] for r in results if r[4]]
    total = [r[5] for r in results]
    gaps = [b - a for r in results for a, b in zip(r[4], r[4][1:])]
    return {"concurrency": concurrency, "requests": len(results), "generated": generated,
            "counted_by": sorted({r[3] for r in results}), "seconds": wall, "tokens_per_second": generated / wall,
            "ttft_p50": percentile(ttft, 50), "ttft_p99": percentile(ttft, 99),
            "latency_p50": percentile(total, 50), "latency_p99": percentile(total, 99),
            "itl_p50": percentile(gaps, 50), "matches_generate": sum(r[1] == references[r[0]]["text"] for r in results),
            "client_cpu_seconds": cpu}


def embed_pass(server, sentences, concurrency, reference=None, bitwise=False):
    latencies, rows, errors = [None] * len(sentences), [None] * len(sentences), []
    next_index, lock = [0], threading.Lock()

    def client():
        conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= len(sentences):
                conn.close()
                return
            body = json.dumps({"input": sentences[i], "model": server.model, "encoding_format": "base64"})
            start = time.perf_counter()
            try:
                conn.request("POST", "/v1/embeddings", body=body, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                latencies[i] = time.perf_counter() - start
                if r.status != 200:
                    errors.append((i, r.status, data[:200]))
                    continue
                emb = json.loads(data)["data"][0]["embedding"]
                rows[i] = (np.frombuffer(base64.b64decode(emb), dtype="<f4") if isinstance(emb, str)
                           else np.asarray(emb, dtype=np.float32))
            except Exception as e:  # noqa: BLE001 - a failed request is counted, not fatal
                errors.append((i, type(e).__name__, str(e)[:200]))
                conn.close()
                conn = http.client.HTTPConnection(server.host, server.port, timeout=30)

    cpu0, start = time.process_time(), time.perf_counter()
    workers = [threading.Thread(target=client) for _ in range(concurrency)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    out = {"concurrency": concurrency, "sentences": len(sentences), "seconds": wall,
           "sentences_per_second": len(sentences) / wall, "errors": len(errors),
           "latency_p50": percentile([x for x in latencies if x is not None], 50),
           "latency_p99": percentile([x for x in latencies if x is not None], 99),
           "client_cpu_seconds": cpu}
    if errors:
        out["first_error"] = repr(errors[0])
    elif reference is not None:
        got = np.stack(rows)
        if bitwise:
            out["bitwise_equal_embed"] = int(sum(np.array_equal(g.view(np.uint32), r.view(np.uint32))
                                                 for g, r in zip(got, reference)))
        g = got / np.linalg.norm(got, axis=1, keepdims=True)
        out["min_cosine_to_embed"] = float(np.min(np.sum(g * reference, axis=1)))
    return out


# ---- the servers ---------------------------------------------------------------------------------

def decoder_servers(a):
    llama = os.path.join(PEERS, ".llama-server", "build", "bin", "llama-server")
    yield "headcount", lambda: Server("headcount", [a.cli, "serve", "--model", a.model, "--port", "{port}",
                                                    "--threads", str(a.threads), "--parallel", str(a.parallel),
                                                    "--max-queue", "1024"])
    if os.access(llama, os.X_OK):
        # -c: room for every slot's prompt and tokens; llama-server's own defaults otherwise
        # (continuous batching on, its slots' prompt cache on, as users run it).
        yield "llama-server", lambda: Server("llama-server", [
            llama, "-m", a.model, "-np", str(a.parallel), "-t", str(a.threads), "-tb", str(a.threads),
            "-c", str(a.parallel * 2048), "--host", "127.0.0.1", "--port", "{port}"])
    else:
        yield "llama-server", None
    venv_python = os.path.join(PEERS, ".venv-llamacpp-server", "bin", "python")
    if os.access(llama, os.X_OK) and os.access(venv_python, os.X_OK):
        # One Llama object behind a lock: requests are served one at a time (no slots). By default
        # (interrupt_requests) a new request cuts the streaming one short; here each waits its turn.
        env = dict(os.environ, LLAMA_CPP_LIB_PATH=os.path.dirname(llama))
        yield "llama-cpp-python", lambda: Server("llama-cpp-python", [
            venv_python, "-m", "llama_cpp.server", "--model", a.model, "--n_threads", str(a.threads),
            "--n_threads_batch", str(a.threads), "--n_ctx", "2048", "--interrupt_requests", "False", "--host", "127.0.0.1",
            "--port", "{port}"],
            env=env, health="/v1/models")
    else:
        yield "llama-cpp-python", None


def embedding_servers(a):
    venv_python = os.path.join(PEERS, ".venv-infinity", "bin", "python")
    installed = os.access(venv_python, os.X_OK) and subprocess.run(
        [venv_python, "-c", "import importlib.util as u; assert u.find_spec('infinity_emb')"],
        capture_output=True).returncode == 0
    yield "headcount", lambda: Server("headcount", [a.cli, "serve", "--embedding-model", a.embedding_model,
                                                    "--port", "{port}", "--threads", str(a.threads),
                                                    "--max-connections", "128", "--max-queue", "1024"])
    for engine in ("torch", "optimum"):
        name = f"infinity-emb {engine}"
        if not installed:
            yield name, None
            continue
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS=str(a.threads),
                   MKL_NUM_THREADS=str(a.threads), INFINITY_ANONYMOUS_USAGE_STATS="0", DO_NOT_TRACK="1")
        # The optimum engine reads a model.onnx in the model's directory: setup_serve_peers.sh
        # exports the same local weights there. infinity 0.0.78 hands optimum 2.x that file's path
        # where optimum matches a file name, which agree only for a model directory given as ".":
        # so it runs from that directory, its ORT-optimized copy in a cache of its own. Its pooling
        # is named (MiniLM's mean pooling): left to "auto" it took the [CLS] row (cosine 0.48 to
        # the model's own sentence embeddings).
        model_dir, cwd = (a.embedding_model, None) if engine == "torch" else (".", a.onnx_model)
        if engine == "optimum":
            env["HF_HUB_CACHE"] = os.path.join(PEERS, ".infinity-hf-cache")
        yield name, (lambda env=env, engine=engine, name=name, model_dir=model_dir, cwd=cwd: Server(name, [
            venv_python, "-m", "infinity_emb.cli", "v2", "--model-id", model_dir, "--engine", engine,
            "--device", "cpu", "--url-prefix", "/v1", "--host", "127.0.0.1", "--port", "{port}",
            "--no-model-warmup"] + (["--pooling-method", "mean"] if engine == "optimum" else []),
            env=env, ready_s=600, cwd=cwd))


def run_decoder(a, log):
    log(f"decoder: references from headcount generate --json ({len(PROMPTS)} prompts, {a.tokens} tokens)")
    references = {p: offline_text(a.cli, a.model, p, a.tokens, a.threads, ignore_eos=False) for p in PROMPTS}
    out = []
    for name, start in decoder_servers(a):
        if a.servers and name not in a.servers:
            continue
        if start is None:
            out.append({"server": name, "skipped": "not built (bench/peers/setup_serve_peers.sh)"})
            log(f"decoder: {name} skipped")
            continue
        try:
            server = start()
        except RuntimeError as e:
            out.append({"server": name, "skipped": str(e)[:600]})
            log(f"decoder: {name} failed to start: {e}")
            continue
        try:
            stream_completion(server, PROMPTS[0], 8)  # warm-up
            passes = []
            for c in a.concurrency:
                passes.append(decoder_pass(server, c, max(c, len(PROMPTS)) if a.requests is None else a.requests,
                                           a.tokens, references))
                p = passes[-1]
                log(f"decoder: {name} C={c}: {p['tokens_per_second']:.1f} tokens/s, TTFT p50 {p['ttft_p50']:.3f} s, "
                    f"{p['matches_generate']}/{p['requests']} match generate")
            out.append({"server": name, "model_id": server.model, "ready_seconds": server.ready_s,
                        "rss_mib": server.rss_mib(), "passes": passes})
        finally:
            server.stop()
        if a.json_out:  # what is done so far, should a later server hang past the run's bound
            with open(a.json_out + ".partial", "w") as f:
                json.dump({"decoder": {"model": os.path.basename(a.model), "threads": a.threads,
                                       "parallel": a.parallel, "tokens": a.tokens, "servers": out}}, f, indent=1)
    return out


def run_embeddings(a, log):
    sentences = read_sentences(a.sts, 0)
    sentences = sentences[:a.sentences]
    log(f"embeddings: reference from headcount embed ({len(sentences)} sentences of {os.path.basename(a.sts)})")
    with tempfile.TemporaryDirectory() as d:
        src, npy = os.path.join(d, "in.txt"), os.path.join(d, "out.npy")
        with open(src, "w", encoding="utf-8") as f:
            f.write("\n".join(sentences) + "\n")
        subprocess.run([a.cli, "embed", src, "--model", a.embedding_model, "--format", "npy", "--out", npy,
                        "--threads", str(a.threads)], check=True, capture_output=True)
        reference = np.load(npy)
    out = []
    for name, start in embedding_servers(a):
        if a.servers and name not in a.servers:
            continue
        if start is None:
            out.append({"server": name, "skipped": "not installed (bench/peers/setup_serve_peers.sh)"})
            log(f"embeddings: {name} skipped")
            continue
        try:
            server = start()
        except RuntimeError as e:
            out.append({"server": name, "skipped": str(e)[:600]})
            log(f"embeddings: {name} failed to start: {e}")
            continue
        try:
            passes = []
            for c in a.concurrency:
                warm = embed_pass(server, sentences[:64], c)  # warm-up: connections, batch shapes
                if warm["errors"]:
                    raise RuntimeError(f"warm-up failed: {warm['first_error']}")
                p = embed_pass(server, sentences, c, reference, bitwise=name == "headcount")
                passes.append(p)
                log(f"embeddings: {name} C={c}: {p['sentences_per_second']:.1f} sentences/s, "
                    f"p50 {1e3 * p['latency_p50']:.1f} ms, errors {p['errors']}")
            out.append({"server": name, "model_id": server.model, "ready_seconds": server.ready_s,
                        "rss_mib": server.rss_mib(), "passes": passes})
        except RuntimeError as e:
            out.append({"server": name, "skipped": str(e)[:600]})
            log(f"embeddings: {name}: {e}")
        finally:
            server.stop()
    return out


# ---- the report ----------------------------------------------------------------------------------

def one_line(text, limit=200):
    return " ".join(str(text).split()).replace("|", "/")[:limit]


def markdown(result):
    lines = []
    dec = result.get("decoder")
    if dec:
        lines += [f"Decoder: {dec['model']}, {dec['threads']} threads, {dec['parallel']} slots, streamed greedy "
                  f"completions of at most {dec['tokens']} tokens (max(C, 8) requests per pass).", "",
                  "| server | C | requests | tokens/s (aggregate) | TTFT p50 / p99 (s) | latency p50 / p99 (s) "
                  "| inter-token p50 (ms) | = generate | client CPU s |", "| --- | --- | --- | --- | --- | --- | --- "
                  "| --- | --- |"]
        for s in dec["servers"]:
            if "skipped" in s:
                lines.append(f"| {s['server']} | skipped: {one_line(s['skipped'])} | | | | | | | |")
                continue
            for p in s["passes"]:
                lines.append(f"| {s['server']} | {p['concurrency']} | {p['requests']} | {p['tokens_per_second']:.1f} "
                             f"| {p['ttft_p50']:.3f} / {p['ttft_p99']:.3f} | {p['latency_p50']:.2f} / "
                             f"{p['latency_p99']:.2f} | {1e3 * p['itl_p50']:.1f} | {p['matches_generate']}/"
                             f"{p['requests']} | {p['client_cpu_seconds']:.1f} |")
        for peer in ("llama-server", "llama-cpp-python"):
            ratios = ratio_line(dec["servers"], "headcount", [peer], "tokens_per_second")
            if ratios:
                lines += ["", f"headcount / {peer}, aggregate tokens/s: " + ratios]
        lines.append("")
    emb = result.get("embeddings")
    if emb:
        lines += [f"Embeddings: {emb['model']}, {emb['threads']} threads, {emb['sentences']} single-sentence "
                  f"requests per pass ({emb['source']}).", "",
                  "| server | C | sentences/s | latency p50 / p99 (ms) | errors | check | client CPU s |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for s in emb["servers"]:
            if "skipped" in s:
                lines.append(f"| {s['server']} | skipped: {one_line(s['skipped'])} | | | | | |")
                continue
            for p in s["passes"]:
                check = (f"{p['bitwise_equal_embed']}/{p['sentences']} bitwise embed" if "bitwise_equal_embed" in p
                         else f"min cos {p['min_cosine_to_embed']:.6f}" if "min_cosine_to_embed" in p else "-")
                lines.append(f"| {s['server']} | {p['concurrency']} | {p['sentences_per_second']:.1f} | "
                             f"{1e3 * p['latency_p50']:.1f} / {1e3 * p['latency_p99']:.1f} | {p['errors']} | {check} "
                             f"| {p['client_cpu_seconds']:.1f} |")
        ratios = ratio_line(emb["servers"], "headcount", ["infinity-emb torch", "infinity-emb optimum"],
                            "sentences_per_second")
        if ratios:
            lines += ["", "headcount / the faster infinity-emb engine, sentences/s: " + ratios]
        lines.append("")
    return "\n".join(lines)


def ratio_line(servers, ours, peers, key):
    by = {s["server"]: {p["concurrency"]: p for p in s["passes"]} for s in servers if "passes" in s}
    if ours not in by or not any(p in by for p in peers):
        return ""
    parts = []
    for c, p in sorted(by[ours].items()):
        best = max((by[q][c][key] for q in peers if q in by and c in by[q] and not by[q][c].get("errors")),
                   default=None)
        if best:
            parts.append(f"C={c}: {p[key] / best:.2f}x")
    return ", ".join(parts)


def svg(result):
    """Throughput and latency against concurrency, one panel each, log2 x axis."""
    panels = []
    if result.get("decoder"):
        panels += [("decoder: generated tokens/s", result["decoder"], "tokens_per_second", 1, False),
                   ("decoder: time to first token p50 (s)", result["decoder"], "ttft_p50", 1, True)]
    if result.get("embeddings"):
        panels += [("embeddings: sentences/s", result["embeddings"], "sentences_per_second", 1, False),
                   ("embeddings: latency p50 (ms)", result["embeddings"], "latency_p50", 1e3, True)]
    colors = {"headcount": "#d62728", "llama-server": "#1f77b4", "llama-cpp-python": "#17becf",
              "infinity-emb torch": "#1f77b4", "infinity-emb optimum": "#2ca02c"}
    W, H, pw, ph, ml, mt = 460, 300, 340, 200, 70, 40
    cols = 2
    rows = (len(panels) + 1) // 2
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W * cols}" height="{H * rows}" '
           f'font-family="sans-serif" font-size="11">', '<rect width="100%" height="100%" fill="white"/>']
    for k, (title, part, key, scale, logy) in enumerate(panels):
        ox, oy = (k % cols) * W + ml, (k // cols) * H + mt
        series = [(s["server"], [(p["concurrency"], p[key] * scale) for p in s["passes"]
                                 if p.get(key) == p.get(key) and p.get(key)]) for s in part["servers"]
                  if "passes" in s]
        cs = sorted({c for _, pts in series for c, _ in pts})
        ys = [y for _, pts in series for _, y in pts]
        if not cs or not ys:
            continue
        xmin, xmax = np.log2(cs[0]), max(np.log2(cs[-1]), np.log2(cs[0]) + 1)
        if logy:
            ylo, yhi = np.floor(np.log10(min(ys))), np.ceil(np.log10(max(ys)))
            yhi = max(yhi, ylo + 1)
            fy = lambda y: oy + ph - (np.log10(y) - ylo) / (yhi - ylo) * ph  # noqa: E731
            ticks = [10 ** e for e in np.arange(ylo, yhi + 1)]
        else:
            top = max(ys) * 1.1
            fy = lambda y: oy + ph - y / top * ph  # noqa: E731
            base = 10 ** np.floor(np.log10(top / 5))
            step = next(base * m for m in (1, 2, 5, 10) if top / (base * m) <= 8)
            ticks = list(np.arange(0, top, step))
        fx = lambda c: ox + (np.log2(c) - xmin) / (xmax - xmin) * pw  # noqa: E731
        out.append(f'<text x="{ox + pw / 2}" y="{oy - 15}" text-anchor="middle" font-size="13">{title}</text>')
        out.append(f'<rect x="{ox}" y="{oy}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
        for t in ticks:
            y = fy(t)
            out.append(f'<line x1="{ox}" x2="{ox + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{ox - 5}" y="{y + 4:.1f}" text-anchor="end">{t:g}</text>')
        for c in cs:
            out.append(f'<text x="{fx(c):.1f}" y="{oy + ph + 15}" text-anchor="middle">{c}</text>')
        out.append(f'<text x="{ox + pw / 2}" y="{oy + ph + 30}" text-anchor="middle">concurrent clients</text>')
        for j, (name, pts) in enumerate(series):
            color = colors.get(name, "#7f7f7f")
            d = " ".join(f"{'M' if i == 0 else 'L'}{fx(c):.1f},{fy(y):.1f}" for i, (c, y) in enumerate(pts))
            out.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="2"/>')
            out += [f'<circle cx="{fx(c):.1f}" cy="{fy(y):.1f}" r="3" fill="{color}"/>' for c, y in pts]
            out.append(f'<text x="{ox + 8}" y="{oy + 14 + 13 * j}" fill="{color}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "headcount"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--embedding-model", default=os.path.join(ROOT, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--onnx-model", default=os.path.join(PEERS, ".infinity-minilm-onnx"),
                    help="the encoder exported to ONNX, for infinity-emb's optimum engine")
    ap.add_argument("--sts", default=None, help="STS-B test TSV (default: ../shared/data/stsb/sts-test.tsv if "
                    "present, else tests/testdata/heads/sts-pairs.tsv)")
    ap.add_argument("--part", nargs="+", default=["decoder", "embeddings"], choices=["decoder", "embeddings"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--requests", type=int, default=None, help="completions per pass (default max(C, 8))")
    ap.add_argument("--sentences", type=int, default=1024)
    ap.add_argument("--servers", nargs="+", help="only these servers (names as in the tables)")
    ap.add_argument("--json-out")
    ap.add_argument("--svg")
    ap.add_argument("--report", nargs="+", help="print the tables (and --svg) of earlier --json-out files")
    a = ap.parse_args()

    if a.report:
        result = {}
        for f in a.report:
            result.update({k: v for k, v in json.load(open(f)).items() if v})
    else:
        if a.sts is None:
            shared = os.path.join(ROOT, "..", "shared", "data", "stsb", "sts-test.tsv")
            a.sts = shared if os.path.exists(shared) else os.path.join(ROOT, "tests", "testdata", "heads",
                                                                       "sts-pairs.tsv")
        a.model, a.embedding_model = os.path.abspath(a.model), os.path.abspath(a.embedding_model)
        a.onnx_model = os.path.abspath(a.onnx_model)
        t0 = time.perf_counter()

        def log(msg):
            print(f"[{time.perf_counter() - t0:6.1f} s] {msg}", file=sys.stderr, flush=True)

        result = {"host": {"cpu": cpu_name(), "cores": os.cpu_count(), "machine": platform.machine()},
                  "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        if "decoder" in a.part:
            result["decoder"] = {"model": os.path.basename(a.model), "threads": a.threads, "parallel": a.parallel,
                                 "tokens": a.tokens, "servers": run_decoder(a, log)}
        if "embeddings" in a.part:
            result["embeddings"] = {"model": os.path.basename(a.embedding_model), "threads": a.threads,
                                    "sentences": a.sentences, "source": os.path.basename(a.sts),
                                    "servers": run_embeddings(a, log)}
        result["seconds"] = time.perf_counter() - t0
        if a.json_out:
            with open(a.json_out, "w") as f:
                json.dump(result, f, indent=1)
    print(markdown(result))
    if a.svg:
        with open(a.svg, "w") as f:
            f.write(svg(result))


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    main()
