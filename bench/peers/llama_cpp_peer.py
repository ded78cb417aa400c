#!/usr/bin/env python3
"""llama.cpp on SmolLM2-135M-Instruct.Q4_1.gguf, measured as bench/decoder_tokens.sh and
`headcount perplexity` measure headcount (run it with bench/peers/.venv-llamacpp's python, which
bench/peers/setup_llama_cpp.sh makes: llama-cpp-python built from its source distribution).

  tokens    prefill of the same 512-token prompt (the book's first 2,060 characters, tokenized by
            llama.cpp) in one eval, then 128 greedy tokens each fed back with eval; tokens/s of
            each, the median of --runs runs, at each --threads count.
  perplexity  llama.cpp's `perplexity` method on a text file: back-to-back windows of --context
            tokens, the logits of positions context/2 .. context-2 scoring the next token, no BOS.

Prints one JSON object per measurement.
  logits    the fixture prompts of tests/testdata/decoder/decoder.json (their ids, as transformers
            tokenized them): llama.cpp's logits of the prompt's last position against the float64
            reference logits_<i>.npy, max |difference| per prompt, and whether its first greedy
            token is the reference's. `--write` records them in
            tests/testdata/decoder/llama_cpp_logits.json, the yardstick the decoder test holds
            headcount's --weights quantized to.
Usage: llama_cpp_peer.py tokens [--threads 1 2] [--runs 3]
       llama_cpp_peer.py perplexity TEXT_FILE [--context 512] [--threads 2]
       llama_cpp_peer.py logits [--threads 2] [--write]
"""
import argparse
import json
import math
import os
import statistics
import time

import llama_cpp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
BOOK = os.path.join(ROOT, "data", "pride-and-prejudice.txt")


def load(threads, context, logits_all=False):
    return llama_cpp.Llama(model_path=MODEL, n_ctx=context, n_batch=context, n_ubatch=context,
                           n_threads=threads, n_threads_batch=threads, logits_all=logits_all,
                           verbose=False)


def last_logits(llm):
    """The last evaluated position's logits. Without logits_all, llama-cpp-python 0.3.36 leaves
    llm.scores zero (found 2026-12-06: the greedy loop below then fed back token 0 every step,
    the same cost per step but not the text), so they are read from llama.cpp itself."""
    row = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(row, shape=(llm.n_vocab(),))


def tokens(args):
    with open(BOOK, "rb") as f:
        text = f.read(2060)
    for threads in args.threads:
        llm = load(threads, 1024)
        prompt = llm.tokenize(text, add_bos=False, special=False)
        pre, dec = [], []
        for _ in range(args.runs + 1):  # the first run warms up
            llm.reset()
            t0 = time.perf_counter()
            llm.eval(prompt)
            token = int(np.argmax(last_logits(llm)))
            t1 = time.perf_counter()
            for _ in range(args.new_tokens - 1):
                llm.eval([token])
                token = int(np.argmax(last_logits(llm)))
            t2 = time.perf_counter()
            pre.append(len(prompt) / (t1 - t0))
            dec.append((args.new_tokens - 1) / (t2 - t1))
        pre, dec = pre[1:], dec[1:]
        print(json.dumps({"peer": "llama.cpp", "version": llama_cpp.__version__, "threads": threads,
                          "prompt_tokens": len(prompt), "new_tokens": args.new_tokens,
                          "prefill_tokens_per_second": statistics.median(pre),
                          "decode_tokens_per_second": statistics.median(dec),
                          "prefill_runs": pre, "decode_runs": dec}), flush=True)


def perplexity(args):
    llm = load(args.threads[0], args.context, logits_all=True)
    with open(args.text, "rb") as f:
        ids = llm.tokenize(f.read(), add_bos=False, special=False)
    first = args.context // 2
    nll, scored = 0.0, 0
    t0 = time.perf_counter()
    for w in range(len(ids) // args.context):
        window = ids[w * args.context:(w + 1) * args.context]
        llm.reset()
        llm.eval(window)
        logits = np.asarray(llm.scores[first:args.context - 1], dtype=np.float64)
        top = logits.max(axis=1)
        lse = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
        nll += float((lse - logits[np.arange(len(logits)), window[first + 1:]]).sum())
        scored += len(logits)
    print(json.dumps({"peer": "llama.cpp", "version": llama_cpp.__version__,
                      "perplexity": math.exp(nll / scored), "nll": nll / scored,
                      "tokens": len(ids), "scored": scored, "context": args.context,
                      "threads": args.threads[0], "seconds": time.perf_counter() - t0}))


def logits(args):
    fixtures_dir = os.path.join(ROOT, "tests", "testdata", "decoder")
    with open(os.path.join(fixtures_dir, "decoder.json")) as f:
        fixtures = json.load(f)
    llm = load(args.threads[0], 256, logits_all=True)
    rows = []
    for i, case in enumerate(fixtures["cases"]):
        reference = np.load(os.path.join(fixtures_dir, "logits_%d.npy" % i)).astype(np.float64)
        llm.reset()
        llm.eval(case["ids"])
        ours = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        rows.append({"case": i, "prompt_tokens": len(case["ids"]),
                     "max_abs_error": float(np.abs(ours - reference[0]).max()),
                     "first_token": int(np.argmax(ours)), "reference_first_token": case["greedy"][0]})
    result = {"peer": "llama.cpp", "version": llama_cpp.__version__,
              "model": "SmolLM2-135M-Instruct.Q4_1.gguf", "cases": rows,
              "made_by": "bench/peers/llama_cpp_peer.py logits --write"}
    print(json.dumps(result, indent=1))
    if args.write:
        with open(os.path.join(fixtures_dir, "llama_cpp_logits.json"), "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["tokens", "perplexity", "logits"])
    p.add_argument("text", nargs="?")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--write", action="store_true")
    args = p.parse_args()
    {"tokens": tokens, "perplexity": perplexity, "logits": logits}[args.what](args)


if __name__ == "__main__":
    main()
