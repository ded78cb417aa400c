"""`headcount serve --model FILE.gguf` as users run it: the real binary on a loopback port, driven by
the `openai` Python package, curl and plain HTTP. Every completion is compared with `headcount
generate --json` for the same prompt, options and seed (its text and token count), alone and
while other requests decode in the same steps (continuous batching), streamed and not; every
limit and fault of docs/serve.md's decoder section is provoked once. Needs the built CLI and the
GGUF file scripts/setup.sh fetches; skips only without it."""

import json
import os
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from test_serve import CLI, KEY, ROOT, Server, error_of

GGUF = os.environ.get("HEADCOUNT_DECODER_MODEL", os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
NAME = os.path.basename(GGUF)[:-len(".gguf")]
pytestmark = pytest.mark.skipif(not os.path.isfile(GGUF), reason="no decoder file: run scripts/setup.sh")

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
           "The three primary colors are", "Café au lait is", "1, 2, 3, 4,", "Water boils at",
           "The opposite of hot is"]


def offline(prompt, max_tokens, *extra):
    """`headcount generate --json`: the reference completion."""
    out = subprocess.run([CLI, "generate", "--model", GGUF, "--prompt", prompt, "--max-tokens", str(max_tokens),
                          "--threads", "2", "--json", *extra], check=True, capture_output=True, text=True,
                         timeout=120).stdout
    return json.loads(out)


def openai_client(server, key=KEY):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def server():
    s = Server("--api-key", KEY, "--parallel", "4", models=("--model", GGUF))
    s.wait_ready()
    yield s
    assert s.stop() == 0, "".join(s.log)


def complete(server, body, path="/v1/completions"):
    status, _, data = server.request("POST", path, {"model": NAME, **body})
    assert status == 200, data
    return json.loads(data)


def metric(server, name):
    status, _, data = server.request("GET", "/metrics")
    return float(next(line.split(" ")[1] for line in data.decode().splitlines() if line.startswith(name + " ")))


def dechunk(payload):
    """The body of an HTTP/1.1 chunked transfer: size line, data, CRLF, ..., a zero size."""
    data, rest = b"", payload
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        data, rest = data + rest[:size], rest[size + 2:]
    return data


def stream(server, body, path="/v1/chat/completions"):
    """The server-sent events of one streamed request, as (events, raw text)."""
    conn = socket.create_connection((server.host, server.port), timeout=120)
    payload = json.dumps({"model": NAME, "stream": True, **body}).encode()
    conn.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode() + payload)
    raw = b""
    while chunk := conn.recv(65536):
        raw += chunk
    conn.close()
    head, _, body_bytes = raw.partition(b"\r\n\r\n")
    assert b"200" in head.split(b"\r\n")[0] and b"text/event-stream" in head, head
    events = [e[len("data: "):] for e in dechunk(body_bytes).decode().split("\n\n") if e]
    assert events[-1] == "[DONE]", events[-3:]
    return [json.loads(e) for e in events[:-1]]


def test_models_and_health(server):
    assert [m.id for m in openai_client(server).models.list().data] == [NAME]
    status, _, _ = server.request("GET", "/health", key=None)
    assert status == 200


def test_greedy_completion_is_generates(server):
    for prompt in PROMPTS[:3]:
        ref = offline(prompt, 24)
        got = complete(server, {"prompt": prompt, "max_tokens": 24, "temperature": 0})
        c = got["choices"][0]
        assert c["text"] == ref["text"], prompt
        assert got["usage"]["completion_tokens"] == len(ref["tokens"])
        assert got["usage"]["prompt_tokens"] == len(ref["prompt_tokens"])
        assert c["finish_reason"] == ("stop" if len(ref["tokens"]) < 24 else "length")
    # ignore_eos (llama.cpp's extension) runs to max_tokens, as generate --ignore-eos.
    ref = offline("What is 2+2?", 40, "--chat", "--ignore-eos")
    got = complete(server, {"messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 40,
                            "temperature": 0, "ignore_eos": True}, "/v1/chat/completions")
    assert got["usage"]["completion_tokens"] == len(ref["tokens"]) == 40
    assert got["choices"][0]["message"]["content"] == ref["text"] and got["choices"][0]["finish_reason"] == "length"


