#!/usr/bin/env bash
# Interleaved A/B of two headcount binaries on `headcount embed`: the wall time of the whole
# command (model load included), alternating A and B each round so that a drift of the host
# hits both; medians per binary and the B/A ratio. Also checks that A and B write the same
# embeddings, byte for byte (a speed change must not change a result).
#
#   bench/embed_ab.sh BIN_A BIN_B [ROUNDS=5] [DTYPE=fp32] [SENTENCES=../shared/data/stsb/sts-test.tsv]
#
# (stderr, the progress lines, is shown only when a command fails.)
# Batch 32 embeds every sentence of the STS-B file (both columns, one per line); batch 1 the
# first 1000 of them. Threads: 2 (HEADCOUNT_AB_THREADS to change). HEADCOUNT_AB_ALLOW_DIFF=1 times
# a change that is meant to move the results (a new summation order): A and B may then differ,
# and the last line says whether they did.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 BIN_A BIN_B [ROUNDS] [DTYPE] [SENTENCES]" >&2
  exit 2
fi
a=$1 b=$2 rounds=${3:-5} dtype=${4:-fp32} sts=${5:-../shared/data/stsb/sts-test.tsv}
threads=${HEADCOUNT_AB_THREADS:-2}
for bin in "$a" "$b"; do [[ -x $bin ]] || { echo "$0: '$bin' is not an executable" >&2; exit 2; }; done
[[ -r $sts ]] || { echo "$0: SENTENCES '$sts' is not readable" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{ cut -f6 "$sts"; cut -f7 "$sts"; } > "$work/all.txt"
head -1000 "$work/all.txt" > "$work/first1000.txt"
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "# $(date -u +%FT%H:%MZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $threads threads, dtype $dtype," \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset}"
echo "# A: $a   B: $b"
for batch in 32 1; do
  input=$work/all.txt
  [[ $batch == 1 ]] && input=$work/first1000.txt
  : > "$work/ta"
  : > "$work/tb"
  for ((r = 0; r < rounds; ++r)); do
    for side in a b; do
      bin=$a
      [[ $side == b ]] && bin=$b
      start=$(date +%s.%N)
      "$bin" embed --batch "$batch" --threads "$threads" --dtype "$dtype" --format npy --out "$work/$side.npy" "$input" \
        2> "$work/err" || { cat "$work/err" >&2; exit 1; }
      end=$(date +%s.%N)
      echo "$end - $start" | bc >> "$work/t$side"
    done
    if ! cmp -s "$work/a.npy" "$work/b.npy"; then
      [[ ${HEADCOUNT_AB_ALLOW_DIFF:-0} == 1 ]] || { echo "$0: A and B wrote different embeddings (batch $batch)" >&2; exit 1; }
      differed=1
    fi
  done
  ma=$(median < "$work/ta") mb=$(median < "$work/tb")
  echo "batch $batch ($(wc -l < "$input") sentences): A $(paste -sd' ' "$work/ta") s, median $ma;" \
    "B $(paste -sd' ' "$work/tb") s, median $mb; B/A $(echo "scale=3; $mb / $ma" | bc)"
done
if [[ ${differed:-0} == 1 ]]; then
  echo "# embeddings of A and B: different (HEADCOUNT_AB_ALLOW_DIFF=1)"
else
  echo "# embeddings of A and B: identical, byte for byte, in every round"
fi
