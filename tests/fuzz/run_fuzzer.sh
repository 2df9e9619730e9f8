#!/usr/bin/env bash
# Builds the restore fuzzer with clang-14 (ASan + UBSan + libFuzzer) in build-fuzz, writes its
# seed corpus, and fuzzes lumen_session_restore for a bounded time.
#
#   tests/fuzz/run_fuzzer.sh [SECONDS]        default 60
#
# Environment: LUMEN_FUZZ_BUILD_DIR (default <repo>/build-fuzz), LUMEN_FUZZ_JOBS (build
# parallelism, default 2), LUMEN_FUZZ_ARGS (extra libFuzzer flags).
# Exits non-zero on any crash, leak, timeout, out-of-memory or sanitizer report; the input
# that triggered it is kept under $build/artifacts/.
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${LUMEN_FUZZ_BUILD_DIR:-$root/build-fuzz}"
jobs="${LUMEN_FUZZ_JOBS:-2}"

cmake -S "$root/tests/fuzz" -B "$build" -DCMAKE_C_COMPILER=clang-14 \
  -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$jobs" --target lumen_restore_fuzzer lumen_restore_seeds

fuzzer="$(find "$build" -type f -name lumen_restore_fuzzer -perm -u+x | head -n1)"
seeder="$(find "$build" -type f -name lumen_restore_seeds -perm -u+x | head -n1)"
seeds="$build/restore_seeds"
corpus="$build/restore_corpus"
artifacts="$build/artifacts"
log="$build/restore_fuzzer.log"
rm -rf "$seeds"
mkdir -p "$seeds" "$corpus" "$artifacts"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
"$seeder" "$seeds"

status=0
# The corpus directory comes first: new inputs are written there, the seeds are only read.
# shellcheck disable=SC2086
"$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -detect_leaks=1 \
  -print_final_stats=1 -dict="$root/tests/fuzz/restore.dict" \
  -artifact_prefix="$artifacts/" ${LUMEN_FUZZ_ARGS:-} "$corpus" "$seeds" 2>&1 | tee "$log" \
  || status=$?

if grep -qE "ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|runtime error:|invariant violated|SUMMARY: " "$log"; then
  echo "run_fuzzer.sh: sanitizer or fuzzer report in $log" >&2
  [ "$status" -ne 0 ] || status=1
fi
if [ "$status" -ne 0 ]; then
  echo "run_fuzzer.sh: FAILED (exit $status); artifacts in $artifacts" >&2
  ls -l "$artifacts" >&2 || true
  exit "$status"
fi
echo "run_fuzzer.sh: no findings in ${seconds} s; corpus $(ls "$corpus" | wc -l) files in $corpus"
