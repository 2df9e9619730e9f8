#pragma once
// The one place that names the GPU runtime. The CUDA backend's sources use CUDA's spellings;
// the ROCm build compiles the same files as HIP (backends/rocm/sources.cmake), and this header
// maps the spellings there instead of forking the sources, as ggml's vendors/hip.h does.
// Kernels never write a literal warp width: kWarpSize.
//
// The HIP build also compiles these files with `cuda` defined as `rocm`, so its code lands in
// namespace lumen::rocm and a library may hold both backends (backends/rocm/sources.cmake).

#if defined(__HIP__)
#include <hip/hip_bfloat16.h>
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

// Runtime types and constants.
#define cudaDeviceProp hipDeviceProp_t
#define cudaDevAttrComputeCapabilityMajor hipDeviceAttributeComputeCapabilityMajor
#define cudaDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define cudaDevAttrMaxSharedMemoryPerMultiprocessor \
  hipDeviceAttributeMaxSharedMemoryPerMultiprocessor
#define cudaError_t hipError_t
#define cudaEvent_t hipEvent_t
#define cudaStream_t hipStream_t
#define cudaStreamCaptureStatus hipStreamCaptureStatus
#define cudaStreamCaptureStatusNone hipStreamCaptureStatusNone
#define cudaStreamCaptureMode hipStreamCaptureMode
#define cudaStreamCaptureModeRelaxed hipStreamCaptureModeRelaxed
#define cudaSuccess hipSuccess
#define cudaErrorInvalidValue hipErrorInvalidValue
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaErrorNotReady hipErrorNotReady
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaFuncAttributePreferredSharedMemoryCarveout \
  hipFuncAttributePreferredSharedMemoryCarveout
#define cudaSharedmemCarveoutMaxShared 100
// Runtime calls (HIP 5.2's API).
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventDestroy hipEventDestroy
#define cudaEventQuery hipEventQuery
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaFree hipFree
#define cudaFreeHost hipHostFree
#define cudaFuncSetAttribute LumenHipFuncSetAttribute
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaGetErrorName hipGetErrorName
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaMalloc hipMalloc
#define cudaMallocHost hipHostMalloc
#define cudaMemGetInfo hipMemGetInfo
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemset hipMemset
#define cudaMemsetAsync hipMemsetAsync
#define cudaSetDevice hipSetDevice
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamIsCapturing hipStreamIsCapturing
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaThreadExchangeStreamCaptureMode hipThreadExchangeStreamCaptureMode

// AMD GPUs have a fixed local data share and no shared-memory carveout to prefer: that hint
// is a no-op there; every other attribute goes to the runtime.
inline hipError_t LumenHipFuncSetAttribute(const void* kernel, hipFuncAttribute attribute,
                                           int value) {
  if (attribute == hipFuncAttributePreferredSharedMemoryCarveout) return hipSuccess;
  return hipFuncSetAttribute(kernel, attribute, value);
}

// bf16: HIP 5.2 has no cuda_bf16.h counterpart, only hip_bfloat16 (one uint16_t, converted
// from float with round-to-nearest-even), so the few intrinsics used are spelled here.
#define __nv_bfloat16 hip_bfloat16
struct LumenHipBFloat162 {
  hip_bfloat16 x, y;
};
#define __nv_bfloat162 LumenHipBFloat162
__device__ __forceinline__ float __bfloat162float(hip_bfloat16 value) {
  return static_cast<float>(value);
}
__device__ __forceinline__ hip_bfloat16 __float2bfloat16_rn(float value) {
  return hip_bfloat16(value);
}
__device__ __forceinline__ float __low2float(LumenHipBFloat162 pair) {
  return static_cast<float>(pair.x);
}
__device__ __forceinline__ float __high2float(LumenHipBFloat162 pair) {
  return static_cast<float>(pair.y);
}
__device__ __forceinline__ LumenHipBFloat162 __floats2bfloat162_rn(float low, float high) {
  return {hip_bfloat16(low), hip_bfloat16(high)};
}

// What the shared backend code calls its runtime and itself (LUMEN_GPU_BACKEND needs lumen.h).
#define LUMEN_GPU_RUNTIME_NAME "HIP"
#define LUMEN_GPU_BACKEND LUMEN_BACKEND_ROCM
#define LUMEN_GPU_BACKEND_NAME "ROCm"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define LUMEN_GPU_RUNTIME_NAME "CUDA"
#define LUMEN_GPU_BACKEND LUMEN_BACKEND_CUDA
#define LUMEN_GPU_BACKEND_NAME "CUDA"
#endif

#include <utility>

#include "backends/cuda/lane_sums.h"

// Kernels that use NVIDIA-only instructions (cp.async, mma.sync, ...) keep a portable path
// behind the same interface, chosen at compile time: a HIP build takes it, and so does a CUDA
// build configured with -DLUMEN_CUDA_PORTABLE=ON (which defines LUMEN_GPU_PORTABLE), so the
// portable paths are tested on NVIDIA hardware too.
#if defined(__HIP__) || defined(LUMEN_GPU_PORTABLE)
#define LUMEN_GPU_NVIDIA_PATHS 0
#else
#define LUMEN_GPU_NVIDIA_PATHS 1
#endif

namespace lumen::cuda {

// Lanes of a warp (NVIDIA) or wavefront (AMD) on the target being compiled. AMD's width
// depends on the target: 64 on gfx9 (gfx908, gfx90a), 32 on gfx10 and later (HIP 5.2 does not
// run gfx10 in wave64 mode). HIP's host pass only parses kernels and sizes no launch by it.
#if defined(__HIP_DEVICE_COMPILE__)
inline constexpr int kWarpSize = __AMDGCN_WAVEFRONT_SIZE;
#elif defined(__HIP__)
inline constexpr int kWarpSize = 64;
#else
inline constexpr int kWarpSize = 32;
#endif

// Every block size is a multiple of the widest warp, so that it holds whole warps on every
// target (kernels static_assert it on their block sizes).
inline constexpr int kMaxWarpSize = 64;

// Sum of `value` over the lanes of the warp whose index differs only in the bits of
// [kFirstMask, kWarpSize): lanes that share the low bits add together (lane_sums.h).
template <int kFirstMask>
__device__ __forceinline__ float SumAcrossLaneGroups(float value) {
  return LaneGroupSum<kFirstMask, kWarpSize>(value, [](float lane_value, int mask) {
#if defined(__HIP__)
    return __shfl_xor(lane_value, mask, kWarpSize);
#else
    return __shfl_xor_sync(0xffffffffu, lane_value, mask);
#endif
  });
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

// Waits until at most kPending of the calling thread's most recently committed copy groups
// are still in flight.
template <int kPending>
__device__ __forceinline__ void CopyAsyncWaitGroup() {
#if LUMEN_GPU_NVIDIA_PATHS
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
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

// Launches `kernel`; with `after_previous` (NVIDIA paths) as a programmatic dependent of the
// kernel before it on `stream`: it may start once that kernel's blocks have called
// AllowDependentLaunch, and must call WaitForPrerequisiteGrids before it reads anything that
// kernel writes, and before it exits, so that its own completion implies its predecessor's.
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                         bool after_previous, cudaStream_t stream, Args&&... args) {
#if LUMEN_GPU_NVIDIA_PATHS
  if (after_previous) {
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  }
#else
  (void)after_previous;
#endif
  kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
  return cudaGetLastError();
}

}  // namespace lumen::cuda
