#pragma once
// Input value checks on the device (the rules of src/input_domain.h): a call's raw inputs are
// scanned before anything of it runs, and the first value outside its domain, in the CPU's
// order (q, k, g, v, beta; lowest element index first), is kept in an error record in device
// memory. Every kernel that writes state or output reads the record and does nothing while it
// holds an error, so a failing call leaves every session as it was, without the host waiting.

#include <cstdint>

#include "backends/cuda/gpu_compat.cuh"
#include "backends/cuda/kernels/layer_math.cuh"

namespace lumen::cuda {

// The tensors of a call, in the order the CPU backend checks them.
enum : int32_t { kInputQ = 0, kInputK = 1, kInputG = 2, kInputV = 3, kInputBeta = 4 };
// The domains of src/input_domain.h: finite, a log-decay (<= 0), a write strength ([0, 1]),
// one under allow_neg_eigval ([0, 2]).
enum : int32_t { kDomainFinite = 0, kDomainLogGate = 1, kDomainUnit = 2, kDomainDoubleUnit = 3 };

inline constexpr unsigned long long kNoInputError = ~0ull;
// A candidate's key: tensor in the high bits, element index below, so the smallest key is the
// first failing element in the CPU's order.
inline constexpr int kInputIndexBits = 48;

// One engine's record (device memory). Empty: every byte 0xff, except blocks_done = 0.
struct InputErrorRecord {
  unsigned long long error = kNoInputError;      // key of the reported element, or none
  unsigned long long candidate = kNoInputError;  // the running call's smallest key
  unsigned int blocks_done = 0;                  // blocks of the running check that finished
  float value = 0.0f;                            // the element, as fp32
  int32_t domain = kDomainFinite;
  int64_t heads = 0, per_head = 0;  // the tensor's layout [tokens, heads, per_head]
  int64_t session = 0, session_token = 0, num_sessions = 0;
  unsigned long long call = 0;  // RawInputs::call of the failing call
};

// Whether the record holds an error: kernels that change state or output test this first.
__device__ __forceinline__ bool InputFailed(const InputErrorRecord* record) {
  return record != nullptr && *reinterpret_cast<const volatile unsigned long long*>(
                                  &record->error) != kNoInputError;
}

// Enqueues the emptying of `record`.
cudaError_t ClearInputErrorRecord(InputErrorRecord* record, cudaStream_t stream);

// Enqueues the check of every raw input of a call of `num_tokens` tokens over `num_sessions`
// sessions. cu_seqlens (device, [num_sessions + 1]) places each token in its session; null
// means token i is session i's only token (a step). When the record already holds an error
// (an earlier call's, not yet reported) it is kept. With `hold_sequences`, a failing call also
// sets the num_sessions + 1 entries of cu_seqlens to 0, so that kernels reading them (the
// chunkwise prefill) see only empty sequences. No allocation, no synchronisation.
cudaError_t LaunchCheckInputs(const LayerConfig& layer, const RawInputs& inputs,
                              int64_t num_tokens, int32_t num_sessions, int32_t* cu_seqlens,
                              bool hold_sequences, InputErrorRecord* record,
                              cudaStream_t stream);

}  // namespace lumen::cuda
