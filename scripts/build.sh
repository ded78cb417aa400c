#!/usr/bin/env bash
# Configures and builds headcount. Usage: scripts/build.sh [build-dir] [extra cmake args...]
# HEADCOUNT_TARGET=<target> builds one target only (e.g. headcount_cli).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" > /dev/null
cmake --build "$build" ${HEADCOUNT_TARGET:+--target "$HEADCOUNT_TARGET"}
