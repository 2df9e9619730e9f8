// The register step kernel. A block of 128 threads owns a 128-row by 32-column tile of one
// value head of one session: thread (r, c) holds rows r, r + 16, ..., r + 112 of columns
// 4c .. 4c + 3 as eight float4, loaded before anything else so that the state's bytes are in
// flight while the token's inputs are read. A token run (several tokens per session) keeps
// the tile in registers through its tokens: the state is read and written once, and each
// token runs the same code as a one-token step, so the results are bitwise a step's.
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

#include <algorithm>

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

// Shared memory of a block running up to kTokens tokens: every token's inputs, prepared once
// before the first token, and the partial sums, two sets alternating by token (a token writes
// its sums while threads behind may still read the previous token's).
template <int kTokens>
struct TileShared {
  float q_rows[kTokens][kKeyDim], k_rows[kTokens][kKeyDim], decay_rows[kTokens][kKeyDim];
  float v[kTokens][kTileColumns];
  float beta[kTokens];
  float head_partial[kTokens][kMostWarps][3];
  float column_partial[2][kMostWarps][2][kTileColumns];
  bool input_failed;
};

// Where a thread sits: its tile's head and columns, its place in the tile.
struct TilePlace {
  int32_t hv, h, col;
  int tid, r, c, warp, lane;
  int32_t own_row;  // the row of q, k and decay this thread prepares: r + 16c
};

// Reads and prepares the inputs of tokens [first, first + count) into `shared`: thread (r, c)
// takes row r + 16c of q, k and the decay and adds its row to the head sums (|q|^2, |k|^2,
// q . k); the threads of row group 0 take v, thread 0 beta. Every load is issued before the
// first token runs, so a run pays one round trip to memory for its inputs, not one per token.
template <bool kDelta, bool kPerChannelGate, int kTokens>
__device__ __forceinline__ void PrepareTokens(const StepArgs& args, const TilePlace& at,
                                              int32_t first, int32_t count,
                                              TileShared<kTokens>& shared) {
  const LayerConfig& layer = args.layer;
  const RawInputs& in = args.inputs;
  const int32_t V = layer.value_dim, HV = layer.num_value_heads, H = layer.num_heads;
#pragma unroll
  for (int j = 0; j < kTokens; ++j) {
    if (j >= count) break;
    const int64_t t = int64_t{first} + j;
    const int64_t qk_row = (t * H + at.h) * kKeyDim;  // [T, H, K]
    const int64_t head_row = t * HV + at.hv;           // [T, HV]
    const float own_q = LoadElement(in.q, qk_row + at.own_row, in.dtype);
    const float own_k = LoadElement(in.k, qk_row + at.own_row, in.dtype);
    float own_decay = 1.0f;
    if constexpr (kPerChannelGate) {
      own_decay = expf(LogDecay(
          layer, LoadElement(in.g, head_row * kKeyDim + at.own_row, in.dtype), at.hv,
          at.own_row));
    } else if (layer.fixed_log_decay != nullptr) {
      own_decay = expf(layer.fixed_log_decay[at.hv]);
    } else if (layer.gate == GateKind::kScalar) {
      own_decay = expf(LogDecay(layer, LoadElement(in.g, head_row, in.dtype), at.hv, 0));
    }
    if (at.r == 0) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        shared.v[j][at.c * 4 + e] = LoadElement(in.v, head_row * V + at.col + e, in.dtype);
      }
    }
    if constexpr (kDelta) {
      if (at.tid == 0) shared.beta[j] = PreparedBeta(layer, LoadElement(in.beta, head_row, in.dtype));
    }
    shared.q_rows[j][at.own_row] = own_q;
    shared.k_rows[j][at.own_row] = own_k;
    shared.decay_rows[j][at.own_row] = own_decay;
    float head[3] = {own_q * own_q, own_k * own_k, own_q * own_k};
#pragma unroll
    for (int x = 0; x < 3; ++x) head[x] = SumAcrossLaneGroups<1>(head[x]);
    if (at.lane == 0) {
#pragma unroll
      for (int x = 0; x < 3; ++x) shared.head_partial[j][at.warp][x] = head[x];
    }
  }
}

