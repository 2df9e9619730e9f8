// The register step kernel. A block of 128 threads owns a 128-row by 32-column tile of one
// value head of one session: thread (r, c) holds rows r, r + 16, ..., r + 112 of columns
// 4c .. 4c + 3 as eight float4, loaded before anything else so that the state's bytes are in
// flight while the token's inputs are read.
//
// The token needs, per column j, the sums over rows of a_i k_i S_ij and a_i q_i S_ij, and per
// head |q|^2, |k|^2 and q . k. With the identity feature map q and k enter both sums linearly,
// so every sum is taken over the raw values and scaled by the L2-norm factors afterwards: the
// column sums (lanes of one column group, then warps through shared memory) and the three head
// sums share one barrier. Each row's raw q, k and decay are read and computed once per block,
// by thread (r, c) for row r + 16c, into shared memory (a barrier of its own): held in
// registers by every thread they cost the occupancy the loads need. Then, as in
// recurrent_step.cu: S' = a S, u = beta (v - S'^T k) (delta rule) or u = v (additive),
// S_t = S' + k u^T and o = S'^T q + (q . k) u.
//
// Gate kinds and the delta rule are template parameters, so the hot loop has no branch on the
// family. Eight blocks per SM (64 registers, a few bytes spilled) measured faster than six
// (80 registers, none spilled) for the delta family: docs/cuda_decode.md.

#include "backends/cuda/kernels/register_step.cuh"

namespace lumen::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kKeyDim = 128;
constexpr int kColumnGroups = 8;  // threads across a tile, 4 columns (one float4) each
constexpr int kRowGroups = kThreads / kColumnGroups;
constexpr int kRowsPerThread = kKeyDim / kRowGroups;
constexpr int kTileColumns = kColumnGroups * 4;
// Shared arrays are sized for the narrowest warp (the most warps per block).
constexpr int kMostWarps = kThreads / 32;
static_assert(kThreads % kMaxWarpSize == 0, "blocks of whole warps on every target");
static_assert(kRowsPerThread == kColumnGroups, "thread (r, c) counts row r + 16c once");

__device__ __forceinline__ float4 Scaled(float4 x, float a) {
  return make_float4(a * x.x, a * x.y, a * x.z, a * x.w);
}

__device__ __forceinline__ void AddScaled(float (&sum)[4], float a, float4 x) {
  sum[0] += a * x.x;
  sum[1] += a * x.y;
  sum[2] += a * x.z;
  sum[3] += a * x.w;
}

