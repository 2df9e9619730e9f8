#pragma once
// Chunkwise prefill on the GPU: the contract between the CUDA backend, which prepares the
// inputs, and the kernel, which runs every (sequence, value head) of a call.

#include <cstdint>

#include "backends/cuda/gpu_compat.cuh"
#include "src/layer_traits.h"

namespace lumen::cuda {

// One prefill call, already validated and prepared by the backend. Every pointer is device
// memory; the tokens of all sequences are concatenated along T.
struct ChunkwiseArgs {
  const float* q;          // [T, H, K]; phi, qk_l2norm and scale already applied
  const float* k;          // [T, H, K]; phi and qk_l2norm already applied
  const float* v;          // [T, HV, V]
  const float* log_decay;  // [T, HV] (kScalar) or [T, HV, K] (kPerChannel), <= 0; else null
  const float* beta;       // [T, HV] in [0, 1] when delta_rule; else null
  float* o;                // [T, HV, V], written for every token
  float* const* states;    // [num_sequences] each [HV, K, V] fp32, read and updated in place
  // [num_sequences] each [HV, K] fp32 (linear_attn's normalizer z), or null when !normalize.
  float* const* normalizers;
  const int32_t* cu_seqlens;  // [num_sequences + 1]; a sequence may be empty
  int32_t num_sequences = 0;
  int32_t max_seqlen = 0;     // the longest sequence (host-side knowledge, for the grid)
  int32_t num_heads = 0;        // H
  int32_t num_value_heads = 0;  // HV, a multiple of H; value head hv reads q/k head hv / (HV / H)
  int32_t key_dim = 0;          // K, any value the model accepts (1 .. 16384)
  int32_t value_dim = 0;        // V, likewise
  GateKind decay = GateKind::kNone;
  bool delta_rule = false;      // delta_net, gated_delta_net, kda
  bool normalize = false;       // o = (S^T q) / (q . z + normalize_eps), z += k per token
  float normalize_eps = 1e-6f;
};

// Enqueues the call on `stream` and returns the launch status (cudaGetLastError after the
// launches). Uses no host synchronisation and allocates nothing, so it can be captured in a
// CUDA graph. Scratch, if any, comes from `scratch` (`ChunkwiseScratchBytes` bytes, device).
cudaError_t LaunchChunkwise(const ChunkwiseArgs& args, void* scratch, cudaStream_t stream);

// Device scratch bytes LaunchChunkwise needs for `args` (0 when none).
int64_t ChunkwiseScratchBytes(const ChunkwiseArgs& args);

// `shape` with every array a launch reads or writes pointed at a placeholder (the sizing
// functions check the arguments as a launch would, pointers included, but read only the
// shapes): for sizing a call before its buffers exist. Never launch it.
ChunkwiseArgs SizingArgs(ChunkwiseArgs shape);

// The most ChunkwiseScratchBytes over every call of 1 .. args.num_sequences sequences whose
// longest holds args.max_seqlen tokens (what a reservation must cover). The size does not grow
// steadily with the number of sequences; this finds the largest without trying each.
int64_t MostChunkwiseScratchBytes(const ChunkwiseArgs& args);

}  // namespace lumen::cuda
