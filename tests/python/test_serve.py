"""`headcount serve` as users run it: the real binary on a loopback port, driven by the `openai`
Python package, by curl and by plain HTTP. Every embedding is compared bitwise with
`headcount embed --format npy` for the same text (floats and base64 alike, alone and under
concurrent load), and every limit and fault of docs/serve.md is provoked once. Needs the built CLI
($HEADCOUNT_CLI, set by scripts/check_python.sh, else build/headcount) and the model directory
scripts/setup.sh fills; skips only without the model."""

import base64
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLI = os.environ.get("HEADCOUNT_CLI", os.path.join(ROOT, "build", "headcount"))
MODEL = os.environ.get("HEADCOUNT_MODEL", os.path.join(ROOT, "models", "all-MiniLM-L6-v2"))
NAME = os.path.basename(os.path.normpath(MODEL))
KEY = "test-key-0123456789"
pytestmark = pytest.mark.skipif(not os.path.isfile(os.path.join(MODEL, "model.safetensors")),
                                reason="no model: run scripts/setup.sh")

# Real sentences (the committed STS pairs of tests/testdata/heads), plus accents, CJK, an empty
# line, and punctuation runs.
PAIRS = [line.rstrip("\n").split("\t") for line in open(os.path.join(ROOT, "tests", "testdata", "heads", "sts-pairs.tsv"),
                                                        encoding="utf-8") if line.count("\t") >= 6]
SENTENCES = [p[5] for p in PAIRS] + [p[6] for p in PAIRS] + [
    "Café crème, s'il vous plaît!", "机器学习 is fun", "", "Wait... what?!?", "x" * 40]
# More than MiniLM's 256 tokens: each "word" below is its own token.
LONG = " ".join(["token"] * 400)


def offline_embeddings(texts, *extra):
    """`headcount embed --format npy` for `texts` (one per line): the reference bits."""
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "in.txt"), os.path.join(d, "out.npy")
        with open(src, "w", encoding="utf-8") as f:
            f.write("\n".join(texts) + "\n")
        subprocess.run([CLI, "embed", src, "--model", MODEL, "--format", "npy", "--out", out, "--threads", "2", *extra],
                       check=True, capture_output=True)
        return np.load(out)


class Server:
    """One `headcount serve` process on a free loopback port (--port 0: the port it printed)."""

    def __init__(self, *args, env=None, models=("--embedding-model", MODEL)):
        threads = [] if "--threads" in args else ["--threads", "2"]
        self.proc = subprocess.Popen([CLI, "serve", *models, "--port", "0", *threads, *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        self.log = []
        line = self.proc.stderr.readline()
        self.log.append(line)
        m = re.search(r"listening on http://([0-9.]+):(\d+)", line)
        assert m, f"no listening line: {line!r}"
        self.host, self.port = m.group(1), int(m.group(2))
        # The rest of stderr, drained so the server never blocks on a full pipe.
        self.reader = threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True)
        self.reader.start()

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    def request(self, method, path, body=None, headers=None, key=KEY, timeout=60):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        h = dict(headers or {})
        if key:
            h["Authorization"] = f"Bearer {key}"
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, dict(r.getheaders()), data

    def wait_ready(self, seconds=60):
        statuses = []
        end = time.time() + seconds
        while time.time() < end:
            status, _, _ = self.request("GET", "/health", key=None)
            statuses.append(status)
            if status == 200:
                return statuses
            time.sleep(0.002)
        raise AssertionError(f"/health never 200: {statuses[-5:]}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
        self.reader.join(timeout=5)
        return self.proc.returncode


@pytest.fixture(scope="module")
def reference():
    return offline_embeddings(SENTENCES)


@pytest.fixture(scope="module")
def server():
    s = Server("--api-key", KEY, "--max-body-bytes", "65536", "--max-queue", "64")
    statuses = s.wait_ready()
    s.first_health = statuses
    yield s
    assert s.stop() == 0, "".join(s.log)


def openai_client(server, key=KEY):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=60)


def error_of(data):
    body = json.loads(data)
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


def as_f32(rows):
    return np.array(rows, dtype=np.float64).astype(np.float32)


def test_health_and_startup(server):
    # Bound to loopback unless --host says otherwise.
    assert server.host == "127.0.0.1"
    # /health answers while the model loads (503; loading takes 0.1-0.3 s, the first poll comes
    # within milliseconds of the listening line) and 200 after; never 200 then 503.
    s = server.first_health
    assert s[0] == 503 and s[-1] == 200 and all(x in (200, 503) for x in s) and s == sorted(s, reverse=True)
    status, _, data = server.request("GET", "/health", key=None)
    assert status == 200 and json.loads(data) == {"status": "ok"}


def test_openai_client_float_and_base64_are_the_offline_bits(server, reference):
    client = openai_client(server)
    got = client.embeddings.create(input=SENTENCES, model=NAME, encoding_format="float")
    assert [d.index for d in got.data] == list(range(len(SENTENCES)))
    floats = as_f32([d.embedding for d in got.data])
    assert floats.shape == reference.shape == (len(SENTENCES), 384)
    assert np.array_equal(floats.view(np.uint32), reference.view(np.uint32))
    assert got.model == NAME and got.usage.prompt_tokens == got.usage.total_tokens > len(SENTENCES) * 2
    # The client's default asks for base64 and decodes it (little-endian float32).
    default = client.embeddings.create(input=SENTENCES[0], model=NAME)
    assert np.array_equal(as_f32(default.data[0].embedding).view(np.uint32), reference[0].view(np.uint32))
    # Raw base64 over plain HTTP: the same bytes.
    status, _, data = server.request("POST", "/v1/embeddings",
                                     {"input": SENTENCES[:5], "model": NAME, "encoding_format": "base64"})
    assert status == 200
    rows = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in json.loads(data)["data"]]
    assert np.array_equal(np.stack(rows).view(np.uint32), reference[:5].view(np.uint32))