// Token j of the block's tokens (prepared in `shared`) through the tile `s` held in registers,
// its o stored at token `t`; `first` marks the block's first token, which reads the input
// check's record. Returns false when the call's inputs failed their check: then nothing may be
// written.
template <bool kDelta, int kTokens>
__device__ __forceinline__ bool RunToken(const StepArgs& args, const TilePlace& at, int j,
                                         int64_t t, bool first, float4 (&s)[kRowsPerThread],
                                         TileShared<kTokens>& shared) {
  const LayerConfig& layer = args.layer;
  const int p = j & 1;
  // Decay, and the column sums of a k S and a q S over this thread's rows.
  float sum_k[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sum_q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int m = 0; m < kRowsPerThread; ++m) {
    const int32_t i = at.r + kRowGroups * m;
    s[m] = Scaled(s[m], shared.decay_rows[j][i]);
    AddScaled(sum_k, shared.k_rows[j][i], s[m]);
    AddScaled(sum_q, shared.q_rows[j][i], s[m]);
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    sum_k[e] = SumAcrossLaneGroups<kColumnGroups>(sum_k[e]);
    sum_q[e] = SumAcrossLaneGroups<kColumnGroups>(sum_q[e]);
  }
  if (at.lane < kColumnGroups) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      shared.column_partial[p][at.warp][0][at.c * 4 + e] = sum_k[e];
      shared.column_partial[p][at.warp][1][at.c * 4 + e] = sum_q[e];
    }
  }
  if (first) {
    // The input check (the kernel before this one) has finished: its record can be read.
    WaitForPrerequisiteGrids();
    if (at.tid == 0) shared.input_failed = InputFailed(args.input_error);
  }
  __syncthreads();
  if (shared.input_failed) return false;

  float column_k[4] = {0.0f, 0.0f, 0.0f, 0.0f}, column_q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float q_squares = 0.0f, k_squares = 0.0f, qk_raw = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / kWarpSize; ++w) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      column_k[e] += shared.column_partial[p][w][0][at.c * 4 + e];
      column_q[e] += shared.column_partial[p][w][1][at.c * 4 + e];
    }
    q_squares += shared.head_partial[j][w][0];
    k_squares += shared.head_partial[j][w][1];
    qk_raw += shared.head_partial[j][w][2];
  }
  const float q_factor = L2NormFactor(layer, q_squares) * layer.scale;
  const float k_factor = L2NormFactor(layer, k_squares);
  const float qk = qk_raw * q_factor * k_factor;
  float u[4], out[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float v = shared.v[j][at.c * 4 + e];
    u[e] = kDelta ? shared.beta[j] * (v - k_factor * column_k[e]) : v;
    out[e] = q_factor * column_q[e] + qk * u[e];
  }
  const float4 u4 = make_float4(u[0], u[1], u[2], u[3]);
#pragma unroll
  for (int m = 0; m < kRowsPerThread; ++m) {
    const float4 written = Scaled(u4, k_factor * shared.k_rows[j][at.r + kRowGroups * m]);
    s[m] = make_float4(s[m].x + written.x, s[m].y + written.y, s[m].z + written.z,
                       s[m].w + written.w);
  }
  if (at.r == 0) {
    const int64_t o_row = (t * layer.num_value_heads + at.hv) * layer.value_dim + at.col;
#pragma unroll
    for (int e = 0; e < 4; ++e) StoreElement(args.o, o_row + e, args.out_dtype, out[e]);
  }
  return true;
}

