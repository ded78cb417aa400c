#!/usr/bin/env bash
# One process against P ranks on `headcount embed` and `headcount train`, interleaved rounds,
# medians (a measurement, not a test; docs/distributed.md quotes it).
#
#   bench/mpi_data_ab.sh BIN [RANKS=2] [ROUNDS=3] [SENTENCES=../shared/data/stsb/sts-test.tsv]
#
# embed: the first 1000 sentences of the STS-B file (both columns), --format npy; one process
#   with RANKS threads against RANKS ranks of one thread (--distributed, the sentence split:
#   checks the two files are byte for byte equal; and --split heads: prints the largest
#   difference).
# train: the nanogpt-cpu preset, 100 steps; one process with RANKS threads against RANKS ranks
#   of one thread (--parallel data, and --parallel heads); prints the largest relative
#   difference of a step's loss and the final losses of each.
set -euo pipefail
bin=$1 ranks=${2:-2} rounds=${3:-3} sts=${4:-../shared/data/stsb/sts-test.tsv}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{ cut -f6 "$sts"; cut -f7 "$sts"; } > "$work/all.txt"
head -1000 "$work/all.txt" > "$work/s.txt"
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
secs() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null 2>&1; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
echo "# $(date -u +%FT%H:%MZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < rounds; r++)); do
  secs "$bin" embed "$work/s.txt" --format npy --out "$work/one.npy" --threads "$ranks" >> "$work/e1"
  secs mpirun --oversubscribe -n "$ranks" "$bin" embed "$work/s.txt" --format npy --out "$work/p.npy" \
    --threads 1 --distributed >> "$work/ep"
  cmp -s "$work/one.npy" "$work/p.npy" || { echo "embed: the outputs differ" >&2; exit 1; }
  secs mpirun --oversubscribe -n "$ranks" "$bin" embed "$work/s.txt" --format npy --out "$work/h.npy" \
    --threads 1 --distributed --split heads >> "$work/eh"
  secs "$bin" train --preset nanogpt-cpu --steps 100 --threads "$ranks" --quiet >> "$work/t1"
  secs mpirun --oversubscribe -n "$ranks" "$bin" train --preset nanogpt-cpu --steps 100 --threads 1 \
    --quiet --parallel data >> "$work/tp"
  secs mpirun --oversubscribe -n "$ranks" "$bin" train --preset nanogpt-cpu --steps 100 --threads 1 \
    --quiet --parallel heads >> "$work/th"
done
e1=$(median < "$work/e1") ep=$(median < "$work/ep") t1=$(median < "$work/t1") tp=$(median < "$work/tp")
eh=$(median < "$work/eh") th=$(median < "$work/th")
echo "embed 1000 sentences: one process ($ranks threads) $e1 s, $ranks ranks (1 thread each) $ep s, ratio $(echo "scale=3; $ep / $e1" | bc); outputs byte for byte equal"
echo "embed 1000 sentences, --split heads: $ranks ranks $eh s, ratio $(echo "scale=3; $eh / $e1" | bc)"
echo "train nanogpt-cpu 100 steps: one process ($ranks threads) $t1 s, $ranks ranks $tp s, ratio $(echo "scale=3; $tp / $t1" | bc)"
echo "train nanogpt-cpu 100 steps, --parallel heads: $ranks ranks $th s, ratio $(echo "scale=3; $th / $t1" | bc)"
"${PYTHON:-/usr/bin/python3}" - "$work/one.npy" "$work/h.npy" <<'PY'
import sys
import numpy as np
a, b = (np.load(p).astype(np.float64) for p in sys.argv[1:3])
print(f"embed --split heads: largest difference from one process {np.abs(a - b).max():.3g}")
PY
"$bin" train --preset nanogpt-cpu --steps 100 --threads "$ranks" --json --quiet > "$work/one.json" 2> /dev/null
mpirun --oversubscribe -n "$ranks" "$bin" train --preset nanogpt-cpu --steps 100 --threads 1 --json --quiet \
  --parallel data > "$work/p.json" 2> /dev/null
mpirun --oversubscribe -n "$ranks" "$bin" train --preset nanogpt-cpu --steps 100 --threads 1 --json --quiet \
  --parallel heads > "$work/h.json" 2> /dev/null
python3 - "$work/one.json" "$work/p.json" "$work/h.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))["curve"]["loss"]
for name, path in (("data", sys.argv[2]), ("heads", sys.argv[3])):
    b = json.load(open(path))["curve"]["loss"]
    rel = [abs(x - y) / abs(x) for x, y in zip(a, b)]
    print(f"losses, --parallel {name}: step 0 {a[0]!r} vs {b[0]!r}; step {len(a) - 1} {a[-1]:.6f} "
          f"vs {b[-1]:.6f}; largest relative difference {max(rel):.3g} (step {rel.index(max(rel))})")
PY
