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

# The encoder: headcount's embed throughput and its peers (sentence-transformers, ONNX Runtime,
# CTranslate2 fp32 and int8) on the same STS-B test sentences and threads, one after the other
# in this run, with what was running beside them (uptime), when ../shared has STS-B.
sts="$root/../shared/data/stsb/sts-test.tsv"
enc="$results/$stamp.encoder.jsonl"
if [[ -f $sts ]]; then
  echo "run_all: encoder suite and peers -> $enc" >&2
  { echo "{\"uptime\": \"$(uptime)\"}"
    "$build/headcount" bench --suite encoder --threads "$threads" --repeats 3 --sentences "$sts" --json | "$python" -c \
      'import json, sys; [print(json.dumps(r)) for r in json.load(sys.stdin)["rows"]]'
    if [[ ${PEERS:-1} != 0 ]]; then
      "$python" "$root/bench/peers/encoder_peers.py" --threads "$threads" --repeats 3 --file "$sts"
    fi
    echo "{\"uptime\": \"$(uptime)\"}"; } > "$enc"
fi

# The host and software behind every figure: CPU model, OpenBLAS's core (as the environment
# sets it) and every peer's version.
"$python" - "$results/$stamp.env.json" <<'PY'
import ctypes, ctypes.util, importlib, json, os, platform, sys
env = {"cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor()),
       "cores": os.cpu_count(), "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", ""),
       "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE", "")}
try:
    lib = ctypes.CDLL(ctypes.util.find_library("openblas") or "libopenblas.so.0")
    lib.openblas_get_corename.restype = ctypes.c_char_p
    lib.openblas_get_config.restype = ctypes.c_char_p
    env["openblas_core"] = lib.openblas_get_corename().decode()
    env["openblas_config"] = lib.openblas_get_config().decode()
except OSError as e:
    env["openblas_core"] = f"unknown ({e})"
for name in ("torch", "onnxruntime", "onnx", "numpy", "transformers", "sentence_transformers", "ctranslate2", "scipy"):
    try:
        env[name] = importlib.import_module(name).__version__
    except ImportError:
        env[name] = None
json.dump(env, open(sys.argv[1], "w"), indent=2)
print("run_all: " + ", ".join(f"{k} {v}" for k, v in env.items()), file=sys.stderr)
PY
echo "run_all: wrote $results/$stamp.json, $results/$stamp.md, $results/$stamp.env.json and (with STS-B) $enc" >&2
