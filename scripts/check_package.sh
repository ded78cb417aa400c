#!/usr/bin/env bash
# The installed C++ package, as a user would use it: `cmake --install` a build tree into a
# temporary prefix, configure examples/consumer against it (find_package(headcount)), build and
# run it; then compile examples/consumer/pkgconfig_main.cpp with nothing but
# `pkg-config --cflags --libs headcount` and run that. Usage: scripts/check_package.sh [build-dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/prefix" --component dev > /dev/null
for f in include/headcount/attention.h lib/libheadcount.a lib/cmake/headcount/headcountConfig.cmake \
         lib/cmake/headcount/headcountConfigVersion.cmake lib/pkgconfig/headcount.pc; do
  [[ -f $tmp/prefix/$f ]] || { echo "check_package: $f was not installed" >&2; exit 1; }
done

cmake -S "$root/examples/consumer" -B "$tmp/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$tmp/prefix" > /dev/null
cmake --build "$tmp/consumer" > /dev/null
"$tmp/consumer/consumer"

export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
echo "pkg-config --cflags --libs headcount: $(pkg-config --cflags --libs headcount)"
# shellcheck disable=SC2046  # the flags are meant to split
c++ -O1 -o "$tmp/pkgconfig_main" "$root/examples/consumer/pkgconfig_main.cpp" $(pkg-config --cflags --libs headcount)
"$tmp/pkgconfig_main"
echo "check_package: the installed package builds and runs the example; pkg-config finds it"
