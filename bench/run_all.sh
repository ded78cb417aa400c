#!/usr/bin/env bash
# Runs `headcount bench --suite all` and then the peers (PyTorch, ONNX Runtime) on the same
# shapes and thread count, and writes bench/results/<date>.json (everything) and
# bench/results/<date>.md (the tables). Usage: bench/run_all.sh [threads]  (default: nproc)
# Environment: BUILD (default build/), REPEATS (default 5), PEERS=0 to skip the peers,
# QUICK=1 for headcount's --quick shapes (a smoke test of this script).
# Not part of CI: a full run takes tens of minutes and the peers need bench/peers/.venv,
# which bench/peers/setup_peers.sh creates (several GB from PyPI).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
threads=${1:-$(nproc)}
build=${BUILD:-$root/build}
repeats=${REPEATS:-5}
results="$root/bench/results"
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
mkdir -p "$results"

HEADCOUNT_TARGET=headcount_cli "$root/scripts/build.sh" "$build"
raw="$results/$stamp.headcount.json"
echo "run_all: headcount bench --suite all --threads $threads -> $raw" >&2
quick=()
if [[ ${QUICK:-0} != 0 ]]; then quick=(--quick); fi
"$build/headcount" bench --suite all --threads "$threads" --repeats "$repeats" "${quick[@]}" --json > "$raw"

peers_args=()
python=python3
if [[ ${PEERS:-1} != 0 ]]; then
  "$root/bench/peers/setup_peers.sh"
  python="$root/bench/peers/.venv/bin/python"
else
  peers_args=(--no-peers)
fi
# The peers read headcount's rows from the file, so both sides time the same shapes.
"$python" "$root/bench/peers/peers.py" --headcount-json "$raw" --threads "$threads" \
  --repeats "$repeats" --suites seq,heads,gqa "${peers_args[@]}" \
  --out-json "$results/$stamp.json" --out-md "$results/$stamp.md"
rm -f "$raw"  # its content is inside $stamp.json
echo "run_all: wrote $results/$stamp.json and $results/$stamp.md" >&2
