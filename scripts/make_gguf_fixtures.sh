#!/usr/bin/env bash
# Makes the GGUF fixtures in tests/testdata/gguf/ from models/SmolLM2-135M-Instruct.Q4_1.gguf
# (scripts/setup.sh fetches it) with independent references: the `gguf` package's dequantize
# (gguf.quants) for the weights, the Hugging Face `tokenizers` crate for the tokenizer, and
# transformers (its GGUF loader and its jinja chat templates) as a cross-check. They live in the
# git-ignored .venv-fixtures, created here with pinned versions (torch only because transformers'
# GGUF loader imports it; accelerate because its model loading asks for it). Only the fixtures are committed. Usage: scripts/make_gguf_fixtures.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-fixtures"
packages=(gguf==0.19.0 numpy==2.4.6 tokenizers==0.23.3 transformers==5.24.0 torch==2.15.0 jinja2==3.1.6
          accelerate==1.16.0)
if ! "$venv/bin/python" -c 'import gguf, numpy, tokenizers, transformers, torch, jinja2, accelerate' 2>/dev/null; then
  echo "make_gguf_fixtures: creating $venv (${packages[*]})" >&2
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${packages[@]}"
fi
exec "$venv/bin/python" "$root/scripts/make_gguf_fixtures.py" "$@"
