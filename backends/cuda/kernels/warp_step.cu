// The warp step kernel. A block owns a tile of 32 columns of one value head of one session.
// Each column group (4 consecutive columns, one 16-byte access of fp32 state) belongs to a
// run of kRowLanes consecutive lanes that split its K rows (row i goes to lane i % kRowLanes),
// so every sum over a column (S'^T k, S'^T q, q . k) is a sum across one lane run: shuffles,
// no shared memory, no barrier. The tile itself is copied into shared memory (asynchronously,
// whole rows per warp) before anything else, and written back from there the same way after
// one barrier: the block waits for its bytes once, holds them in shared memory rather than
// registers meanwhile (so many blocks, and their copies, fit on an SM), and reads and writes
// each state byte once. The runs never cross a warp of 32 or 64 lanes, so the layout is the
// same on every warp width.
//
// Per token (SPEC section 2): additive, S_t = a S + k v^T and o = S_t^T q; delta rule,
// S' = a S, u = beta (v - S'^T k), S_t = S' + k u^T and o = S'^T q + (q . k) u.

#include "backends/cuda/kernels/warp_step.cuh"

#include <type_traits>

namespace lumen::cuda {
namespace {

constexpr int kRowLanes = 8;
constexpr int kColumnVec = 4;
constexpr int kColumnGroups = 8;
constexpr int kThreads = kRowLanes * kColumnGroups;
constexpr int kTileColumns = kColumnGroups * kColumnVec;
constexpr int kMostRows = 16;  // rows per thread at K = 128
static_assert(kThreads % kMaxWarpSize == 0, "blocks of whole warps on every target");

// Four consecutive state elements as fp32: one 16-byte (fp32) or 8-byte (bf16) access.
template <bool kBf16>
__device__ __forceinline__ void LoadColumns(const void* at, float (&out)[kColumnVec]) {
  if constexpr (kBf16) {
    const uint2 raw = *static_cast<const uint2*>(at);
    const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
    const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
    out[0] = __low2float(lo);
    out[1] = __high2float(lo);
    out[2] = __low2float(hi);
    out[3] = __high2float(hi);
  } else {
    const float4 raw = *static_cast<const float4*>(at);
    out[0] = raw.x;
    out[1] = raw.y;
    out[2] = raw.z;
    out[3] = raw.w;
  }
}

template <bool kBf16>
__device__ __forceinline__ void StoreColumns(void* at, const float (&in)[kColumnVec]) {
  if constexpr (kBf16) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(in[0], in[1]);
    const __nv_bfloat162 hi = __floats2bfloat162_rn(in[2], in[3]);
    uint2 raw;
    raw.x = *reinterpret_cast<const uint32_t*>(&lo);
    raw.y = *reinterpret_cast<const uint32_t*>(&hi);
    *static_cast<uint2*>(at) = raw;
  } else {
    *static_cast<float4*>(at) = make_float4(in[0], in[1], in[2], in[3]);
  }
}

// kRows rows per thread: K <= kRowLanes * kRows. kChecksInputs: the small call's input check
// is done here (args.check_in_kernel); a separate instantiation, so that the registers the
// check takes do not lower the occupancy of the large calls.
template <int kRows, bool kBf16, bool kChecksInputs>
__global__ void __launch_bounds__(kThreads)
WarpStepKernel(const StepArgs args, const StepStates states) {
  using Stored = std::conditional_t<kBf16, __nv_bfloat16, float>;
  const LayerConfig& layer = args.layer;
  const int32_t K = layer.key_dim, V = layer.value_dim;
  const int32_t HV = layer.num_value_heads, H = layer.num_heads;
  const int32_t tiles = (V + kTileColumns - 1) / kTileColumns;
  const int32_t tile = blockIdx.x % tiles;
  const int32_t hv = blockIdx.x / tiles;
  const int32_t session = blockIdx.y;
  const int32_t h = hv / (HV / H);
  const int64_t t = args.first_session + session;  // the session's token

  const int row_lane = threadIdx.x % kRowLanes;
  const int32_t col = tile * kTileColumns + threadIdx.x / kRowLanes * kColumnVec;
  const bool active = col < V;  // V % 4 == 0: a group is wholly inside V or wholly outside

  // Copy the tile into shared memory first: these are the bytes this kernel exists to move.
  // Consecutive threads take consecutive column groups of a row, so each warp reads whole
  // rows of the tile (128 bytes of fp32 state); while they are in flight they hold no
  // registers, and many blocks fit on an SM. A row is padded by one group so that the lanes
  // of a run, which read one group of consecutive rows, fall in different banks.
  constexpr int kKeyRows = kRowLanes * kRows;
  constexpr int kGroupBytes = kColumnVec * static_cast<int>(sizeof(Stored));
  constexpr int kGroupsPerRow = kTileColumns / kColumnVec;
  constexpr int kRowStride = (kGroupsPerRow + 1) * kGroupBytes;
  constexpr int kCopiesPerThread = kKeyRows * kGroupsPerRow / kThreads;
  static_assert(kKeyRows * kGroupsPerRow % kThreads == 0, "whole copy rounds");
  __shared__ __align__(16) char tile_s[kKeyRows * kRowStride];
  char* matrix = reinterpret_cast<char*>(static_cast<Stored*>(states.layer_state[session]) +
                                         int64_t{hv} * K * V);
  const int32_t tile_col = tile * kTileColumns;
  // Where this tile's group g of row i sits in the matrix and in tile_s, and whether it is
  // inside the matrix.
  auto group_inside = [&](int i, int g) { return i < K && tile_col + g * kColumnVec < V; };
  auto group_global = [&](int i, int g) {
    return matrix + (int64_t{i} * V + tile_col + g * kColumnVec) * int64_t{sizeof(Stored)};
  };
  auto group_shared = [&](int i, int g) { return tile_s + i * kRowStride + g * kGroupBytes; };
#pragma unroll
  for (int n = 0; n < kCopiesPerThread; ++n) {
    const int c = threadIdx.x + n * kThreads;
    const int i = c / kGroupsPerRow, g = c % kGroupsPerRow;
    if (group_inside(i, g)) CopyAsync<kGroupBytes>(group_shared(i, g), group_global(i, g));
  }
  CopyAsyncCommit();

  // The head's q, k and per-channel gate, raw, into shared memory (each thread loads rows
  // threadIdx.x, + kThreads, ...), and this thread's v and beta, in flight together with the
  // state.
  constexpr int kWarps = kThreads / kWarpSize;
  __shared__ float q_s[kKeyRows], k_s[kKeyRows], a_s[kKeyRows];
  __shared__ float warp_squares[kWarps][2];
  const RawInputs& in = args.inputs;
  const int64_t qk_row = (t * H + h) * K;    // [T, H, K]
  const int64_t g_row = (t * HV + hv) * K;   // [T, HV, K], per-channel gates
  const int64_t vo_row = (t * HV + hv) * V;  // [T, HV, V]
  float squares[2] = {0.0f, 0.0f};           // this thread's share of sum(q^2), sum(k^2)
  constexpr int kKeyRowsPerThread = (kKeyRows + kThreads - 1) / kThreads;
#pragma unroll
  for (int pass = 0; pass < kKeyRowsPerThread; ++pass) {
    const int j = threadIdx.x + pass * kThreads;
    if (j >= kKeyRows) break;
    float q = 0.0f, k = 0.0f, g = 0.0f;
    if (j < K) {
      q = LoadElement(in.q, qk_row + j, in.dtype);
      k = LoadElement(in.k, qk_row + j, in.dtype);
      if (layer.gate == kGatePerChannel) g = LoadElement(in.g, g_row + j, in.dtype);
    }
    squares[0] += q * q;
    squares[1] += k * k;
    q_s[j] = q;
    k_s[j] = k;
    a_s[j] = g;
  }
  float v[kColumnVec];
#pragma unroll
  for (int e = 0; e < kColumnVec; ++e) {
    v[e] = active ? LoadElement(in.v, vo_row + col + e, in.dtype) : 0.0f;
  }
  const float beta =
      layer.delta_rule ? PreparedBeta(layer, LoadElement(in.beta, t * HV + hv, in.dtype)) : 0.0f;
  float scalar_decay = 1.0f;
  if (layer.fixed_log_decay != nullptr) {
    scalar_decay = expf(layer.fixed_log_decay[hv]);
  } else if (layer.gate == kGateScalar) {
    scalar_decay = expf(LogDecay(layer, LoadElement(in.g, t * HV + hv, in.dtype), hv, 0));
  }
  if (layer.qk_l2norm) {
    squares[0] = SumAcrossLaneGroups<1>(squares[0]);
    squares[1] = SumAcrossLaneGroups<1>(squares[1]);
    if (threadIdx.x % kWarpSize == 0) {
      warp_squares[threadIdx.x / kWarpSize][0] = squares[0];
      warp_squares[threadIdx.x / kWarpSize][1] = squares[1];
    }
  }

  // The call's inputs are valid (checked here for a small call, else by the check launched
  // before this kernel) and no earlier call's error waits to be reported: else the whole
  // block changes nothing. The barrier that decides also publishes the shared arrays, the
  // tile included.
  CopyAsyncWaitAll();
  bool failed;
  if constexpr (kChecksInputs) {
    const bool reports = blockIdx.x == 0 && blockIdx.y == 0;
    failed = BlockFindsInputError(args.check, args.num_sessions, reports, args.input_error);
  } else {
    WaitForPrerequisiteGrids();
    failed = __syncthreads_or(InputFailed(args.input_error));
  }
  if (failed) return;

  // Prepared q, k and row decays in place (each thread the rows it loaded); rows past K stay
  // 0 in every sum (a feature map need not map 0 to 0).
  float q_norm = 1.0f, k_norm = 1.0f;
  if (layer.qk_l2norm) {
    float q_squares = 0.0f, k_squares = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      q_squares += warp_squares[w][0];
      k_squares += warp_squares[w][1];
    }
    q_norm = L2NormFactor(layer, q_squares);
    k_norm = L2NormFactor(layer, k_squares);
  }
#pragma unroll
  for (int pass = 0; pass < kKeyRowsPerThread; ++pass) {
    const int j = threadIdx.x + pass * kThreads;
    if (j >= kKeyRows) break;
    if (j < K) {
      q_s[j] = PreparedQueryKey(layer, q_s[j], q_norm, layer.scale);
      k_s[j] = PreparedQueryKey(layer, k_s[j], k_norm, 1.0f);
      a_s[j] = layer.gate == kGatePerChannel ? expf(LogDecay(layer, a_s[j], hv, j)) : scalar_decay;
    } else {
      a_s[j] = 1.0f;
    }
  }
  __syncthreads();
  const Stored* normalizer =
      static_cast<const Stored*>(states.layer_state[session]) + int64_t{HV} * K * V +
      int64_t{hv} * K;

