// Input preparation kernels: one block per (token, q/k head) row for q and k, whose L2 norm
// needs a sum over the row; one thread per element for v, the gate and beta.

#include "backends/cuda/kernels/prepare_inputs.cuh"

#include <algorithm>

namespace lumen::cuda {
namespace {

constexpr int kRowThreads = 128;
constexpr int kElementThreads = 256;
static_assert(kRowThreads % kMaxWarpSize == 0 && kElementThreads % kMaxWarpSize == 0,
              "blocks of whole warps on every target");

__global__ void __launch_bounds__(kRowThreads)
PrepareQueryKeyKernel(const LayerConfig layer, const RawInputs in, PreparedInputs out) {
  __shared__ float warp_sums[kRowThreads / kWarpSize][2];
  const int64_t row = blockIdx.x;  // t * H + h
  const int32_t K = layer.key_dim;
  float q_norm = 1.0f, k_norm = 1.0f;
  if (layer.qk_l2norm) {
    float q2 = 0.0f, k2 = 0.0f;
    for (int32_t i = threadIdx.x; i < K; i += kRowThreads) {
      const float q = LoadElement(in.q, row * K + i, in.dtype);
      const float k = LoadElement(in.k, row * K + i, in.dtype);
      q2 += q * q;
      k2 += k * k;
    }
    q2 = SumAcrossLaneGroups<1>(q2);
    k2 = SumAcrossLaneGroups<1>(k2);
    if (threadIdx.x % kWarpSize == 0) {
      warp_sums[threadIdx.x / kWarpSize][0] = q2;
      warp_sums[threadIdx.x / kWarpSize][1] = k2;
    }
    __syncthreads();
    q2 = k2 = 0.0f;
    for (int w = 0; w < kRowThreads / kWarpSize; ++w) {
      q2 += warp_sums[w][0];
      k2 += warp_sums[w][1];
    }
    q_norm = L2NormFactor(layer, q2);
    k_norm = L2NormFactor(layer, k2);
  }
  for (int32_t i = threadIdx.x; i < K; i += kRowThreads) {
    out.q[row * K + i] =
        PreparedQueryKey(layer, LoadElement(in.q, row * K + i, in.dtype), q_norm, layer.scale);
    out.k[row * K + i] =
        PreparedQueryKey(layer, LoadElement(in.k, row * K + i, in.dtype), k_norm, 1.0f);
  }
}

// v to fp32, the gate to its log-decay and beta to [0, 1], element by element over
// [T * HV * V], [T * HV (* K)] and [T * HV].
__global__ void __launch_bounds__(kElementThreads)
PrepareElementsKernel(const LayerConfig layer, const RawInputs in, PreparedInputs out,
                      int64_t num_tokens) {
  const int64_t HV = layer.num_value_heads, K = layer.key_dim, V = layer.value_dim;
  const int64_t v_count = out.v != nullptr ? num_tokens * HV * V : 0;
  const int64_t per_head = layer.gate == GateKind::kPerChannel ? K : 1;
  const int64_t g_count = out.log_decay != nullptr ? num_tokens * HV * per_head : 0;
  const int64_t beta_count = out.beta != nullptr ? num_tokens * HV : 0;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
       i < v_count + g_count + beta_count; i += stride) {
    if (i < v_count) {
      out.v[i] = LoadElement(in.v, i, in.dtype);
    } else if (i < v_count + g_count) {
      const int64_t j = i - v_count;
      const int32_t hv = static_cast<int32_t>((j / per_head) % HV);
      const int32_t channel = static_cast<int32_t>(j % per_head);
      out.log_decay[j] = layer.fixed_log_decay != nullptr
                             ? layer.fixed_log_decay[hv]
                             : LogDecay(layer, LoadElement(in.g, j, in.dtype), hv, channel);
    } else {
      const int64_t j = i - v_count - g_count;
      out.beta[j] = PreparedBeta(layer, LoadElement(in.beta, j, in.dtype));
    }
  }
}

}  // namespace

cudaError_t LaunchPrepareInputs(const LayerConfig& layer, const RawInputs& inputs,
                                int64_t num_tokens, const PreparedInputs& out,
                                cudaStream_t stream) {
  if (num_tokens == 0) return cudaSuccess;
  const int64_t rows = num_tokens * layer.num_heads;
  // Rows beyond the grid's x limit are not a concern: T * H < 2^31 for any call lumen takes.
  PrepareQueryKeyKernel<<<static_cast<uint32_t>(rows), kRowThreads, 0, stream>>>(layer, inputs,
                                                                                 out);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return error;
  const int64_t elements = num_tokens * layer.num_value_heads * layer.value_dim;
  const int64_t blocks = std::min<int64_t>((elements + kElementThreads - 1) / kElementThreads,
                                           int64_t{1} << 16);
  PrepareElementsKernel<<<static_cast<uint32_t>(blocks), kElementThreads, 0, stream>>>(
      layer, inputs, out, num_tokens);
  return cudaGetLastError();
}

}  // namespace lumen::cuda