def test_models_route(server):
    models = openai_client(server).models.list()
    assert [m.id for m in models.data] == [NAME]


def test_tei_embed_normalize_and_tokenize(server, reference):
    status, _, data = server.request("POST", "/embed", {"inputs": SENTENCES[3]})
    assert status == 200 and np.array_equal(as_f32(json.loads(data)).view(np.uint32), reference[3:4].view(np.uint32))
    status, _, data = server.request("POST", "/embed", {"inputs": SENTENCES[:4], "normalize": False})
    plain = offline_embeddings(SENTENCES[:4], "--no-normalize")
    assert status == 200 and np.array_equal(as_f32(json.loads(data)).view(np.uint32), plain.view(np.uint32))
    status, _, data = server.request("POST", "/tokenize", {"inputs": ["A man is playing a guitar.", "hi"]})
    assert status == 200
    tokens = json.loads(data)
    assert [t["text"] for t in tokens[0]] == ["[CLS]", "a", "man", "is", "playing", "a", "guitar", ".", "[SEP]"]
    assert tokens[0][0] == {"id": 101, "text": "[CLS]", "special": True} and tokens[1][-1]["id"] == 102
    status, _, data = server.request("POST", "/tokenize", {"inputs": "hi", "add_special_tokens": False})
    assert status == 200 and [t["text"] for t in json.loads(data)[0]] == ["hi"]


def test_input_token_cap_and_truncation(server):
    status, _, data = server.request("POST", "/v1/embeddings", {"input": ["short", LONG], "model": NAME})
    e = error_of(data)
    assert status == 400 and e["param"] == "input[1]" and e["code"] == "context_length_exceeded"
    assert "402" in e["message"] and "256" in e["message"]
    status, _, data = server.request("POST", "/embed", {"inputs": LONG})
    assert status == 400 and error_of(data)["param"] == "inputs"
    # truncate: the first 255 ids and [SEP], which is what `headcount embed` does with the line.
    status, _, data = server.request("POST", "/embed", {"inputs": LONG, "truncate": True})
    assert status == 200
    assert np.array_equal(as_f32(json.loads(data)).view(np.uint32), offline_embeddings([LONG]).view(np.uint32))


@pytest.mark.parametrize("body,param,code", [
    ('{"input": "x", "model": ', None, "invalid_json"),
    ('[1, 2]', "body", "invalid_value"),
    ({"model": NAME}, "input", "invalid_value"),
    ({"input": 7, "model": NAME}, "input", "invalid_value"),
    ({"input": [], "model": NAME}, "input", "invalid_value"),
    ({"input": ["ok", 3], "model": NAME}, "input[1]", "invalid_value"),
    ({"input": [[101, 102]], "model": NAME}, "input[0]", "invalid_value"),
    ({"input": "x"}, "model", "invalid_value"),
    ({"input": "x", "model": NAME, "encoding_format": "hex"}, "encoding_format", "invalid_value"),
    ({"input": "x", "model": NAME, "dimensions": 128}, "dimensions", "invalid_value"),
    ({"input": ["x"] * 2049, "model": NAME}, "input", "invalid_value"),
])
def test_bad_bodies_name_the_field(server, body, param, code):
    status, _, data = server.request("POST", "/v1/embeddings", body)
    e = error_of(data)
    assert status == 400 and e["param"] == param and e["code"] == code and e["type"] == "invalid_request_error"