  // Pass 1: decay, and the additive write; this thread's share of the sums over K.
  float sum_k[kColumnVec], sum_q[kColumnVec];  // S'^T k and S'^T q (delta); S_t^T q (additive)
#pragma unroll
  for (int e = 0; e < kColumnVec; ++e) sum_k[e] = sum_q[e] = 0.0f;
  float q_dot_k = 0.0f, q_dot_zk = 0.0f;  // q . k and q . (z + k)
  const int group = threadIdx.x / kRowLanes;
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const int32_t i = row_lane + kRowLanes * m;
    if (i >= K) continue;  // rows past K hold no state
    const float q = q_s[i], k = k_s[i], a = a_s[i];
    q_dot_k += q * k;
    if (layer.normalize) q_dot_zk += q * (static_cast<float>(normalizer[i]) + k);
    float s[kColumnVec];
    LoadColumns<kBf16>(group_shared(i, group), s);
#pragma unroll
    for (int e = 0; e < kColumnVec; ++e) {
      if (layer.delta_rule) {
        s[e] *= a;
        sum_k[e] += k * s[e];
        sum_q[e] += q * s[e];
      } else {
        s[e] = a * s[e] + k * v[e];
        sum_q[e] += q * s[e];
      }
    }
    if (!layer.delta_rule) StoreColumns<kBf16>(group_shared(i, group), s);
  }

  float out[kColumnVec], u[kColumnVec];
  q_dot_k = SumAcrossLaneRun<kRowLanes>(q_dot_k);
  if (layer.normalize) q_dot_zk = SumAcrossLaneRun<kRowLanes>(q_dot_zk);
