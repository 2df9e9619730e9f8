#pragma once
// The one place that names the GPU runtime. The CUDA backend's sources use CUDA's spellings;
// a HIP build (the later ROCm backend) maps them here instead of forking the sources, as
// ggml's vendors/hip.h does. Kernels never write a literal warp width: kWarpSize.

#if defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_bf16.h>
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaStream_t hipStream_t
#define cudaEvent_t hipEvent_t
#define cudaGetLastError hipGetLastError
#define cudaGetErrorString hipGetErrorString
#define cudaGetErrorName hipGetErrorName
#define __nv_bfloat16 hip_bfloat16
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

namespace lumen::cuda {

#if defined(__HIP_PLATFORM_AMD__)
inline constexpr int kWarpSize = 64;
#else
inline constexpr int kWarpSize = 32;
#endif

// Sum of `value` over the lanes of a warp whose lane index differs only in the bits of
// [first_mask, kWarpSize): lanes that share the low bits add together.
template <int kFirstMask>
__device__ __forceinline__ float SumAcrossLaneGroups(float value) {
#pragma unroll
  for (int mask = kFirstMask; mask < kWarpSize; mask <<= 1) {
#if defined(__HIP_PLATFORM_AMD__)
    value += __shfl_xor(value, mask);
#else
    value += __shfl_xor_sync(0xffffffffu, value, mask);
#endif
  }
  return value;
}

}  // namespace lumen::cuda
