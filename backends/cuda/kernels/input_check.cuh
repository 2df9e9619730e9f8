#pragma once
// Input value checks on the device (the rules of src/input_domain.h): a call's raw inputs are
// scanned before anything of it runs, and the first value outside its domain, in the CPU's
// order (q, k, g, v, beta; lowest element index first), is kept in an error record in device
// memory. Every kernel that writes state or output reads the record and does nothing while it
// holds an error, so a failing call leaves every session as it was, without the host waiting.
// A check launch does the scan (LaunchCheckInputs), or, for a small step, each block of the
// step kernel itself (BlockFindsInputError), which saves a launch.

#include <cstdint>

#include "backends/cuda/gpu_compat.cuh"
#include "backends/cuda/kernels/layer_math.cuh"

namespace lumen::cuda {

// The tensors of a call, in the order the CPU backend checks them.
enum : int32_t { kInputQ = 0, kInputK = 1, kInputG = 2, kInputV = 3, kInputBeta = 4 };
// The domains of src/input_domain.h: finite, a log-decay (<= 0), a write strength ([0, 1]).
enum : int32_t { kDomainFinite = 0, kDomainLogGate = 1, kDomainUnit = 2 };

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
};

// Whether the record holds an error: kernels that change state or output test this first.
__device__ __forceinline__ bool InputFailed(const InputErrorRecord* record) {
  return record != nullptr && *reinterpret_cast<const volatile unsigned long long*>(
                                  &record->error) != kNoInputError;
}

// One tensor of a call as the checks read it.
struct CheckedTensor {
  const void* data = nullptr;
  int64_t count = 0;  // elements; 0 when the layer has no such input
  int64_t heads = 0, per_head = 0;
  int32_t domain = kDomainFinite;
};

// Every raw input of a call, kInputQ .. kInputBeta.
struct CheckedInputs {
  CheckedTensor tensors[5];
  int32_t dtype = kFloat32;
};

// The raw inputs of a call of `num_tokens` tokens, as the checks read them.
CheckedInputs InputsToCheck(const LayerConfig& layer, const RawInputs& inputs,
                            int64_t num_tokens);

// Elements of every tensor of `inputs` together.
int64_t CheckedElementCount(const CheckedInputs& inputs);

constexpr float kLargestFinite = 3.40282347e+38f;  // FLT_MAX, as in src/input_domain.h

__device__ __forceinline__ bool Inside(float value, int32_t domain) {
  const float low = domain == kDomainUnit ? 0.0f : -kLargestFinite;
  const float high =
      domain == kDomainFinite ? kLargestFinite : domain == kDomainLogGate ? 0.0f : 1.0f;
  return value >= low && value <= high;  // false for NaN
}

// Makes the call's smallest candidate the record (unless an earlier error is still there) and
// holds the sequences of a failing call. One thread, after every candidate of the call is in.
__device__ inline void FinishCheck(const CheckedInputs& args, int32_t num_sessions,
                                   int32_t* cu_seqlens, bool hold_sequences,
                                   InputErrorRecord* record) {
  const unsigned long long key = atomicExch(&record->candidate, kNoInputError);
  if (record->error == kNoInputError && key != kNoInputError) {
    const int tensor = static_cast<int>(key >> kInputIndexBits);
    const int64_t index = static_cast<int64_t>(key & ((1ull << kInputIndexBits) - 1));
    const CheckedTensor& t = args.tensors[tensor];
    record->value = LoadElement(t.data, index, args.dtype);
    record->domain = t.domain;
    record->heads = t.heads;
    record->per_head = t.per_head;
    const int64_t token = index / (t.heads * t.per_head);
    int64_t session = token, first = token;
    if (cu_seqlens != nullptr) {
      // The last offset at or before the token (empty sessions before it share its offset).
      int32_t low = 0, high = num_sessions;  // cu_seqlens[low] <= token < cu_seqlens[high]
      while (high - low > 1) {
        const int32_t middle = (low + high) / 2;
        if (cu_seqlens[middle] <= token) {
          low = middle;
        } else {
          high = middle;
        }
      }
      session = low;
      first = cu_seqlens[low];
    }
    record->session = session;
    record->session_token = token - first;
    record->num_sessions = num_sessions;
    record->error = key;
  }
  if (hold_sequences && record->error != kNoInputError) {
    for (int32_t s = 0; s <= num_sessions; ++s) cu_seqlens[s] = 0;
  }
}

// Lowers the record's candidate to the first element of `args` outside its domain that the
// threads `first, first + stride, ...` find. Every candidate is in once all such threads
// have returned (and their writes are visible).
__device__ inline void LowerCandidate(const CheckedInputs& args, int64_t first, int64_t stride,
                                      InputErrorRecord* record) {
#pragma unroll 1
  for (int tensor = 0; tensor < 5; ++tensor) {
    const CheckedTensor& t = args.tensors[tensor];
    for (int64_t i = first; i < t.count; i += stride) {
      if (!Inside(LoadElement(t.data, i, args.dtype), t.domain)) {
        atomicMin(&record->candidate,
                  (static_cast<unsigned long long>(tensor) << kInputIndexBits) |
                      static_cast<unsigned long long>(i));
        break;  // later elements of this thread have larger keys
      }
    }
  }
}

