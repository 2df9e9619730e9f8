#pragma once
// Where each layer call's arrays sit in the CUDA backend's device scratch: the fp32 results of
// the convolution and Mamba-2 passes (the "extras") and a prefill's tables and arrays, each
// laid out from a call's shape; and the most scratch a reservation needs.

#include <cstdint>

#include "backends/cuda/gpu_compat.cuh"
#include "backends/cuda/kernels/chunkwise.cuh"
#include "backends/cuda/kernels/layer_math.cuh"
#include "backends/cuda/kernels/short_conv.cuh"
#include "src/backend.h"
#include "src/layer_spec.h"

namespace lumen::cuda {

inline int64_t RoundUp(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// Lays out one call's device scratch: Add reserves a region and returns its offset.
class ScratchLayout {
 public:
  int64_t Add(int64_t bytes) {
    const int64_t offset = total_;
    total_ += RoundUp(bytes);
    return offset;
  }
  int64_t total() const { return total_; }

 private:
  int64_t total_ = 0;
};

// Where the convolution and Mamba-2 passes put their results in their part of the scratch
// (byte offsets; -1 = not used): the fp32 inputs the other kernels read instead of the raw
// ones and, for a step with D, the fp32 output the skip is added to.
struct ExtrasPlan {
  int64_t q = -1, k = -1, v = -1, x = -1, g = -1, beta = -1, o = -1;
  int64_t total = 0;
};

template <typename T>
T* At(char* base, int64_t offset) {
  return offset >= 0 ? reinterpret_cast<T*>(base + offset) : nullptr;
}

// Mamba-2's layer: ssd with a raw gate (dt scaling, and the D skip where given).
bool IsMamba2(const LayerSpec& spec);

// For a call of T tokens, a prefill or a step; nothing for a layer without those passes.
ExtrasPlan PlanExtras(const LayerSpec& spec, int64_t T, bool chunkwise);
ExtrasPlan PlanExtras(const LayerSpec& spec, const LayerRun& run);

// The fp32 arrays of `plan` (in `extras`) as the raw inputs of the kernels after it.
RawInputs ExtrasAsInputs(const ExtrasPlan& plan, char* extras);
// The same arrays as the convolution pass's outputs.
ConvOutputs ExtrasOutputs(const ExtrasPlan& plan, char* extras);

// g and beta as fp32 into the extras (the convolution pass converts q, k and v);
// after_previous as for LaunchToFloats.
cudaError_t LaunchGatesToFloats(const LayerSpec& spec, const RawInputs& inputs, int64_t T,
                                const ConvOutputs& out, cudaStream_t stream,
                                bool after_previous = false);

// Where a prefill's arrays sit in its part of the scratch (byte offsets; -1 = not used). The
// device tables come first (written by LaunchWritePrefillTables).
struct PrefillPlan {
  int64_t cu_seqlens = -1;   // int32 [N + 1]
  int64_t states = -1;       // float* [N]: the fp32 state of each session (or its wide copy)
  int64_t normalizers = -1;  // float* [N], normalised layers only
  int64_t stored = -1;       // void* [N]: the bf16 states, bf16 layers only
  int64_t tables_bytes = 0;
  int64_t q = -1, k = -1, v = -1, log_decay = -1, beta = -1, o = -1, wide = -1, chunk = -1;
  int64_t total = 0;
};

// What a prefill's scratch depends on.
struct PrefillShape {
  int64_t sessions = 0;
  int64_t tokens = 0;
  DType input_dtype = DType::kFloat32;  // what the preparation reads: fp32 after a conv
  DType output_dtype = DType::kFloat32;
  int64_t chunk_bytes = 0;  // ChunkScratchBytes
};

// Floats of one session's layer state: the matrices and the normalizer.
int64_t StateCount(const LayerSpec& spec);

// Tokens of the call's longest sequence.
int32_t LongestSequence(const LayerRun& run);

// The chunkwise kernel's arguments that depend on the layer and the call's shape only.
ChunkwiseArgs ChunkwiseShape(const LayerSpec& spec, int32_t num_sequences, int32_t longest);

// The chunkwise kernel's scratch for `num_sequences` sequences, the longest of `longest`
// tokens.
int64_t ChunkScratchBytes(const LayerSpec& spec, int32_t num_sequences, int32_t longest);

PrefillPlan PlanPrefill(const LayerSpec& spec, const PrefillShape& shape);
PrefillPlan PlanPrefill(const LayerSpec& spec, const LayerRun& run);

// The dtype of the inputs the prefill's preparation reads: fp32 after the convolution pass.
DType PreparedInputDtype(const LayerSpec& spec, DType input_dtype);

// The chunkwise kernel's most scratch over every number of sequences up to max_sessions, one
// of them holding all max_tokens tokens (its scratch never shrinks as a sequence grows).
int64_t MostChunkScratchBytes(const LayerSpec& spec, int32_t max_sessions,
                              int32_t max_tokens);

// The most scratch (bytes) any call over device buffers of at most `max_sessions` sessions
// and `max_tokens` tokens on layer `spec` takes, prefill or step, in any dtype. Each region
// of the scratch is taken at its largest: a 16-bit input and output (the fp32 copies), all
// sessions (the tables, bf16 states' wide copies), all tokens, and the chunkwise kernel's
// `chunk_bytes` (MostChunkScratchBytes).
int64_t ReservedBytes(const LayerSpec& spec, int32_t max_sessions, int32_t max_tokens,
                      int64_t chunk_bytes);

}  // namespace lumen::cuda