#pragma unroll
  for (int e = 0; e < kColumnVec; ++e) {
    const float q_sum = SumAcrossLaneRun<kRowLanes>(sum_q[e]);
    if (layer.delta_rule) {
      u[e] = beta * (v[e] - SumAcrossLaneRun<kRowLanes>(sum_k[e]));
      out[e] = q_sum + q_dot_k * u[e];
    } else {
      u[e] = 0.0f;
      out[e] = q_sum;
    }
    if (layer.normalize) out[e] /= q_dot_zk + layer.normalize_eps;
  }

  // Pass 2: the delta write, S_t = S' + k u^T (S' = a S again, bit for bit as in pass 1).
  if (layer.delta_rule) {
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const int32_t i = row_lane + kRowLanes * m;
      if (i >= K) continue;
      float s[kColumnVec];
      LoadColumns<kBf16>(group_shared(i, group), s);
#pragma unroll
      for (int e = 0; e < kColumnVec; ++e) {
        s[e] *= a_s[i];
        s[e] += k_s[i] * u[e];
      }
      StoreColumns<kBf16>(group_shared(i, group), s);
    }
  }
  // Every state store, whole rows per warp as the copies were.
  __syncthreads();
#pragma unroll
  for (int n = 0; n < kCopiesPerThread; ++n) {
    const int c = threadIdx.x + n * kThreads;
    const int i = c / kGroupsPerRow, g = c % kGroupsPerRow;
    if (!group_inside(i, g)) continue;
    if constexpr (kBf16) {
      *reinterpret_cast<uint2*>(group_global(i, g)) =
          *reinterpret_cast<const uint2*>(group_shared(i, g));
    } else {
      *reinterpret_cast<uint4*>(group_global(i, g)) =
          *reinterpret_cast<const uint4*>(group_shared(i, g));
    }
  }
  if (row_lane == 0 && active) {
#pragma unroll
    for (int e = 0; e < kColumnVec; ++e) {
      StoreElement(args.o, vo_row + col + e, args.out_dtype, out[e]);
    }
  }
}

