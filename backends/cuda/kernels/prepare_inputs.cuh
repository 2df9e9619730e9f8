#pragma once
// Input preparation for the chunkwise prefill: the raw inputs of a call become the fp32
// arrays ChunkwiseArgs reads, with the layer's options applied (docs/spec.md §2; the same math
// the step kernel fuses in).

#include <cstdint>

#include "backends/cuda/gpu_compat.cuh"
#include "backends/cuda/kernels/layer_math.cuh"

namespace lumen::cuda {

// Where the prepared arrays go (device memory); a null destination is not written.
struct PreparedInputs {
  float* q = nullptr;          // [T, H, K]  phi(l2norm(q)) * scale
  float* k = nullptr;          // [T, H, K]  phi(l2norm(k))
  float* v = nullptr;          // [T, HV, V] fp32
  float* log_decay = nullptr;  // [T, HV] (scalar gate, retention) or [T, HV, K], <= 0
  float* beta = nullptr;       // [T, HV] in [0, 1]
};

// Enqueues the preparation of `num_tokens` tokens on `stream`. No allocation, no
// synchronisation. Returns the launch status.
cudaError_t LaunchPrepareInputs(const LayerConfig& layer, const RawInputs& inputs,
                                int64_t num_tokens, const PreparedInputs& out,
                                cudaStream_t stream);

}  // namespace lumen::cuda
