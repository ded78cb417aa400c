#!/usr/bin/env bash
# headcount's training step against PyTorch eager on the same model (nanogpt-cpu: 4 layers x 4
# heads, d_model 128, context 64, batch 12), interleaved: each round runs `headcount bench
# --suite train` then bench/peers/train_peer.py, so a drift of the host hits both; per thread
# count the median of the rounds' median step times and the tokens/s ratio headcount / PyTorch.
# Also runs headcount once more with OPENBLAS_CORETYPE=Prescott (OpenBLAS's fallback core on
# CPUs it does not know): the step must not care, as no training product goes through OpenBLAS.
#
#   bench/train_vs_pytorch.sh [THREADS="1 2"] [ROUNDS=5] [STEPS=30] [HEADS=4]
#
# HEADS changes the heads at d_model 128 (head_dim 128 / HEADS: the head-sweep experiment's
# series, e.g. 1, 16 or 64) on both sides.
# Needs build/headcount and the peers' venv (bench/peers/setup_peers.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads_list=${1:-1 2} rounds=${2:-5} steps=${3:-30} heads=${4:-4}
hc=${HEADCOUNT_BIN:-$root/build/headcount}
py=${PEERS_PYTHON:-$root/bench/peers/.venv/bin/python}
[[ -x $hc ]] || { echo "$0: $hc not built (scripts/build.sh)" >&2; exit 2; }
[[ -x $py ]] || { echo "$0: $py missing (bench/peers/setup_peers.sh)" >&2; exit 2; }
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
hc_step() { "$hc" bench --suite train --threads "$1" --repeats "$steps" --train-heads "$heads" --json | "$py" -c 'import json,sys; print(json.load(sys.stdin)["median_step_seconds"])'; }
tokens=$("$hc" bench --suite train --threads 1 --repeats 1 --json | "$py" -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_step"])')
echo "# $(date -u +%FT%H:%MZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) (family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "model $(grep -m1 '^model' /proc/cpuinfo | cut -d: -f2 | xargs)), $heads heads at d_model 128, $rounds rounds of $steps steps," \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset}"
for t in $threads_list; do
  hcs=() pts=()
  for ((r = 0; r < rounds; ++r)); do
    hcs+=("$(hc_step "$t")")
    pts+=("$("$py" "$root/bench/peers/train_peer.py" --threads "$t" --steps "$steps" --heads "$heads" 2>/dev/null |
      "$py" -c 'import json,sys; print(json.load(sys.stdin)["median_step_seconds"])')")
  done
  prescott=$(OPENBLAS_CORETYPE=Prescott hc_step "$t")
  h=$(printf '%s\n' "${hcs[@]}" | median) p=$(printf '%s\n' "${pts[@]}" | median)
  awk -v t="$t" -v n="$tokens" -v h="$h" -v p="$p" -v q="$prescott" -v hs="${hcs[*]}" -v ps="${pts[*]}" 'BEGIN {
    printf "threads %d: headcount %.2f ms (%.0f tokens/s), PyTorch eager %.2f ms (%.0f tokens/s): %.2fx; ", t, h * 1e3, n / h, p * 1e3, n / p, p / h
    printf "headcount with OPENBLAS_CORETYPE=Prescott %.2f ms (%.2fx of the rounds median)\n", q * 1e3, q / h
    printf "  rounds (s): headcount %s | PyTorch %s\n", hs, ps }'
done