// A step (kRun false: one token per session, session s reads token first_session + s) or a
// token run (args.cu_seqlens, any number of tokens per session, kMaxRunTokens prepared at a
// time). Both prepare their
// tokens with PrepareTokens and run each through RunToken; the step's kernel has no loop and
// a token's worth of shared memory.
template <bool kDelta, bool kPerChannelGate, bool kRun>
__global__ void __launch_bounds__(kThreads, 8)
RegisterStepKernel(const StepArgs args, const StepStates states) {
  constexpr int kTokens = kRun ? kMaxRunTokens : 1;
  __shared__ TileShared<kTokens> shared;
  AllowDependentLaunch();  // every kernel launched after it waits for it before reading it
  const LayerConfig& layer = args.layer;
  const int32_t V = layer.value_dim, HV = layer.num_value_heads, H = layer.num_heads;
  const int32_t tiles = V / kTileColumns;
  const int32_t session = args.first_session + static_cast<int32_t>(blockIdx.y);
  TilePlace at;
  at.hv = static_cast<int32_t>(blockIdx.x) / tiles;
  at.h = at.hv / (HV / H);
  at.tid = threadIdx.x;
  at.c = at.tid % kColumnGroups;
  at.r = at.tid / kColumnGroups;
  at.warp = at.tid / kWarpSize;
  at.lane = at.tid % kWarpSize;
  at.own_row = at.r + kRowGroups * at.c;
  at.col = (static_cast<int32_t>(blockIdx.x) % tiles) * kTileColumns + at.c * 4;
  int32_t first_token = session, count = 1;
  void* state = nullptr;
  if constexpr (kRun) {
    first_token = args.cu_seqlens[session];
    count = args.cu_seqlens[session + 1] - first_token;
    state = args.state_table[session];
    if (count == 0) return;  // a session without tokens in this call
  } else {
    state = states.layer_state[blockIdx.y];
  }

  float* matrix = static_cast<float*>(state) + int64_t{at.hv} * kKeyDim * V + at.col;
  float4 s[kRowsPerThread];
#pragma unroll
  for (int m = 0; m < kRowsPerThread; ++m) {
    s[m] = *reinterpret_cast<const float4*>(matrix + int64_t{at.r + kRowGroups * m} * V);
  }
  if (args.inputs_from_previous) WaitForPrerequisiteGrids();  // the convolution's outputs
  if constexpr (kRun) {
    // kTokens tokens prepared at a time; the arrays are prepared again only once every
    // thread is done with the previous group's.
    for (int32_t base = 0; base < count; base += kTokens) {
      const int32_t group = min(kTokens, count - base);
      if (base > 0) __syncthreads();
      PrepareTokens<kDelta, kPerChannelGate, kTokens>(args, at, first_token + base, group, shared);
      __syncthreads();
#pragma unroll 1
      for (int j = 0; j < group; ++j) {
        if (!RunToken<kDelta, kTokens>(args, at, j, int64_t{first_token} + base + j,
                                       base + j == 0, s, shared)) {
          return;  // the call's inputs failed their check: change nothing
        }
      }
    }
  } else {
    PrepareTokens<kDelta, kPerChannelGate, kTokens>(args, at, first_token, count, shared);
    __syncthreads();
    if (!RunToken<kDelta, kTokens>(args, at, 0, first_token, true, s, shared)) return;
  }
  if constexpr (kRun) {
    if (!args.write_state) return;  // a tentative pass: outputs only
  }
#pragma unroll
  for (int m = 0; m < kRowsPerThread; ++m) {
    *reinterpret_cast<float4*>(matrix + int64_t{at.r + kRowGroups * m} * V) = s[m];
  }
}

template <bool kDelta, bool kPerChannelGate, bool kRun>
cudaError_t Launch(const StepArgs& args, const StepStates& states, cudaStream_t stream) {
  const dim3 grid(static_cast<uint32_t>(args.layer.value_dim / kTileColumns *
                                        args.layer.num_value_heads),
                  static_cast<uint32_t>(args.num_sessions));
  return LaunchKernel(RegisterStepKernel<kDelta, kPerChannelGate, kRun>, grid, dim3(kThreads), 0,
                      args.after_previous, stream, args, states);
}

// The kernel for the layer's gate kind and rule, a step's or a token run's.
template <bool kRun>
cudaError_t LaunchFor(const StepArgs& args, const StepStates& states, cudaStream_t stream) {
  const bool per_channel = args.layer.gate == GateKind::kPerChannel;
  if (args.layer.delta_rule) {
    return per_channel ? Launch<true, true, kRun>(args, states, stream)
                       : Launch<true, false, kRun>(args, states, stream);
  }
  return per_channel ? Launch<false, true, kRun>(args, states, stream)
                     : Launch<false, false, kRun>(args, states, stream);
}

}  // namespace

bool RegisterStepFits(const StepArgs& args) {
  const LayerConfig& layer = args.layer;
  return !args.state_bf16 && layer.key_dim == kKeyDim && layer.value_dim % kTileColumns == 0 &&
         !layer.normalize && layer.feature_map == FeatureMap::kIdentity;
}

cudaError_t LaunchRegisterTokens(const StepArgs& args, int32_t num_sessions,
                                 cudaStream_t stream) {
  constexpr int32_t kMaxGridY = 65535;
  StepArgs launch = args;
  const StepStates unused{};  // the states come from args.state_table
  for (int32_t first = 0; first < num_sessions; first += kMaxGridY) {
    launch.first_session = first;
    launch.after_previous = args.after_previous && first == 0;  // only the first is next to it
    launch.num_sessions = std::min(kMaxGridY, num_sessions - first);
    if (cudaError_t error = LaunchFor<true>(launch, unused, stream); error != cudaSuccess) {
      return error;
    }
  }
  return cudaSuccess;
}

cudaError_t LaunchRegisterStep(const StepArgs& args, const StepStates& states,
                               cudaStream_t stream) {
  return LaunchFor<false>(args, states, stream);
}

}  // namespace lumen::cuda
