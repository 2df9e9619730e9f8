// The input check: one grid-stride pass over every raw input that lowers the record's
// candidate key atomically; the last block's first thread turns the smallest key into the
// record.

#include "backends/cuda/kernels/input_check.cuh"

#include <algorithm>

namespace lumen::cuda {
namespace {

constexpr int kThreads = 256;
static_assert(kThreads % kMaxWarpSize == 0, "blocks of whole warps on every target");
constexpr float kLargest = 3.40282347e+38f;  // FLT_MAX, as in src/input_domain.h

// One tensor of the call as the check reads it.
struct CheckedTensor {
  const void* data = nullptr;
  int64_t count = 0;  // elements; 0 when the layer has no such input
  int64_t heads = 0, per_head = 0;
  int32_t domain = kDomainFinite;
};

struct CheckArgs {
  CheckedTensor tensors[5];  // kInputQ .. kInputBeta
  DType dtype = DType::kFloat32;
  unsigned long long call = 0;
};

__device__ __forceinline__ bool Inside(float value, int32_t domain) {
  const float low = domain == kDomainUnit || domain == kDomainDoubleUnit ? 0.0f : -kLargest;
  const float high = domain == kDomainFinite    ? kLargest
                     : domain == kDomainLogGate ? 0.0f
                     : domain == kDomainUnit    ? 1.0f
                                                : 2.0f;
  return value >= low && value <= high;  // false for NaN
}

// Makes the call's smallest candidate the record (unless an earlier error is still there) and
// holds the sequences of a failing call. One thread, after every block's candidates are in.
__device__ void FinishCheck(const CheckArgs& args, int32_t num_sessions, int32_t* cu_seqlens,
                           bool hold_sequences, InputErrorRecord* record) {
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
    record->call = args.call;
    record->error = key;
  }
  if (hold_sequences && record->error != kNoInputError) {
    for (int32_t s = 0; s <= num_sessions; ++s) cu_seqlens[s] = 0;
  }
}

// Each thread lowers the candidate to its first failing element; the last block to finish
// (counted in the record) completes the record, in the same launch.
__global__ void __launch_bounds__(kThreads)
CheckKernel(const CheckArgs args, int32_t num_sessions, int32_t* cu_seqlens,
            bool hold_sequences, InputErrorRecord* record) {
  AllowDependentLaunch();  // a step kernel may load its state meanwhile; it waits to read us
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  const int64_t first = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  // This thread's first element of every tensor, loaded together: the check of a step of a
  // few sessions is then one round trip to memory, not five.
  float first_values[5];
#pragma unroll
  for (int tensor = 0; tensor < 5; ++tensor) {
    const CheckedTensor& t = args.tensors[tensor];
    first_values[tensor] = first < t.count ? LoadElement(t.data, first, args.dtype) : 0.0f;
  }
#pragma unroll
  for (int tensor = 0; tensor < 5; ++tensor) {
    const CheckedTensor& t = args.tensors[tensor];
    for (int64_t i = first; i < t.count; i += stride) {
      const float value = i == first ? first_values[tensor] : LoadElement(t.data, i, args.dtype);
      if (!Inside(value, t.domain)) {
        atomicMin(&record->candidate,
                  (static_cast<unsigned long long>(tensor) << kInputIndexBits) |
                      static_cast<unsigned long long>(i));
        break;  // later elements of this thread have larger keys
      }
    }
  }
  __shared__ bool last;
  __threadfence();  // this block's candidates are visible before it counts itself done
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&record->blocks_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last || threadIdx.x != 0) return;
  __threadfence();
  FinishCheck(args, num_sessions, cu_seqlens, hold_sequences, record);
  record->blocks_done = 0;
}

}  // namespace

cudaError_t ClearInputErrorRecord(InputErrorRecord* record, cudaStream_t stream) {
  cudaError_t error = cudaMemsetAsync(record, 0xff, sizeof(InputErrorRecord), stream);
  if (error != cudaSuccess) return error;
  return cudaMemsetAsync(&record->blocks_done, 0, sizeof(record->blocks_done), stream);
}

cudaError_t LaunchCheckInputs(const LayerConfig& layer, const RawInputs& inputs,
                              int64_t num_tokens, int32_t num_sessions, int32_t* cu_seqlens,
                              bool hold_sequences, InputErrorRecord* record,
                              cudaStream_t stream) {
  const int64_t H = layer.num_heads, HV = layer.num_value_heads;
  const int64_t K = layer.key_dim, V = layer.value_dim;
  CheckArgs args;
  args.dtype = inputs.dtype;
  args.call = inputs.call;
  args.tensors[kInputQ] = {inputs.q, num_tokens * H * K, H, K, kDomainFinite};
  args.tensors[kInputK] = {inputs.k, num_tokens * H * K, H, K, kDomainFinite};
  if (inputs.g != nullptr && layer.fixed_log_decay == nullptr && layer.gate != GateKind::kNone) {
    const int64_t per_head = layer.gate == GateKind::kPerChannel ? K : 1;
    args.tensors[kInputG] = {inputs.g, num_tokens * HV * per_head, HV, per_head,
                             layer.gate_raw ? kDomainFinite : kDomainLogGate};
  }
  args.tensors[kInputV] = {inputs.v, num_tokens * HV * V, HV, V, kDomainFinite};
  if (layer.delta_rule) {
    args.tensors[kInputBeta] = {inputs.beta, num_tokens * HV, HV, 1,
                                layer.beta_sigmoid       ? kDomainFinite
                                : layer.allow_neg_eigval ? kDomainDoubleUnit
                                                         : kDomainUnit};
  }
  int64_t largest = 0;
  for (const CheckedTensor& t : args.tensors) largest = std::max(largest, t.count);
  const int64_t blocks = std::clamp<int64_t>((largest + kThreads - 1) / kThreads, 1, 1024);
  CheckKernel<<<static_cast<uint32_t>(blocks), kThreads, 0, stream>>>(
      args, num_sessions, cu_seqlens, hold_sequences, record);
  return cudaGetLastError();
}

}  // namespace lumen::cuda
