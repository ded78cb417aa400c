#!/usr/bin/env bash
# Installs everything headcount needs to build and test, from Debian packages by name.
# Safe to re-run: it only calls apt-get when a package is missing.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config
  libopenblas-dev        # GEMMs (sgemm, sbgemm); the pthread build
  libcli11-dev           # command line
  nlohmann-json3-dev     # JSON output, safetensors headers
  libgtest-dev           # tests
  libbenchmark-dev       # benchmarks
  python3 python3-numpy  # the independent float64 check of `headcount attention`
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
