#!/usr/bin/env bash
# Every test on a fresh Debian 12 machine: sets up and builds with the test dependencies
# (setup.sh --tests), then runs ctest: everything but the GPU tests, and then the GPU tests
# (label `gpu`) where this machine has an NVIDIA GPU and the build has the CUDA backend.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh --tests
ctest --test-dir build --output-on-failure -j"$(nproc)" -LE gpu
gpu_tests=$(ctest --test-dir build -N -L gpu | sed -n 's/^Total Tests: //p')
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "test.sh: no NVIDIA GPU on this machine:" \
       "the ${gpu_tests:-0} GPU tests (ctest -L gpu) did not run"
elif [[ "${gpu_tests:-0}" == 0 ]]; then
  echo "test.sh: this machine has a GPU but the build has no CUDA backend (nvcc was not found):" \
       "no GPU test was built or run"
else
  ctest --test-dir build --output-on-failure -L gpu
fi
