#!/usr/bin/env bash
# Creates bench/peers/.venv (git-ignored): PyTorch, ONNX Runtime, onnx, NumPy, transformers,
# sentence-transformers, CTranslate2 and SciPy from PyPI, for peers.py and encoder_peers.py.
# Never used by CI or by headcount itself. Safe to re-run: it installs only when the venv is
# missing or cannot import the packages.
#
# PyPI's Linux torch wheel pulls in the NVIDIA CUDA libraries (about 3 GB) although the peer
# benchmarks use only its CPU backends; pip's cache (~/.cache/pip) is reused when present.
# Versions are pinned so that two runs of the peers compare the same software.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${PEERS_VENV:-$here/.venv}
python=${PYTHON:-python3}
packages=(torch==2.15.0 onnxruntime==1.32.0 onnx==1.23.2 numpy==2.4.6 transformers==5.24.0
          sentence-transformers==6.2.0 ctranslate2==4.8.5 scipy==1.17.1)

check='import torch, onnxruntime, onnx, numpy, transformers, sentence_transformers, ctranslate2, scipy'
if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "$check" 2>/dev/null; then
  echo "setup_peers: $venv is ready" >&2
else
  echo "setup_peers: creating $venv (${packages[*]})" >&2
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet "${packages[@]}"
fi
"$venv/bin/python" - <<'PY' >&2
import ctranslate2, numpy, onnx, onnxruntime, scipy, sentence_transformers, torch, transformers
print(f"setup_peers: torch {torch.__version__} (CPU capability {torch.backends.cpu.get_cpu_capability()}), "
      f"onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__}, numpy {numpy.__version__}, "
      f"transformers {transformers.__version__}, sentence-transformers {sentence_transformers.__version__}, "
      f"ctranslate2 {ctranslate2.__version__}, scipy {scipy.__version__}")
PY
