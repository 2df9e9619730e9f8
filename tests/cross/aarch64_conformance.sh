#!/usr/bin/env bash
# Cross-builds lumen for aarch64 (the phones and edge boxes the CPU backend targets) with
# cmake/toolchains/aarch64-linux-gnu.cmake, then runs the conformance vectors and the head
# kernel tests under qemu-user through ctest. Emulated floating point is a few hundred times
# slower than native, so only these two programs run, in parallel. COMPILER: gcc (default,
# aarch64-linux-gnu.cmake) or clang (aarch64-linux-gnu-clang.cmake: clang 14 against the same
# cross toolchain's libraries).
#
#   tests/cross/aarch64_conformance.sh BUILD_DIR [JOBS] [COMPILER]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$1"
jobs="${2:-2}"
case "${3:-gcc}" in
  gcc) toolchain=aarch64-linux-gnu.cmake ;;
  clang) toolchain=aarch64-linux-gnu-clang.cmake ;;
  *) echo "aarch64_conformance.sh: COMPILER is gcc or clang, not '$3'" >&2; exit 2 ;;
esac

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchains/$toolchain" \
  -DLUMEN_ENABLE_CUDA=OFF -DLUMEN_ENABLE_HIP=OFF -DLUMEN_BUILD_TESTS=ON \
  -DLUMEN_BUILD_EXAMPLES=OFF -DLUMEN_BUILD_BINDINGS=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target lumen_conformance_tests lumen_kernel_tests
ctest --test-dir "$build" -j "$jobs" --output-on-failure \
  -R '^lumen_(conformance|kernel)_tests:'
