#!/bin/bash
# Builds the chunkwise kernel test with plain nvcc and runs it on the GPU of this machine:
# the quick checks first, then (if they pass) everything, with the benchmark.
#   tests/backends/cuda/run_chunkwise_test.sh [log directory] [extra test arguments]
# PORTABLE=1 builds the portable kernels instead (-DLUMEN_GPU_PORTABLE: no mma.sync or
# cp.async), as a HIP build compiles them; QUICK=1 stops after the quick checks; BUILD_ONLY=1
# stops after the build (the binary is build/chunkwise[-portable]/chunkwise_kernel_test).
set -euo pipefail
cd "$(dirname "$0")/../../.."
logs="${1:-build/cuda-test}"
shift || true
out=build/chunkwise${PORTABLE:+-portable}
mkdir -p "$logs" "$out"
nvcc=${NVCC:-nvcc}
flags=(-O3 -std=c++17 --threads 0 -I. -Icapi/include -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90)
if [[ -n "${PORTABLE:-}" ]]; then flags+=(-DLUMEN_GPU_PORTABLE); fi
"$nvcc" "${flags[@]}" -Xptxas -v -c backends/cuda/kernels/chunkwise.cu -o "$out/chunkwise.o" \
  > "$logs/ptxas.log" 2>&1 &
"$nvcc" "${flags[@]}" -c tests/backends/cuda/chunkwise_kernel_test.cu -o "$out/chunkwise_kernel_test.o"
wait $! || { cat "$logs/ptxas.log"; exit 1; }
"$nvcc" "$out/chunkwise.o" "$out/chunkwise_kernel_test.o" -o "$out/chunkwise_kernel_test"
if [[ -n "${BUILD_ONLY:-}" ]]; then exit 0; fi
"$out/chunkwise_kernel_test" --quick --no-bench "$@" 2>&1 | tee "$logs/quick.log" | grep -v '^PASS' || true
grep -q ' checks passed' "$logs/quick.log" && ! grep -q '^FAIL' "$logs/quick.log" || exit 1
if [[ -n "${QUICK:-}" ]]; then exit 0; fi
"$out/chunkwise_kernel_test" "$@" 2>&1 | tee "$logs/full.log" | grep -v '^PASS'