def test_concurrent_requests_are_each_their_offline_completion(server):
    """Eight requests at --parallel 4, greedy and sampled with seeds, sent at once: they join and
    leave each other's decode steps, and each is still bitwise the offline command's."""
    cases = [(p, {"temperature": 0}) if i % 2 == 0 else (p, {"temperature": 0.8, "top_p": 0.9, "seed": 1000 + i})
             for i, p in enumerate(PROMPTS)]
    lengths = [40, 17, 33, 25, 48, 12, 29, 36]
    refs = []
    for (prompt, opts), n in zip(cases, lengths):
        extra = [] if opts["temperature"] == 0 else ["--temperature", "0.8", "--top-p", "0.9", "--seed", str(opts["seed"])]
        refs.append(offline(prompt, n, *extra))
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: complete(server, {"prompt": cases[i][0], "max_tokens": lengths[i], **cases[i][1]}),
                                range(8)))
    for ref, got in zip(refs, answers):
        assert got["choices"][0]["text"] == ref["text"]
        assert got["usage"]["completion_tokens"] == len(ref["tokens"])
    # They did share steps: some decode step ran more than one request.
    status, _, data = server.request("GET", "/metrics")
    rows = {line.split(" ")[0]: float(line.split(" ")[1]) for line in data.decode().splitlines() if line.startswith("headcount_decode_batch_rows_")}
    assert rows["headcount_decode_batch_rows_sum"] > rows["headcount_decode_batch_rows_count"]


def test_long_prompt_prefilled_in_chunks_between_steps_keeps_every_bit(server):
    """A 300-token prompt arriving while three streams decode is prefilled 32 tokens per step
    (--prefill-chunk): its completion and its prompt's log-probabilities are the bits it gets
    alone (one prefill), and the running streams' completions are theirs too."""
    long_prompt = " ".join(f"item {i}," for i in range(100))
    body = {"prompt": long_prompt, "max_tokens": 12, "temperature": 0, "echo": True, "logprobs": 1}
    alone = complete(server, body)
    assert alone["usage"]["prompt_tokens"] > 250
    refs = [offline(p, 150) for p in PROMPTS[:3]]
    with ThreadPoolExecutor(4) as pool:
        running = [pool.submit(stream, server, {"prompt": p, "max_tokens": 150, "temperature": 0}, "/v1/completions")
                   for p in PROMPTS[:3]]
        time.sleep(0.5)  # the three are decoding
        calls = metric(server, "headcount_prefill_calls_total")
        loaded = complete(server, body)
        chunks = metric(server, "headcount_prefill_calls_total") - calls
        streams = [r.result(timeout=120) for r in running]
    assert loaded["choices"][0] == alone["choices"][0]
    assert chunks >= alone["usage"]["prompt_tokens"] // 32, chunks  # it was cut into chunks
    assert loaded["choices"][0]["text"] == long_prompt + offline(long_prompt, 12)["text"]
    for ref, events in zip(refs, streams):
        assert "".join(e["choices"][0]["text"] for e in events) == ref["text"]


def test_openai_chat_streamed_and_not_is_generate_chat(server):
    question = "What is the capital of Italy?"
    ref = offline(question, 40, "--chat")
    client = openai_client(server)
    whole = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": question}],
                                           max_tokens=40, temperature=0)
    assert whole.choices[0].message.content == ref["text"] and whole.choices[0].message.role == "assistant"
    assert whole.usage.prompt_tokens == len(ref["prompt_tokens"]) and whole.usage.completion_tokens == len(ref["tokens"])
    pieces, finish, usage = [], None, None
    for chunk in client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": question}],
                                                max_tokens=40, temperature=0, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert "".join(pieces) == ref["text"] and len(pieces) > 5
    assert finish == whole.choices[0].finish_reason and usage.completion_tokens == len(ref["tokens"])


def test_openai_completions_with_seed_are_generate_seed(server):
    ref = offline(PROMPTS[2], 30, "--temperature", "1.0", "--seed", "7")
    got = openai_client(server).completions.create(model=NAME, prompt=PROMPTS[2], max_tokens=30, temperature=1.0, seed=7)
    assert got.choices[0].text == ref["text"]
    # The default seed is generate's (0): the same request gives the same completion.
    again = [complete(server, {"prompt": PROMPTS[2], "max_tokens": 10})["choices"][0]["text"] for _ in range(2)]
    assert again[0] == again[1] == offline(PROMPTS[2], 10, "--temperature", "1")["text"]


def test_stop_strings_cut_the_text_streamed_and_not(server):
    ref = offline(PROMPTS[5], 30)["text"]  # " 5, 6, 7, ..."
    stop = ref[8:11]
    assert stop and stop in ref
    whole = complete(server, {"prompt": PROMPTS[5], "max_tokens": 30, "temperature": 0, "stop": [stop, "zzz"]})
    assert whole["choices"][0]["text"] == ref[:ref.index(stop)] and whole["choices"][0]["finish_reason"] == "stop"
    events = stream(server, {"prompt": PROMPTS[5], "max_tokens": 30, "temperature": 0, "stop": stop}, "/v1/completions")
    assert "".join(e["choices"][0]["text"] for e in events) == ref[:ref.index(stop)]
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


