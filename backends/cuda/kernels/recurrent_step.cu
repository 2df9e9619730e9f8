// The block step kernel, for every shape the register kernel (register_step.cu: fp32 state,
// K = 128, V % 32 == 0, no normaliser, identity feature map) and the pipelined kernel
// (pipelined_step.cu: bf16 state with K <= 128 and V % 4 == 0) do not take. A block owns one column tile of one value
// head of one session:
// rows split across kRowGroups thread groups, columns across kColumnThreads threads of kVec
// consecutive columns each (one 16-byte access for fp32 state). Columns of S evolve
// independently (docs/spec.md §2), so tiles never talk to each other; the sums over K are
// block reductions.
//
// Per token: o = S_t^T q with S_t = a S + k v^T (additive) or, for the delta rule,
// S' = a S, u = beta (v - S'^T k), S_t = S' + k u^T and o = S'^T q + (q . k) u, so one
// reduction of (S'^T k, S'^T q) serves both.

#include "backends/cuda/kernels/recurrent_step.cuh"

#include "backends/cuda/kernels/block_sum.cuh"
#include "backends/cuda/kernels/pipelined_step.cuh"
#include "backends/cuda/kernels/register_step.cuh"
#include "backends/cuda/kernels/step_columns.cuh"

namespace lumen::cuda {
namespace {

constexpr int kBlockThreads = 128;
static_assert(kBlockThreads % kMaxWarpSize == 0, "blocks of whole warps on every target");
constexpr int kColumnThreads = 8;
constexpr int kRowGroups = kBlockThreads / kColumnThreads;
constexpr int kWarps = kBlockThreads / kWarpSize;
// Blocks of the staged kernel resident per SM that registers must allow (each keeps its
// tile's copies in flight); a 256-row tile's shared memory allows fewer.
constexpr int StagedBlocksPerSm(int rows) { return rows >= 16 ? 5 : 8; }
static_assert(kWarpSize % kColumnThreads == 0, "a warp holds whole row groups");

template <int kVec>
struct StateIo;

template <>
struct StateIo<4> {
  __device__ static void Load(const void* base, int64_t index, bool bf16, int valid,
                              float (&out)[4]) {
    (void)valid;  // kVec 4 is chosen only when V % 4 == 0: a tile's 4 columns are all valid
    if (bf16) {
      const uint2 raw = *reinterpret_cast<const uint2*>(
          static_cast<const __nv_bfloat16*>(base) + index);
      const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
      const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
      out[0] = __low2float(lo); out[1] = __high2float(lo);
      out[2] = __low2float(hi); out[3] = __high2float(hi);
    } else {
      const float4 raw = *reinterpret_cast<const float4*>(static_cast<const float*>(base) + index);
      out[0] = raw.x; out[1] = raw.y; out[2] = raw.z; out[3] = raw.w;
    }
  }
  __device__ static void Store(void* base, int64_t index, bool bf16, int valid,
                               const float (&in)[4]) {
    (void)valid;
    if (bf16) {
      const __nv_bfloat162 lo = __floats2bfloat162_rn(in[0], in[1]);
      const __nv_bfloat162 hi = __floats2bfloat162_rn(in[2], in[3]);
      uint2 raw;
      raw.x = *reinterpret_cast<const uint32_t*>(&lo);
      raw.y = *reinterpret_cast<const uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(base) + index) = raw;
    } else {
      *reinterpret_cast<float4*>(static_cast<float*>(base) + index) =
          make_float4(in[0], in[1], in[2], in[3]);
    }
  }
};

template <>
struct StateIo<1> {
  __device__ static void Load(const void* base, int64_t index, bool bf16, int valid,
                              float (&out)[1]) {
    out[0] = valid > 0 ? LoadElement(base, index, bf16 ? DType::kBFloat16 : DType::kFloat32) : 0.0f;
  }
  __device__ static void Store(void* base, int64_t index, bool bf16, int valid,
                               const float (&in)[1]) {
    if (valid > 0) StoreElement(base, index, bf16 ? DType::kBFloat16 : DType::kFloat32, in[0]);
  }
};

// kRows rows per thread per chunk of kRowGroups * kRows rows. kSingleChunk: K fits in one
// chunk, so the tile is read once and written once. With 16-byte column groups it is copied
// into shared memory asynchronously (kStaged): the bytes in flight are then bounded by shared
// memory, not by registers, and the registers stay few enough for many blocks per SM. Else
// it is held in registers.
template <int kVec, int kRows, bool kSingleChunk>
__global__ void __launch_bounds__(kBlockThreads, kSingleChunk && kVec == 4 ? StagedBlocksPerSm(kRows) : 1)
RecurrentStepKernel(const StepArgs args, const StepStates states) {
  constexpr int kChunk = kRowGroups * kRows;
  constexpr int kTileColumns = kColumnThreads * kVec;
  constexpr bool kStaged = kSingleChunk && kVec == 4;
  __shared__ float q_s[kChunk], k_s[kChunk], a_s[kChunk];
  // The state tile, [kChunk, kTileColumns] in the stored dtype (fp32 or bf16).
  __shared__ __align__(16) float staged[kStaged ? kChunk * kTileColumns : 1];
  __shared__ float partial[kWarps][2 * kTileColumns];
  __shared__ float column_sum[2 * kTileColumns];
  __shared__ float reduce_scratch[kWarps * 2];
  // Read by one thread after the check has finished, published by the barrier that ends
  // stage(), so the whole block agrees.
  __shared__ bool input_failed;

  const LayerConfig& layer = args.layer;
  const int32_t K = layer.key_dim, V = layer.value_dim;
  const int32_t HV = layer.num_value_heads, H = layer.num_heads;
  const int32_t tiles = (V + kTileColumns - 1) / kTileColumns;
  const int32_t tile = blockIdx.x % tiles;
  const int32_t hv = blockIdx.x / tiles;
  const int32_t session = blockIdx.y;
  const int32_t h = hv / (HV / H);

  const int64_t t = args.first_session + session;  // the session's token

  const int tid = threadIdx.x;
  const int c = tid % kColumnThreads;
  const int r = tid / kColumnThreads;
  const int32_t col = tile * kTileColumns + c * kVec;
  const int valid = min(kVec, V - col);  // columns of this thread inside V (may be <= 0)
  const bool bf16 = args.state_bf16;

  // State and normalizer of this head, in the stored dtype: [K, V] and [K].
  void* block = states.layer_state[session];
  const int64_t elem = bf16 ? 2 : 4;
  char* matrix = static_cast<char*>(block) + static_cast<int64_t>(hv) * K * V * elem;
  const char* normalizer =
      static_cast<char*>(block) + (static_cast<int64_t>(HV) * K * V + int64_t{hv} * K) * elem;

  // Where row j (of the chunk) of this thread's columns sits in the staged tile.
  auto tile_at = [&](int j) {
    return reinterpret_cast<char*>(staged) + (int64_t{j} * kTileColumns + c * kVec) * elem;
  };
  float s[kRows][kVec];
  if (kStaged) {
    // Start every state copy first: they are the bytes this kernel exists to move.
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const int32_t i = r + kRowGroups * m;
      if (i < K && valid > 0) {
        const char* source = matrix + (int64_t{i} * V + col) * elem;
        bf16 ? CopyAsync<4 * 2>(tile_at(i), source) : CopyAsync<4 * 4>(tile_at(i), source);
      }
    }
    CopyAsyncCommit();
  } else if (kSingleChunk) {
    // Issue every state load first: they are the bytes this kernel exists to move.
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const int32_t i = r + kRowGroups * m;
      if (i < K && valid > 0) {
        StateIo<kVec>::Load(matrix, int64_t{i} * V + col, bf16, valid, s[m]);
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) s[m][e] = 0.0f;
      }
    }
  }

  const RawInputs& in = args.inputs;
  const int64_t qk_row = (t * H + h) * K;  // [T, H, K]
  const int64_t g_row = (t * HV + hv) * K;  // [T, HV, K], per-channel gates

  // Raw q, k and per-channel g of rows [base, base + kChunk) into shared memory; returns this
  // thread's share of sum(q^2) and sum(k^2). Each thread later transforms the very elements
  // it loaded, so no barrier separates the two.
  auto load_raw = [&](int32_t base, float& q_squares, float& k_squares) {
    for (int32_t j = tid; j < kChunk; j += kBlockThreads) {
      const int32_t i = base + j;
      float q = 0.0f, k = 0.0f, g = 0.0f;
      if (i < K) {
        q = LoadElement(in.q, qk_row + i, in.dtype);
        k = LoadElement(in.k, qk_row + i, in.dtype);
        if (layer.gate == GateKind::kPerChannel) g = LoadElement(in.g, g_row + i, in.dtype);
      }
      q_squares += q * q;
      k_squares += k * k;
      q_s[j] = q;
      k_s[j] = k;
      a_s[j] = g;
    }
  };

  float norms[2] = {0.0f, 0.0f};  // sum(q^2), sum(k^2) over K
  if (kSingleChunk) {
    load_raw(0, norms[0], norms[1]);  // in flight together with the state loads
  } else if (layer.qk_l2norm) {
    for (int32_t i = tid; i < K; i += kBlockThreads) {
      const float q = LoadElement(in.q, qk_row + i, in.dtype);
      const float k = LoadElement(in.k, qk_row + i, in.dtype);
      norms[0] += q * q;
      norms[1] += k * k;
    }
  }

  float v[kVec];
  const int64_t vo_row = (t * HV + hv) * V;  // [T, HV, V]