def test_tei_wrong_types(server):
    status, _, data = server.request("POST", "/embed", {"inputs": "x", "truncate": "yes"})
    assert status == 400 and error_of(data)["param"] == "truncate"
    status, _, data = server.request("POST", "/embed", {"inputs": "x", "normalize": 1})
    assert status == 400 and error_of(data)["param"] == "normalize"


def test_unknown_route_and_model(server):
    status, _, data = server.request("GET", "/v2/nothing")
    assert status == 404 and error_of(data)["code"] == "not_found"
    import openai
    with pytest.raises(openai.NotFoundError) as caught:
        openai_client(server).embeddings.create(input="x", model="text-embedding-3-small")
    body = caught.value.body
    error = body.get("error", body)  # the client hands over the error object itself
    assert error["code"] == "model_not_found" and error["param"] == "model"


def test_body_cap(server):
    body = json.dumps({"input": "y " * 40000, "model": NAME})
    assert len(body) > 65536
    status, _, data = server.request("POST", "/v1/embeddings", body)
    assert status == 413 and error_of(data)["param"] == "body"


def test_api_key(server):
    import openai
    with pytest.raises(openai.AuthenticationError):
        openai_client(server, key="wrong-key").embeddings.create(input="x", model=NAME)
    for key in (None, "", KEY + "x", KEY[:-1]):
        status, headers, data = server.request("GET", "/v1/models", key=key)
        assert status == 401 and error_of(data)["type"] == "authentication_error"
        assert headers.get("WWW-Authenticate") == "Bearer"
    status, _, _ = server.request("GET", "/health", key=None)
    assert status == 200
    # No CORS headers unless --cors-origin names an origin.
    _, headers, _ = server.request("GET", "/v1/models")
    assert not any(h.lower().startswith("access-control") for h in headers)


def test_curl(server, reference):
    out = subprocess.run(["curl", "-sS", "-H", f"Authorization: Bearer {KEY}", "-H", "Content-Type: application/json",
                          "-d", json.dumps({"input": SENTENCES[7], "model": NAME}), server.url + "/v1/embeddings"],
                         check=True, capture_output=True, text=True, timeout=60).stdout
    row = as_f32(json.loads(out)["data"][0]["embedding"])
    assert np.array_equal(row.view(np.uint32), reference[7].view(np.uint32))
    out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", server.url + "/v1/models"],
                         capture_output=True, text=True, timeout=60).stdout
    assert out == "401"


def test_concurrent_single_sentence_requests_are_the_offline_bits(server, reference):
    """16 clients, one sentence a request, each answer bitwise the offline row; meanwhile a large
    request keeps the scheduler busy, so the small ones queue and are coalesced into shared steps."""
    def steps():
        _, _, data = server.request("GET", "/metrics")
        return int(re.search(r"^headcount_embed_batch_sentences_count (\d+)$", data.decode(), re.M).group(1))

    before = steps()
    # 150 inputs of 202 tokens, just under the fixture's --max-body-bytes.
    big = ThreadPoolExecutor(1).submit(server.request, "POST", "/v1/embeddings",
                                       {"input": ["a " * 200] * 150, "model": NAME})
    time.sleep(0.1)

    def one(i):
        status, _, data = server.request("POST", "/v1/embeddings",
                                         {"input": SENTENCES[i], "model": NAME, "encoding_format": "base64"})
        assert status == 200, data
        return i, np.frombuffer(base64.b64decode(json.loads(data)["data"][0]["embedding"]), dtype="<f4")

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, list(range(len(SENTENCES))) * 2))
    for i, row in results:
        assert np.array_equal(row.view(np.uint32), reference[i].view(np.uint32)), SENTENCES[i]
    assert big.result()[0] == 200
    # Fewer scheduler steps than requests: requests shared steps.
    assert steps() - before < len(results) + 1
    _, _, data = server.request("GET", "/metrics")
    text = data.decode()
    assert re.search(r'^headcount_requests_total\{route="/v1/embeddings",status="200"\} \d+$', text, re.M)
    assert re.search(r'^headcount_requests_total\{route="/v1/models",status="401"\} \d+$', text, re.M)
    assert re.search(r'^headcount_request_duration_seconds_bucket\{route="/v1/embeddings",le="\+Inf"\} \d+$', text, re.M)
    assert re.search(r"^headcount_queue_depth 0$", text, re.M)
    assert int(re.search(r"^headcount_embed_sentences_total (\d+)$", text, re.M).group(1)) >= len(results) + 150


def test_cors_origin():
    s = Server("--cors-origin", "https://app.example")
    try:
        s.wait_ready()
        status, headers, _ = s.request("GET", "/v1/models", key=None)
        assert status == 200 and headers["Access-Control-Allow-Origin"] == "https://app.example"
        status, headers, _ = s.request("OPTIONS", "/v1/embeddings", key=None,
                                       headers={"Origin": "https://app.example",
                                                "Access-Control-Request-Method": "POST"})
        assert status == 204 and "POST" in headers["Access-Control-Allow-Methods"]
        assert "Authorization" in headers["Access-Control-Allow-Headers"]
    finally:
        assert s.stop() == 0


