// The input check: one grid-stride pass over every raw input that lowers the record's
// candidate key atomically; the last block's first thread turns the smallest key into the
// record.

#include "backends/cuda/kernels/input_check.cuh"

#include <algorithm>

namespace lumen::cuda {
namespace {

constexpr int kThreads = 256;
static_assert(kThreads % kMaxWarpSize == 0, "blocks of whole warps on every target");

// Each thread lowers the candidate to its first failing element; the last block to finish
// (counted in the record) completes the record, in the same launch.
__global__ void __launch_bounds__(kThreads)
CheckKernel(const CheckedInputs args, int32_t num_sessions, int32_t* cu_seqlens,
            bool hold_sequences, InputErrorRecord* record) {
  AllowDependentLaunch();  // a step kernel may load its state meanwhile; it waits to read us
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  LowerCandidate(args, blockIdx.x * int64_t{kThreads} + threadIdx.x, stride, record);
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

CheckedInputs InputsToCheck(const LayerConfig& layer, const RawInputs& inputs,
                            int64_t num_tokens) {
  const int64_t H = layer.num_heads, HV = layer.num_value_heads;
  const int64_t K = layer.key_dim, V = layer.value_dim;
  CheckedInputs args;
  args.dtype = inputs.dtype;
  args.tensors[kInputQ] = {inputs.q, num_tokens * H * K, H, K, kDomainFinite};
  args.tensors[kInputK] = {inputs.k, num_tokens * H * K, H, K, kDomainFinite};
  if (inputs.g != nullptr && layer.fixed_log_decay == nullptr && layer.gate != kGateNone) {
    const int64_t per_head = layer.gate == kGatePerChannel ? K : 1;
    args.tensors[kInputG] = {inputs.g, num_tokens * HV * per_head, HV, per_head,
                             layer.gate_raw ? kDomainFinite : kDomainLogGate};
  }
  args.tensors[kInputV] = {inputs.v, num_tokens * HV * V, HV, V, kDomainFinite};
  if (layer.delta_rule) {
    args.tensors[kInputBeta] = {inputs.beta, num_tokens * HV, HV, 1,
                                layer.beta_sigmoid ? kDomainFinite : kDomainUnit};
  }
  return args;
}

int64_t CheckedElementCount(const CheckedInputs& inputs) {
  int64_t count = 0;
  for (const CheckedTensor& t : inputs.tensors) count += t.count;
  return count;
}

cudaError_t LaunchCheckInputs(const LayerConfig& layer, const RawInputs& inputs,
                              int64_t num_tokens, int32_t num_sessions, int32_t* cu_seqlens,
                              bool check_values, bool hold_sequences, InputErrorRecord* record,
                              cudaStream_t stream) {
  CheckedInputs args = InputsToCheck(layer, inputs, num_tokens);
  int64_t largest = 0;
  if (check_values) {
    for (const CheckedTensor& t : args.tensors) largest = std::max(largest, t.count);
  } else {
    for (CheckedTensor& t : args.tensors) t.count = 0;  // only the holding
  }
  const int64_t blocks = std::clamp<int64_t>((largest + kThreads - 1) / kThreads, 1, 1024);
  CheckKernel<<<static_cast<uint32_t>(blocks), kThreads, 0, stream>>>(
      args, num_sessions, cu_seqlens, hold_sequences, record);
  return cudaGetLastError();
}

}  // namespace lumen::cuda
