#!/usr/bin/env bash
# Interleaved comparison of several (binary, HEADCOUNT_ISA) configurations on the `encoder` or
# `decoder` suite of `headcount bench`: each round runs every configuration once, in an order
# rotated by one each round (so none always runs first), then per row the median over the rounds
# of each configuration's figure is printed, each configuration's ratio to the first one, and,
# within each configuration, bf16's and int8's ratio to fp32 (the same run's rows). How the AMX
# tiles were measured against vdpbf16ps / vpdpbusd and against the previous main (issue 54).
#
#   bench/isa_ab.sh SUITE ROUNDS NAME=BIN@ISA [NAME=BIN@ISA...] -- [bench options...]
#
# ISA is a HEADCOUNT_ISA value, or "best" for none. e.g.
#   bench/isa_ab.sh encoder 3 vnni=build/headcount@avx512_bf16 amx=build/headcount@best -- --threads 2
set -euo pipefail
if [[ $# -lt 3 ]]; then
  echo "usage: $0 encoder|decoder ROUNDS NAME=BIN@ISA [NAME=BIN@ISA...] -- [bench options...]" >&2
  exit 2
fi
suite=$1 rounds=$2
shift 2
[[ $suite == encoder || $suite == decoder ]] || { echo "$0: SUITE must be encoder or decoder, got '$suite'" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "$0: ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; }
names=() bins=() isas=()
while (($#)) && [[ $1 != -- ]]; do
  [[ $1 =~ ^([A-Za-z0-9_.-]+)=(.+)@([a-z0-9_]+)$ ]] || { echo "$0: expected NAME=BIN@ISA, got '$1'" >&2; exit 2; }
  names+=("${BASH_REMATCH[1]}") bins+=("${BASH_REMATCH[2]}") isas+=("${BASH_REMATCH[3]}")
  [[ -x ${BASH_REMATCH[2]} ]] || { echo "$0: '${BASH_REMATCH[2]}' is not an executable" >&2; exit 2; }
  shift
done
[[ ${1:-} == -- ]] && shift
((${#names[@]} >= 1)) || { echo "$0: no configuration given" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "# $(date -u +%FT%H:%MZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
  "(family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | xargs) model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | xargs))," \
  "suite $suite, $rounds rounds, options: $*"
count=${#names[@]}
for ((r = 0; r < rounds; ++r)); do
  for ((j = 0; j < count; ++j)); do
    i=$(((j + r) % count))
    isa=${isas[$i]}
    [[ $isa == best ]] && isa=
    HEADCOUNT_ISA=$isa "${bins[$i]}" bench --suite "$suite" --json "$@" > "$work/${names[$i]}.$r.json" 2> "$work/err" ||
      { cat "$work/err" >&2; exit 1; }
  done
done
python3 - "$work" "$rounds" "$suite" "${names[@]}" <<'EOF'
import json, statistics, sys
work, rounds, suite, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
def load(name, r):
    with open(f"{work}/{name}.{r}.json") as f:
        return json.load(f)["rows"]
if suite == "encoder":  # higher is better: sentences/s per (dtype, batch)
    key = lambda row: (row["dtype"], row["batch"])
    figures = {"sentences/s": (lambda row: row["sentences_per_second"], "gemm_kernel")}
else:
    key = lambda row: (row["weights"],)
    figures = {"prefill tok/s": (lambda row: row["prefill_tokens_per_second"], "gemm_kernel_prefill"),
               "decode tok/s": (lambda row: row["decode_tokens_per_second"], "gemm_kernel_decode")}
runs = {n: [load(n, r) for r in range(rounds)] for n in names}
for fig, (get, kernel_field) in figures.items():
    kernels = {n: {key(row): row.get(kernel_field, "") for row in runs[n][0]} for n in names}
    med = {n: {} for n in names}
    for n in names:
        for k in [key(row) for row in runs[n][0]]:
            vals = [get(row) for r in range(rounds) for row in runs[n][r] if key(row) == k]
            med[n][k] = (statistics.median(vals), min(vals), max(vals))
    print(f"\n## {fig}: median over {rounds} rounds (min-max); ratio to {names[0]}")
    print(f"{'row':<14}" + "".join(f"{n:>26}" for n in names) + "".join(f"{n + '/' + names[0]:>16}" for n in names[1:]))
    for k in med[names[0]]:
        line = f"{' '.join(str(x) for x in k):<14}"
        for n in names:
            m, lo, hi = med[n].get(k, (float('nan'),) * 3)
            line += f"{m:12.1f} ({lo:.1f}-{hi:.1f})".rjust(26)
        for n in names[1:]:
            line += f"{med[n][k][0] / med[names[0]][k][0]:16.3f}"
        print(line)
    print(f"\n### {fig}: within each configuration, against its own fp32 row (same rounds)")
    for n in names:
        for k in med[n]:
            dtype = k[0]
            if dtype in ("f32", "fp32"):
                continue
            base = (("f32" if suite == "encoder" else "fp32"),) + k[1:]
            if base in med[n]:
                print(f"{n:<10} {' '.join(str(x) for x in k):<14} {med[n][k][0] / med[n][base][0]:6.2f}x fp32   [{kernels[n].get(k, '')}]")
EOF
