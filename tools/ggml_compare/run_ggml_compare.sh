#!/usr/bin/env bash
# Builds ggml's CPU library from a llama.cpp or ggml checkout, lumen's shared library, and
# tools/ggml_compare/ggml_compare.cc against both, then runs the comparison (lumen against ggml's
# GATED_DELTA_NET, SSM_SCAN and GATED_LINEAR_ATTN ops on the same inputs; see the top of
# ggml_compare.cc).
#
#   tools/ggml_compare/run_ggml_compare.sh GGML_SOURCE_DIR [ggml_compare options, see --help]
#
# GGML_SOURCE_DIR is a llama.cpp checkout (its ggml/ folder is used) or a ggml checkout.
# Not part of the build, of ctest or of CI: ggml is not a Debian 12 package and nothing may
# download at build time, so the caller brings the sources.
#
# Environment:
#   PEER_BUILD_DIR     where the builds go (default: build/peer in the repository)
#   LUMEN_TIMING_LOCK  a lock file: when set, the timed run holds it (flock) so that two
#                      timing runs on the machine never overlap
#   JOBS               parallel compile jobs (default 2)
# Builds run at nice 19; the timed run at the caller's priority.
set -euo pipefail
if [[ $# -lt 1 ]]; then
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src="$(cd "$1" && pwd)"
shift
[[ -f "$src/ggml/CMakeLists.txt" ]] && src="$src/ggml"
[[ -f "$src/include/ggml.h" ]] || { echo "no ggml sources in $src" >&2; exit 2; }
build="${PEER_BUILD_DIR:-$root/build/peer}"
jobs="${JOBS:-2}"

# ggml: the CPU backend only, for the machine it runs on (as llama.cpp builds it by default:
# -march=native, OpenMP threads), no BLAS.
nice -n 19 cmake -S "$src" -B "$build/ggml" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DGGML_BLAS=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF \
  >/dev/null
nice -n 19 cmake --build "$build/ggml" -j "$jobs" --target ggml ggml-base ggml-cpu

nice -n 19 cmake -S "$root" -B "$build/lumen" -DCMAKE_BUILD_TYPE=Release \
  -DLUMEN_ENABLE_CUDA=OFF -DLUMEN_ENABLE_HIP=OFF -DLUMEN_BUILD_TESTS=OFF \
  -DLUMEN_BUILD_EXAMPLES=OFF -DLUMEN_BUILD_BINDINGS=OFF >/dev/null
nice -n 19 cmake --build "$build/lumen" -j "$jobs" --target lumen

lumen_lib="$(dirname "$(find "$build/lumen" -name 'liblumen.so' -print -quit)")"
ggml_libs="$(dirname "$(find "$build/ggml" -name 'libggml-cpu.a' -print -quit)")"
nice -n 19 g++ -std=c++17 -O3 -march=native -Wall -Wextra \
  -I "$root/capi/include" -I "$src/include" \
  "$root/tools/ggml_compare/ggml_compare.cc" -o "$build/ggml_compare" \
  -L "$ggml_libs" -lggml -lggml-cpu -lggml-base -fopenmp -lpthread -ldl -lm \
  -L "$lumen_lib" -llumen -Wl,-rpath,"$lumen_lib"

if git -C "$src" rev-parse HEAD >/dev/null 2>&1; then
  echo "ggml sources: $(git -C "$src" rev-parse HEAD)"
fi
if [[ -n "${LUMEN_TIMING_LOCK:-}" ]]; then
  exec flock "$LUMEN_TIMING_LOCK" "$build/ggml_compare" "$@"
fi
exec "$build/ggml_compare" "$@"
