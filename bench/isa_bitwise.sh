#!/usr/bin/env bash
# Are two headcount binaries' outputs the same bits under an instruction-set cap? For each
# HEADCOUNT_ISA given: MiniLM embeddings (fp32, bf16, int8; the first N STS-B test sentences,
# batch 32, 2 threads) compared byte for byte as .npy files; SmolLM2's greedy tokens (fp32,
# bf16, int8 and quantized weights, a 64-token continuation) and its perplexity's mean negative
# log-likelihood on the first 4,000 characters of data/pride-and-prejudice.txt (windows of 256, printed to
# 17 digits: a changed logit shows there), compared as JSON. How "nothing changes elsewhere" was checked when the GEMM gained AMX tiles
# (issue 54): the previous main against the new one with HEADCOUNT_ISA=avx512_bf16 and avx512.
#
#   bench/isa_bitwise.sh BIN_A BIN_B ISA [ISA...]      (N: $SENTENCES, default 500)
set -euo pipefail
if [[ $# -lt 3 ]]; then
  echo "usage: $0 BIN_A BIN_B ISA [ISA...]" >&2
  exit 2
fi
a=$1 b=$2
shift 2
for bin in "$a" "$b"; do [[ -x $bin ]] || { echo "$0: '$bin' is not an executable" >&2; exit 2; }; done
root=$(cd "$(dirname "$0")/.." && pwd)
sts=${HEADCOUNT_STSB:-$root/../shared/data/stsb/sts-test.tsv}
[[ -f $sts ]] || { echo "$0: no STS-B file at $sts (set HEADCOUNT_STSB)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
awk -F'\t' -v n="${SENTENCES:-500}" 'NR <= n { print $6 }' "$sts" > "$work/sentences.txt"
head -c 4000 "$root/data/pride-and-prejudice.txt" > "$work/text.txt"
prompt="The history of the printing press begins in"
differ=0
for isa in "$@"; do
  for dtype in fp32 bf16 int8; do
    for side in a b; do
      bin=$a
      [[ $side == b ]] && bin=$b
      HEADCOUNT_ISA=$isa "$bin" embed "$work/sentences.txt" --dtype "$dtype" --threads 2 \
        --format npy --out "$work/$side.npy"
    done
    if cmp -s "$work/a.npy" "$work/b.npy"; then
      echo "$isa embed $dtype: identical ($(stat -c %s "$work/a.npy") bytes)"
    else
      echo "$isa embed $dtype: DIFFERENT"
      differ=1
    fi
  done
  for weights in fp32 bf16 int8 quantized; do
    for side in a b; do
      bin=$a
      [[ $side == b ]] && bin=$b
      HEADCOUNT_ISA=$isa "$bin" generate --model "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
        --prompt "$prompt" --max-tokens 64 --ignore-eos \
        --weights "$weights" --threads 2 --json |
        python3 -c 'import json, sys; d = json.load(sys.stdin); print(json.dumps({k: v for k, v in d.items() if "second" not in k and "time" not in k and "per_s" not in k}, sort_keys=True))' \
          > "$work/$side.json"
    done
    for side in a b; do
      bin=$a
      [[ $side == b ]] && bin=$b
      HEADCOUNT_ISA=$isa "$bin" perplexity --model "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
        "$work/text.txt" --context 256 --weights "$weights" --threads 2 --json |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["nll"])' >> "$work/$side.json"
    done
    if cmp -s "$work/a.json" "$work/b.json"; then
      echo "$isa generate + perplexity $weights: identical ($(python3 -c 'import json, sys; print(", ".join(sorted(json.loads(open(sys.argv[1]).readline()))))' "$work/a.json"), nll $(tail -1 "$work/a.json"))"
    else
      echo "$isa generate + perplexity $weights: DIFFERENT"
      diff <(tr ',' '\n' < "$work/a.json") <(tr ',' '\n' < "$work/b.json") | head -5
      differ=1
    fi
  done
done
exit $differ
