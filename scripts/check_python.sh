#!/usr/bin/env bash
# The Python package from a build tree configured with -DHEADCOUNT_PYTHON=ON: pytest over
# tests/python with <build>/python on PYTHONPATH (the extension and the package's .py files),
# using the venv scripts/setup.sh makes (.venv: Debian's python3 with numpy and pytest, plus
# nanobind). Usage: scripts/check_python.sh [build-dir] [pytest args...]
# The PyTorch comparisons run when torch imports; with the peers' environment (PyTorch):
#   HEADCOUNT_PYTHON=bench/peers/.venv/bin/python scripts/check_python.sh build
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
python=${HEADCOUNT_PYTHON:-$root/.venv/bin/python}
pythonpath="$build/python"
# An interpreter without pytest (the peers' venv has torch but no pytest): Debian's pytest
# (python3-pytest, pure Python) alone, without the rest of Debian's site-packages (its numpy
# would shadow the venv's).
if ! "$python" -c 'import pytest' 2>/dev/null; then
  shim=$(mktemp -d)
  trap 'rm -rf "$shim"' EXIT
  for p in pytest _pytest pluggy iniconfig py py.py attr attrs; do
    [[ -e /usr/lib/python3/dist-packages/$p ]] && ln -s "/usr/lib/python3/dist-packages/$p" "$shim/$p"
  done
  pythonpath="$pythonpath:$shim"
fi
HEADCOUNT_CLI=$build/headcount PYTHONPATH="$pythonpath" "$python" -m pytest -q -p no:cacheprovider "$root/tests/python" "$@"