// Element e of a 16-byte chunk of a tensor of `dtype`, as fp32 (exactly as LoadElement).
__device__ __forceinline__ float ChunkElement(const uint32_t (&words)[4], int e, int32_t dtype) {
  if (dtype == kFloat32) return __uint_as_float(words[e]);
  const uint32_t bits = (words[e / 2] >> (16 * (e % 2))) & 0xffffu;
  if (dtype == kBFloat16) return __uint_as_float(bits << 16);
  const uint16_t half_bits = static_cast<uint16_t>(bits);
  __half value;
  __builtin_memcpy(&value, &half_bits, sizeof(value));
  return __half2float(value);
}

// Whether any element of `args` that this block reads lies outside its domain. The block
// reads every tensor as one run of 16-byte chunks (thread threadIdx.x takes chunks
// threadIdx.x, + blockDim.x, ...), eight loads in flight before the first test, so a small
// call's inputs take a few round trips to L2. A tensor not aligned for 16-byte loads, and the
// elements past a tensor's last whole chunk, are read element by element.
__device__ inline bool BlockReadsOutside(const CheckedInputs& args) {
  const int32_t dtype = args.dtype;
  const int64_t per_chunk = dtype == kFloat32 ? 4 : 8;
  int64_t chunks[5], chunk_end[5];
  int64_t total = 0;
#pragma unroll
  for (int tensor = 0; tensor < 5; ++tensor) {
    const CheckedTensor& t = args.tensors[tensor];
    const bool aligned = reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
    chunks[tensor] = aligned ? t.count / per_chunk : 0;
    total += chunks[tensor];
    chunk_end[tensor] = total;
  }
  // Batches of kBatch chunks per thread: every load of a batch is issued before any test.
  constexpr int kBatch = 8;
  bool outside = false;
  for (int64_t base = threadIdx.x; base < total; base += kBatch * int64_t{blockDim.x}) {
    uint4 raw[kBatch];
    int32_t domains[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t j = base + u * int64_t{blockDim.x};
      domains[u] = -1;  // past the last chunk
      if (j < total) {
        const void* data = args.tensors[0].data;
        int32_t domain = args.tensors[0].domain;
        int64_t start = 0;
#pragma unroll
        for (int tensor = 1; tensor < 5; ++tensor) {
          if (j >= chunk_end[tensor - 1]) {
            data = args.tensors[tensor].data;
            domain = args.tensors[tensor].domain;
            start = chunk_end[tensor - 1];
          }
        }
        raw[u] = static_cast<const uint4*>(data)[j - start];
        domains[u] = domain;
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (domains[u] < 0) continue;
      const uint32_t words[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (e < per_chunk) outside |= !Inside(ChunkElement(words, e, dtype), domains[u]);
      }
    }
  }
#pragma unroll 1
  for (int tensor = 0; tensor < 5; ++tensor) {
    const CheckedTensor& t = args.tensors[tensor];
    for (int64_t i = chunks[tensor] * per_chunk + threadIdx.x; i < t.count; i += blockDim.x) {
      outside |= !Inside(LoadElement(t.data, i, dtype), t.domain);
    }
  }
  return outside;
}

// The input check of a small call done inside its step kernel: each block reads the whole
// call's raw inputs itself (a few KiB, from L2), so no check launch runs before the step.
// Returns, to every thread of the block, whether the block must change nothing: a value of
// this call outside its domain, or an earlier call's error still in the record. The block
// that `reports` writes the record as LaunchCheckInputs would (sessions: one token each).
// Every thread of the block calls it, none having returned.
__device__ inline bool BlockFindsInputError(const CheckedInputs& args, int32_t num_sessions,
                                            bool reports, InputErrorRecord* record) {
  const bool failed = __syncthreads_or(BlockReadsOutside(args));
  if (failed && reports) {  // rare: the first failing element, as the check kernel finds it
    LowerCandidate(args, threadIdx.x, blockDim.x, record);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) FinishCheck(args, num_sessions, nullptr, false, record);
  }
  return failed || InputFailed(record);
}

// Enqueues the emptying of `record`.
cudaError_t ClearInputErrorRecord(InputErrorRecord* record, cudaStream_t stream);

// Enqueues the check of every raw input of a call of `num_tokens` tokens over `num_sessions`
// sessions. cu_seqlens (device, [num_sessions + 1]) places each token in its session; null
// means token i is session i's only token (a step). When the record already holds an error
// (an earlier call's, not yet reported) it is kept. With `hold_sequences`, a failing call also
// sets the num_sessions + 1 entries of cu_seqlens to 0, so that kernels reading them (the
// chunkwise prefill) see only empty sequences. Without `check_values` only the holding runs
// (for an earlier call's error). No allocation, no synchronisation.
cudaError_t LaunchCheckInputs(const LayerConfig& layer, const RawInputs& inputs,
                              int64_t num_tokens, int32_t num_sessions, int32_t* cu_seqlens,
                              bool check_values, bool hold_sequences, InputErrorRecord* record,
                              cudaStream_t stream);

}  // namespace lumen::cuda
