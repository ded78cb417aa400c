#!/usr/bin/env bash
# Builds bench/gemm_depth_ab.cpp three times (side A with the library's depth block, side B with
# DEPTH_B, the driver) and runs it: the four MiniLM projections at M rows, A and B alternating
# in one process. Needs an AVX-512 CPU and the Release tree's generated headers (build/include).
#   bench/gemm_depth_ab.sh DEPTH_B M [ROUNDS=40]     (M = 0: one task's rate in cache)
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 DEPTH_B M [ROUNDS]" >&2
  exit 2
fi
depth=$1 m=$2 rounds=${3:-40}
[[ $depth =~ ^[1-9][0-9]*$ ]] || { echo "$0: DEPTH_B must be a positive integer, got '$depth'" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(-O3 -DNDEBUG -std=c++20 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mprefer-vector-width=512
       -ffp-contract=fast "-I$root/include" "-I$root/build/include" "-I$root/src" "-DHC_GEMM_DEPTH_OVERRIDE=$depth")
g++ "${flags[@]}" -DHC_AB_SIDE=1 -c "$root/bench/gemm_depth_ab.cpp" -o "$work/a.o" &
side_a=$!
g++ "${flags[@]}" -DHC_AB_SIDE=2 -c "$root/bench/gemm_depth_ab.cpp" -o "$work/b.o" &
side_b=$!
g++ "${flags[@]}" -c "$root/bench/gemm_depth_ab.cpp" -o "$work/main.o"
wait "$side_a"
wait "$side_b"
g++ "$work/main.o" "$work/a.o" "$work/b.o" -o "$work/gemm_depth_ab"
"$work/gemm_depth_ab" "$m" "$rounds"
