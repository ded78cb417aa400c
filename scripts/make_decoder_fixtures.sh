#!/usr/bin/env bash
# Makes the decoder fixtures in tests/testdata/decoder/ from models/SmolLM2-135M-Instruct.Q4_1.gguf
# (scripts/setup.sh fetches it) with Hugging Face transformers' LlamaForCausalLM loaded from the
# same GGUF (its loader dequantizes through the `gguf` package and undoes llama.cpp's Q/K row
# permutation). They live in the git-ignored .venv-decoder, created here with pinned versions
# (accelerate because transformers' model loading asks for it). Only the fixtures are committed.
# Usage: scripts/make_decoder_fixtures.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-decoder"
packages=(gguf==0.19.0 numpy==2.4.6 transformers==5.24.0 torch==2.15.0 accelerate==1.16.0)
if ! "$venv/bin/python" -c 'import gguf, numpy, transformers, torch, accelerate' 2>/dev/null; then
  echo "make_decoder_fixtures: creating $venv (${packages[*]})" >&2
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${packages[@]}"
fi
exec "$venv/bin/python" "$root/scripts/make_decoder_fixtures.py" "$@"