def test_echo_and_logprobs(server):
    got = complete(server, {"prompt": "Hello world", "max_tokens": 3, "temperature": 0, "echo": True, "logprobs": 2})
    c = got["choices"][0]
    lp = c["logprobs"]
    assert c["text"].startswith("Hello world") and len(lp["tokens"]) == 2 + 3
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert "".join(lp["tokens"]) == c["text"]
    assert lp["text_offset"] == [sum(len(t.encode()) for t in lp["tokens"][:i]) for i in range(len(lp["tokens"]))]
    for i in range(1, len(lp["tokens"])):
        top = lp["top_logprobs"][i]
        assert len(top) == 2 and max(top.values()) <= 0 and lp["token_logprobs"][i] <= 0
        if i >= 2:  # greedy tokens: the chosen one is the most likely
            assert lp["token_logprobs"][i] == max(top.values())
    # echo with max_tokens 0 scores the prompt alone (what evaluation harnesses ask); the prompt's
    # log-probabilities are the same as with a continuation.
    scored = complete(server, {"prompt": "Hello world", "max_tokens": 0, "echo": True, "logprobs": 0})
    s = scored["choices"][0]
    assert s["text"] == "Hello world" and s["logprobs"]["token_logprobs"] == lp["token_logprobs"][:2]
    assert scored["usage"]["completion_tokens"] == 0
    # Chat's shape: content[i] = {token, logprob, bytes, top_logprobs}.
    chat = complete(server, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0,
                             "logprobs": True, "top_logprobs": 3}, "/v1/chat/completions")
    content = chat["choices"][0]["logprobs"]["content"]
    assert len(content) == chat["usage"]["completion_tokens"]
    assert all(len(t["top_logprobs"]) == 3 and t["logprob"] == t["top_logprobs"][0]["logprob"] for t in content)
    assert all(bytes(t["bytes"]).decode("utf-8", "replace") == t["token"] for t in content)


def test_tokenize_and_detokenize(server):
    status, _, data = server.request("POST", "/tokenize", {"content": "Hello world"})
    ids = json.loads(data)["tokens"]
    assert status == 200 and ids == offline("Hello world", 1)["prompt_tokens"]
    status, _, data = server.request("POST", "/detokenize", {"tokens": ids})
    assert status == 200 and json.loads(data) == {"content": "Hello world"}
    status, _, data = server.request("POST", "/tokenize", {"content": "Hello world", "with_pieces": True})
    assert json.loads(data)["tokens"] == [{"id": ids[0], "piece": "Hello"}, {"id": ids[1], "piece": " world"}]
    status, _, data = server.request("POST", "/detokenize", {"tokens": [1, 10 ** 9]})
    assert status == 400 and error_of(data)["param"] == "tokens[1]"


