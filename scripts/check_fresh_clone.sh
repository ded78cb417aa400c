#!/usr/bin/env bash
# A fresh clone runs the main job: `git clone` this repository into a temporary directory (with
# no ../shared beside it, as on a user's machine) and run the clone's scripts/main.sh --quick
# with an already-built binary, then check that the report and every output were written and
# that the STS-B step said where to put the file. Usage: scripts/check_fresh_clone.sh BINARY
# The model comes from the binary's default directory (scripts/setup.sh fetches it; a clone
# would fetch its own); exit 77 (skipped) when it is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
if [[ ! -f $root/models/all-MiniLM-L6-v2/model.safetensors && -z ${HEADCOUNT_MODEL:-} ]]; then
  echo "check_fresh_clone: no model (run scripts/setup.sh): skipped"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone --quiet "$root" "$tmp/headcount"
[[ ! -e $tmp/shared ]]
start=$(date +%s)
HEADCOUNT_BIN=$bin HEADCOUNT_OUT=$tmp/out HEADCOUNT_STSB='' "$tmp/headcount/scripts/main.sh" --quick > "$tmp/log" 2>&1 ||
  { cat "$tmp/log"; echo "check_fresh_clone: main.sh failed" >&2; exit 1; }
report=$tmp/out/main-report.txt
fail() { cat "$tmp/log"; echo "check_fresh_clone: $*" >&2; exit 1; }
[[ -s $report ]] || fail "no report"
grep -q "^headcount [0-9]" "$report" || fail "no version line"
grep -q "projections (Q, K, V, O together): 1,048,576 weights, 1,048,576,000 multiply-adds" "$report" || fail "no cost table"
grep -q "main: no STS-B file, skipping the STS-B score: put sts-test.tsv in $tmp/shared/data/stsb/" "$report" ||
  fail "no line saying where to put STS-B"
for f in embeddings.npy head-sweep-quick.html heads-report.html; do
  [[ -s $tmp/out/$f ]] || fail "$f not written"
done
grep -qF "$tmp/headcount/data/pride-and-prejudice.txt" "$tmp/out/heads-report.html" || fail "the heads report did not use the committed text"
/usr/bin/python3 - "$tmp/out/embeddings.npy" <<'PY' || fail "embeddings.npy is not [16, 384] float32"
import sys, numpy as np
e = np.load(sys.argv[1])
assert e.shape == (16, 384) and e.dtype == np.float32 and np.all(np.isfinite(e)), (e.shape, e.dtype)
PY
echo "check_fresh_clone: a clone without ../shared ran main.sh --quick in $(($(date +%s) - start)) s; report and outputs written"
