#!/usr/bin/env bash
# Creates bench/peers/.venv (git-ignored): PyTorch, ONNX Runtime, onnx and NumPy from PyPI,
# for peers.py. Never used by CI or by headcount itself. Safe to re-run: it installs only
# when the venv is missing or cannot import the four packages.
#
# PyPI's Linux torch wheel pulls in the NVIDIA CUDA libraries (about 3 GB) although the peer
# benchmarks use only its CPU backends; pip's cache (~/.cache/pip) is reused when present.
# Versions are pinned so that two runs of the peers compare the same software.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${PEERS_VENV:-$here/.venv}
python=${PYTHON:-python3}
packages=(torch==2.15.0 onnxruntime==1.32.0 onnx==1.23.2 numpy==2.4.6)

check='import torch, onnxruntime, onnx, numpy'
if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "$check" 2>/dev/null; then
  echo "setup_peers: $venv is ready" >&2
else
  echo "setup_peers: creating $venv (${packages[*]})" >&2
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet "${packages[@]}"
fi
"$venv/bin/python" - <<'PY' >&2
import numpy, onnx, onnxruntime, torch
print(f"setup_peers: torch {torch.__version__} (CPU capability {torch.backends.cpu.get_cpu_capability()}), "
      f"onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__}, numpy {numpy.__version__}")
PY
