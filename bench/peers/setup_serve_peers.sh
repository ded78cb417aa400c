#!/usr/bin/env bash
# The serving peers for bench/serve_peers.py (issue 52 item 4), each made only when missing:
#   bench/peers/.llama-server/  llama.cpp's llama-server, built from the llama.cpp tree inside
#                               llama-cpp-python 0.3.36's source distribution on PyPI
#                               (vendor/llama.cpp), with setup_llama_cpp.sh's ISA flags (named one by
#                               one, no -march=native: llama.cpp's AMX path dies on the Intel host);
#                               (shared libraries, so that the next one loads the same build);
#   bench/peers/.venv-llamacpp-server/  llama-cpp-python[server] 0.3.36 from the same sdist, its
#                               Python package only (LLAMA_BUILD=OFF): run with
#                               LLAMA_CPP_LIB_PATH=bench/peers/.llama-server/build/bin, it calls the
#                               libllama built above, so both llama.cpp servers run the same kernels;
#   bench/peers/.venv-infinity/ infinity-emb (torch and optimum engines) in its own venv;
#   bench/peers/.infinity-minilm-onnx/  models/all-MiniLM-L6-v2 exported to ONNX by that venv's
#                               optimum-cli (infinity's optimum engine reads only a model.onnx in
#                               the model's directory, and the local copy has the safetensors only).
# All git-ignored; never used by CI or by headcount itself. SERVE_PEERS="llama llamacpp-python"
# (or any subset of llama, llamacpp-python, infinity) makes only those.
# Run it under `nice -n 19` on a shared host: the llama.cpp build takes several minutes on 2 cores.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
which=${SERVE_PEERS:-llama llamacpp-python infinity}
version=0.3.36
has() { grep -qw "$1" /proc/cpuinfo; }

if [[ " $which " == *" llama "* ]]; then
  dir=$here/.llama-server
  bin=$dir/build/bin/llama-server
  if [[ ! -x $bin ]]; then
    mkdir -p "$dir"
    sdist=$dir/llama_cpp_python-$version.tar.gz
    if [[ ! -f $sdist ]]; then
      python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
        -d "$dir" "llama-cpp-python==$version"
    fi
    rm -rf "$dir/src" && mkdir -p "$dir/src"
    tar xzf "$sdist" -C "$dir/src" --strip-components=1 "llama_cpp_python-$version/vendor/llama.cpp"
    cmake_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_F16C=ON"
    has avx2 && cmake_args+=" -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_BMI2=ON"
    has avx512f && cmake_args+=" -DGGML_AVX512=ON"
    has avx512vbmi && cmake_args+=" -DGGML_AVX512_VBMI=ON"
    has avx512_vnni && cmake_args+=" -DGGML_AVX512_VNNI=ON"
    has avx512_bf16 && cmake_args+=" -DGGML_AVX512_BF16=ON"
    cmake_args=${LLAMA_CPP_CMAKE_ARGS:-$cmake_args}
    echo "setup_serve_peers: building llama-server ($cmake_args)" >&2
    # shellcheck disable=SC2086
    cmake -S "$dir/src/vendor/llama.cpp" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release $cmake_args \
      -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=ON >"$dir/cmake.log"
    cmake --build "$dir/build" --target llama-server -j "$(nproc)" >"$dir/build.log"
  fi
  echo "setup_serve_peers: $("$bin" --version 2>&1 | grep -m1 version)" >&2
fi

if [[ " $which " == *" llamacpp-python "* ]]; then
  dir=$here/.llama-server
  venv=$here/.venv-llamacpp-server
  if [[ ! -f $dir/build/bin/libllama.so ]]; then
    echo "setup_serve_peers: llama-cpp-python's server needs the llama build first (SERVE_PEERS=llama)" >&2
    exit 1
  fi
  if ! LLAMA_CPP_LIB_PATH=$dir/build/bin "$venv/bin/python" -c 'import llama_cpp.server.app' 2>/dev/null; then
    echo "setup_serve_peers: creating $venv (llama-cpp-python[server]==$version, LLAMA_BUILD=OFF)" >&2
    python3 -m venv "$venv"
    CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" "$venv/bin/python" -m pip install --quiet \
      --disable-pip-version-check "llama-cpp-python[server] @ file://$dir/llama_cpp_python-$version.tar.gz"
  fi
  LLAMA_CPP_LIB_PATH=$dir/build/bin "$venv/bin/python" -c 'import llama_cpp; print("setup_serve_peers:",
    "llama-cpp-python", llama_cpp.__version__, "on", getattr(llama_cpp.llama_cpp, "_base_path", "?"))' >&2
fi

if [[ " $which " == *" infinity "* ]]; then
  venv=$here/.venv-infinity
  # Pinned so that two runs compare the same software. PyPI's Linux torch wheel pulls in the CUDA
  # libraries (about 3 GB) although only its CPU backend is used.
  packages=("infinity-emb[server,torch,optimum]==${INFINITY_VERSION:-0.0.78}")
  check='import infinity_emb, torch, optimum'
  if ! "$venv/bin/python" -c "$check" 2>/dev/null; then
    echo "setup_serve_peers: creating $venv (${packages[*]})" >&2
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${packages[@]}"
  fi
  onnx=$here/.infinity-minilm-onnx
  minilm=${MINILM_DIR:-$here/../../models/all-MiniLM-L6-v2}
  if [[ ! -f $onnx/model.onnx ]]; then
    HF_HUB_OFFLINE=1 "$venv/bin/optimum-cli" export onnx --model "$minilm" --task feature-extraction \
      --library-name transformers "$onnx" >&2
    cp -r "$minilm"/1_Pooling "$minilm"/modules.json "$minilm"/sentence_bert_config.json \
      "$minilm"/config_sentence_transformers.json "$onnx"/
  fi
  "$venv/bin/python" -c 'import infinity_emb, torch; print("setup_serve_peers: infinity-emb",
    infinity_emb.__version__, "torch", torch.__version__)' >&2
fi
