#!/usr/bin/env bash
# Tokens per second of `headcount generate` on SmolLM2-135M (fp32 weights dequantized from the
# Q4_1 GGUF): prefill of a ~512-token prompt (the start of data/pride-and-prejudice.txt) and 128
# greedy decoded tokens (--ignore-eos), at each thread count asked, `runs` times each; prints the
# median of each rate and every run's figures. The model loads in each run (not timed: the rates
# are generate's own clocks around the prefill and the decode steps).
# Usage: [WEIGHTS=fp32|bf16|int8] [RUNS=3] bench/decoder_tokens.sh [build-dir] [threads...]
#        (default: build, threads 1 2)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
threads=("${@:-1 2}")
read -r -a threads <<< "${threads[*]}"
runs=${RUNS:-3}
weights=${WEIGHTS:-fp32}
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
# 2,060 characters of the book: 512 tokens with SmolLM2's tokenizer.
prompt=$(head -c 2060 "$root/data/pride-and-prejudice.txt")
summary='
import json, statistics, sys
rows = [json.loads(line) for line in sys.stdin]
pre = [r["prefill_tokens_per_second"] for r in rows]
dec = [r["decode_tokens_per_second"] for r in rows]
runs = lambda xs: ", ".join("%.1f" % x for x in xs)
print("weights %s, threads %d: prompt %d tokens, %d new; prefill median %.1f tokens/s (runs %s); "
      "decode median %.1f tokens/s (runs %s)" % (rows[0]["weights"], rows[0]["threads"], len(rows[0]["prompt_tokens"]),
      len(rows[0]["tokens"]), statistics.median(pre), runs(pre), statistics.median(dec), runs(dec)))'
for t in "${threads[@]}"; do
  for ((r = 0; r < runs; ++r)); do
    "$build/headcount" generate --model "$model" --prompt "$prompt" --max-tokens 128 \
      --ignore-eos --threads "$t" --weights "$weights" --json
  done | python3 -c "$summary"
done