#pragma unroll
  for (int e = 0; e < kVec; ++e) {
    v[e] = e < valid ? LoadElement(in.v, vo_row + col + e, in.dtype) : 0.0f;
  }
  float beta = 0.0f;
  if (layer.delta_rule) beta = PreparedBeta(layer, LoadElement(in.beta, t * HV + hv, in.dtype));
  float scalar_decay = 1.0f;
  if (layer.fixed_log_decay != nullptr) {
    scalar_decay = expf(layer.fixed_log_decay[hv]);
  } else if (layer.gate == GateKind::kScalar) {
    scalar_decay = expf(LogDecay(layer, LoadElement(in.g, t * HV + hv, in.dtype), hv, 0));
  }

  float q_norm = 1.0f, k_norm = 1.0f;
  if (layer.qk_l2norm) {
    BlockSum<kBlockThreads>(norms, reduce_scratch);
    q_norm = L2NormFactor(layer, norms[0]);
    k_norm = L2NormFactor(layer, norms[1]);
  }

  float dots[2] = {0.0f, 0.0f};  // q.k and q.(z + k), this thread's rows until summed

  // Prepared q, k and row decays of rows [base, base + kChunk) in shared memory, from the raw
  // values load_raw put there; with `count_dots`, adds this thread's share of q.k and
  // q.(z + k) to `dots`. Ends with a barrier.
  auto stage = [&](int32_t base, bool count_dots) {
    if (!kSingleChunk) {
      float unused_q = 0.0f, unused_k = 0.0f;
      load_raw(base, unused_q, unused_k);
    }
    for (int32_t j = tid; j < kChunk; j += kBlockThreads) {
      const int32_t i = base + j;
      float q = 0.0f, k = 0.0f, a = 1.0f;
      if (i < K) {
        q = PreparedQueryKey(layer, q_s[j], q_norm, layer.scale);
        k = PreparedQueryKey(layer, k_s[j], k_norm, 1.0f);
        a = layer.gate == GateKind::kPerChannel ? expf(LogDecay(layer, a_s[j], hv, i)) : scalar_decay;
        if (count_dots) {
          dots[0] += q * k;
          if (layer.normalize) {
            dots[1] += q * (LoadElement(normalizer, i, bf16 ? DType::kBFloat16 : DType::kFloat32) + k);
          }
        }
      }
      q_s[j] = q;
      k_s[j] = k;
      a_s[j] = a;
    }
    __syncthreads();
  };

  float sum_k[kVec], sum_q[kVec];  // S'^T k and S'^T q (delta); S_t^T q in sum_q (additive)
