#!/usr/bin/env bash
# Builds and runs every test twice: a Release build, then a build under AddressSanitizer
# + UndefinedBehaviorSanitizer. Assumes scripts/setup.sh has run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
# Each section header carries the minutes since the start, so a CI log shows what each step took.
section() { awk -v s="$SECONDS" -v t="$1" 'BEGIN { printf "== [%5.1f min] %s\n", s / 60, t }'; }

section "Formatting (.clang-format) and levels (includes point down, docs/architecture.md)"
"$root/scripts/check_format.sh"
python3 "$root/scripts/check_levels.py" "$root"

section "Release build and tests"
# The Python extension is built in the same tree, against the same library objects (no second
# compile of the library); nanobind comes from the venv scripts/setup.sh makes.
python_args=(-DHEADCOUNT_PYTHON=ON -DPython_EXECUTABLE="$root/.venv/bin/python")
# HEADCOUNT_MPI: attention over MPI ranks and its tests under mpirun (1 to 4 ranks, a rank killed).
"$root/scripts/build.sh" "$root/build" "${python_args[@]}" -DHEADCOUNT_MPI=ON
ctest --test-dir "$root/build" --output-on-failure -j"$jobs"

section "Python package (pytest), the installed CMake package, main.sh on a fresh clone"
"$root/scripts/check_python.sh" "$root/build"
"$root/scripts/check_package.sh" "$root/build"
rc=0; "$root/scripts/check_fresh_clone.sh" "$root/build/headcount" || rc=$?
((rc == 0 || rc == 77)) || exit "$rc"

section "AddressSanitizer + UndefinedBehaviorSanitizer build and tests, then the fuzz targets"
# One clang tree serves both: the library carries ASan + UBSan, and libFuzzer's coverage hooks in
# the readers the fuzz targets reach (CMakeLists.txt, HEADCOUNT_FUZZED_SOURCES), so the same
# objects link the test suite and the nine fuzz targets (fuzz/). clang compiles this about 1.8x
# faster than GCC does with the same sanitizers (their .ninja_log on 2 cores: 747 s against 1346 s
# for the library); with the hooks in every kernel loop the suite took 1398 s against GCC's 497 s.
clang=$(command -v clang++-14 || command -v clang++)
"$root/scripts/build.sh" "$root/build-asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$clang" \
  -DHEADCOUNT_SANITIZE=ON -DHEADCOUNT_FUZZ=ON
ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$root/build-asan" --output-on-failure -j"$jobs"
# 40 s a target (60 until 2026-12-03, when CI reached 43 of its ~40 minutes; docs/performance.md's CI runs
# record no crash at 60 s); long runs are `scripts/fuzz.sh 600` or -runs=10000000 (docs/performance.md's fuzzing target).
FUZZ_BUILD="$root/build-asan" "$root/scripts/fuzz.sh" 40

# Hardening (issue 15): the threads under ThreadSanitizer and the kernels with the instruction set
# forced down.
section "ThreadSanitizer: thread pool, kernel, decode, encoder and serve scheduler tests"
# clang, like the ASan tree: on 2 cores this section took 7.7 min with GCC's TSan build and 3 min
# with clang's (150 s build + 32 s of tests, 2026-12-02); both report a planted race.
HEADCOUNT_TARGET=headcount_tsan_tests "$root/scripts/build.sh" "$root/build-tsan" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$clang" -DHEADCOUNT_TSAN=ON -DHEADCOUNT_BUILD_TESTS=OFF
# Under TSan every case runs ~20x slower: the pool's own test, one shard in ten of the kernel
# case table, the decode cases, then the encoder (MiniLM, several thread counts).
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 GTEST_TOTAL_SHARDS=10 GTEST_SHARD_INDEX=0 \
  "$root/build-tsan/headcount_tsan_tests" --gtest_filter='Context.*:CaseTable/*:Cases/DecodeKernel.*:LayerDecode.*'
TSAN_OPTIONS=halt_on_error=1 "$root/build-tsan/headcount_tsan_tests" --gtest_filter='MiniLM.*'
# headcount serve's schedulers (continuous batching with chunked prefill, dynamic batching) fed
# from four threads, with cancels and deadlines: the scheduler threads, the readers, the pool.
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "$root/build-tsan/headcount_tsan_tests" \
  --gtest_filter='DecoderScheduler.*:EmbeddingScheduler.*'
# The streaming kernel's two regions per chunk of copied K/V heads (long keys; wide V rows, k600),
# and its finiteness check on the pool (the case table's shard above may not hold these cases).
TSAN_OPTIONS=halt_on_error=1 "$root/build-tsan/headcount_tsan_tests" \
  --gtest_filter='KernelValidation.Streaming*:*StreamingIsBitwiseIdenticalForOneAndTwoThreads/*_k12000_*:*StreamingIsBitwiseIdenticalForOneAndTwoThreads/*_k45000_*:*StreamingIsBitwiseIdenticalForOneAndTwoThreads/*_k600*'


section "Kernel tests with the instruction set forced down (HEADCOUNT_ISA)"
kernel_tests='CaseTable/KernelCase.*:TileKernels.*:VectorExp.*:Cases/DecodeKernel.*:AttentionBackward.*:Table/BackwardCases.*:IsaSwitch.*:QBlockGemm.*'
for isa in avx2 generic; do
  HEADCOUNT_ISA=$isa "$root/build/headcount_tests" --gtest_filter="$kernel_tests" --gtest_brief=1
done
section "done"
