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
#define cudaMemsetAsync hipMemsetAsync
#define __nv_bfloat16 hip_bfloat16
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

// Kernels that use NVIDIA-only instructions (cp.async, mma.sync, ...) keep a portable path
// behind the same interface, chosen at compile time: a HIP build takes it, and so does a CUDA
// build configured with -DLUMEN_CUDA_PORTABLE=ON (which defines LUMEN_GPU_PORTABLE), so the
// portable paths are tested on NVIDIA hardware too.
#if defined(__HIP_PLATFORM_AMD__) || defined(LUMEN_GPU_PORTABLE)
#define LUMEN_GPU_NVIDIA_PATHS 0
#else
#define LUMEN_GPU_NVIDIA_PATHS 1
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

// Copies kBytes (4, 8 or 16) from global to shared memory without holding registers while
// the bytes are in flight (cp.async, sm_80); CopyAsyncWaitAll waits for the calling thread's
// copies. The portable path copies synchronously.
template <int kBytes>
__device__ __forceinline__ void CopyAsync(void* shared_dst, const void* global_src) {
#if !LUMEN_GPU_NVIDIA_PATHS
  __builtin_memcpy(shared_dst, global_src, kBytes);
#else
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global_src));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(address), "l"(global_src),
                 "n"(kBytes));
  }
#endif
}

__device__ __forceinline__ void CopyAsyncCommit() {
#if LUMEN_GPU_NVIDIA_PATHS
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

__device__ __forceinline__ void CopyAsyncWaitAll() {
#if LUMEN_GPU_NVIDIA_PATHS
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Programmatic dependent launch (sm_90): a kernel launched with the programmatic stream
// serialization attribute may start once every block of the kernel before it has called
// AllowDependentLaunch, and WaitForPrerequisiteGrids then waits until that kernel has finished
// and its writes are visible. Elsewhere both are no-ops and launches are plainly ordered.
__device__ __forceinline__ void AllowDependentLaunch() {
#if LUMEN_GPU_NVIDIA_PATHS && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void WaitForPrerequisiteGrids() {
#if LUMEN_GPU_NVIDIA_PATHS && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace lumen::cuda
