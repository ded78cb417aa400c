#!/usr/bin/env bash
# Creates bench/peers/.venv-llamacpp (git-ignored) with llama-cpp-python built from its source
# distribution on PyPI (it compiles llama.cpp for this CPU: several minutes), for
# llama_cpp_peer.py. Never used by CI or by headcount itself; installs only when missing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=$here/.venv-llamacpp
packages=(llama-cpp-python==0.3.36 numpy==2.4.6)
if ! "$venv/bin/python" -c 'import llama_cpp, numpy' 2>/dev/null; then
  echo "setup_llama_cpp: creating $venv (${packages[*]})" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${packages[@]}"
fi
"$venv/bin/python" -c 'import llama_cpp; print("setup_llama_cpp: llama-cpp-python", llama_cpp.__version__)' >&2
