#!/usr/bin/env bash
# Builds lumen and its tests with AddressSanitizer and UndefinedBehaviorSanitizer (GCC) in a
# build directory of their own, then runs the test suite there. Any report fails the run:
# UBSan does not recover, ASan aborts on its first error, LeakSanitizer checks every exit.
#
#   tests/sanitize/run_sanitized_tests.sh SOURCE_DIR BUILD_DIR [JOBS]
#
# Not run there: the restore fuzzer (it has its own ASan + UBSan build), the install check
# (it builds unsanitized consumers against the installed library), the aarch64 cross build
# (its own tree, under qemu), the GPU tests (the sanitized build is CPU only) and the
# bindings (their interpreters cannot load an ASan library without preloading its runtime).
set -euo pipefail

source_dir="$1"
build="$2"
jobs="${3:-2}"
flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
# Compile time is most of this run's cost: -O1 with line tables only (ASan's recommended
# level; stack traces keep file and line) and one build of the CPU kernels instead of one per
# SIMD level (LUMEN_CPU_SIMD_LEVELS=OFF: the same source; the plain build tests every level)
# halve it.
optimize="-O1 -g1 -DNDEBUG"

start=$(date +%s)
cmake -S "$source_dir" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="$optimize" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$optimize" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DLUMEN_ENABLE_CUDA=OFF -DLUMEN_BUILD_TESTS=ON -DLUMEN_BUILD_EXAMPLES=OFF \
  -DLUMEN_BUILD_BINDINGS=OFF -DLUMEN_CPU_SIMD_LEVELS=OFF \
  -DLUMEN_SANITIZED_TESTS=OFF >/dev/null
# The test programs only (not the benchmarks, the CLI or the kernels' second build).
programs=(lumen_capi_tests lumen_session_tests lumen_conformance_tests lumen_kernel_tests
          lumen_snapshot_tests lumen_store_tests lumen_tentative_tests)
cmake --build "$build" -j "$jobs" --target "${programs[@]}"
built=$(date +%s)

# allocator_may_return_null: a model of 4 EiB must get OUT_OF_MEMORY, as without ASan.
asan="detect_leaks=1:allocator_may_return_null=1:abort_on_error=1"
export ASAN_OPTIONS="$asan:detect_stack_use_after_return=1:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# Left out to keep CI within its budget (each still runs in the plain build): the exhaustive
# truncation and bit-flip restores, which the restore fuzzer covers under ASan + UBSan, and
# the short main job, a long stream of the same steps the session tests make.
pattern=$(IFS='|'; echo "${programs[*]}")
ctest --test-dir "$build" --output-on-failure -j "$jobs" -LE gpu -R "^($pattern):" \
  -E "every truncation|every single-bit flip"
end=$(date +%s)
echo "run_sanitized_tests.sh: build $((built - start)) s, tests $((end - built)) s"