#pragma unroll
  for (int e = 0; e < kVec; ++e) sum_k[e] = sum_q[e] = 0.0f;

  if (kStaged) CopyAsyncWaitAll();  // this thread's own rows of the tile have arrived

  // The input check (the kernel before this one) has finished: its record can be read.
  WaitForPrerequisiteGrids();
  if (threadIdx.x == 0) input_failed = InputFailed(args.input_error);

  // Pass 1: decay, and the additive write; partial sums over this thread's rows.
  const int32_t pass_end = kSingleChunk ? 1 : K;  // one chunk, known at compile time
  for (int32_t base = 0; base < pass_end; base += kChunk) {
    if (!kSingleChunk && base > 0) __syncthreads();  // the previous chunk's reads are done
    stage(base, true);
    if (input_failed) return;  // the call's inputs failed their check: change nothing
    if constexpr (kStaged) {
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const int j = r + kRowGroups * m;
        if (j >= K || valid <= 0) continue;
        float row[kVec];
        StateIo<kVec>::Load(tile_at(j), 0, bf16, valid, row);
        const float a = a_s[j], k = k_s[j], q = q_s[j];
        DecayRow(layer.delta_rule, a, k, q, v, row, sum_k, sum_q);
        if (!layer.delta_rule) {
          StateIo<kVec>::Store(matrix, int64_t{j} * V + col, bf16, valid, row);
        }
      }
    } else {
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const int j = r + kRowGroups * m;
      const int32_t i = base + j;
      if (!kSingleChunk) {
        if (i < K && valid > 0) {
          StateIo<kVec>::Load(matrix, int64_t{i} * V + col, bf16, valid, s[m]);
        } else {
#pragma unroll
          for (int e = 0; e < kVec; ++e) s[m][e] = 0.0f;
        }
      }
      const float a = a_s[j], k = k_s[j], q = q_s[j];
      DecayRow(layer.delta_rule, a, k, q, v, s[m], sum_k, sum_q);
      if (!kSingleChunk && !layer.delta_rule && i < K && valid > 0) {
        StateIo<kVec>::Store(matrix, int64_t{i} * V + col, bf16, valid, s[m]);
      }
    }
    }
  }

  // Sums over rows: lanes of one column group, then warps.
  WarpColumnSums<kColumnThreads>(sum_k, sum_q, c, partial[tid / kWarpSize]);
  BlockSum<kBlockThreads>(dots, reduce_scratch);  // its barriers also publish `partial`
  SumWarpPartials(partial, column_sum);
  __syncthreads();

  float out[kVec], u[kVec];
  ColumnOutputs(layer, column_sum, c, v, beta, dots[0], dots[1], out, u);

  // Pass 2: the delta write, S_t = S' + k u^T, then every state store.
  if constexpr (kStaged) {
    if (layer.delta_rule) {
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const int j = r + kRowGroups * m;
        if (j >= K || valid <= 0) continue;
        float row[kVec];
        StateIo<kVec>::Load(tile_at(j), 0, bf16, valid, row);
        DeltaWriteRow(a_s[j], k_s[j], u, row);
        StateIo<kVec>::Store(matrix, int64_t{j} * V + col, bf16, valid, row);
      }
    }
  } else if (kSingleChunk) {
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const int32_t i = r + kRowGroups * m;
      if (layer.delta_rule) {
        const float k = k_s[i];
#pragma unroll
        for (int e = 0; e < kVec; ++e) s[m][e] += k * u[e];
      }
      if (i < K && valid > 0) StateIo<kVec>::Store(matrix, int64_t{i} * V + col, bf16, valid, s[m]);
    }
  } else if (layer.delta_rule) {
    for (int32_t base = 0; base < K; base += kChunk) {
      __syncthreads();
      stage(base, false);
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const int j = r + kRowGroups * m;
        const int32_t i = base + j;
        if (i >= K || valid <= 0) continue;
        float row[kVec];
        StateIo<kVec>::Load(matrix, int64_t{i} * V + col, bf16, valid, row);
        DeltaWriteRow(a_s[j], k_s[j], u, row);
        StateIo<kVec>::Store(matrix, int64_t{i} * V + col, bf16, valid, row);
      }
    }
  }

  if (r == 0) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      if (e < valid) StoreElement(args.o, vo_row + col + e, args.out_dtype, out[e]);
    }
  }
}

