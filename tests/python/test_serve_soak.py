"""A soak test of `headcount serve` with both models, bounded in count and time: 8 client threads
for at most --soak seconds (default 60) or 600 requests, mixing good requests (embeddings; greedy
and seeded completions, streamed and not) with malformed ones (bad JSON, wrong types, unknown
routes, oversized bodies) and abrupt disconnects (mid-stream, mid-body). The server must stay up,
every good answer must be bitwise the offline command's (`embed --format npy`, `generate --json`),
every bad one the documented error, and its VmRSS after the soak at most 5% above its VmRSS after
the warm-up. The mix is drawn from a seeded generator, so a failure names a reproducible
request. Skips only without the models."""

import base64
import json
import os
import random
import socket
import threading
import time

import numpy as np
import pytest

from test_serve import MODEL, NAME as ENCODER, SENTENCES, Server, offline_embeddings
from test_serve_decoder import GGUF, NAME as DECODER, PROMPTS, dechunk, offline

pytestmark = pytest.mark.skipif(not (os.path.isfile(GGUF) and os.path.isdir(MODEL)), reason="no models")
SECONDS = float(os.environ.get("HEADCOUNT_SOAK_SECONDS", "60"))
MAX_REQUESTS = 600
CLIENTS = 8


def vm_rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def raw_request(server, method, path, body=b"", read=True, close_after=None):
    """One request on its own socket; returns (status, body bytes). close_after: bytes of the
    request to send before closing the socket without reading (an abrupt client)."""
    head = (f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    s = socket.create_connection((server.host, server.port), timeout=120)
    try:
        data = head + body
        if close_after is not None:
            s.sendall(data[:close_after])
            return None, b""
        s.sendall(data)
        if not read:
            s.recv(64)  # the first bytes of the answer, then gone
            return None, b""
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    finally:
        s.close()
    status = int(raw.split(b" ", 2)[1])
    headers, _, payload = raw.partition(b"\r\n\r\n")
    return status, dechunk(payload) if b"chunked" in headers.lower() else payload


def test_soak_mixed_load_stays_up_correct_and_bounded_in_memory():
    embeddings = offline_embeddings(SENTENCES)
    completions = {}
    for i, prompt in enumerate(PROMPTS[:6]):
        extra = [] if i % 2 == 0 else ["--temperature", "0.9", "--seed", str(50 + i)]
        completions[prompt] = (offline(prompt, 20, *extra)["text"],
                               {"temperature": 0} if i % 2 == 0 else {"temperature": 0.9, "seed": 50 + i})
    server = Server("--parallel", "4", "--max-body-bytes", "65536",
                    models=("--embedding-model", MODEL, "--model", GGUF))
    failures, counts, lock = [], {}, threading.Lock()
    try:
        server.wait_ready()

        def good_embedding(rng):
            i = rng.randrange(len(SENTENCES))
            status, body = raw_request(server, "POST", "/v1/embeddings", json.dumps(
                {"input": SENTENCES[i], "model": ENCODER, "encoding_format": "base64"}).encode())
            row = np.frombuffer(base64.b64decode(json.loads(body)["data"][0]["embedding"]), dtype="<f4")
            return status == 200 and np.array_equal(row.view(np.uint32), embeddings[i].view(np.uint32))

        def good_completion(rng):
            prompt = rng.choice(list(completions))
            text, options = completions[prompt]
            streamed = rng.random() < 0.5
            status, body = raw_request(server, "POST", "/v1/completions", json.dumps(
                {"model": DECODER, "prompt": prompt, "max_tokens": 20, "stream": streamed, **options}).encode())
            if status != 200:
                return False
            if not streamed:
                return json.loads(body)["choices"][0]["text"] == text
            events = [e[6:] for e in body.decode().split("\n\n") if e.startswith("data: ")]
            return events[-1] == "[DONE]" and "".join(
                json.loads(e)["choices"][0]["text"] for e in events[:-1] if json.loads(e)["choices"]) == text

        def malformed(rng):
            kind = rng.randrange(4)
            if kind == 0:
                status, body = raw_request(server, "POST", "/v1/completions", b'{"model": "x", "prompt": ')
                return status == 400 and json.loads(body)["error"]["code"] == "invalid_json"
            if kind == 1:
                status, body = raw_request(server, "POST", "/v1/chat/completions",
                                           json.dumps({"model": DECODER, "messages": "hi"}).encode())
                return status == 400 and json.loads(body)["error"]["param"] == "messages"
            if kind == 2:
                status, _ = raw_request(server, "GET", "/v2/nothing")
                return status == 404
            status, _ = raw_request(server, "POST", "/v1/embeddings", b"[" + b"1," * 40000 + b"1]")
            return status == 413

        def abrupt(rng):
            body = json.dumps({"model": DECODER, "prompt": rng.choice(PROMPTS), "max_tokens": 200,
                               "stream": True, "temperature": 0}).encode()
            if rng.random() < 0.5:
                raw_request(server, "POST", "/v1/completions", body, read=False)  # leaves mid-stream
            else:
                raw_request(server, "POST", "/v1/completions", body, close_after=60 + rng.randrange(len(body)))
            return True

        actions = [(good_embedding, 0.35), (good_completion, 0.3), (malformed, 0.2), (abrupt, 0.15)]

        # Warm-up: every kind once, then the memory baseline.
        warm = random.Random(0)
        for action, _ in actions:
            assert action(warm), action.__name__
        time.sleep(0.5)
        warm_rss = vm_rss_kib(server.proc.pid)

        end = time.time() + SECONDS
        issued = iter(range(MAX_REQUESTS))

        def client(k):
            rng = random.Random(1000 + k)
            while time.time() < end:
                with lock:
                    n = next(issued, None)
                if n is None:
                    return
                action = rng.choices([a for a, _ in actions], weights=[w for _, w in actions])[0]
                try:
                    ok = action(rng)
                except Exception as e:  # noqa: BLE001 - a failure to report, not to hide
                    ok, action = False, f"{action.__name__}: {e!r}"
                with lock:
                    name = action if isinstance(action, str) else action.__name__
                    counts[name] = counts.get(name, 0) + 1
                    if not ok:
                        failures.append((k, n, name))

        threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(1.0)  # abandoned streams leave at the scheduler's next step
        status, _ = raw_request(server, "GET", "/health")
        soak_rss = vm_rss_kib(server.proc.pid)
        print(f"soak: {sum(counts.values())} requests {counts}; VmRSS {warm_rss} KiB after warm-up, "
              f"{soak_rss} KiB after ({soak_rss / warm_rss:.3f}x)")
        assert status == 200 and server.proc.poll() is None
        assert not failures, failures[:10]
        assert sum(counts.values()) >= 100, counts
        assert soak_rss <= warm_rss * 1.05, (warm_rss, soak_rss)
        # Abandoned streams left their slots: nothing decodes once the clients are gone.
        status, body = raw_request(server, "GET", "/metrics")
        assert "headcount_decoder_running 0" in body.decode()
    finally:
        assert server.stop() == 0
