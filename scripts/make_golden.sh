#!/usr/bin/env bash
# Regenerates the PyTorch parity fixtures in tests/testdata/golden/.
# Creates the ignored virtual environment .venv-torch (torch + numpy from PyPI) if it is
# missing. Only needed to change the fixtures: CI reads the committed files, not PyTorch.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv-torch"

if [[ ! -x "$venv/bin/python" ]]; then
  echo "make_golden: creating $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet torch numpy
fi

exec "$venv/bin/python" "$root/scripts/make_golden.py" "$@"