// z += phi(l2norm(k)) for each session's token and value head: after the step kernel, which
// read the old z in every column tile.
__global__ void __launch_bounds__(kBlockThreads)
NormalizerUpdateKernel(const StepArgs args, const StepStates states) {
  __shared__ float reduce_scratch[kWarps * 2];
  __shared__ bool input_failed;
  if (threadIdx.x == 0) input_failed = InputFailed(args.input_error);
  __syncthreads();
  if (input_failed) return;
  const LayerConfig& layer = args.layer;
  const int32_t K = layer.key_dim, V = layer.value_dim;
  const int32_t HV = layer.num_value_heads, H = layer.num_heads;
  const int32_t hv = blockIdx.x;
  const int32_t session = blockIdx.y;
  const int32_t h = hv / (HV / H);
  const int64_t t = args.first_session + session;
  const RawInputs& in = args.inputs;
  const int64_t qk_row = (t * H + h) * K;
  float k_norm = 1.0f;
  if (layer.qk_l2norm) {
    float sums[2] = {0.0f, 0.0f};
    for (int32_t i = threadIdx.x; i < K; i += kBlockThreads) {
      const float k = LoadElement(in.k, qk_row + i, in.dtype);
      sums[0] += k * k;
    }
    BlockSum<kBlockThreads>(sums, reduce_scratch);
    k_norm = L2NormFactor(layer, sums[0]);
  }
  const DType dtype = args.state_bf16 ? DType::kBFloat16 : DType::kFloat32;
  void* z = static_cast<char*>(states.layer_state[session]) +
            (static_cast<int64_t>(HV) * K * V + int64_t{hv} * K) * (args.state_bf16 ? 2 : 4);
  for (int32_t i = threadIdx.x; i < K; i += kBlockThreads) {
    const float k = PreparedQueryKey(layer, LoadElement(in.k, qk_row + i, in.dtype), k_norm, 1.0f);
    StoreElement(z, i, dtype, LoadElement(z, i, dtype) + k);
  }
}

