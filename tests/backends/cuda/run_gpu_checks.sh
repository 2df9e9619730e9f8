#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: configures and builds lumen with the CUDA backend, runs the
# GPU tests (ctest label `gpu`) and `lumen bench`. Logs go to $LOG_DIR (default ./gpu-logs).
# Usage: run_gpu_checks.sh [cmake args...], e.g. -DCMAKE_PREFIX_PATH=... -DLUMEN_VECTORS_DIR=...
# Set SKIP_BENCH=1 to leave the benchmark out, QUICK_BENCH=1 for a short one, BUILD_DIR to
# build elsewhere than build-gpu (e.g. a second configuration with -DLUMEN_CUDA_PORTABLE=ON),
# BUILD_ONLY=1 to stop after the build.
set -uo pipefail
cd "$(dirname "$0")/../../.."
log_dir=${LOG_DIR:-gpu-logs}
build_dir=${BUILD_DIR:-build-gpu}
mkdir -p "$log_dir"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
start=$(date +%s)
# The Python binding's GPU test needs a python3 with PyTorch (CMake registers it only then).
python_args=()
python3 -c "import torch" 2>/dev/null && python_args=(-DPython3_EXECUTABLE="$(command -v python3)")
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DLUMEN_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 "${python_args[@]}" "$@" >"$log_dir/configure.log" 2>&1 ||
  { tail -30 "$log_dir/configure.log"; exit 1; }
grep -E "binding|bindings_python_cuda" "$log_dir/configure.log"
targets=(lumen_cuda_tests lumen_conformance_tests lumen_session_tests lumen_capi_tests lumen_cli)
cmake --build "$build_dir" --target help | grep -q lumen_python_capi && targets+=(lumen_python_capi)
cmake --build "$build_dir" -j"$(nproc)" --target "${targets[@]}" >"$log_dir/build.log" 2>&1 ||
  { grep -B2 -A8 -m5 "error" "$log_dir/build.log"; exit 1; }
echo "build: $(($(date +%s) - start)) s"
[[ -n "${BUILD_ONLY:-}" ]] && exit 0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
ctest --test-dir "$build_dir" -L gpu -V --timeout 900 >"$log_dir/ctest.log" 2>&1
tests_status=$?
grep -E "tests passed|Test +#|Failed|FAILED|All tests passed|^[0-9]+: test cases" \
  "$log_dir/ctest.log" | tail -20
if [[ "${SKIP_BENCH:-0}" != 1 ]]; then
  bench_args=()
  [[ "${QUICK_BENCH:-0}" == 1 ]] && bench_args=(--quick)
  "$build_dir"/tools/lumen/lumen bench "${bench_args[@]}" 2>&1 | tee "$log_dir/bench.log"
fi
exit $tests_status
