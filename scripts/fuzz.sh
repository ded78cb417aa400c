#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang + ASan + UBSan) and runs each for N seconds.
# Usage: scripts/fuzz.sh [seconds-per-target (default 60)] [target...]
#   FUZZ_JOBS=2        targets run at once (default: 2, what CI has)
#   FUZZ_BUILD=dir     build directory (default build-fuzz); a tree already configured with
#                      -DHEADCOUNT_FUZZ=ON (scripts/test.sh's sanitizer build) is reused as it is
#   TMPDIR             scratch for the model-directory target (default /dev/shm when writable)
# Each target starts from the committed seeds (fuzz/corpus/<target>) with its dictionary
# (fuzz/dict/<target>.dict); new inputs go to $FUZZ_BUILD/corpus/<target>, crashes to
# $FUZZ_BUILD/artifacts/<target>/. Prints the executions per target; exits 1 if any crashed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
shift || true
build=${FUZZ_BUILD:-$root/build-fuzz}
jobs=${FUZZ_JOBS:-2}
all=(safetensors npy encoder_config wordpiece sts attention_options gguf bpe serve_request)
targets=("${@:-${all[@]}}")
cxx=${FUZZ_CXX:-$(command -v clang++-14 || command -v clang++)}

if ! grep -qs '^HEADCOUNT_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
    -DHEADCOUNT_FUZZ=ON -DHEADCOUNT_BUILD_TESTS=OFF ${FUZZ_CMAKE_ARGS:-} > /dev/null
fi
cmake --build "$build" --target "${targets[@]/#/fuzz_}"

# encoder_config writes a model directory per input: in memory it runs several times faster.
if [[ -z ${TMPDIR:-} && -w /dev/shm ]]; then export TMPDIR=/dev/shm; fi

run_one() {
  local t=$1
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
  # -rss_limit_mb: a reader that allocates what a header claims instead of what the file holds
  # is a bug to report, not a machine to swap; -timeout: likewise a reader that loops.
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=print_stacktrace=1 \
    "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -dict="$root/fuzz/dict/$t.dict" -artifact_prefix="$build/artifacts/$t/" \
    "$build/corpus/$t" "$root/fuzz/corpus/$t" > "$build/fuzz_$t.log" 2>&1
}

for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  rm -f "$build/fuzz_$t.rc"
  (if run_one "$t"; then echo ok; else echo CRASH; fi > "$build/fuzz_$t.rc") &
done
wait

failed=0
for t in "${targets[@]}"; do
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$build/fuzz_$t.log" | grep -o '[0-9]*$' || echo "?")
  result=$(cat "$build/fuzz_$t.rc")
  printf 'fuzz %-18s %-5s %12s executions in %ss (log %s)\n' "$t" "$result" "$runs" "$seconds" "$build/fuzz_$t.log"
  if [[ $result != ok ]]; then
    failed=1
    grep -m5 -E 'ERROR|SUMMARY|assertion|Test unit written' "$build/fuzz_$t.log" || true
  fi
done
exit "$failed"