def test_queue_full_and_deadline():
    """--max-queue 1 with one request per step: while one runs and one waits, the rest get 503
    with Retry-After; --timeout-s short: a request that cannot finish in time gets 504."""
    s = Server("--max-queue", "1", "--max-batch-tokens", "1", "--max-input-tokens", "64", "--timeout-s", "1",
               "--threads", "1")
    try:
        s.wait_ready()
        status, _, data = s.request("POST", "/embed", {"inputs": "word " * 70})
        assert status == 400 and "64" in error_of(data)["message"]
        heavy = {"inputs": ["word " * 60] * 100}
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: s.request("POST", "/embed", heavy), range(8)))
        codes = sorted(a[0] for a in answers)
        assert 503 in codes, codes
        for status, headers, data in answers:
            if status == 503:
                assert headers["Retry-After"] == "1" and error_of(data)["code"] == "queue_full"
        # 400 sequences of 62 tokens: about 3.5 s on one thread of the 2-core development host, so
        # past the 1 s deadline (the second waits behind the first).
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda _: s.request("POST", "/embed", {"inputs": ["word " * 60] * 400}), range(2)))
        assert any(a[0] == 504 and error_of(a[2])["code"] == "timeout" for a in answers), [a[0] for a in answers]
    finally:
        assert s.stop() == 0


def test_sigterm_finishes_in_flight_requests_and_exits_0(reference):
    s = Server()
    s.wait_ready()
    pool = ThreadPoolExecutor(1)
    flight = pool.submit(s.request, "POST", "/v1/embeddings", {"input": SENTENCES * 38, "model": NAME}, None, None)
    time.sleep(0.3)  # the request is in the scheduler's hands
    s.proc.send_signal(signal.SIGTERM)
    status, _, data = flight.result(timeout=60)
    assert status == 200
    rows = as_f32([d["embedding"] for d in json.loads(data)["data"]])
    assert np.array_equal(rows.view(np.uint32), np.tile(reference, (38, 1)).view(np.uint32))
    assert s.proc.wait(timeout=30) == 0
    s.reader.join(timeout=5)
    assert any("SIGTERM" in line for line in s.log)
    with pytest.raises(OSError):
        socket.create_connection((s.host, s.port), timeout=5).close()


@pytest.mark.parametrize("args,names", [
    (["--port", "70000"], "--port"),
    (["--port", "http"], "--port"),
    (["--embedding-model", "/nonexistent/model"], "/nonexistent/model"),
    (["--max-input-tokens", "1000"], "--max-input-tokens"),
    (["--timeout-s", "0"], "--timeout-s"),
    (["--max-connections", "0"], "--max-connections"),
    (["--host", "256.1.1.1", "--port", "1"], "256.1.1.1"),
])
def test_bad_options_are_one_line_and_exit_2(args, names):
    base = [CLI, "serve"] + ([] if "--embedding-model" in args else ["--embedding-model", MODEL])
    r = subprocess.run(base + args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and names in lines[0] and lines[0].startswith("headcount: error:"), r.stderr


def test_port_in_use_is_exit_2(server):
    r = subprocess.run([CLI, "serve", "--embedding-model", MODEL, "--port", str(server.port)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and str(server.port) in r.stderr and "--port" in r.stderr, r.stderr


def test_64_clients_connecting_at_once_keep_their_connections(server, reference):
    """64 clients connect at the same moment and send 12 requests each on one keep-alive
    connection: none is refused or reset (httplib 0.11's defaults, a listen backlog of 5 and 5
    requests per connection, reset clients at 64), and every answer is the offline bits."""
    import http.client
    barrier = threading.Barrier(64)

    def client(k):
        conn = http.client.HTTPConnection(server.host, server.port, timeout=120)
        barrier.wait()
        conn.connect()
        sock = conn.sock
        for i in range(12):
            s = (k + i) % len(SENTENCES)
            conn.request("POST", "/v1/embeddings", json.dumps({"input": SENTENCES[s], "model": NAME, "encoding_format": "base64"}),
                         {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
            r = conn.getresponse()
            body = r.read()
            assert r.status == 200, body
            row = np.frombuffer(base64.b64decode(json.loads(body)["data"][0]["embedding"]), dtype="<f4")
            assert np.array_equal(row.view(np.uint32), reference[s].view(np.uint32))
            assert conn.sock is sock  # the same connection throughout
        conn.close()

    with ThreadPoolExecutor(64) as pool:
        list(pool.map(client, range(64)))
