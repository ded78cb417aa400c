#!/usr/bin/env bash
# Out of memory at the CLI boundary: under `ulimit -v`, `headcount attention --probs` on inputs
# whose probabilities need 2.1 GB must fail with one line on stderr and exit code 2 (not abort,
# not be killed), and leave no output. Usage: out_of_memory_check.sh <headcount> <python3>
set -euo pipefail
cli=$1 python=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# q, k, v [1, 23000, 1, 1]: probs [1, 1, 23000, 23000] f32 = 2.1 GB.
"$python" - "$dir" <<'PY'
import sys, numpy as np
for name in "qkv":
    np.save(f"{sys.argv[1]}/{name}.npy", np.full((1, 23000, 1, 1), 0.5, dtype=np.float32))
PY
set +e
(ulimit -v 1500000; "$cli" attention --q "$dir/q.npy" --k "$dir/k.npy" --v "$dir/v.npy" \
   --out "$dir/out.npy" --probs "$dir/probs.npy") > "$dir/stdout" 2> "$dir/stderr"
code=$?
set -e
err=$(cat "$dir/stderr")
if [[ $code -ne 2 || $err != "headcount: error: out of memory" ]]; then
  echo "expected exit 2 and 'headcount: error: out of memory', got exit $code and:"; cat "$dir/stderr"; exit 1
fi
leftover=$(find "$dir" -name 'out.npy*' -o -name 'probs.npy*')
if [[ -n $leftover ]]; then echo "outputs left behind: $leftover"; exit 1; fi
echo "ok: exit 2, '$err', no output written"
