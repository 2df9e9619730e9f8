#pragma once
// One step's arithmetic on a thread's kVec state columns, shared by the block step kernel
// (recurrent_step.cu) and the pipelined one (pipelined_step.cu), so that every decode path
// computes the same bits in the same order (docs/spec.md §2).

#include "backends/cuda/gpu_compat.cuh"
#include "backends/cuda/kernels/layer_math.cuh"

namespace lumen::cuda {

// Pass 1 on one state row: decays it by `a`; the additive families also write k v^T. Adds the
// row's share of S'^T k and S'^T q (delta rule) or of S_t^T q (additive) to the sums.
template <int kVec>
__device__ __forceinline__ void DecayRow(bool delta_rule, float a, float k, float q,
                                         const float (&v)[kVec], float (&row)[kVec],
                                         float (&sum_k)[kVec], float (&sum_q)[kVec]) {
#pragma unroll
  for (int e = 0; e < kVec; ++e) {
    if (delta_rule) {
      row[e] *= a;
      sum_k[e] += k * row[e];
      sum_q[e] += q * row[e];
    } else {
      row[e] = a * row[e] + k * v[e];
      sum_q[e] += q * row[e];
    }
  }
}

// Pass 2 of the delta rule on one state row, given as it was before pass 1: S_t = S' + k u^T
// with S' = a S.
template <int kVec>
__device__ __forceinline__ void DeltaWriteRow(float a, float k, const float (&u)[kVec],
                                              float (&row)[kVec]) {
#pragma unroll
  for (int e = 0; e < kVec; ++e) row[e] = a * row[e] + k * u[e];
}

// Sums the row sums over the kColumnThreads-lane groups of a warp that share columns; lanes
// 0..kColumnThreads-1 write the warp's totals for their columns to `warp_partial`, two floats a
// column (S^T k, S^T q), column group `c` owning columns c * kVec ...
template <int kColumnThreads, int kVec>
__device__ __forceinline__ void WarpColumnSums(float (&sum_k)[kVec], float (&sum_q)[kVec], int c,
                                               float* warp_partial) {
#pragma unroll
  for (int e = 0; e < kVec; ++e) {
    sum_k[e] = SumAcrossLaneGroups<kColumnThreads>(sum_k[e]);
    sum_q[e] = SumAcrossLaneGroups<kColumnThreads>(sum_q[e]);
  }
  if (threadIdx.x % kWarpSize < kColumnThreads) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      warp_partial[2 * (c * kVec + e)] = sum_k[e];
      warp_partial[2 * (c * kVec + e) + 1] = sum_q[e];
    }
  }
}

// The block's column sums from the kWarps warps' partials (WarpColumnSums' `warp_partial` of
// each warp), one thread per float. The caller's barriers publish `partial` before this and
// `column_sum` after it.
template <int kWarps, int kFloats>
__device__ __forceinline__ void SumWarpPartials(const float (&partial)[kWarps][kFloats],
                                                float* column_sum) {
  const int tid = threadIdx.x;
  if (tid < kFloats) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += partial[w][tid];
    column_sum[tid] = total;
  }
}

// The outputs of column group `c` from the block's column sums (`column_sum`, laid out as
// WarpColumnSums writes them): the delta rule's u = beta (v - S'^T k) and o = S'^T q + (q.k) u;
// the additive families' o = S_t^T q; divided by q.z + eps where the layer normalizes.
template <int kVec>
__device__ __forceinline__ void ColumnOutputs(const LayerConfig& layer, const float* column_sum,
                                              int c, const float (&v)[kVec], float beta,
                                              float qk_dot, float qz_dot, float (&out)[kVec],
                                              float (&u)[kVec]) {
#pragma unroll
  for (int e = 0; e < kVec; ++e) {
    const float k_dot = column_sum[2 * (c * kVec + e)];
    const float q_dot = column_sum[2 * (c * kVec + e) + 1];
    u[e] = beta * (v[e] - k_dot);
    out[e] = layer.delta_rule ? q_dot + qk_dot * u[e] : q_dot;
    if (layer.normalize) out[e] /= qz_dot + layer.normalize_eps;
  }
}

}  // namespace lumen::cuda
