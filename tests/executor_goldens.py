#!/usr/bin/env python3
"""Bitwise goldens of the inference path, kept while the executors are restructured (issue 51).

`write` runs a headcount binary under every instruction-set cap this CPU supports and records,
per cap, a SHA-256 of each output: MiniLM embeddings (fp32, bf16, int8; batch 1 and 32; 1 and 2
threads) as .npy bytes, SmolLM2's greedy tokens (fp32 and quantized weights; 1 and 2 threads) and
its perplexity's mean negative log-likelihood printed to 17 digits (every logit of every window
feeds it, so a changed logit shows). `check` runs the binary under test the same way, for the caps
this CPU supports that the file holds, and names every output whose bits moved.

The goldens were written by main's binary before the first change of the one-executor issue
(commit named in the file). Tuning constants are compile-time, so an instruction set gives the
same bits on any host that has it; caps the host lacks are skipped (and said).

    tests/executor_goldens.py write BINARY OUT.json
    tests/executor_goldens.py check BINARY GOLDENS.json     (exit 0 equal, 1 moved, 77 no models)
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENCODER = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
DECODER = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TEXT = os.path.join(ROOT, "data", "pride-and-prejudice.txt")
CAPS = ["generic", "avx2", "avx512", "avx512_bf16", "amx_bf16"]
# /proc/cpuinfo flags each cap needs (what src/simd/isa.cpp checks through CPUID).
CAP_FLAGS = {
    "generic": [],
    "avx2": ["avx2", "fma", "f16c"],
    "avx512": ["avx512f", "avx512bw", "avx512vl", "avx512dq"],
    "avx512_bf16": ["avx512_bf16"],
    "amx_bf16": ["amx_tile", "amx_bf16"],
}
PROMPT = "The history of the printing press begins in"


def supported_caps():
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    caps, need = [], []
    for cap in CAPS:
        need = need + CAP_FLAGS[cap]
        if all(flag in flags for flag in need):
            caps.append(cap)
    return caps


def run(binary, cap, args):
    env = dict(os.environ, HEADCOUNT_ISA=cap)
    done = subprocess.run([binary] + args, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{binary} {' '.join(args)} (HEADCOUNT_ISA={cap}) failed: {done.stderr.strip()}")
    return done.stdout


def outputs(binary, cap, work):
    """name -> sha256 hex of every output, under one instruction-set cap."""
    sentences = os.path.join(work, "sentences.txt")
    with open(TEXT, encoding="utf-8") as f:
        lines = [line.strip() for line in f if len(line.strip()) > 20][:64]
    with open(sentences, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    text = os.path.join(work, "text.txt")
    with open(TEXT, encoding="utf-8") as f, open(text, "w", encoding="utf-8") as g:
        g.write(f.read(3000))
    got = {}
    npy = os.path.join(work, "e.npy")
    for dtype in ["fp32", "bf16", "int8"]:
        for batch in [1, 32]:
            for threads in [1, 2]:
                run(binary, cap, ["embed", sentences, "--model", ENCODER, "--dtype", dtype,
                                  "--batch", str(batch), "--threads", str(threads),
                                  "--format", "npy", "--out", npy])
                with open(npy, "rb") as f:
                    got[f"embed {dtype} batch {batch} threads {threads}"] = \
                        hashlib.sha256(f.read()).hexdigest()
    for weights in ["fp32", "quantized"]:
        for threads in [1, 2]:
            out = json.loads(run(binary, cap, ["generate", "--model", DECODER, "--prompt", PROMPT,
                                               "--max-tokens", "24", "--ignore-eos",
                                               "--weights", weights, "--threads", str(threads),
                                               "--json"]))
            tokens = json.dumps(out["tokens"])
            got[f"generate {weights} threads {threads}"] = \
                hashlib.sha256(tokens.encode()).hexdigest()
        out = json.loads(run(binary, cap, ["perplexity", text, "--model", DECODER,
                                           "--context", "128", "--weights", weights,
                                           "--threads", "2", "--json"]))
        got[f"perplexity {weights}"] = hashlib.sha256(repr(out["nll"]).encode()).hexdigest()
    return got


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("write", "check"):
        sys.exit(__doc__)
    mode, binary, path = sys.argv[1:]
    if not (os.path.isdir(ENCODER) and os.path.isfile(DECODER)):
        print("skipped: models/ has no MiniLM or SmolLM2 (scripts/setup.sh puts them there)")
        sys.exit(77)
    caps = supported_caps()
    with tempfile.TemporaryDirectory() as work:
        if mode == "write":
            commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                                    text=True).stdout.strip()
            goldens = {"written_by": f"main at {commit}", "caps": {}}
            for cap in caps:
                goldens["caps"][cap] = outputs(binary, cap, work)
                print(f"{cap}: {len(goldens['caps'][cap])} outputs")
            with open(path, "w") as f:
                json.dump(goldens, f, indent=1, sort_keys=True)
                f.write("\n")
            return
        with open(path) as f:
            goldens = json.load(f)
        moved = 0
        for cap in CAPS:
            if cap not in goldens["caps"]:
                continue
            if cap not in caps:
                print(f"{cap}: skipped (this CPU lacks it)")
                continue
            got = outputs(binary, cap, work)
            for name, digest in goldens["caps"][cap].items():
                if got.get(name) != digest:
                    print(f"{cap} {name}: MOVED (golden {digest[:12]}, now {got.get(name, 'none')[:12]})")
                    moved += 1
            print(f"{cap}: {len(goldens['caps'][cap])} outputs checked")
        if moved:
            print(f"{moved} outputs differ from {goldens['written_by']}")
            sys.exit(1)
        print(f"all outputs bitwise those of {goldens['written_by']}")


if __name__ == "__main__":
    main()
