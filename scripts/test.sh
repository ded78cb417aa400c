#!/usr/bin/env bash
# Builds and runs every test twice: a Release build, then a build under AddressSanitizer
# + UndefinedBehaviorSanitizer. Assumes scripts/setup.sh has run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)

echo "== Release build and tests"
# The Python extension is built in the same tree, against the same library objects (no second
# compile of the library); nanobind comes from the venv scripts/setup.sh makes.
python_args=(-DHEADCOUNT_PYTHON=ON -DPython_EXECUTABLE="$root/.venv/bin/python")
"$root/scripts/build.sh" "$root/build" "${python_args[@]}"
ctest --test-dir "$root/build" --output-on-failure -j"$jobs"

echo "== Python package (pytest), the installed CMake package, main.sh on a fresh clone"
"$root/scripts/check_python.sh" "$root/build"
"$root/scripts/check_package.sh" "$root/build"
rc=0; "$root/scripts/check_fresh_clone.sh" "$root/build/headcount" || rc=$?
((rc == 0 || rc == 77)) || exit "$rc"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build and tests"
"$root/scripts/build.sh" "$root/build-asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHEADCOUNT_SANITIZE=ON
ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$root/build-asan" --output-on-failure -j"$jobs"
