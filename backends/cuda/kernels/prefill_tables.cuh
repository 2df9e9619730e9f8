#pragma once
// The device tables a prefill reads (cu_seqlens and per-session state pointers), written by
// small kernels whose parameters carry the values: the call needs no host staging buffer and
// no synchronisation, and a graph that captured it replays with that call's values.

#include <cstdint>
#include <vector>

#include "backends/cuda/gpu_compat.cuh"

namespace lumen::cuda {

// Where the tables go (device memory, in the call's scratch).
struct PrefillTables {
  int32_t* cu_seqlens = nullptr;  // [n + 1]
  float** states = nullptr;       // [n]: the fp32 state each session's chunkwise pass updates
  float** normalizers = nullptr;  // [n]: states[s] + matrix_count, or null
  void** stored = nullptr;        // [n]: the session's layer state as stored, or null
  float* wide = nullptr;          // bf16 layers: fp32 copies [n, count] (states[s] points
                                  // here); null: states[s] is the stored block itself
  int64_t count = 0;              // fp32 elements per session in `wide`
  int64_t matrix_count = 0;
};

// Enqueues the writes of the tables for blocks[0..n) and cu_seqlens[0..n] (host values).
cudaError_t LaunchWritePrefillTables(const PrefillTables& tables,
                                     const std::vector<void*>& blocks,
                                     const std::vector<int32_t>& cu_seqlens,
                                     cudaStream_t stream);

}  // namespace lumen::cuda
