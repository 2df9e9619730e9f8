#pragma once
// A sum over the whole thread block, shared by the step kernels.

#include "backends/cuda/gpu_compat.cuh"

namespace lumen::cuda {

// Sums each of kCount values over a block of kThreads threads; every thread gets the totals.
// `scratch` holds (kThreads / kWarpSize) * kCount floats. Has a barrier before its reads of
// `scratch` and one after, so it may be called again at once, and it publishes every shared
// memory write made before it.
template <int kThreads, int kCount>
__device__ __forceinline__ void BlockSum(float (&values)[kCount], float* scratch) {
  constexpr int kWarps = kThreads / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
#pragma unroll
  for (int j = 0; j < kCount; ++j) values[j] = SumAcrossLaneGroups<1>(values[j]);
  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < kCount; ++j) scratch[warp * kCount + j] = values[j];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kCount; ++j) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += scratch[w * kCount + j];
    values[j] = total;
  }
  __syncthreads();
}

}  // namespace lumen::cuda
