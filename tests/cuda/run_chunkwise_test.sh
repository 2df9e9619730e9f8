#!/bin/bash
# Builds the chunkwise kernel test with plain nvcc and runs it on the GPU of this machine:
# the quick checks first, then (if they pass) everything, with the benchmark.
#   tests/cuda/run_chunkwise_test.sh [log directory] [extra test arguments]
set -euo pipefail
cd "$(dirname "$0")/../.."
logs="${1:-build/cuda-test}"
shift || true
mkdir -p "$logs" build
nvcc=${NVCC:-nvcc}
flags=(-O3 -std=c++17 -I. -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90)
"$nvcc" "${flags[@]}" -Xptxas -v -c backends/cuda/kernels/chunkwise.cu -o build/chunkwise.o \
  > "$logs/ptxas.log" 2>&1 &
"$nvcc" "${flags[@]}" -c tests/cuda/chunkwise_kernel_test.cu -o build/chunkwise_kernel_test.o
wait $! || { cat "$logs/ptxas.log"; exit 1; }
"$nvcc" build/chunkwise.o build/chunkwise_kernel_test.o -o build/chunkwise_kernel_test
build/chunkwise_kernel_test --quick --no-bench "$@" 2>&1 | tee "$logs/quick.log" | grep -v '^PASS' || true
grep -q ' checks passed' "$logs/quick.log" && ! grep -q '^FAIL' "$logs/quick.log" || exit 1
build/chunkwise_kernel_test "$@" 2>&1 | tee "$logs/full.log" | grep -v '^PASS'