template <int kVec, int kRows, bool kSingleChunk>
cudaError_t Launch(const StepArgs& args, const StepStates& states, cudaStream_t stream) {
  const int32_t tile_columns = kColumnThreads * kVec;
  const int64_t tiles = (args.layer.value_dim + tile_columns - 1) / tile_columns;
  const dim3 grid(static_cast<uint32_t>(tiles * args.layer.num_value_heads),
                  static_cast<uint32_t>(args.num_sessions));
  return LaunchKernel(RecurrentStepKernel<kVec, kRows, kSingleChunk>, grid, dim3(kBlockThreads),
                      0, args.after_previous, stream, args, states);
}

// The one dispatch switch: 16-byte column groups when V allows them, rows held in registers
// when K fits (K up to 32, 64, 128, 256), else the chunked path for any K.
template <int kVec>
cudaError_t LaunchForKeyDim(const StepArgs& args, const StepStates& states,
                            cudaStream_t stream) {
  const int32_t K = args.layer.key_dim;
  if (K <= kRowGroups * 2) return Launch<kVec, 2, true>(args, states, stream);
  if (K <= kRowGroups * 4) return Launch<kVec, 4, true>(args, states, stream);
  if (K <= kRowGroups * 8) return Launch<kVec, 8, true>(args, states, stream);
  if (K <= kRowGroups * 16) return Launch<kVec, 16, true>(args, states, stream);
  return Launch<kVec, 8, false>(args, states, stream);
}

}  // namespace

cudaError_t LaunchRecurrentStep(const StepArgs& args, const StepStates& states,
                                cudaStream_t stream) {
  if (args.num_sessions == 0) return cudaSuccess;
  // Every head's slice starts 16-byte aligned when V % 4 == 0 (blocks are 64-byte aligned).
  cudaError_t error = cudaSuccess;
  if (RegisterStepFits(args)) {
    error = LaunchRegisterStep(args, states, stream);
  } else if (PipelinedStepFits(args)) {
    error = LaunchPipelinedStep(args, states, stream);
  } else if (args.layer.value_dim % 4 == 0) {
    error = LaunchForKeyDim<4>(args, states, stream);
  } else {
    error = LaunchForKeyDim<1>(args, states, stream);
  }
  if (error != cudaSuccess || !args.layer.normalize) return error;
  const dim3 grid(static_cast<uint32_t>(args.layer.num_value_heads),
                  static_cast<uint32_t>(args.num_sessions));
  NormalizerUpdateKernel<<<grid, kBlockThreads, 0, stream>>>(args, states);
  return cudaGetLastError();
}

}  // namespace lumen::cuda
