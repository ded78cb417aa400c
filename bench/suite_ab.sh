#!/usr/bin/env bash
# Interleaved A/B of two headcount binaries on one `headcount bench` suite: A's and B's JSON runs
# alternate, A B then B A (so a drift of the host hits both and neither always runs first); then
# each row's B/A ratio of the median seconds over the rounds is printed, with the spread of the
# per-round ratios. Rows are matched by their shape fields; rows only one binary has are counted
# as unmatched. Suites that report tokens/s (decoder) are compared as seconds per token, a row per
# phase (prefill, decode, batched decode).
#
#   bench/suite_ab.sh BIN_A BIN_B SUITE [ROUNDS=3] [extra bench options...]
#
# e.g. bench/suite_ab.sh old/headcount build/headcount seq 3 --threads 2 --repeats 5
set -euo pipefail
if [[ $# -lt 3 ]]; then
  echo "usage: $0 BIN_A BIN_B SUITE [ROUNDS] [bench options...]" >&2
  exit 2
fi
a=$1 b=$2 suite=$3 rounds=${4:-3}
shift $(($# < 4 ? $# : 4))
for bin in "$a" "$b"; do [[ -x $bin ]] || { echo "$0: '$bin' is not an executable" >&2; exit 2; }; done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "$0: ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "# $(date -u +%FT%H:%MZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), suite $suite, $rounds rounds," \
  "options: $*, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
echo "# A: $a   B: $b"
for ((r = 0; r < rounds; ++r)); do
  order="a b"
  ((r % 2)) && order="b a"  # A B, B A, A B, ...: neither binary always runs first
  for side in $order; do
    bin=$a
    [[ $side == b ]] && bin=$b
    "$bin" bench --suite "$suite" --json "$@" > "$work/$side.$r.json" 2> "$work/err" ||
      { cat "$work/err" >&2; exit 1; }
  done
done
python3 - "$work" "$rounds" <<'EOF'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
KEY = ("op", "kernel", "dtype", "batch", "heads", "kv_heads", "head_dim", "q_len", "kv_len",
       "causal", "d_model", "threads", "weights", "sequences")
# Suites that report rates (decoder: tokens/s) are compared as seconds per token, one row per
# phase.
RATES = ("prefill", "decode", "batched_decode")

def rows(side, r):
    with open(f"{work}/{side}.{r}.json") as f:
        doc = json.load(f)
    out = {}
    for row in doc["rows"]:
        if row.get("status", "ok") != "ok":
            continue
        key = tuple(row.get(k) for k in KEY)
        if "seconds" in row:
            out[key + ("",)] = row["seconds"]
        for phase in RATES:
            rate = row.get(f"{phase}_tokens_per_second")
            if rate:
                out[key + (phase,)] = 1.0 / rate
    return out

a = [rows("a", r) for r in range(rounds)]
b = [rows("b", r) for r in range(rounds)]
keys = [k for k in a[0] if all(k in x for x in a + b)]
print(f"{'row':<56} {'A s':>10} {'B s':>10} {'B/A':>7} {'per round':>16}")
ratios = []
for k in keys:
    ma = statistics.median(x[k] for x in a)
    mb = statistics.median(x[k] for x in b)
    per = [b[r][k] / a[r][k] for r in range(rounds)]
    ratios.append(mb / ma)
    f = dict(zip(KEY + ("phase",), k))
    if f["phase"]:
        name = " ".join(str(x) for x in (f["weights"], f["phase"], "s/token",
                                          f"x{f['sequences']}" if f["sequences"] else "") if x)
    else:
        name = " ".join(str(x) for x in (
            f["op"] or "", f["kernel"], f["dtype"], f"b{f['batch']}",
            f"h{f['heads']}/{f['kv_heads']}", f"d{f['head_dim']}", f"q{f['q_len']}",
            f"k{f['kv_len']}", "causal" if f["causal"] else "",
            f"dm{f['d_model']}" if f["d_model"] else "") if x)
    print(f"{name:<56} {ma:10.5f} {mb:10.5f} {mb / ma:7.3f} {min(per):7.3f}-{max(per):.3f}")
unmatched = len(set(a[0]) ^ set(b[0]))
print(f"# {len(keys)} rows matched, {unmatched} unmatched; median B/A over rows "
      f"{statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}")
EOF
