// The pipelined step kernel, for bf16 state (fp32 state measured faster with the block kernel
// of recurrent_step.cu: docs/cuda_decode.md). A tile is all K rows of 128 bytes of columns (64
// state columns, or 32 when V is not a multiple of 8) of one value head of one session; tiles of
// one head follow each other in the work order. The grid is as many blocks as the device holds
// at once, and block b walks the b-th contiguous run of tiles: while it computes one tile, the
// copy of its next tile into shared memory (cp.async) is in flight and the stores of the one
// before drain. What depends on the head alone (prepared q, k and decays, their L2 norms,
// q . k, beta) is computed once per head, not once per tile.
//
// Per tile the arithmetic is RecurrentStepKernel's, in the same order (docs/spec.md §2): each
// thread owns kVec columns of 16 rows of the tile and reads only the shared memory it copied.

#include "backends/cuda/kernels/pipelined_step.cuh"

#include <algorithm>
#include <type_traits>

#include "backends/cuda/kernels/block_sum.cuh"
#include "backends/cuda/kernels/step_columns.cuh"

namespace lumen::cuda {
namespace {

constexpr int kThreads = 128;
static_assert(kThreads % kMaxWarpSize == 0, "blocks of whole warps on every target");
constexpr int kColumnThreads = 8;  // threads of one tile row: 8 x 16 bytes
constexpr int kRowGroups = kThreads / kColumnThreads;
static_assert(kWarpSize % kColumnThreads == 0, "a warp holds whole row groups");
constexpr int kStages = 2;  // tiles in shared memory per block: this one and the next
// Per block beside the tiles: q, k and decays, the reduction arrays, the runtime's reserve.
constexpr int64_t kOtherSharedBytes = 4096;
constexpr int kMaxBlocksPerMultiprocessor = 8;
using State = __nv_bfloat16;

// kVec consecutive bf16 state elements to floats and back, in one access of 2 * kVec bytes.
template <int kVec>
__device__ __forceinline__ void LoadChunk(const __nv_bfloat16* at, float (&out)[kVec]) {
  using Raw = std::conditional_t<kVec == 8, uint4, uint2>;
  const Raw raw = *reinterpret_cast<const Raw*>(at);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int e = 0; e < kVec / 2; ++e) {
    out[2 * e] = __low2float(pairs[e]);
    out[2 * e + 1] = __high2float(pairs[e]);
  }
}

template <int kVec>
__device__ __forceinline__ void StoreChunk(__nv_bfloat16* at, const float (&in)[kVec]) {
  using Raw = std::conditional_t<kVec == 8, uint4, uint2>;
  Raw raw;
  __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int e = 0; e < kVec / 2; ++e) pairs[e] = __floats2bfloat162_rn(in[2 * e], in[2 * e + 1]);
  *reinterpret_cast<Raw*>(at) = raw;
}

// A tile's columns and, in the stored dtype, its bytes.
template <int kVec>
inline constexpr int kTileColumnsOf = kColumnThreads * kVec;
template <int kVec, int kRows>
inline constexpr int64_t kTileBytesOf =
    int64_t{kRowGroups} * kRows * kTileColumnsOf<kVec> * static_cast<int64_t>(sizeof(State));

