#pragma once
// Conversions around the fp32 kernels: bf16-stored states widened to fp32 working copies and
// rounded back (the chunkwise prefill reads fp32 state), inputs read as fp32, and fp32 results
// stored as the caller's output dtype (with Mamba-2's D skip added on the way).

#include <cstdint>

#include "backends/cuda/gpu_compat.cuh"
#include "backends/cuda/kernels/input_check.cuh"

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

// dst[0..count) = src[0..count) read as `dtype` (a lumen_dtype value), in fp32 (nothing when
// dst is null).
// `after_previous`: launched as a programmatic dependent of the kernel before it on the
// stream (LaunchKernel), as in a one-token step's chain of launches; likewise below.
cudaError_t LaunchToFloats(const void* src, DType dtype, float* dst, int64_t count,
                           cudaStream_t stream, bool after_previous = false);

// The output of a call: o[i] = o32[i] (+ D[head] * x[i], Mamba-2's skip, when x and d_skip are
// given) stored as `dtype`, for count = T * HV * V elements; o may be o32 when dtype is fp32.
// Writes nothing while the input check's record holds an error.
cudaError_t LaunchFinishOutput(const float* o32, const float* x, const float* d_skip,
                               int32_t num_value_heads, int32_t value_dim, void* o,
                               DType dtype, int64_t count, const InputErrorRecord* record,
                               cudaStream_t stream, bool after_previous = false);

}  // namespace lumen::cuda
