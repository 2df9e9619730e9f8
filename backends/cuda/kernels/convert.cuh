#pragma once
// Conversions around the fp32 kernels: bf16-stored states widened to fp32 working copies and
// rounded back (the chunkwise prefill reads fp32 state), and fp32 results stored as the
// caller's output dtype.

#include <cstdint>

#include "backends/cuda/gpu_compat.cuh"

namespace lumen::cuda {

// For each of n sessions, wide[s][0..count) = stored[s][0..count) (bf16 to fp32). The pointer
// tables are device memory.
cudaError_t LaunchWidenStates(const void* const* stored, float* const* wide, int64_t count,
                              int32_t n, cudaStream_t stream);

// For each of n sessions, stored[s][0..count) = round_to_bf16(wide[s][0..count)).
cudaError_t LaunchNarrowStates(const float* const* wide, void* const* stored, int64_t count,
                               int32_t n, cudaStream_t stream);

}  // namespace lumen::cuda

namespace lumen::cuda {

// dst[0..count) = src[0..count) converted to `dtype` (a lumen_dtype value).
cudaError_t LaunchStoreFloats(const float* src, void* dst, int32_t dtype, int64_t count,
                              cudaStream_t stream);

}  // namespace lumen::cuda