// Rows 16 * kRows >= K; tiles_per_head = ceil(V / tile columns).
template <int kVec, int kRows>
__global__ void __launch_bounds__(kThreads, kRows <= 8 ? 6 : 3)
PipelinedStepKernel(const StepArgs args, const StepStates states, const int32_t tiles_per_head) {
  constexpr int kWarps = kThreads / kWarpSize;
  constexpr int kTileRows = kRowGroups * kRows;
  constexpr int kTileColumns = kTileColumnsOf<kVec>;
  constexpr int kChunkBytes = kVec * static_cast<int>(sizeof(State));
  static_assert(2 * kTileColumns <= kThreads, "one thread per column sum");
  // kStages tiles, [kTileRows][kTileColumns] each, in the stored dtype.
  extern __shared__ __align__(16) unsigned char staged[];
  __shared__ float q_s[kTileRows], k_s[kTileRows], a_s[kTileRows];
  __shared__ float partial[kWarps][2 * kTileColumns];
  __shared__ float column_sum[2 * kTileColumns];
  __shared__ float reduce_scratch[kWarps * 2];
  __shared__ bool input_failed;

  const LayerConfig& layer = args.layer;
  const RawInputs& in = args.inputs;
  const int32_t K = layer.key_dim, V = layer.value_dim;
  const int32_t HV = layer.num_value_heads, H = layer.num_heads;
  const int tid = threadIdx.x;
  const int c = tid % kColumnThreads;
  const int r = tid / kColumnThreads;

  // This block's run of tiles: tile `item` is column tile item % tiles_per_head of head
  // item / tiles_per_head = session * HV + hv.
  const int64_t items = int64_t{args.num_sessions} * HV * tiles_per_head;
  const int64_t begin = items * blockIdx.x / gridDim.x;
  const int64_t end = items * (blockIdx.x + 1) / gridDim.x;

  auto column_of = [&](int64_t item) {
    return static_cast<int32_t>(item % tiles_per_head) * kTileColumns + c * kVec;
  };
  // This thread's columns of row 0 of tile `item` in the session's state.
  auto state_at = [&](int64_t item) {
    const int64_t head = item / tiles_per_head;
    const int32_t session = static_cast<int32_t>(head / HV);
    const int32_t hv = static_cast<int32_t>(head % HV);
    return static_cast<State*>(states.layer_state[session]) + int64_t{hv} * K * V +
           column_of(item);
  };
  auto staged_at = [&](int stage, int row) {
    return reinterpret_cast<State*>(staged) + (int64_t{stage} * kTileRows + row) * kTileColumns +
           c * kVec;
  };
  // Starts the copy of this thread's part of tile `item` into `stage` and commits it as one
  // group; past the block's run it commits an empty group, so that item i is always the
  // (i - begin)-th group.
  auto prefetch = [&](int64_t item, int stage) {
    if (item < end && column_of(item) < V) {
      const State* source = state_at(item);
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const int row = r + kRowGroups * m;
        if (row < K) CopyAsync<kChunkBytes>(staged_at(stage, row), source + int64_t{row} * V);
      }
    }
    CopyAsyncCommit();
  };

  prefetch(begin, 0);
  int64_t prepared_head = -1;
  float qk_dot = 0.0f, qz_dot = 0.0f, beta = 0.0f;  // of the prepared head
  for (int64_t item = begin; item < end; ++item) {
    const int stage = static_cast<int>((item - begin) % kStages);
    prefetch(item + 1, static_cast<int>((item + 1 - begin) % kStages));

    const int64_t head = item / tiles_per_head;
    const int32_t session = static_cast<int32_t>(head / HV);
    const int32_t hv = static_cast<int32_t>(head % HV);
    const int32_t h = hv / (HV / H);
    const int64_t t = args.first_session + session;  // the session's token
    const int32_t col = column_of(item);
    const bool valid = col < V;

    float v[kVec];
    const int64_t vo_row = (t * HV + hv) * V;  // [T, HV, V]
#pragma unroll
    for (int e = 0; e < kVec; ++e) v[e] = valid ? LoadElement(in.v, vo_row + col + e, in.dtype) : 0.0f;

    if (head != prepared_head) {
      prepared_head = head;
      __syncthreads();  // the previous head's q_s, k_s and a_s are no longer read
      const int64_t qk_row = (t * H + h) * K;   // [T, H, K]
      const int64_t g_row = (t * HV + hv) * K;  // [T, HV, K], per-channel gates
      float norms[2] = {0.0f, 0.0f};            // sum(q^2), sum(k^2) over K
      for (int32_t i = tid; i < K; i += kThreads) {
        const float q = LoadElement(in.q, qk_row + i, in.dtype);
        const float k = LoadElement(in.k, qk_row + i, in.dtype);
        q_s[i] = q;
        k_s[i] = k;
        if (layer.gate == GateKind::kPerChannel) a_s[i] = LoadElement(in.g, g_row + i, in.dtype);
        norms[0] += q * q;
        norms[1] += k * k;
      }
      float scalar_decay = 1.0f;
      if (layer.fixed_log_decay != nullptr) {
        scalar_decay = expf(layer.fixed_log_decay[hv]);
      } else if (layer.gate == GateKind::kScalar) {
        scalar_decay = expf(LogDecay(layer, LoadElement(in.g, t * HV + hv, in.dtype), hv, 0));
      }
      if (layer.delta_rule) {
        beta = PreparedBeta(layer, LoadElement(in.beta, t * HV + hv, in.dtype));
      }
      float q_norm = 1.0f, k_norm = 1.0f;
      if (layer.qk_l2norm) {
        BlockSum<kThreads>(norms, reduce_scratch);
        q_norm = L2NormFactor(layer, norms[0]);
        k_norm = L2NormFactor(layer, norms[1]);
      }
      // Each thread transforms the very elements it loaded: no barrier before this.
      const State* normalizer =
          static_cast<const State*>(states.layer_state[session]) + int64_t{HV} * K * V +
          int64_t{hv} * K;
      float dots[2] = {0.0f, 0.0f};  // q.k and q.(z + k)
      for (int32_t i = tid; i < K; i += kThreads) {
        const float q = PreparedQueryKey(layer, q_s[i], q_norm, layer.scale);
        const float k = PreparedQueryKey(layer, k_s[i], k_norm, 1.0f);
        const float a =
            layer.gate == GateKind::kPerChannel ? expf(LogDecay(layer, a_s[i], hv, i)) : scalar_decay;
        dots[0] += q * k;
        if (layer.normalize) {
          dots[1] += q * (LoadElement(normalizer, i, DType::kBFloat16) + k);
        }
        q_s[i] = q;
        k_s[i] = k;
        a_s[i] = a;
      }
      BlockSum<kThreads>(dots, reduce_scratch);  // its barriers also publish q_s, k_s, a_s
      qk_dot = dots[0];
      qz_dot = dots[1];
    }

    CopyAsyncWaitGroup<kStages - 1>();  // this thread's rows of this tile have arrived

    if (item == begin) {
      // Everything before this only read. The input check (the kernel before this one, which
      // this one may overlap) has finished: its record can be read.
      WaitForPrerequisiteGrids();
      if (tid == 0) input_failed = InputFailed(args.input_error);
      __syncthreads();
      if (input_failed) {  // the call's inputs failed their check: change nothing
        CopyAsyncWaitAll();
        return;
      }
    }

    // Pass 1: decay, and the additive write; partial sums over this thread's rows.
    State* state = state_at(item);
    float sum_k[kVec], sum_q[kVec];  // S'^T k and S'^T q (delta); S_t^T q in sum_q (additive)
#pragma unroll
    for (int e = 0; e < kVec; ++e) sum_k[e] = sum_q[e] = 0.0f;
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const int j = r + kRowGroups * m;
      if (j >= K || !valid) continue;
      float row[kVec];
      LoadChunk<kVec>(staged_at(stage, j), row);
      const float a = a_s[j], k = k_s[j], q = q_s[j];
      DecayRow(layer.delta_rule, a, k, q, v, row, sum_k, sum_q);
      if (!layer.delta_rule) StoreChunk<kVec>(state + int64_t{j} * V, row);
    }

    // Sums over rows: lanes of one column group, then warps.
    WarpColumnSums<kColumnThreads>(sum_k, sum_q, c, partial[tid / kWarpSize]);
    __syncthreads();
    SumWarpPartials(partial, column_sum);
    __syncthreads();

    float out[kVec], u[kVec];
    ColumnOutputs(layer, column_sum, c, v, beta, qk_dot, qz_dot, out, u);

    // Pass 2: the delta write, S_t = S' + k u^T.
    if (layer.delta_rule) {
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const int j = r + kRowGroups * m;
        if (j >= K || !valid) continue;
        float row[kVec];
        LoadChunk<kVec>(staged_at(stage, j), row);
        DeltaWriteRow(a_s[j], k_s[j], u, row);
        StoreChunk<kVec>(state + int64_t{j} * V, row);
      }
    }

    if (r == 0 && valid) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) StoreElement(args.o, vo_row + col + e, args.out_dtype, out[e]);
    }
  }
}

