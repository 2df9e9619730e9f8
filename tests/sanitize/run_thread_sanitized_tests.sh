#!/usr/bin/env bash
# Builds lumen and its threaded tests with ThreadSanitizer in a build directory of their own,
# then runs them there. Any data race, lock-order inversion or misuse of a mutex fails the
# run (halt_on_error); every suppression in tsan.supp names its reason.
#
#   tests/sanitize/run_thread_sanitized_tests.sh SOURCE_DIR BUILD_DIR [JOBS] [COMPILER]
#
# COMPILER: clang (default; clang 14 and its libclang-rt-14-dev runtime) or gcc (GCC 12's
# libtsan2). Both build and pass; CI runs clang's because it fits the budget: on 2 cores
# clang's build took 127 s and its tests 11 s, GCC's build 560 s.
#
# Run there: the C API suite (engines and sessions used from several threads at once, the
# thread-local error messages), the snapshot suite, the thread pool's cases of the kernels'
# suite and the sessions' case that runs one model on 1 and 4 threads. Not run: the
# conformance vectors and the sessions against the reference (single-threaded calls, in the
# plain and the ASan + UBSan builds), the bindings (their interpreters would need the TSan
# runtime preloaded), the GPU tests.
set -euo pipefail

source_dir="$1"
build="$2"
jobs="${3:-2}"
case "${4:-clang}" in
  clang) export CC=clang-14 CXX=clang++-14 ;;
  gcc) export CC=gcc CXX=g++ ;;
  *) echo "run_thread_sanitized_tests.sh: COMPILER is clang or gcc, not '$4'" >&2; exit 2 ;;
esac
flags="-fsanitize=thread -fno-omit-frame-pointer"
# Compile time is most of this run's cost: -O1 with line tables only. The kernels are built
# at every SIMD level, as a user's build is: that is the build whose ifunc resolvers (GCC's
# target_clones, before backends/cpu/kernel_targets.h's tables) crashed TSan before main,
# and the kernels' suite compares each level the CPU has with the baseline here too.
optimize="-O1 -g1 -DNDEBUG"

start=$(date +%s)
cmake -S "$source_dir" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="$optimize" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$optimize" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" \
  -DLUMEN_ENABLE_CUDA=OFF -DLUMEN_ENABLE_HIP=OFF -DLUMEN_BUILD_TESTS=ON \
  -DLUMEN_BUILD_EXAMPLES=OFF -DLUMEN_BUILD_BINDINGS=OFF \
  -DLUMEN_SANITIZED_TESTS=OFF >/dev/null
programs=(lumen_capi_tests lumen_snapshot_tests lumen_kernel_tests lumen_session_tests)
cmake --build "$build" -j "$jobs" --target "${programs[@]}"
built=$(date +%s)

# allocator_may_return_null: a model of 4 EiB must get OUT_OF_MEMORY, as without TSan.
tsan="halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1"
export TSAN_OPTIONS="$tsan:suppressions=$source_dir/tests/sanitize/tsan.supp"
# The sessions' suite only for its threaded case; the exhaustive truncation and bit-flip
# restores, as in the ASan + UBSan run, are left to the plain build and the restore fuzzer.
ctest --test-dir "$build" --output-on-failure -j "$jobs" -LE gpu \
  -R "^(lumen_capi_tests|lumen_snapshot_tests):|^lumen_kernel_tests:ThreadPool|\
^lumen_session_tests:.*threads" \
  -E "every truncation|every single-bit flip"
end=$(date +%s)
echo "run_thread_sanitized_tests.sh: build $((built - start)) s, tests $((end - built)) s"