template <bool kDelta, bool kPerChannelGate>
__global__ void __launch_bounds__(kThreads, 8)
RegisterStepKernel(const StepArgs args, const StepStates states) {
  __shared__ float q_rows[kKeyDim], k_rows[kKeyDim], decay_rows[kKeyDim];
  __shared__ float column_partial[kMostWarps][2][kTileColumns];
  __shared__ float head_partial[kMostWarps][3];
  __shared__ bool input_failed;

  const LayerConfig& layer = args.layer;
  const int32_t V = layer.value_dim, HV = layer.num_value_heads, H = layer.num_heads;
  const int32_t tiles = V / kTileColumns;
  const int32_t tile = blockIdx.x % tiles;
  const int32_t hv = blockIdx.x / tiles;
  const int32_t session = blockIdx.y;
  const int32_t h = hv / (HV / H);
  const int64_t t = args.first_session + session;  // the session's token
  const int tid = threadIdx.x;
  const int c = tid % kColumnGroups;
  const int r = tid / kColumnGroups;
  const int32_t col = tile * kTileColumns + c * 4;

  float* matrix =
      static_cast<float*>(states.layer_state[session]) + int64_t{hv} * kKeyDim * V + col;
  float4 s[kRowsPerThread];
#pragma unroll
  for (int m = 0; m < kRowsPerThread; ++m) {
    s[m] = *reinterpret_cast<const float4*>(matrix + int64_t{r + kRowGroups * m} * V);
  }

  const RawInputs& in = args.inputs;
  const int64_t qk_row = (t * H + h) * kKeyDim;   // [T, H, K]
  const int64_t head_row = t * HV + hv;            // [T, HV]
  float v[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = LoadElement(in.v, head_row * V + col + e, in.dtype);
  float beta = 0.0f;
  if constexpr (kDelta) beta = PreparedBeta(layer, LoadElement(in.beta, head_row, in.dtype));

  // Each row's raw q and k and its decay, once per block: thread (r, c) takes row r + 16c,
  // and adds its row to the head sums.
  const int32_t own_row = r + kRowGroups * c;
  const float own_q = LoadElement(in.q, qk_row + own_row, in.dtype);
  const float own_k = LoadElement(in.k, qk_row + own_row, in.dtype);
  float own_decay = 1.0f;
  if constexpr (kPerChannelGate) {
    own_decay = expf(LogDecay(layer, LoadElement(in.g, head_row * kKeyDim + own_row, in.dtype),
                              hv, own_row));
  } else if (layer.fixed_log_decay != nullptr) {
    own_decay = expf(layer.fixed_log_decay[hv]);
  } else if (layer.gate == GateKind::kScalar) {
    own_decay = expf(LogDecay(layer, LoadElement(in.g, head_row, in.dtype), hv, 0));
  }
  q_rows[own_row] = own_q;
  k_rows[own_row] = own_k;
  decay_rows[own_row] = own_decay;
  float head[3] = {own_q * own_q, own_k * own_k, own_q * own_k};
  __syncthreads();

  // Decay, and the column sums of a k S and a q S over this thread's rows.
  float sum_k[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sum_q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int m = 0; m < kRowsPerThread; ++m) {
    const int32_t i = r + kRowGroups * m;
    s[m] = Scaled(s[m], decay_rows[i]);
    AddScaled(sum_k, k_rows[i], s[m]);
    AddScaled(sum_q, q_rows[i], s[m]);
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    sum_k[e] = SumAcrossLaneGroups<kColumnGroups>(sum_k[e]);
    sum_q[e] = SumAcrossLaneGroups<kColumnGroups>(sum_q[e]);
  }
#pragma unroll
  for (int x = 0; x < 3; ++x) head[x] = SumAcrossLaneGroups<1>(head[x]);
  const int warp = tid / kWarpSize, lane = tid % kWarpSize;
  if (lane < kColumnGroups) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      column_partial[warp][0][c * 4 + e] = sum_k[e];
      column_partial[warp][1][c * 4 + e] = sum_q[e];
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int x = 0; x < 3; ++x) head_partial[warp][x] = head[x];
  }
  // The input check (the kernel before this one) has finished: its record can be read.
  WaitForPrerequisiteGrids();
  if (tid == 0) input_failed = InputFailed(args.input_error);
  __syncthreads();
  if (input_failed) return;  // the call's inputs failed their check: change nothing

  float column_k[4] = {0.0f, 0.0f, 0.0f, 0.0f}, column_q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float q_squares = 0.0f, k_squares = 0.0f, qk_raw = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / kWarpSize; ++w) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      column_k[e] += column_partial[w][0][c * 4 + e];
      column_q[e] += column_partial[w][1][c * 4 + e];
    }
    q_squares += head_partial[w][0];
    k_squares += head_partial[w][1];
    qk_raw += head_partial[w][2];
  }
  const float q_factor = L2NormFactor(layer, q_squares) * layer.scale;
  const float k_factor = L2NormFactor(layer, k_squares);
  const float qk = qk_raw * q_factor * k_factor;
  float u[4], out[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    u[e] = kDelta ? beta * (v[e] - k_factor * column_k[e]) : v[e];
    out[e] = q_factor * column_q[e] + qk * u[e];
  }
  const float4 u4 = make_float4(u[0], u[1], u[2], u[3]);
#pragma unroll
  for (int m = 0; m < kRowsPerThread; ++m) {
    const float4 row = s[m];
    const float4 written = Scaled(u4, k_factor * k_rows[r + kRowGroups * m]);
    *reinterpret_cast<float4*>(matrix + int64_t{r + kRowGroups * m} * V) =
        make_float4(row.x + written.x, row.y + written.y, row.z + written.z,
                    row.w + written.w);
  }
  if (r == 0) {
    const int64_t o_row = head_row * V + col;
#pragma unroll
    for (int e = 0; e < 4; ++e) StoreElement(args.o, o_row + e, args.out_dtype, out[e]);
  }
}

template <bool kDelta, bool kPerChannelGate>
cudaError_t Launch(const StepArgs& args, const StepStates& states, cudaStream_t stream) {
  const dim3 grid(static_cast<uint32_t>(args.layer.value_dim / kTileColumns *
                                        args.layer.num_value_heads),
                  static_cast<uint32_t>(args.num_sessions));
  return LaunchStepKernel(RegisterStepKernel<kDelta, kPerChannelGate>, grid, dim3(kThreads), 0,
                          args.follows_check, stream, args, states);
}

}  // namespace

bool RegisterStepFits(const StepArgs& args) {
  const LayerConfig& layer = args.layer;
  return !args.state_bf16 && layer.key_dim == kKeyDim && layer.value_dim % kTileColumns == 0 &&
         !layer.normalize && layer.feature_map == FeatureMap::kIdentity;
}

cudaError_t LaunchRegisterStep(const StepArgs& args, const StepStates& states,
                               cudaStream_t stream) {
  const bool per_channel = args.layer.gate == GateKind::kPerChannel;
  if (args.layer.delta_rule) {
    return per_channel ? Launch<true, true>(args, states, stream)
                       : Launch<true, false>(args, states, stream);
  }
  return per_channel ? Launch<false, true>(args, states, stream)
                     : Launch<false, false>(args, states, stream);
}

}  // namespace lumen::cuda
