#!/usr/bin/env bash
# Builds lumen's CPU kernels and their tests with clang 14 in a build directory of their own,
# then runs them there: every SIMD level the CPU has against the baseline and the float64
# recurrence, the vector math at every level, the conformance vectors, and the check that
# each level's objects define nothing outside their namespace. GCC's build (the main one)
# runs the same tests, so both compilers' kernels are tested on every run
# (docs/cpu_dispatch.md).
#
#   tests/clang/run_clang_kernel_tests.sh SOURCE_DIR BUILD_DIR [JOBS]
set -euo pipefail

source_dir="$1"
build="$2"
jobs="${3:-2}"

start=$(date +%s)
CC=clang-14 CXX=clang++-14 cmake -S "$source_dir" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DLUMEN_ENABLE_CUDA=OFF -DLUMEN_ENABLE_HIP=OFF -DLUMEN_BUILD_TESTS=ON \
  -DLUMEN_BUILD_EXAMPLES=OFF -DLUMEN_BUILD_BINDINGS=OFF -DLUMEN_SANITIZED_TESTS=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target lumen_kernel_tests lumen_conformance_tests
built=$(date +%s)

ctest --test-dir "$build" --output-on-failure -j "$jobs" \
  -R "^(lumen_kernel_tests|lumen_conformance_tests):|^lumen_kernel_level_symbols$"
end=$(date +%s)
echo "run_clang_kernel_tests.sh: build $((built - start)) s, tests $((end - built)) s"