template <int kVec, int kRows>
cudaError_t Launch(const StepArgs& args, const StepStates& states, cudaStream_t stream) {
  constexpr auto kKernel = PipelinedStepKernel<kVec, kRows>;
  constexpr int64_t kSharedBytes = kStages * kTileBytesOf<kVec, kRows>;
  static_assert(kSharedBytes <= 48 * 1024, "no opt-in to large shared memory needed");
  const int32_t tiles_per_head =
      (args.layer.value_dim + kTileColumnsOf<kVec> - 1) / kTileColumnsOf<kVec>;
  const int64_t items = int64_t{args.num_sessions} * args.layer.num_value_heads * tiles_per_head;
  // As many blocks as run at once (shared memory is what limits them); without the device's
  // figures, one block per tile.
  int64_t blocks = items;
  if (args.multiprocessors > 0 && args.shared_bytes_per_multiprocessor > 0) {
    const int64_t per_multiprocessor =
        std::clamp<int64_t>(args.shared_bytes_per_multiprocessor / (kSharedBytes + kOtherSharedBytes),
                            1, kMaxBlocksPerMultiprocessor);
    blocks = std::min(items, per_multiprocessor * args.multiprocessors);
  }
  return LaunchKernel(kKernel, dim3(static_cast<uint32_t>(blocks)), dim3(kThreads),
                      static_cast<size_t>(kSharedBytes), args.after_previous, stream, args,
                      states, tiles_per_head);
}

template <int kVec>
cudaError_t LaunchForKeyDim(const StepArgs& args, const StepStates& states, cudaStream_t stream) {
  if (args.layer.key_dim <= kRowGroups * 4) return Launch<kVec, 4>(args, states, stream);
  return Launch<kVec, 8>(args, states, stream);
}

}  // namespace

bool PipelinedStepFits(const StepArgs& args) {
  return args.state_bf16 && args.layer.value_dim % 4 == 0 && args.layer.key_dim <= kRowGroups * 8;
}

cudaError_t LaunchPipelinedStep(const StepArgs& args, const StepStates& states,
                                cudaStream_t stream) {
  if (args.layer.value_dim % 8 == 0) return LaunchForKeyDim<8>(args, states, stream);
  return LaunchForKeyDim<4>(args, states, stream);
}

}  // namespace lumen::cuda