@pytest.mark.parametrize("path,body,status,param", [
    ("/v1/completions", {"prompt": "x", "max_tokens": 9000}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": "ten"}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "temperature": 3}, 400, "temperature"),
    ("/v1/completions", {"prompt": "x", "top_p": 0}, 400, "top_p"),
    ("/v1/completions", {"prompt": "x", "n": 2}, 400, "n"),
    ("/v1/completions", {"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ("/v1/completions", {"prompt": ["a", "b"]}, 400, "prompt"),
    ("/v1/completions", {"prompt": [1, 99999999]}, 400, "prompt[1]"),
    ("/v1/completions", {"prompt": ""}, 400, "prompt"),
    ("/v1/completions", {"prompt": "x", "logprobs": 9}, 400, "logprobs"),
    ("/v1/completions", {"prompt": "x", "frequency_penalty": 0.5}, 400, "frequency_penalty"),
    ("/v1/completions", {"prompt": "x", "model": "gpt-4"}, 404, "model"),
    ("/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
     "messages[0].content[0]"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, 400, "top_logprobs"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tools": []}, 400, "tools"),
])
def test_bad_requests_name_the_field(server, path, body, status, param):
    got, _, data = server.request("POST", path, {"model": NAME, **body})
    assert got == status and error_of(data)["param"] == param, data
    assert server.proc.poll() is None


def test_disconnect_mid_stream_frees_the_slot_and_sigterm_finishes_in_flight():
    """--parallel 1: a client that leaves mid-stream frees the only slot at the next step (the
    next request runs at once); SIGTERM lets a running request finish, then exits 0."""
    s = Server("--parallel", "1", models=("--model", GGUF))
    try:
        s.wait_ready()
        conn = socket.create_connection((s.host, s.port), timeout=60)
        payload = json.dumps({"model": NAME, "prompt": PROMPTS[2], "max_tokens": 4000, "stream": True,
                              "temperature": 0}).encode()
        conn.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
        seen = b""
        while b"data: " not in seen:  # the headers, then the first event
            seen += conn.recv(4096)
        conn.close()
        start = time.time()
        status, _, data = s.request("POST", "/v1/completions", {"model": NAME, "prompt": "Hi", "max_tokens": 5,
                                                                "temperature": 0})
        assert status == 200 and time.time() - start < 10, data
        end = time.time() + 5  # the gauge is set after the scheduler's step
        while "headcount_decoder_running 0" not in s.request("GET", "/metrics")[2].decode():
            assert time.time() < end
            time.sleep(0.05)
        # SIGTERM while a request runs: it completes, the server exits 0.
        with ThreadPoolExecutor(1) as pool:
            flight = pool.submit(s.request, "POST", "/v1/completions",
                                 {"model": NAME, "prompt": PROMPTS[0], "max_tokens": 60, "temperature": 0})
            time.sleep(0.3)
            s.proc.send_signal(signal.SIGTERM)
            status, _, data = flight.result(timeout=60)
        assert status == 200 and json.loads(data)["usage"]["completion_tokens"] >= 1
        assert s.proc.wait(timeout=60) == 0
    finally:
        s.stop()


def test_full_queue_and_deadline():
    """--parallel 1 --max-queue 1: a third request at once is 503 with Retry-After; --timeout-s
    short: a completion that cannot finish in time is 504, or a final error event once streamed."""
    s = Server("--parallel", "1", "--max-queue", "1", "--timeout-s", "2", models=("--model", GGUF))
    try:
        s.wait_ready()
        long = {"model": NAME, "prompt": PROMPTS[2], "max_tokens": 3000, "temperature": 0}
        with ThreadPoolExecutor(3) as pool:
            first = pool.submit(s.request, "POST", "/v1/completions", long)
            time.sleep(0.5)
            second = pool.submit(s.request, "POST", "/v1/completions", long)
            time.sleep(0.3)
            status, headers, data = s.request("POST", "/v1/completions", long)
            assert status == 503 and headers.get("Retry-After") == "1" and error_of(data)["code"] == "queue_full"
            assert first.result(timeout=60)[0] == 504 and second.result(timeout=60)[0] == 504
        events = subprocess.run(["curl", "-sN", f"{s.url}/v1/completions", "-d", json.dumps({**long, "stream": True})],
                                capture_output=True, text=True, timeout=60).stdout
        last = [e for e in events.split("\n\n") if e][-1]
        assert json.loads(last[len("data: "):])["error"]["code"] == "timeout"
    finally:
        assert s.stop() == 0


def chat_template_replaced(path, old, new):
    """A copy of the GGUF file whose tokenizer.chat_template has `old` replaced by `new` (the same
    length, so every offset of the file stays valid)."""
    assert len(old) == len(new)
    data = bytearray(open(GGUF, "rb").read())
    key = b"tokenizer.chat_template"
    at = data.index(key) + len(key)
    kind, length = int.from_bytes(data[at:at + 4], "little"), int.from_bytes(data[at + 4:at + 12], "little")
    assert kind == 8  # a string
    start = at + 12
    value = bytes(data[start:start + length])
    assert old in value
    data[start:start + length] = value.replace(old, new)
    with open(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("args,names", [
    (["--parallel", "0"], "--parallel"),
    (["--prefill-chunk", "-1"], "--prefill-chunk"),
    (["--kv-dtype", "fp8"], "--kv-dtype"),
    (["--weights", "int4"], "--weights"),
    (["--model", "/nonexistent.gguf"], "/nonexistent.gguf"),
    (["--model", os.path.join(ROOT, "README.md")], "--model"),
])
def test_bad_decoder_options_are_one_line_and_exit_2(args, names):
    base = [CLI, "serve", "--port", "0"] + ([] if "--model" in args else ["--model", GGUF])
    r = subprocess.run(base + args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and names in lines[0] and lines[0].startswith("headcount: error:"), r.stderr


def test_a_chat_template_other_than_chatml_is_refused_at_start(tmp_path):
    other = tmp_path / "other-template.gguf"
    chat_template_replaced(other, b"<|im_start|>", b"<|xx_start|>")
    r = subprocess.run([CLI, "serve", "--model", str(other), "--port", "0"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "--model" in r.stderr and "not ChatML" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "listening" not in r.stderr
