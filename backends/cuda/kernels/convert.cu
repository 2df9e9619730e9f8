// Element-wise conversions; for states, grid y is the session.

#include "backends/cuda/kernels/convert.cuh"

#include "backends/cuda/kernels/layer_math.cuh"

#include <algorithm>

namespace lumen::cuda {
namespace {

constexpr int kThreads = 256;
static_assert(kThreads % kMaxWarpSize == 0, "blocks of whole warps on every target");
constexpr int32_t kMaxGridY = 65535;

__global__ void WidenKernel(const void* const* stored, float* const* wide, int64_t count) {
  const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(stored[blockIdx.y]);
  float* dst = wide[blockIdx.y];
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * kThreads) {
    dst[i] = __bfloat162float(src[i]);
  }
}

__global__ void NarrowKernel(const float* const* wide, void* const* stored, int64_t count) {
  const float* src = wide[blockIdx.y];
  __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(stored[blockIdx.y]);
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * kThreads) {
    dst[i] = __float2bfloat16_rn(src[i]);
  }
}

// Reads only the call's raw inputs: as a dependent launch it runs beside the kernel before it,
// and waits for it only at the end (see LaunchKernel).
__global__ void ToFloatsKernel(const void* src, DType dtype, float* dst, int64_t count) {
  AllowDependentLaunch();
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * kThreads) {
    dst[i] = LoadElement(src, i, dtype);
  }
  WaitForPrerequisiteGrids();
}

__global__ void FinishOutputKernel(const float* o32, const float* x, const float* d_skip,
                                   int32_t num_value_heads, int32_t value_dim, void* o,
                                   DType dtype, int64_t count,
                                   const InputErrorRecord* record) {
  WaitForPrerequisiteGrids();  // the step's o, and the check's record
  if (InputFailed(record)) return;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * kThreads) {
    float value = o32[i];
    if (x != nullptr) value += d_skip[i / value_dim % num_value_heads] * x[i];
    StoreElement(o, i, dtype, value);
  }
}

dim3 Grid(int64_t count, int32_t n) {
  const int64_t blocks = std::min<int64_t>((count + kThreads - 1) / kThreads, 1024);
  return dim3(static_cast<uint32_t>(std::max<int64_t>(blocks, 1)), static_cast<uint32_t>(n));
}

}  // namespace

cudaError_t LaunchWidenStates(const void* const* stored, float* const* wide, int64_t count,
                              int32_t n, cudaStream_t stream) {
  for (int32_t first = 0; first < n; first += kMaxGridY) {
    WidenKernel<<<Grid(count, std::min(n - first, kMaxGridY)), kThreads, 0, stream>>>(
        stored + first, wide + first, count);
    if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

cudaError_t LaunchNarrowStates(const float* const* wide, void* const* stored, int64_t count,
                               int32_t n, cudaStream_t stream) {
  for (int32_t first = 0; first < n; first += kMaxGridY) {
    NarrowKernel<<<Grid(count, std::min(n - first, kMaxGridY)), kThreads, 0, stream>>>(
        wide + first, stored + first, count);
    if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

cudaError_t LaunchToFloats(const void* src, DType dtype, float* dst, int64_t count,
                           cudaStream_t stream, bool after_previous) {
  if (dst == nullptr || count == 0) return cudaSuccess;
  return LaunchKernel(ToFloatsKernel, Grid(count, 1), dim3(kThreads), 0, after_previous, stream,
                      src, dtype, dst, count);
}

cudaError_t LaunchFinishOutput(const float* o32, const float* x, const float* d_skip,
                               int32_t num_value_heads, int32_t value_dim, void* o,
                               DType dtype, int64_t count, const InputErrorRecord* record,
                               cudaStream_t stream, bool after_previous) {
  if (count == 0) return cudaSuccess;
  return LaunchKernel(FinishOutputKernel, Grid(count, 1), dim3(kThreads), 0, after_previous,
                      stream, o32, x, d_skip, num_value_heads, value_dim, o, dtype, count, record);
}

}  // namespace lumen::cuda
