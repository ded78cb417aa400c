#!/usr/bin/env bash
# Creates bench/peers/.venv-llamacpp (git-ignored) with llama-cpp-python built from its source
# distribution on PyPI (it compiles llama.cpp for this CPU: several minutes), for
# llama_cpp_peer.py. Never used by CI or by headcount itself; installs only when missing.
#
# llama.cpp is built for this CPU's AVX2 / AVX-512 / VNNI / BF16 instructions, named one by one
# rather than with -march=native: on the Intel test host (which advertises AMX) llama.cpp's AMX
# path dies in ldtilecfg with SIGSEGV (2026-12-06), and headcount uses no AMX tiles for int8
# either, so the peer runs the same vector units headcount does. LLAMA_CPP_CMAKE_ARGS replaces
# the choice.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=$here/.venv-llamacpp
packages=(llama-cpp-python==0.3.36 numpy==2.4.6)
has() { grep -qw "$1" /proc/cpuinfo; }
cmake_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_F16C=ON"
has avx2 && cmake_args+=" -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_BMI2=ON"
has avx512f && cmake_args+=" -DGGML_AVX512=ON"
has avx512vbmi && cmake_args+=" -DGGML_AVX512_VBMI=ON"
has avx512_vnni && cmake_args+=" -DGGML_AVX512_VNNI=ON"
has avx512_bf16 && cmake_args+=" -DGGML_AVX512_BF16=ON"
cmake_args=${LLAMA_CPP_CMAKE_ARGS:-$cmake_args}
if ! "$venv/bin/python" -c 'import llama_cpp, numpy' 2>/dev/null; then
  echo "setup_llama_cpp: creating $venv (${packages[*]}; CMAKE_ARGS=$cmake_args)" >&2
  python3 -m venv "$venv"
  CMAKE_ARGS=$cmake_args "$venv/bin/pip" install --quiet --disable-pip-version-check \
    --no-cache-dir "${packages[@]}"
fi
"$venv/bin/python" -c 'import llama_cpp; print("setup_llama_cpp: llama-cpp-python", llama_cpp.__version__)' >&2