template <int kRows, bool kBf16, bool kChecksInputs>
cudaError_t Launch(const StepArgs& args, const StepStates& states, cudaStream_t stream) {
  constexpr auto kernel = WarpStepKernel<kRows, kBf16, kChecksInputs>;
  // Blocks per SM are bounded by shared memory: ask for all of it (once per kernel).
  static const cudaError_t carveout = cudaFuncSetAttribute(
      reinterpret_cast<const void*>(kernel), cudaFuncAttributePreferredSharedMemoryCarveout,
      cudaSharedmemCarveoutMaxShared);
  if (carveout != cudaSuccess) return carveout;
  const int64_t tiles = (args.layer.value_dim + kTileColumns - 1) / kTileColumns;
  const dim3 grid(static_cast<uint32_t>(tiles * args.layer.num_value_heads),
                  static_cast<uint32_t>(args.num_sessions));
  return LaunchStepKernel(kernel, grid, kThreads, args, states, stream);
}

template <int kRows>
cudaError_t LaunchForStateType(const StepArgs& args, const StepStates& states,
                               cudaStream_t stream) {
  if (args.check_in_kernel) {
    return args.state_bf16 ? Launch<kRows, true, true>(args, states, stream)
                           : Launch<kRows, false, true>(args, states, stream);
  }
  return args.state_bf16 ? Launch<kRows, true, false>(args, states, stream)
                         : Launch<kRows, false, false>(args, states, stream);
}

}  // namespace

bool WarpStepTakes(const LayerConfig& layer) {
  return layer.key_dim <= kRowLanes * kMostRows && layer.value_dim % kColumnVec == 0;
}

cudaError_t LaunchWarpStep(const StepArgs& args, const StepStates& states, cudaStream_t stream) {
  const int32_t K = args.layer.key_dim;
  if (K <= kRowLanes * 4) return LaunchForStateType<4>(args, states, stream);
  if (K <= kRowLanes * 8) return LaunchForStateType<8>(args, states, stream);
  return LaunchForStateType<kMostRows>(args, states, stream);
}

}  // namespace lumen::cuda
