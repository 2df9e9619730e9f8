// The chunkwise form on the GPU at fp32 accuracy (no TF32 rounding), as three or four
// launches per round:
//
//   1. IntraChunkKernel, one block per (sequence, chunk, value head), all chunks at once:
//      the masked C x C score matrix P[t, s] = sum_i q_t k_s exp(b_t - b_s) (s <= t) and, for
//      the delta rule, the UT transform of flash-linear-attention:
//      W = (I + A)^-1 diag(beta) (K ⊙ exp(b)) and U = (I + A)^-1 diag(beta) V with
//      A[t, s] = beta_t sum_i k_t k_s exp(b_t - b_s) (s < t), by forward substitution.
//      For the normalizer it sums each chunk's keys; for the split walk (3a) it also saves b_t
//      (scalar decay) or K ⊙ exp(b_C - b) and b_C (per-channel decay). The SIMT kernel
//      (IntraChunkKernel) computes all of it in fp32 FMAs; NVIDIA builds that take the split
//      walk run IntraChunkTensorKernel instead where it is faster (kTensorIntraChunk): P and A
//      as 3xTF32 mma products, the UT transform blocked into 16 x 16 diagonal inverses and
//      mma products.
//   2. NormalizerPrefixKernel (normalizer only): the normalizer each chunk starts from.
//   3. The inter-chunk part: U' = U - W S0 for the delta rule (V itself for additive writes),
//      O = (Q ⊙ exp(b)) S0 + P U', S = exp(b_C) ⊙ S0 + (K ⊙ exp(b_C - b))^T U'.
//      NVIDIA builds with K <= 128 and no normalizer split it as flash-linear-attention does,
//      on the tensor cores in 3xTF32 (tf32x3_mma.cuh): 3a StateWalkTensorKernel walks the
//      chunks in order carrying only the state (in registers) and saves each chunk's starting
//      state and U'; 3b ChunkOutputTensorKernel computes O for every chunk at once.
//      Elsewhere InterChunkKernel, one block per (sequence, value head, tile of value columns),
//      walks the chunks and computes all three in fp32 on the SIMT cores: the portable path.
//
// b_t is the cumulative log-decay inside the chunk (token t's own decay included), per key
// channel; every factor exp(b_t - b_s) with s <= t is <= 1. Per-channel decays cannot be
// pulled out of the sum over channels as a product exp(b_t) exp(-b_s) without leaving fp32's
// range, so P and A are built from 16-token sub-chunks: between sub-chunks both sides are
// scaled against the boundary r between them, q_t exp(b_t - r) and k_s exp(r - b_s), both
// factors <= 1; inside a sub-chunk each term gets its own exp(b_t - b_s). No chunk is ever cut
// short, whatever the decays.
//
// Scratch holds the per-chunk results of launches 1 and 3a (P, W, U then U', the chunk's
// starting state, the decay terms) for a bounded window of chunks; longer calls
// run as several rounds (a window of chunks for a group of sequences each), the state carrying
// between them in place. Rounds are plain stream-ordered launches: no host synchronisation.
//
// Exponentials use __expf (ex2.approx): about 1e-6 relative error over the arguments here
// (all <= 0 and of moderate size where they matter), far inside the chunkwise bound of 1e-4.

#include "backends/cuda/kernels/chunkwise.cuh"

#include <algorithm>
#include <cstdint>

#include "backends/cuda/gpu_compat.cuh"
#include "backends/cuda/kernels/tf32x3_mma.cuh"

namespace lumen::cuda {
namespace {

constexpr int kChunk = 64;               // C, tokens per chunk
constexpr int kSubChunk = 16;            // sub-chunk of the per-channel decay references
constexpr int kSubChunks = kChunk / kSubChunk;

// Launch 1: 256 threads, each owning a 4 x 4 grid of (t, s) pairs of the C x C matrices.
constexpr int kIntraThreads = 256;
constexpr int kIntraSlab = 16;                 // key channels per pass
constexpr int kIntraStride = kIntraSlab + 1;   // padded row: conflict-free column reads
constexpr int kIntraBlocksPerSm = 2;           // register budget: 128 per thread
constexpr int kSquareStride = kChunk + 4;      // padded row of A, 16-byte aligned

// Launch 3: 128 threads over a C x kValueTile output tile, 4 x 4 each.
constexpr int kInterThreads = 128;
constexpr int kInterSlab = 64;                 // key channels per pass
constexpr int kValueTile = 32;                 // value columns per block
constexpr int kInterBlocksPerSm = 3;           // caps registers at 168
constexpr int kSlabStride = kInterSlab + 4;    // rows stay 16-byte aligned for float4 reads
constexpr int kTileStride = kValueTile + 4;

// Scratch is sized for at most this many bytes of per-chunk results at once (at least one
// chunk of one sequence); longer calls take more rounds.
constexpr int64_t kScratchBudgetBytes = int64_t{256} << 20;

static_assert(kIntraThreads == 16 * 16 && kChunk == 4 * 16, "launch 1 thread layout");
static_assert(kInterThreads == 16 * 8 && kValueTile == 8 * 4, "launch 3 thread layout");
static_assert(kIntraThreads % kMaxWarpSize == 0 && kInterThreads % kMaxWarpSize == 0,
              "blocks of whole warps on every target");

// Where one (sequence, chunk, value head) keeps its results inside the scratch.
struct SlotLayout {
  int64_t slot_floats = 0;       // floats per slot, a multiple of 4
  int64_t scores = 0;            // [C, C] P, zero above the diagonal and past the chunk
  int64_t keys = 0;              // [C, K] W (delta rule)
  int64_t values = 0;            // [C, V] U, then U' (delta rule)
  int64_t start_state = 0;       // [K, V] the state before the chunk (split walk)
  int64_t token_decay = 0;       // [C] b_t (split walk, scalar decay)
  int64_t key_end = 0;           // [C, K] K ⊙ exp(b_C - b), zero past the chunk (split walk,
                                 // per-channel decay)
  int64_t decay_end = 0;         // [K] b_C (split walk, per-channel decay)
  int64_t normalizer = 0;        // [K] the chunk's key sum, then the normalizer it starts from
  int32_t chunks_per_round = 0;  // slots reserved per sequence
};

// How one call is cut into rounds: groups of sequences times windows of chunks.
struct Plan {
  SlotLayout layout;
  int32_t max_chunks = 0;
  int32_t sequences_per_round = 0;
};

// The sequences and chunks one round covers.
struct Round {
  int32_t first_sequence = 0;
  int32_t first_chunk = 0;
};

// One chunk of one sequence, located from a round-local (sequence, chunk) pair.
struct ChunkSpan {
  int32_t sequence;
  int32_t start;   // first token, an index into the concatenated T
  int32_t length;  // 1..C
};

__device__ bool LocateChunk(const ChunkwiseArgs& args, const Round& round, int32_t local_sequence,
                            int32_t local_chunk, ChunkSpan* span) {
  span->sequence = round.first_sequence + local_sequence;
  if (span->sequence >= args.num_sequences) return false;
  const int32_t begin = args.cu_seqlens[span->sequence];
  const int32_t tokens = args.cu_seqlens[span->sequence + 1] - begin;
  const int64_t offset = static_cast<int64_t>(round.first_chunk + local_chunk) * kChunk;
  if (offset >= tokens) return false;
  span->start = begin + static_cast<int32_t>(offset);
  span->length = tokens - offset < kChunk ? static_cast<int32_t>(tokens - offset) : kChunk;
  return true;
}

__device__ float* SlotOf(const SlotLayout& layout, float* scratch, int32_t num_value_heads,
                         int32_t local_sequence, int32_t local_chunk, int32_t value_head) {
  const int64_t slot =
      (static_cast<int64_t>(local_sequence) * layout.chunks_per_round + local_chunk) *
          num_value_heads + value_head;
  return scratch + slot * layout.slot_floats;
}

// The one home of the launch grid convention: every per-(sequence, value head[, tile of
// value columns]) launch numbers its blocks along x as
// (local_sequence * num_value_heads + value_head) * value_tiles + tile, so LaunchRounds sizes
// gridDim.x as sequences * num_value_heads * value_tiles; untiled launches have one tile.
struct GridSlot {
  int32_t local_sequence;
  int32_t value_head;
  int32_t tile;  // of kValueTile value columns
};

// Tiles of kValueTile value columns per (sequence, value head) in the tiled launches.
__host__ __device__ constexpr int32_t ValueTiles(int32_t value_dim) {
  return (value_dim + kValueTile - 1) / kValueTile;
}

__device__ __forceinline__ GridSlot LocateGridSlot(int32_t num_value_heads,
                                                   int32_t value_tiles = 1) {
  GridSlot grid;
  grid.tile = blockIdx.x % value_tiles;
  grid.value_head = (blockIdx.x / value_tiles) % num_value_heads;
  grid.local_sequence = blockIdx.x / value_tiles / num_value_heads;
  return grid;
}

// What one block of a per-chunk launch works on: its chunk, the chunk's scratch slot, and the
// chunk's first q and k rows of the value head's query/key head.
struct ChunkBlock {
  ChunkSpan span;
  float* slot;
  int32_t value_head;
  int32_t head;
  int64_t qk_row;  // floats from one token's q (or k) row to the next
  const float* q;
  const float* k;
};

// Locates this block's (sequence, value head) by LocateGridSlot and its chunk by blockIdx.y;
// false where the chunk lies past its sequence's end or the round's sequences, so the block
// has nothing to do.
__device__ bool LocateChunkBlock(const ChunkwiseArgs& args, const SlotLayout& layout,
                                 const Round& round, float* scratch, ChunkBlock* block) {
  const GridSlot grid = LocateGridSlot(args.num_value_heads);
  const int32_t local_chunk = blockIdx.y;
  if (!LocateChunk(args, round, grid.local_sequence, local_chunk, &block->span)) return false;
  block->slot = SlotOf(layout, scratch, args.num_value_heads, grid.local_sequence, local_chunk,
                       grid.value_head);
  block->value_head = grid.value_head;
  block->head = grid.value_head / (args.num_value_heads / args.num_heads);
  block->qk_row = static_cast<int64_t>(args.num_heads) * args.key_dim;
  const int64_t first =
      static_cast<int64_t>(block->span.start) * block->qk_row + block->head * args.key_dim;
  block->q = args.q + first;
  block->k = args.k + first;
  return true;
}

// In-place inclusive prefix sums down the kChunk rows of each of kColumns columns of `a`
// (row stride `stride`), by all kThreads threads: each totals a segment of rows, then
// rewrites it as running sums starting from the totals of the segments above it. `totals`
// holds kThreads floats.
template <int kColumns, int kThreads>
__device__ void PrefixSumColumns(float* a, int stride, float* totals) {
  constexpr int kSegments = kThreads / kColumns;
  constexpr int kRows = kChunk / kSegments;
  static_assert(kSegments * kColumns == kThreads && kRows * kSegments == kChunk, "layout");
  const int column = threadIdx.x % kColumns;
  const int segment = threadIdx.x / kColumns;
  float* first = a + segment * kRows * stride + column;
  float total = 0.0f;
#pragma unroll 8
  for (int r = 0; r < kRows; ++r) total += first[r * stride];
  totals[segment * kColumns + column] = total;
  __syncthreads();
  float running = 0.0f;
  for (int s = 0; s < segment; ++s) running += totals[s * kColumns + column];
#pragma unroll 8
  for (int r = 0; r < kRows; ++r) {
    running += first[r * stride];
    first[r * stride] = running;
  }
  __syncthreads();
}

// Per-token scalars of a chunk: the cumulative scalar log-decay b_t (kScalar) and beta_t
// (delta rule), zero past the chunk's end. `scratch` holds kChunk floats.
template <GateKind kDecay, bool kDelta>
__device__ void LoadTokenScalars(const ChunkwiseArgs& args, const ChunkSpan& span,
                                 int32_t value_head, float* decay, float* beta, float* scratch) {
  const int t = threadIdx.x;
  const int64_t row = static_cast<int64_t>(span.start + t) * args.num_value_heads + value_head;
  if (t < kChunk) {
    if (kDecay == GateKind::kScalar) scratch[t] = t < span.length ? args.log_decay[row] : 0.0f;
    if (kDelta) beta[t] = t < span.length ? args.beta[row] : 0.0f;
  }
  if (kDecay != GateKind::kScalar) return;
  __syncthreads();
  if (t < kChunk) {
    float sum = 0.0f;
    for (int s = 0; s <= t; ++s) sum += scratch[s];
    decay[t] = sum;
  }
  __syncthreads();
}

// Runs over a kChunk x kColumns tile, each thread's share in batches of up to 16 elements:
// the batch's global reads first (fetch(t, c) returns the value), then its shared-memory
// writes (store(t, c, value)), so that the reads' latencies overlap instead of adding up.
template <int kColumns, int kThreads, typename Fetch, typename Store>
__device__ __forceinline__ void ForEachInTile(Fetch fetch, Store store) {
  constexpr int kPerThread = kChunk * kColumns / kThreads;
  constexpr int kBatch = kPerThread < 16 ? kPerThread : 16;  // reads in flight per thread
  static_assert(kPerThread * kThreads == kChunk * kColumns && kPerThread % kBatch == 0,
                "tile layout");
#pragma unroll 1
  for (int first = 0; first < kPerThread; first += kBatch) {
    float values[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int e = threadIdx.x + (first + i) * kThreads;
      values[i] = fetch(e / kColumns, e % kColumns);
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int e = threadIdx.x + (first + i) * kThreads;
      store(e / kColumns, e % kColumns, values[i]);
    }
  }
}

// The per-channel log-decay of token t (chunk-relative), channel k0 + c; zero past the chunk
// and past K.
__device__ __forceinline__ float FetchLogDecay(const ChunkwiseArgs& args, const ChunkSpan& span,
                                               int32_t value_head, int32_t k0, int t, int c) {
  if (t >= span.length || k0 + c >= args.key_dim) return 0.0f;
  return __ldg(&args.log_decay[(static_cast<int64_t>(span.start + t) * args.num_value_heads +
                                value_head) * args.key_dim + k0 + c]);
}

// Loads the per-channel log-decays of channels [k0, k0 + kColumns) into `b` ([C, stride])
// and turns them into b_t, the cumulative sums.
template <int kColumns, int kThreads>
__device__ void LoadCumulativeDecay(const ChunkwiseArgs& args, const ChunkSpan& span,
                                    int32_t value_head, int32_t k0, float* b, int stride,
                                    float* totals) {
  ForEachInTile<kColumns, kThreads>(
      [&](int t, int c) { return FetchLogDecay(args, span, value_head, k0, t, c); },
      [&](int t, int c, float g) { b[t * stride + c] = g; });
  __syncthreads();
  PrefixSumColumns<kColumns, kThreads>(b, stride, totals);
}

// ---------------------------------------------------------------------------------------
// Launch 1: P, and for the delta rule W and U, of every chunk of the round.

// Shared memory of launch 1, in floats: the per-slab arrays of the score pass, then A.
constexpr int kIntraSlabFloats = kChunk * kIntraStride;
constexpr int kIntraRegionFloats = std::max(8 * kIntraSlabFloats, kChunk * kSquareStride);

// Accumulates the raw (t, s) sums of P and, for the delta rule, of A over one slab of key
// channels. Thread (ty, tx) owns rows t = ty + 16 i and columns s = tx + 16 j, so pair (i, j)
// is sub-chunk pair (i, j): for j < i the scaled operands, for j == i the exact factors.
template <GateKind kDecay, bool kDelta>
__device__ void AccumulateScores(const float* q_raw, const float* k_raw, const float* b,
                                 const float* q_scaled, const float* k_scaled,
                                 const float* k_minus, float (&p)[4][4], float (&a)[4][4]) {
  const int ty = threadIdx.x / 16;
  const int tx = threadIdx.x % 16;
#pragma unroll 2
  for (int c = 0; c < kIntraSlab; ++c) {
    float qt[4], kt[4], ks[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      qt[i] = q_raw[(ty + 16 * i) * kIntraStride + c];
      ks[i] = k_raw[(tx + 16 * i) * kIntraStride + c];
      if (kDelta) kt[i] = k_raw[(ty + 16 * i) * kIntraStride + c];
    }
    if (kDecay != GateKind::kPerChannel) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j <= i; ++j) {
          p[i][j] = fmaf(qt[i], ks[j], p[i][j]);
          if (kDelta) a[i][j] = fmaf(kt[i], ks[j], a[i][j]);
        }
      }
    } else {
      float bt[4], bs[4], qst[4], kst[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        bt[i] = b[(ty + 16 * i) * kIntraStride + c];
        bs[i] = b[(tx + 16 * i) * kIntraStride + c];
        qst[i] = q_scaled[(ty + 16 * i) * kIntraStride + c];
        if (kDelta) kst[i] = k_scaled[(ty + 16 * i) * kIntraStride + c];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        // exp(b_t - b_s) for the pair inside sub-chunk i; s > t is masked later, and the
        // clamp keeps that unused factor finite.
        const float e = __expf(fminf(bt[i] - bs[i], 0.0f));
        p[i][i] = fmaf(qt[i] * ks[i], e, p[i][i]);
        if (kDelta) a[i][i] = fmaf(kt[i] * ks[i], e, a[i][i]);
#pragma unroll
        for (int j = 0; j < i; ++j) {
          const float km = k_minus[((i - 1) * kChunk + tx + 16 * j) * kIntraStride + c];
          p[i][j] = fmaf(qst[i], km, p[i][j]);
          if (kDelta) a[i][j] = fmaf(kst[i], km, a[i][j]);
        }
      }
    }
  }
}

// The delta rule's UT transform, X = (I + A)^-1 diag(beta) [K ⊙ exp(b) | V], by forward
// substitution X_t = rhs_t - sum_{s<t} A[t, s] X_s: the K + V right-hand columns are
// independent, so each thread solves whole columns in registers, reading A (row stride
// kSquareStride, zero past the chunk) as broadcasts. The key columns are W, the value
// columns U.
template <GateKind kDecay>
__device__ void SolveTransform(const ChunkwiseArgs& args, const ChunkSpan& span,
                               int32_t value_head, const float* k, int64_t qk_row,
                               const float* v, int64_t v_row, const float* a,
                               const float* decay, const float* beta, float* w, float* u) {
  const int32_t key_dim = args.key_dim;
  const int32_t value_dim = args.value_dim;
  for (int32_t column = threadIdx.x; column < key_dim + value_dim; column += kIntraThreads) {
    const bool is_key = column < key_dim;
    const float* source = is_key ? k + column : v + (column - key_dim);
    const int64_t stride = is_key ? qk_row : v_row;
    float x[kChunk];
#pragma unroll
    for (int t = 0; t < kChunk; ++t) x[t] = t < span.length ? __ldg(source + t * stride) : 0.0f;
    if (is_key && kDecay == GateKind::kPerChannel) {
      float b = 0.0f;
#pragma unroll
      for (int t0 = 0; t0 < kChunk; t0 += kSubChunk) {
        float g[kSubChunk];
#pragma unroll
        for (int t = 0; t < kSubChunk; ++t) {
          g[t] = FetchLogDecay(args, span, value_head, 0, t0 + t, column);
        }
#pragma unroll
        for (int t = 0; t < kSubChunk; ++t) {
          b += g[t];
          x[t0 + t] *= __expf(b);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kChunk; ++t) {
      x[t] *= beta[t];
      if (kDecay == GateKind::kScalar && is_key) x[t] *= __expf(decay[t]);
    }
#pragma unroll
    for (int t = 1; t < kChunk; ++t) {
      const float4* row = reinterpret_cast<const float4*>(a + t * kSquareStride);
      float sum = x[t];
#pragma unroll
      for (int s4 = 0; s4 < (t + 3) / 4; ++s4) {
        const float4 a4 = row[s4];  // entries s >= t are zero
        sum = fmaf(-a4.x, x[4 * s4], sum);
        if (4 * s4 + 1 < t) sum = fmaf(-a4.y, x[4 * s4 + 1], sum);
        if (4 * s4 + 2 < t) sum = fmaf(-a4.z, x[4 * s4 + 2], sum);
        if (4 * s4 + 3 < t) sum = fmaf(-a4.w, x[4 * s4 + 3], sum);
      }
      x[t] = sum;
    }
    float* out = is_key ? w + column : u + (column - key_dim);
    const int32_t out_stride = is_key ? key_dim : value_dim;
#pragma unroll
    for (int t = 0; t < kChunk; ++t) out[t * out_stride] = x[t];
  }
}

// kda's kernel needs more than 128 registers per thread: one block per multiprocessor.
template <GateKind kDecay, bool kDelta, bool kNormalize>
__global__ void __launch_bounds__(kIntraThreads,
                                  kDecay == GateKind::kPerChannel && kDelta ? 1 : kIntraBlocksPerSm)
IntraChunkKernel(const ChunkwiseArgs args, const SlotLayout layout, const Round round,
                 float* scratch) {
  __shared__ __align__(16) float region[kIntraRegionFloats];
  __shared__ float decay[kChunk];  // b_t, scalar decay
  __shared__ float beta[kChunk];
  __shared__ float totals[kIntraThreads];

  ChunkBlock block;
  if (!LocateChunkBlock(args, layout, round, scratch, &block)) return;
  const ChunkSpan span = block.span;
  float* slot = block.slot;
  const int32_t key_dim = args.key_dim;
  const int32_t value_dim = args.value_dim;
  const int64_t qk_row = block.qk_row;
  const float* q = block.q;
  const float* k = block.k;

  LoadTokenScalars<kDecay, kDelta>(args, span, block.value_head, decay, beta, totals);
  if (kDecay == GateKind::kScalar && layout.token_decay > 0 && threadIdx.x < kChunk) {
    slot[layout.token_decay + threadIdx.x] = decay[threadIdx.x];  // b_t for launch 3a
  }

  float* q_raw = region;                          // [C, S] q
  float* k_raw = region + kIntraSlabFloats;       // [C, S] k
  float* b = region + 2 * kIntraSlabFloats;       // [C, S] b_t, per-channel decay
  float* q_scaled = region + 3 * kIntraSlabFloats;  // [C, S] q exp(b_t - r)
  float* k_scaled = region + 4 * kIntraSlabFloats;  // [C, S] k exp(b_t - r), delta rule
  float* k_minus = region + 5 * kIntraSlabFloats;   // [3, C, S] k exp(r_i - b_s), s < 16 i

  float p[4][4] = {};
  float a[4][4] = {};
  for (int32_t k0 = 0; k0 < key_dim; k0 += kIntraSlab) {
    ForEachInTile<2 * kIntraSlab, kIntraThreads>(
        [&](int t, int c) {
          const int column = c % kIntraSlab;
          if (t >= span.length || k0 + column >= key_dim) return 0.0f;
          return __ldg((c < kIntraSlab ? q : k) + t * qk_row + k0 + column);
        },
        [&](int t, int c, float value) {
          (c < kIntraSlab ? q_raw : k_raw)[t * kIntraStride + c % kIntraSlab] = value;
        });
    if (kDecay == GateKind::kPerChannel) {
      LoadCumulativeDecay<kIntraSlab, kIntraThreads>(args, span, block.value_head, k0, b,
                                                     kIntraStride, totals);
      // r_i = b at the last token of sub-chunk i - 1 (0 before the chunk).
      for (int e = threadIdx.x; e < kChunk * kIntraSlab; e += kIntraThreads) {
        const int t = e / kIntraSlab;
        const int c = e % kIntraSlab;
        const int sub = t / kSubChunk;
        const float bt = b[t * kIntraStride + c];
        const float r = sub == 0 ? 0.0f : b[(sub * kSubChunk - 1) * kIntraStride + c];
        const float up = __expf(bt - r);
        q_scaled[t * kIntraStride + c] = q_raw[t * kIntraStride + c] * up;
        if (kDelta) k_scaled[t * kIntraStride + c] = k_raw[t * kIntraStride + c] * up;
        for (int i = sub + 1; i < kSubChunks; ++i) {
          const float ri = b[(i * kSubChunk - 1) * kIntraStride + c];
          k_minus[((i - 1) * kChunk + t) * kIntraStride + c] = k_raw[t * kIntraStride + c] * __expf(ri - bt);
        }
      }
    }
    __syncthreads();
    AccumulateScores<kDecay, kDelta>(q_raw, k_raw, b, q_scaled, k_scaled, k_minus, p, a);
    if (kNormalize && threadIdx.x < kIntraSlab && k0 + threadIdx.x < key_dim) {
      float sum = 0.0f;
      for (int t = 0; t < kChunk; ++t) sum += k_raw[t * kIntraStride + threadIdx.x];
      slot[layout.normalizer + k0 + threadIdx.x] = sum;
    }
    __syncthreads();
  }

  // Mask, apply the scalar decay factors and store P; keep A for the solve.
  const int ty = threadIdx.x / 16;
  const int tx = threadIdx.x % 16;
  float* a_matrix = region;  // [C, kSquareStride]
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = ty + 16 * i;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int s = tx + 16 * j;
      const bool keep = s <= t && t < span.length;
      float factor = keep ? 1.0f : 0.0f;
      if (kDecay == GateKind::kScalar && keep) factor = __expf(decay[t] - decay[s]);
      slot[layout.scores + t * kChunk + s] = p[i][j] * factor;
      if (kDelta) a_matrix[t * kSquareStride + s] = s < t ? beta[t] * a[i][j] * factor : 0.0f;
    }
  }
  if (!kDelta) return;
  __syncthreads();
  const int64_t v_row = static_cast<int64_t>(args.num_value_heads) * value_dim;
  const float* v = args.v + static_cast<int64_t>(span.start) * v_row + block.value_head * value_dim;
  SolveTransform<kDecay>(args, span, block.value_head, k, qk_row, v, v_row, a_matrix, decay, beta,
                         slot + layout.keys, slot + layout.values);
}

// ---------------------------------------------------------------------------------------
// Launch 2 (normalizer only): each chunk's slot gets the normalizer before the chunk (an
// exclusive prefix over its key sums, starting from the sequence's z); z moves to the end.

__global__ void NormalizerPrefixKernel(const ChunkwiseArgs args, const SlotLayout layout,
                                       const Round round, float* scratch) {
  const int32_t num_value_heads = args.num_value_heads;
  const GridSlot grid = LocateGridSlot(num_value_heads);
  const int32_t sequence = round.first_sequence + grid.local_sequence;
  if (sequence >= args.num_sequences) return;
  float* z = args.normalizers[sequence] + static_cast<int64_t>(grid.value_head) * args.key_dim;
  ChunkSpan span;
  int32_t chunks = 0;
  while (chunks < layout.chunks_per_round &&
         LocateChunk(args, round, grid.local_sequence, chunks, &span)) {
    ++chunks;
  }
  if (chunks == 0) return;
  for (int32_t i = threadIdx.x; i < args.key_dim; i += blockDim.x) {
    float running = z[i];
    for (int32_t c = 0; c < chunks; ++c) {
      float* entry =
          SlotOf(layout, scratch, num_value_heads, grid.local_sequence, c, grid.value_head) +
          layout.normalizer + i;
      const float chunk_sum = *entry;
      *entry = running;
      running += chunk_sum;
    }
    z[i] = running;
  }
}

// ---------------------------------------------------------------------------------------
// Launch 3: the state through the chunks, and the outputs.

constexpr int kSlabFloats = kChunk * kSlabStride;
constexpr int kStateSlabFloats = kInterSlab * kTileStride;
constexpr int kTileFloats = kChunk * kTileStride;
constexpr int kSlabPerThread = kChunk * kInterSlab / kInterThreads;
constexpr int kStatePerThread = kInterSlab * kValueTile / kInterThreads;
constexpr int kScoresPerThread = kChunk * kChunk / kInterThreads;
// Reads of S0 use the first layout; the output and state update the second.
constexpr int kInterRegionFloats =
    std::max(2 * kSlabFloats + kStateSlabFloats, kTileFloats + kSlabFloats);

template <GateKind kDecay, bool kDelta, bool kNormalize>
__global__ void __launch_bounds__(kInterThreads, kInterBlocksPerSm)
InterChunkKernel(const ChunkwiseArgs args, const SlotLayout layout, const Round round,
                 float* scratch) {
  __shared__ __align__(16) float region[kInterRegionFloats];
  __shared__ float decay[kChunk];      // b_t, scalar decay
  __shared__ float decay_up[kChunk];   // exp(b_t), scalar decay
  __shared__ float decay_down[kChunk];  // exp(b_C - b_t), scalar decay
  __shared__ float decay_end[kInterSlab];  // b_C per channel of the slab
  __shared__ float z0[kInterSlab];
  __shared__ float totals[kInterThreads];

  const int32_t key_dim = args.key_dim;
  const int32_t value_dim = args.value_dim;
  const int32_t num_value_heads = args.num_value_heads;
  const GridSlot grid = LocateGridSlot(num_value_heads, ValueTiles(value_dim));
  const int32_t v0 = grid.tile * kValueTile;
  const int32_t head = grid.value_head / (num_value_heads / args.num_heads);
  const int64_t qk_row = static_cast<int64_t>(args.num_heads) * key_dim;
  const int64_t v_row = static_cast<int64_t>(num_value_heads) * value_dim;

  const int ty = threadIdx.x / 8;  // rows ty + 16 i of the output tile
  const int tx = threadIdx.x % 8;  // columns 4 tx .. 4 tx + 3 of the value tile

  float* q_hat = region;                         // [C, slab] q ⊙ exp(b)
  float* w = region + kSlabFloats;               // [C, slab] W
  float* s_slab = region + 2 * kSlabFloats;      // [slab, tile] S0
  float* u = region;                             // [C, tile] U'
  float* p = region + kTileFloats;               // [C, C] P
  float* k_end = region + kTileFloats;           // [C, slab] k ⊙ exp(b_C - b)

  for (int32_t local_chunk = 0; local_chunk < layout.chunks_per_round; ++local_chunk) {
    ChunkSpan span;
    if (!LocateChunk(args, round, grid.local_sequence, local_chunk, &span)) break;
    const int32_t length = span.length;
    const float* slot =
        SlotOf(layout, scratch, num_value_heads, grid.local_sequence, local_chunk, grid.value_head);
    float* state =
        args.states[span.sequence] + static_cast<int64_t>(grid.value_head) * key_dim * value_dim;
    const float* q = args.q + static_cast<int64_t>(span.start) * qk_row + head * key_dim;
    const float* k = args.k + static_cast<int64_t>(span.start) * qk_row + head * key_dim;
    LoadTokenScalars<kDecay, false>(args, span, grid.value_head, decay, nullptr, totals);
    if (kDecay == GateKind::kScalar) {
      if (threadIdx.x < kChunk) {
        const int t = threadIdx.x;
        decay_up[t] = __expf(decay[t]);
        decay_down[t] = t < length ? __expf(decay[length - 1] - decay[t]) : 0.0f;
      }
      __syncthreads();
    }

    // O = (Q ⊙ exp(b)) S0 and, for the delta rule, X = W S0.
    float out[4][4] = {};
    float x[4][4] = {};
    float q_dot_z[4] = {};
    for (int32_t k0 = 0; k0 < key_dim; k0 += kInterSlab) {
      if (kDecay == GateKind::kPerChannel) {
        LoadCumulativeDecay<kInterSlab, kInterThreads>(args, span, grid.value_head, k0, q_hat,
                                                       kSlabStride, totals);
      }
      if (kNormalize && threadIdx.x < kInterSlab) {
        z0[threadIdx.x] =
            k0 + threadIdx.x < key_dim ? slot[layout.normalizer + k0 + threadIdx.x] : 0.0f;
      }
      // Half a slab at a time: its global reads first, then the shared-memory writes.
#pragma unroll 1
      for (int half = 0; half < 2; ++half) {
        constexpr int kCount = kSlabPerThread / 2;
        float q_values[kCount], w_values[kCount], s_values[kStatePerThread / 2];
#pragma unroll
        for (int i = 0; i < kCount; ++i) {
          const int e = threadIdx.x + (half * kCount + i) * kInterThreads;
          const int t = e / kInterSlab;
          const int c = e % kInterSlab;
          const bool column = k0 + c < key_dim;
          q_values[i] = t < length && column ? __ldg(q + t * qk_row + k0 + c) : 0.0f;
          if (kDelta) {
            w_values[i] = column ? __ldg(slot + layout.keys + t * key_dim + k0 + c) : 0.0f;
          }
        }
#pragma unroll
        for (int i = 0; i < kStatePerThread / 2; ++i) {
          const int e = threadIdx.x + (half * kStatePerThread / 2 + i) * kInterThreads;
          const int r = e / kValueTile;
          const int c = e % kValueTile;
          const bool inside = k0 + r < key_dim && v0 + c < value_dim;
          s_values[i] = inside ? state[static_cast<int64_t>(k0 + r) * value_dim + v0 + c] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < kCount; ++i) {
          const int e = threadIdx.x + (half * kCount + i) * kInterThreads;
          const int t = e / kInterSlab;
          const int c = e % kInterSlab;
          float value = q_values[i];
          if (kDecay == GateKind::kScalar) value *= decay_up[t];
          if (kDecay == GateKind::kPerChannel) value *= __expf(q_hat[t * kSlabStride + c]);
          q_hat[t * kSlabStride + c] = value;
          if (kDelta) w[t * kSlabStride + c] = w_values[i];
        }
#pragma unroll
        for (int i = 0; i < kStatePerThread / 2; ++i) {
          const int e = threadIdx.x + (half * kStatePerThread / 2 + i) * kInterThreads;
          s_slab[(e / kValueTile) * kTileStride + e % kValueTile] = s_values[i];
        }
      }
      __syncthreads();
#pragma unroll 1
      for (int c = 0; c < kInterSlab; c += 4) {
        float4 qv[4], wv[4], sv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          qv[i] = *reinterpret_cast<const float4*>(&q_hat[(ty + 16 * i) * kSlabStride + c]);
          if (kDelta) wv[i] = *reinterpret_cast<const float4*>(&w[(ty + 16 * i) * kSlabStride + c]);
          sv[i] = *reinterpret_cast<const float4*>(&s_slab[(c + i) * kTileStride + 4 * tx]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float qc[4] = {qv[i].x, qv[i].y, qv[i].z, qv[i].w};
          const float wc[4] = {wv[i].x, wv[i].y, wv[i].z, wv[i].w};
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const float sr[4] = {sv[r].x, sv[r].y, sv[r].z, sv[r].w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              out[i][j] = fmaf(qc[r], sr[j], out[i][j]);
              if (kDelta) x[i][j] = fmaf(wc[r], sr[j], x[i][j]);
            }
            if (kNormalize) q_dot_z[i] = fmaf(qc[r], z0[c + r], q_dot_z[i]);
          }
        }
      }
      __syncthreads();
    }

    // U' (V for additive writes, U - W S0 for the delta rule), then O += P U'.
    float p_values[kScoresPerThread];
#pragma unroll
    for (int i = 0; i < kScoresPerThread; ++i) {
      p_values[i] = __ldg(slot + layout.scores + threadIdx.x + i * kInterThreads);
    }
    const float* v =
        args.v + static_cast<int64_t>(span.start) * v_row + grid.value_head * value_dim;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = ty + 16 * i;
      float row[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int32_t col = v0 + 4 * tx + j;
        float value = 0.0f;
        if (t < length && col < value_dim) {
          value = kDelta ? slot[layout.values + t * value_dim + col] - x[i][j] : v[t * v_row + col];
        }
        row[j] = value;
      }
      *reinterpret_cast<float4*>(&u[t * kTileStride + 4 * tx]) = make_float4(row[0], row[1], row[2], row[3]);
    }
#pragma unroll
    for (int i = 0; i < kScoresPerThread; ++i) {
      const int e = threadIdx.x + i * kInterThreads;
      p[(e / kChunk) * kSlabStride + e % kChunk] = p_values[i];
    }
    __syncthreads();
    float row_sum[4] = {};
    for (int s = 0; s < length; s += 4) {
      float4 pv[4], uv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        pv[i] = *reinterpret_cast<const float4*>(&p[(ty + 16 * i) * kSlabStride + s]);
        uv[i] = *reinterpret_cast<const float4*>(&u[(s + i) * kTileStride + 4 * tx]);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float pc[4] = {pv[i].x, pv[i].y, pv[i].z, pv[i].w};
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const float ur[4] = {uv[r].x, uv[r].y, uv[r].z, uv[r].w};
#pragma unroll
          for (int j = 0; j < 4; ++j) out[i][j] = fmaf(pc[r], ur[j], out[i][j]);
          if (kNormalize) row_sum[i] += pc[r];
        }
      }
    }
    float* o = args.o + static_cast<int64_t>(span.start) * v_row + grid.value_head * value_dim;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = ty + 16 * i;
      if (t >= length) continue;
      const float scale = kNormalize ? 1.0f / (q_dot_z[i] + row_sum[i] + args.normalize_eps) : 1.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int32_t col = v0 + 4 * tx + j;
        if (col < value_dim) o[t * v_row + col] = out[i][j] * scale;
      }
    }
    __syncthreads();

    // S = exp(b_C) ⊙ S0 + (K ⊙ exp(b_C - b))^T U', a slab of key rows at a time.
    const int row0 = 4 * ty;  // rows row0 .. row0 + 3 of the slab; ty < 16 covers 64
    for (int32_t k0 = 0; k0 < key_dim; k0 += kInterSlab) {
      if (kDecay == GateKind::kPerChannel) {
        LoadCumulativeDecay<kInterSlab, kInterThreads>(args, span, grid.value_head, k0, k_end,
                                                       kSlabStride, totals);
        if (threadIdx.x < kInterSlab) {
          decay_end[threadIdx.x] = k_end[(length - 1) * kSlabStride + threadIdx.x];
        }
        __syncthreads();
      }
      float k_values[kSlabPerThread], s_old[4][4];
#pragma unroll
      for (int i = 0; i < kSlabPerThread; ++i) {
        const int e = threadIdx.x + i * kInterThreads;
        const int t = e / kInterSlab;
        const int c = e % kInterSlab;
        k_values[i] = t < length && k0 + c < key_dim ? __ldg(k + t * qk_row + k0 + c) : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int32_t key = k0 + row0 + i;
          const int32_t col = v0 + 4 * tx + j;
          s_old[i][j] = key < key_dim && col < value_dim
                            ? state[static_cast<int64_t>(key) * value_dim + col] : 0.0f;
        }
      }
#pragma unroll
      for (int i = 0; i < kSlabPerThread; ++i) {
        const int e = threadIdx.x + i * kInterThreads;
        const int t = e / kInterSlab;
        const int c = e % kInterSlab;
        float value = k_values[i];
        if (kDecay == GateKind::kScalar) value *= decay_down[t];
        if (kDecay == GateKind::kPerChannel) value *= __expf(decay_end[c] - k_end[t * kSlabStride + c]);
        k_end[t * kSlabStride + c] = value;
      }
      __syncthreads();
      float acc[4][4] = {};
      for (int t = 0; t < length; ++t) {
        const float4 kv = *reinterpret_cast<const float4*>(&k_end[t * kSlabStride + row0]);
        const float4 uv = *reinterpret_cast<const float4*>(&u[t * kTileStride + 4 * tx]);
        const float kc[4] = {kv.x, kv.y, kv.z, kv.w};
        const float uc[4] = {uv.x, uv.y, uv.z, uv.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(kc[i], uc[j], acc[i][j]);
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int32_t key = k0 + row0 + i;
        if (key >= key_dim) continue;
        float factor = 1.0f;
        if (kDecay == GateKind::kScalar) factor = decay_up[length - 1];
        if (kDecay == GateKind::kPerChannel) factor = __expf(decay_end[row0 + i]);
        float* state_row = state + static_cast<int64_t>(key) * value_dim;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int32_t col = v0 + 4 * tx + j;
          if (col < value_dim) state_row[col] = fmaf(factor, s_old[i][j], acc[i][j]);
        }
      }
      __syncthreads();
    }
  }
}

// ---------------------------------------------------------------------------------------
// Launch 3 on the tensor cores (NVIDIA only; the normalizer and portable builds keep the
// kernel above), split as flash-linear-attention splits it, so that the serial chain carries
// only the state:
//   3a. StateWalkTensorKernel, one block per (sequence, value head, tile of value columns),
//       walking the chunks in order: U' = U - W S0 (V for additive writes) and
//       S = exp(b_C) ⊙ S0 + (K ⊙ exp(b_C - b))^T U'. It saves each chunk's starting state
//       S0 and, for the delta rule, U' (in place of U) to the chunk's slot.
//   3b. ChunkOutputTensorKernel, one block per (sequence, chunk, value head, tile), all at
//       once: O = (Q ⊙ exp(b)) S0 + P U' from the slot; its latency hides behind thousands
//       of blocks.
// Each product is a warp-level 3xTF32 mma (tf32x3_mma.cuh), so fp32 accuracy at tensor-core
// rates. Warp w owns rows 16 w .. 16 w + 15 of every 64-row product (tokens of the chunk, or
// key channels of a slab) and all kValueTile columns; the accumulators stay in the mma
// fragment layout.

#if LUMEN_GPU_NVIDIA_PATHS
constexpr int kTensorWarps = kInterThreads / kWarpSize;
constexpr int kTensorBlocksPerSm = 4;  // 4 x 128 threads: 128 registers each, one wave of
                                       // B = 4, HV = 32, four value tiles on 132 SMs
constexpr int kTensorValueTiles = kValueTile / 8;  // 8-column mma tiles per value tile
// Launch 3a holds the state tile in registers: keys up to kRegisterWalkSlabs slabs. Larger
// keys take the SIMT walk.
constexpr int kRegisterWalkSlabs = 2;
constexpr int kRegisterWalkMaxKeys = kRegisterWalkSlabs * kInterSlab;
// Row strides of the shared tiles, chosen so that fragment loads hit 32 distinct banks:
// A operands read along rows need stride = 4 (mod 32), B operands and A operands read down
// columns need stride = 8 (mod 32).
constexpr int kRowStrideA = kInterSlab + 4;         // [64, slab] q_hat, w; [C, C] p
constexpr int kRowStrideB = kValueTile + 8;         // [slab, tile] S0; [C, tile] U'
constexpr int kRowStrideColumnA = kInterSlab + 8;   // [C, slab] k_end, read transposed
// Shared memory of 3a (S0, then U' in its place; a slab of W or K^) and 3b (q_hat with S0,
// then P with U').
constexpr int kWalkSlabFloats = kChunk * std::max(kRowStrideA, kRowStrideColumnA);
constexpr int kWalkSharedFloats = kRegisterWalkMaxKeys * kRowStrideB + kWalkSlabFloats;
constexpr int kOutputRegionFloats =
    std::max(kChunk * kRowStrideA + kInterSlab * kRowStrideB,
             kChunk * kRowStrideB + kChunk * kRowStrideA);
static_assert(kTensorWarps * 16 == kChunk && kInterSlab == kChunk, "one 16-row strip per warp");
static_assert(kRegisterWalkMaxKeys >= kChunk, "U' fits in the place of S0");
static_assert(std::max(kWalkSharedFloats, kOutputRegionFloats) * 4 <=
                  227 * 1024 / kTensorBlocksPerSm - 2048,
              "shared memory for kTensorBlocksPerSm blocks");

// The entry (kWidth 1) or quad of entries (kWidth 4: columns c .. c + 3) at step i of this
// thread's walk over a tile of kColumns columns. StageTile copies and ScaleStagedTile scales
// in this order, so each thread scales only what it copied.
struct TileEntry {
  int r, c;
};
template <int kColumns, int kWidth>
__device__ __forceinline__ TileEntry OwnEntry(int i) {
  const int e = threadIdx.x + i * kInterThreads;
  return {e / (kColumns / kWidth), kWidth * (e % (kColumns / kWidth))};
}

// Starts copying a kRows x kColumns tile from global memory (`source`, row stride
// `source_row` floats) to shared memory (`target`, row stride `target_row`, 16-byte aligned
// rows); entries at or past `rows` or `columns` become zero. The caller waits
// (CopyAsyncWaitAll); each thread may then read the entries it copied itself, and the others
// after a barrier. `quads` (QuadAligned): every row of the source starts 16-byte aligned and
// `columns` is a multiple of 4, so 16-byte copies; else 4-byte ones.
template <int kRows, int kColumns>
__device__ __forceinline__ void StageTile(const float* source, int64_t source_row, int rows,
                                          int columns, float* target, int target_row,
                                          bool quads) {
  static_assert(kColumns % 4 == 0 && kRows * kColumns % (4 * kInterThreads) == 0, "layout");
  if (quads) {
#pragma unroll 2
    for (int i = 0; i < kRows * kColumns / 4 / kInterThreads; ++i) {
      const auto [r, c] = OwnEntry<kColumns, 4>(i);
      float* to = target + r * target_row + c;
      if (r < rows && c < columns) {
        CopyAsync<16>(to, source + r * source_row + c);
      } else {
        *reinterpret_cast<float4*>(to) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
  } else {
#pragma unroll 4
    for (int i = 0; i < kRows * kColumns / kInterThreads; ++i) {
      const auto [r, c] = OwnEntry<kColumns, 1>(i);
      float* to = target + r * target_row + c;
      if (r < rows && c < columns) {
        CopyAsync<4>(to, source + r * source_row + c);
      } else {
        *to = 0.0f;
      }
    }
  }
}

// Calls scale(t, c, value) -> value on each entry of a kRows x kColumns shared tile that this
// thread copied with StageTile (same `quads`), in place.
template <int kRows, int kColumns, typename Scale>
__device__ __forceinline__ void ScaleStagedTile(float* target, int target_row, bool quads,
                                                Scale scale) {
  if (quads) {
#pragma unroll
    for (int i = 0; i < kRows * kColumns / 4 / kInterThreads; ++i) {
      const auto [r, c] = OwnEntry<kColumns, 4>(i);
      float4& quad = *reinterpret_cast<float4*>(target + r * target_row + c);
      float4 value = quad;
      value.x = scale(r, c, value.x);
      value.y = scale(r, c + 1, value.y);
      value.z = scale(r, c + 2, value.z);
      value.w = scale(r, c + 3, value.w);
      quad = value;
    }
  } else {
#pragma unroll 4
    for (int i = 0; i < kRows * kColumns / kInterThreads; ++i) {
      const auto [r, c] = OwnEntry<kColumns, 1>(i);
      float& entry = target[r * target_row + c];
      entry = scale(r, c, entry);
    }
  }
}

// Whether StageTile may copy quads: rows of `row` floats from `base` stay 16-byte aligned and
// each row's `columns` come in whole quads (none reaches past them).
__device__ __forceinline__ bool QuadAligned(const float* base, int64_t row, int32_t columns) {
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && row % 4 == 0 && columns % 4 == 0;
}

template <GateKind kDecay, bool kDelta>
__global__ void __launch_bounds__(kInterThreads, kTensorBlocksPerSm)
StateWalkTensorKernel(const ChunkwiseArgs args, const SlotLayout layout, const Round round,
                      float* scratch) {
  __shared__ __align__(16) float s_shared[kRegisterWalkMaxKeys * kRowStrideB];  // S0, then U'
  __shared__ __align__(16) float slab[kWalkSlabFloats];  // a slab of W or of K^
  float* u = s_shared;  // [C, tile] U', once W S0 is done
  __shared__ float token_factor[kChunk];              // exp(b_C - b_t), scalar decay
  __shared__ float key_factor[kRegisterWalkMaxKeys];  // exp(b_C) per key, per-channel decay

  const int32_t key_dim = args.key_dim;
  const int32_t value_dim = args.value_dim;
  const int32_t num_value_heads = args.num_value_heads;
  const GridSlot grid = LocateGridSlot(num_value_heads, ValueTiles(value_dim));
  const int32_t sequence = round.first_sequence + grid.local_sequence;
  if (sequence >= args.num_sequences) return;
  const int32_t v0 = grid.tile * kValueTile;
  const int32_t head = grid.value_head / (num_value_heads / args.num_heads);
  const int64_t qk_row = static_cast<int64_t>(args.num_heads) * key_dim;
  const int64_t v_row = static_cast<int64_t>(num_value_heads) * value_dim;
  const int key_slabs = (key_dim + kInterSlab - 1) / kInterSlab;
  const bool key_quads = QuadAligned(scratch, key_dim, key_dim);  // slot rows of W and K^
  const bool input_quads = QuadAligned(args.k + head * key_dim, qk_row, key_dim);

  // This thread's entries: rows row0 + g (+ 8) of each 64-row product (tokens, or the keys
  // of slab m), columns 8 n + 2 j (+ 1) of the value tile.
  const int row0 = 16 * (threadIdx.x / kWarpSize);
  const int g = threadIdx.x % kWarpSize / 4;
  const int j = threadIdx.x % 4;
  auto row_of = [&](int e) { return row0 + g + 8 * (e / 2); };
  auto column_of = [&](int n, int e) { return 8 * n + 2 * j + e % 2; };

  // The state tile in registers, in the accumulator layout of K^T U'. for_each_state calls
  // f(entry, key, column, inside) for each entry s[m][n][e] this thread holds: its place in
  // the head's [K, V] state, and whether that lies inside K x V.
  float* state =
      args.states[sequence] + static_cast<int64_t>(grid.value_head) * key_dim * value_dim;
  float s[kRegisterWalkSlabs][kTensorValueTiles][4];
  auto for_each_state = [&](auto f) {
#pragma unroll
    for (int m = 0; m < kRegisterWalkSlabs; ++m) {
#pragma unroll
      for (int n = 0; n < kTensorValueTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int32_t key = kInterSlab * m + row_of(e);
          const int32_t col = column_of(n, e);
          f(s[m][n][e], key, col, key < key_dim && v0 + col < value_dim);
        }
      }
    }
  };
  const int64_t tile_offset = v0;  // of this block's value tile in a [K, V] state
  for_each_state([&](float& entry, int32_t key, int col, bool inside) {
    entry = inside ? state[key * static_cast<int64_t>(value_dim) + tile_offset + col] : 0.0f;
  });

  bool walked = false;
  for (int32_t local_chunk = 0; local_chunk < layout.chunks_per_round; ++local_chunk) {
    ChunkSpan span;
    if (!LocateChunk(args, round, grid.local_sequence, local_chunk, &span)) break;
    walked = true;
    const int32_t length = span.length;
    const int depth = (length + 7) / 8 * 8;  // token steps of the products over t
    float* slot =
        SlotOf(layout, scratch, num_value_heads, grid.local_sequence, local_chunk, grid.value_head);
    const float* k = args.k + static_cast<int64_t>(span.start) * qk_row + head * key_dim;

    // This chunk's U (or V) entries, loaded now so that their latency hides behind W S0.
    const float* u_in = kDelta ? slot + layout.values
                               : args.v + static_cast<int64_t>(span.start) * v_row +
                                     grid.value_head * value_dim;
    const int64_t u_row = kDelta ? value_dim : v_row;
    float u_values[kTensorValueTiles][4];
#pragma unroll
    for (int n = 0; n < kTensorValueTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int t = row_of(e);
        const int32_t col = v0 + column_of(n, e);
        u_values[n][e] = t < length && col < value_dim ? u_in[t * u_row + col] : 0.0f;
      }
    }
    float chunk_factor = 1.0f;  // exp(b_C), scalar decay
    if (kDecay == GateKind::kScalar) {
      const float* b = slot + layout.token_decay;
      const float end = b[length - 1];
      chunk_factor = __expf(end);
      if (threadIdx.x < kChunk) {
        const int t = threadIdx.x;
        token_factor[t] = t < length ? __expf(end - b[t]) : 0.0f;
      }
    }
    if (kDecay == GateKind::kPerChannel) {
      for (int32_t key = threadIdx.x; key < key_slabs * kInterSlab; key += kInterThreads) {
        key_factor[key] = key < key_dim ? __expf(slot[layout.decay_end + key]) : 0.0f;
      }
    }

    // S0 to the slot (for launch 3b) and, for W S0, to shared memory.
    float* start_state = slot + layout.start_state + tile_offset;
    for_each_state([&](float& entry, int32_t key, int col, bool inside) {
      if (inside) start_state[key * static_cast<int64_t>(value_dim) + col] = entry;
      if (kDelta) s_shared[key * kRowStrideB + col] = entry;
    });

    // X = W S0 (delta rule), a slab of keys at a time.
    float x[kTensorValueTiles][4] = {};
    if (kDelta) {
      for (int m = 0; m < key_slabs; ++m) {
        const int32_t k0 = kInterSlab * m;
        StageTile<kChunk, kInterSlab>(slot + layout.keys + k0, key_dim, kChunk, key_dim - k0,
                                      slab, kRowStrideA, key_quads);
        CopyAsyncWaitAll();
        __syncthreads();
        WarpProductTf32x3<kTensorValueTiles, false>(x, x, slab + row0 * kRowStrideA, nullptr,
                                                    kRowStrideA, 1, s_shared + k0 * kRowStrideB,
                                                    kRowStrideB, kInterSlab);
        __syncthreads();
      }
    }

    // U' (V for additive writes; U - W S0 for the delta rule, saved in place of U).
#pragma unroll
    for (int n = 0; n < kTensorValueTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int t = row_of(e);
        const int32_t col = v0 + column_of(n, e);
        const float value = u_values[n][e] - x[n][e];
        if (kDelta && t < length && col < value_dim) slot[layout.values + t * value_dim + col] = value;
        u[t * kRowStrideB + column_of(n, e)] = t < length && col < value_dim ? value : 0.0f;
      }
    }

    // S = exp(b_C) ⊙ S0 + K^T U' with K^ = K ⊙ exp(b_C - b), a slab of keys at a time.
#pragma unroll
    for (int m = 0; m < kRegisterWalkSlabs; ++m) {
      if (m >= key_slabs) break;
      const int32_t k0 = kInterSlab * m;
      if (kDecay == GateKind::kPerChannel) {  // K^ from launch 1
        StageTile<kChunk, kInterSlab>(slot + layout.key_end + k0, key_dim, kChunk,
                                      key_dim - k0, slab, kRowStrideColumnA, key_quads);
        CopyAsyncWaitAll();
      } else {
        StageTile<kChunk, kInterSlab>(k + k0, qk_row, length, key_dim - k0, slab,
                                      kRowStrideColumnA, input_quads);
        CopyAsyncWaitAll();
        if (kDecay == GateKind::kScalar) {
          __syncthreads();  // token_factor
          ScaleStagedTile<kChunk, kInterSlab>(
              slab, kRowStrideColumnA, input_quads,
              [&](int t, int, float value) { return value * token_factor[t]; });
        }
      }
      __syncthreads();
      float acc[kTensorValueTiles][4] = {};
      WarpProductTf32x3<kTensorValueTiles, false>(acc, acc, slab + row0, nullptr, 1,
                                                  kRowStrideColumnA, u, kRowStrideB, depth);
#pragma unroll
      for (int n = 0; n < kTensorValueTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float factor = 1.0f;
          if (kDecay == GateKind::kScalar) factor = chunk_factor;
          if (kDecay == GateKind::kPerChannel) factor = key_factor[k0 + row_of(e)];
          s[m][n][e] = fmaf(factor, s[m][n][e], acc[n][e]);
        }
      }
      __syncthreads();
    }
  }
  if (!walked) return;
  for_each_state([&](float& entry, int32_t key, int col, bool inside) {
    if (inside) state[key * static_cast<int64_t>(value_dim) + tile_offset + col] = entry;
  });
}

template <GateKind kDecay, bool kDelta>
__global__ void __launch_bounds__(kInterThreads, kTensorBlocksPerSm)
ChunkOutputTensorKernel(const ChunkwiseArgs args, const SlotLayout layout, const Round round,
                        const float* scratch) {
  __shared__ __align__(16) float region[kOutputRegionFloats];
  __shared__ float decay[kChunk];          // b_t, scalar decay
  __shared__ float decay_up[kChunk];       // exp(b_t), scalar decay
  __shared__ float totals[kInterThreads];

  const int32_t key_dim = args.key_dim;
  const int32_t value_dim = args.value_dim;
  const int32_t num_value_heads = args.num_value_heads;
  const GridSlot grid = LocateGridSlot(num_value_heads, ValueTiles(value_dim));
  const int32_t local_chunk = blockIdx.y;
  ChunkSpan span;
  if (!LocateChunk(args, round, grid.local_sequence, local_chunk, &span)) return;
  const int32_t v0 = grid.tile * kValueTile;
  const int32_t head = grid.value_head / (num_value_heads / args.num_heads);
  const int64_t qk_row = static_cast<int64_t>(args.num_heads) * key_dim;
  const int64_t v_row = static_cast<int64_t>(num_value_heads) * value_dim;
  const int32_t length = span.length;
  const int depth = (length + 7) / 8 * 8;
  const float* slot =
      SlotOf(layout, const_cast<float*>(scratch), num_value_heads, grid.local_sequence, local_chunk,
             grid.value_head);
  const float* q = args.q + static_cast<int64_t>(span.start) * qk_row + head * key_dim;
  const bool state_quads = QuadAligned(scratch, value_dim, value_dim);
  const bool input_quads = QuadAligned(args.q + head * key_dim, qk_row, key_dim);

  const int row0 = 16 * (threadIdx.x / kWarpSize);
  const int g = threadIdx.x % kWarpSize / 4;
  const int j = threadIdx.x % 4;

  float* q_hat = region;                            // [C, slab] q ⊙ exp(b)
  float* s_slab = region + kChunk * kRowStrideA;    // [slab, tile] S0
  float* u = region;                                // [C, tile] U'
  float* p = region + kChunk * kRowStrideB;         // [C, C] P

  LoadTokenScalars<kDecay, false>(args, span, grid.value_head, decay, nullptr, totals);
  if (kDecay == GateKind::kScalar) {
    if (threadIdx.x < kChunk) decay_up[threadIdx.x] = __expf(decay[threadIdx.x]);
    __syncthreads();
  }

  // O = (Q ⊙ exp(b)) S0.
  float out[kTensorValueTiles][4] = {};
  for (int32_t k0 = 0; k0 < key_dim; k0 += kInterSlab) {
    if (kDecay == GateKind::kPerChannel) {
      LoadCumulativeDecay<kInterSlab, kInterThreads>(args, span, grid.value_head, k0, q_hat,
                                                     kRowStrideA, totals);
    }
    StageTile<kInterSlab, kValueTile>(
        slot + layout.start_state + static_cast<int64_t>(k0) * value_dim + v0, value_dim,
        key_dim - k0, value_dim - v0, s_slab, kRowStrideB, state_quads);
    if (kDecay == GateKind::kPerChannel) {  // q_hat holds b_t: scale as the values arrive
      ForEachInTile<kInterSlab, kInterThreads>(
          [&](int t, int c) {
            return t < length && k0 + c < key_dim ? __ldg(q + t * qk_row + k0 + c) : 0.0f;
          },
          [&](int t, int c, float value) {
            q_hat[t * kRowStrideA + c] = value * __expf(q_hat[t * kRowStrideA + c]);
          });
      CopyAsyncWaitAll();
    } else {
      StageTile<kChunk, kInterSlab>(q + k0, qk_row, length, key_dim - k0, q_hat, kRowStrideA,
                                    input_quads);
      CopyAsyncWaitAll();
      if (kDecay == GateKind::kScalar) {
        ScaleStagedTile<kChunk, kInterSlab>(
            q_hat, kRowStrideA, input_quads,
            [&](int t, int, float value) { return value * decay_up[t]; });
      }
    }
    __syncthreads();
    WarpProductTf32x3<kTensorValueTiles, false>(out, out, q_hat + row0 * kRowStrideA, nullptr,
                                                kRowStrideA, 1, s_slab, kRowStrideB, kInterSlab);
    __syncthreads();
  }

  // O += P U'.
#pragma unroll
  for (int i = 0; i < kScoresPerThread / 4; ++i) {
    const int e = 4 * (threadIdx.x + i * kInterThreads);
    CopyAsync<16>(&p[(e / kChunk) * kRowStrideA + e % kChunk], slot + layout.scores + e);
  }
  const float* v = kDelta ? slot + layout.values
                          : args.v + static_cast<int64_t>(span.start) * v_row +
                                grid.value_head * value_dim;
  const int64_t u_row = kDelta ? value_dim : v_row;
  StageTile<kChunk, kValueTile>(v + v0, u_row, length, value_dim - v0, u, kRowStrideB,
                                QuadAligned(v, u_row, value_dim));
  CopyAsyncWaitAll();
  __syncthreads();
  WarpProductTf32x3<kTensorValueTiles, false>(out, out, p + row0 * kRowStrideA, nullptr,
                                              kRowStrideA, 1, u, kRowStrideB, depth);
  float* o = args.o + static_cast<int64_t>(span.start) * v_row + grid.value_head * value_dim;
#pragma unroll
  for (int n = 0; n < kTensorValueTiles; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int t = row0 + g + 8 * (e / 2);
      const int32_t col = v0 + 8 * n + 2 * j + e % 2;
      if (t < length && col < value_dim) o[t * v_row + col] = out[n][e];
    }
  }
}

// ---------------------------------------------------------------------------------------
// Launch 1 on the tensor cores (NVIDIA builds that take the split walk: K <= 128, no
// normalizer), one block of four warps per (sequence, chunk, value head). Warp w owns
// sub-chunk w, rows 16 w .. 16 w + 15 of P and A.
//   Scores: P = Q K^T and A = K K^T in 3xTF32 mma over the whole key dimension, staged once.
//     Scalar or no decay: the products over s < 16 (w + 1), the factors exp(b_t - b_s) applied
//     to the sums. Per-channel decay: the pairs of earlier sub-chunks as mma products of
//     operands scaled against the boundary r = b_{16 w - 1} as the fragments are built,
//     q_t exp(b_t - r) and k_s exp(r - b_s) (both factors <= 1); the diagonal 16 x 16 block,
//     where no boundary lies between t and s, on the SIMT cores with each term's own
//     exp(b_t - b_s), its 8 x 8 block above the diagonal skipped.
//   The delta rule's UT transform, blocked as flash-linear-attention's solve_tril: each warp
//     inverts its diagonal block D_w = (I + A_ww)^-1 by forward substitution, then every
//     8-column tile of the right-hand sides R = diag(beta) [K ⊙ exp(b) | V] is solved block
//     row by block row, X_i = D_i (R_i - sum_{j<i} A_ij X_j), both products in 3xTF32 mma.
//     A warp owns whole column tiles, so the solve needs no block barrier.

constexpr int kIntraTensorBlocksPerSm = 2;
constexpr int kSolveTile = 64;                  // value columns per pass of the solve
constexpr int kSolveStride = kSolveTile + 8;    // B operand rows: conflict-free fragments
constexpr int kSquareFloats = kChunk * kSquareStride;       // A, read as the A operand
constexpr int kInverseStride = kSubChunk + 4;               // D_i, read as the A operand
constexpr int kInverseFloats = kChunk * kInverseStride;

// Where IntraChunkTensorKernel keeps its operands in dynamic shared memory (floats): q, then a
// tile of beta V; k, then the right-hand sides and W; b per channel, then A and D.
struct IntraTensorShared {
  int key_stride = 0;   // row stride of q, k and b: the keys padded to whole mma steps, + 4
  int keys = 0;         // offset of k
  int third = 0;        // offset of b / A
  int total = 0;
};

__host__ __device__ inline IntraTensorShared IntraTensorSharedLayout(int32_t key_dim,
                                                                      GateKind decay, bool delta) {
  IntraTensorShared layout;
  layout.key_stride = (key_dim + 7) / 8 * 8 + 4;
  const int rows = kChunk * layout.key_stride;
  const int solve = delta ? kSquareFloats + kInverseFloats : 0;
  layout.keys = delta && kSolveStride > layout.key_stride ? kChunk * kSolveStride : rows;
  layout.third = layout.keys + rows;
  const int third = decay == GateKind::kPerChannel ? (rows > solve ? rows : solve) : solve;
  layout.total = layout.third + third;
  return layout;
}

// Copies chunk rows [0, kChunk) x columns [0, padded) of `source` (row stride `source_row`)
// to shared memory, entries at or past `rows` or `columns` zero. As StageTile: the caller
// waits (CopyAsyncWaitAll) and then needs a barrier.
__device__ __forceinline__ void StageChunkRows(const float* source, int64_t source_row,
                                               int rows, int columns, int padded,
                                               float* target, int target_row, bool quads) {
  const int width = quads ? 4 : 1;
  const int per_row = padded / width;
  for (int e = threadIdx.x; e < kChunk * per_row; e += blockDim.x) {
    const int r = e / per_row;
    const int c = width * (e % per_row);
    float* to = target + r * target_row + c;
    const bool inside = r < rows && c < columns;
    if (quads) {
      if (inside) {
        CopyAsync<16>(to, source + r * source_row + c);
      } else {
        *reinterpret_cast<float4*>(to) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    } else if (inside) {
      CopyAsync<4>(to, source + r * source_row + c);
    } else {
      *to = 0.0f;
    }
  }
}

// The diagonal block of sub-chunk `row0 / 16` with per-channel decays, in the accumulator
// layout of its two 8-column mma tiles: p[h] and a[h] are tile h (columns row0 + 8 h ..).
// Entries (h = 1, e < 2) lie above the diagonal for every lane and stay zero.
template <bool kDelta>
__device__ __forceinline__ void DiagonalScores(const float* q, const float* k, const float* b,
                                               int stride, int columns, int row0,
                                               float (&p)[2][4], float (&a)[2][4]) {
  const int g = threadIdx.x % kWarpSize / 4;
  const int j = threadIdx.x % 4;
  const int rows[2] = {row0 + g, row0 + g + 8};
  const int cols[4] = {row0 + 2 * j, row0 + 2 * j + 1, row0 + 8 + 2 * j, row0 + 9 + 2 * j};
#pragma unroll 1
  for (int c = 0; c < columns; c += 4) {
    float4 qt[2], kt[2], bt[2], ks[4], bs[4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      qt[r] = *reinterpret_cast<const float4*>(q + rows[r] * stride + c);
      bt[r] = *reinterpret_cast<const float4*>(b + rows[r] * stride + c);
      if (kDelta) kt[r] = *reinterpret_cast<const float4*>(k + rows[r] * stride + c);
    }
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      ks[s] = *reinterpret_cast<const float4*>(k + cols[s] * stride + c);
      bs[s] = *reinterpret_cast<const float4*>(b + cols[s] * stride + c);
    }
#pragma unroll
    for (int x = 0; x < 4; ++x) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (h == 1 && e < 2) continue;
          const int r = e / 2;
          const int s = 2 * h + e % 2;
          // Pairs with s > t are masked later; the clamp keeps their factor finite.
          const float factor = __expf(fminf(reinterpret_cast<const float*>(&bt[r])[x] -
                                                reinterpret_cast<const float*>(&bs[s])[x],
                                            0.0f));
          const float key = reinterpret_cast<const float*>(&ks[s])[x] * factor;
          p[h][e] = fmaf(reinterpret_cast<const float*>(&qt[r])[x], key, p[h][e]);
          if (kDelta) a[h][e] = fmaf(reinterpret_cast<const float*>(&kt[r])[x], key, a[h][e]);
        }
      }
    }
  }
}

// Solves (I + A) X = R in place for the 8-column tiles n = warp + kTensorWarps i < tiles of
// `x` (row stride `stride`), block row by block row; `a` holds A (stride kSquareStride),
// `inverse` the diagonal blocks' inverses D_i (stride kInverseStride). Each warp touches only
// its own columns.
template <int kTilesPerWarp>
__device__ __forceinline__ void SolveColumns(float* x, int stride, int tiles, const float* a,
                                             const float* inverse) {
  const int warp = threadIdx.x / kWarpSize;
  const int g = threadIdx.x % kWarpSize / 4;
  const int j = threadIdx.x % 4;
  auto entry = [&](int row, int tile, int e) {
    return (row + g + 8 * (e / 2)) * stride + 8 * (warp + kTensorWarps * tile) + 2 * j + e % 2;
  };
#pragma unroll 1
  for (int i = 0; i < kSubChunks; ++i) {
    float sum[kTilesPerWarp][4] = {};
#pragma unroll 1
    for (int k0 = 0; k0 < kSubChunk * i; k0 += 8) {
      const FragmentA fa = MakeFragmentA(
          [&](int r, int c) { return a[(kSubChunk * i + r) * kSquareStride + k0 + c]; });
#pragma unroll
      for (int tile = 0; tile < kTilesPerWarp; ++tile) {
        const int n = warp + kTensorWarps * tile;
        if (n >= tiles) break;
        const FragmentB fb =
            MakeFragmentB([&](int r, int c) { return x[(k0 + r) * stride + 8 * n + c]; });
        MmaTf32x3(sum[tile], fa, fb);
      }
    }
#pragma unroll
    for (int tile = 0; tile < kTilesPerWarp; ++tile) {
      if (warp + kTensorWarps * tile >= tiles) break;
#pragma unroll
      for (int e = 0; e < 4; ++e) x[entry(kSubChunk * i, tile, e)] -= sum[tile][e];
    }
    __syncwarp();
    float solved[kTilesPerWarp][4] = {};
#pragma unroll
    for (int k0 = 0; k0 < kSubChunk; k0 += 8) {
      const FragmentA fa = MakeFragmentA([&](int r, int c) {
        return inverse[(kSubChunk * i + r) * kInverseStride + k0 + c];
      });
#pragma unroll
      for (int tile = 0; tile < kTilesPerWarp; ++tile) {
        const int n = warp + kTensorWarps * tile;
        if (n >= tiles) break;
        const FragmentB fb = MakeFragmentB(
            [&](int r, int c) { return x[(kSubChunk * i + k0 + r) * stride + 8 * n + c]; });
        MmaTf32x3(solved[tile], fa, fb);
      }
    }
    __syncwarp();
#pragma unroll
    for (int tile = 0; tile < kTilesPerWarp; ++tile) {
      if (warp + kTensorWarps * tile >= tiles) break;
#pragma unroll
      for (int e = 0; e < 4; ++e) x[entry(kSubChunk * i, tile, e)] = solved[tile][e];
    }
    __syncwarp();
  }
}

// Calls f(t, c) for each quad of columns c, c + 1, c + 2, c + 3 < `columns` (a multiple of 4)
// of every chunk row t: warp w takes rows w, w + kTensorWarps, ..., each lane a quad, so
// neither index needs a division.
template <typename Quad>
__device__ __forceinline__ void ForEachQuad(int columns, Quad f) {
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll 4
  for (int t = warp; t < kChunk; t += kTensorWarps) {
    for (int c = 4 * lane; c < columns; c += 4 * kWarpSize) f(t, c);
  }
}

// The score tiles (16 rows x 8 columns) that the mma computes: row block r holds tiles
// 0 .. 2 r + 1 (per-channel decay: 0 .. 2 r - 1, the diagonal block being computed apart),
// listed from the last row block on and dealt out evenly, kScoreItems to a warp, so that the
// warps' shares of the triangle are equal.
template <bool kChannels>
constexpr int kScoreItems = (kChannels ? 12 : 20) / kTensorWarps;

template <bool kChannels>
__device__ __forceinline__ void ScoreTile(int index, int& row_block, int& tile) {
  int r = kSubChunks - 1;
  int tiles = 2 * r + (kChannels ? 0 : 2);
  while (index >= tiles) {
    index -= tiles;
    --r;
    tiles = 2 * r + (kChannels ? 0 : 2);
  }
  row_block = r;
  tile = index;
}

template <GateKind kDecay, bool kDelta>
__global__ void __launch_bounds__(kInterThreads, kIntraTensorBlocksPerSm)
IntraChunkTensorKernel(const ChunkwiseArgs args, const SlotLayout layout, const Round round,
                       float* scratch) {
  extern __shared__ __align__(16) float shared[];
  __shared__ float decay[kChunk];  // b_t, scalar decay
  __shared__ float beta[kChunk];
  __shared__ float totals[kChunk];
  constexpr bool kChannels = kDecay == GateKind::kPerChannel;
  constexpr int kItems = kScoreItems<kChannels>;

  ChunkBlock block;
  if (!LocateChunkBlock(args, layout, round, scratch, &block)) return;
  const ChunkSpan span = block.span;
  const int32_t length = span.length;
  float* slot = block.slot;
  const int32_t key_dim = args.key_dim;
  const int32_t value_dim = args.value_dim;
  const int32_t head = block.head;
  const int64_t qk_row = block.qk_row;
  const float* q = block.q;
  const float* k = block.k;
  const IntraTensorShared regions = IntraTensorSharedLayout(key_dim, kDecay, kDelta);
  const int stride = regions.key_stride;
  const int padded = stride - 4;
  float* q_s = shared;                   // [C, stride] q; then a tile of beta V
  float* k_s = shared + regions.keys;    // [C, stride] k; then beta K ⊙ exp(b), then W
  float* b_s = shared + regions.third;   // [C, stride] b_t per channel; then A
  float* inverse = b_s + kSquareFloats;  // [C, kInverseStride] D_i, block row i

  LoadTokenScalars<kDecay, kDelta>(args, span, block.value_head, decay, beta, totals);
  if (kDecay == GateKind::kScalar && threadIdx.x < kChunk) {
    slot[layout.token_decay + threadIdx.x] = decay[threadIdx.x];  // b_t for launch 3a
  }
  const bool quads = QuadAligned(args.q + head * key_dim, qk_row, key_dim) &&
                     QuadAligned(args.k + head * key_dim, qk_row, key_dim);
  StageChunkRows(q, qk_row, length, key_dim, padded, q_s, stride, quads);
  StageChunkRows(k, qk_row, length, key_dim, padded, k_s, stride, quads);
  if (kChannels) {  // b_t, one column per thread, the reads of 16 tokens in flight
    for (int c = threadIdx.x; c < padded; c += blockDim.x) {
      float running = 0.0f;
#pragma unroll
      for (int t0 = 0; t0 < kChunk; t0 += 16) {
        float g[16];
#pragma unroll
        for (int t = 0; t < 16; ++t) {
          g[t] = FetchLogDecay(args, span, block.value_head, 0, t0 + t, c);
        }
#pragma unroll
        for (int t = 0; t < 16; ++t) {
          running += g[t];
          b_s[(t0 + t) * stride + c] = running;
        }
      }
    }
  }
  CopyAsyncWaitAll();
  __syncthreads();
  if (kChannels) {  // K^ = K ⊙ exp(b_C - b) and b_C for launch 3a
    const float* end = b_s + (length - 1) * stride;
    ForEachQuad(padded, [&](int t, int c) {
      const float4 kq = *reinterpret_cast<const float4*>(k_s + t * stride + c);
      const float4 bq = *reinterpret_cast<const float4*>(b_s + t * stride + c);
      const float4 eq = *reinterpret_cast<const float4*>(end + c);
      const float kv[4] = {kq.x, kq.y, kq.z, kq.w};
      const float bv[4] = {bq.x, bq.y, bq.z, bq.w};
      const float ev[4] = {eq.x, eq.y, eq.z, eq.w};
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        if (c + x >= key_dim) break;
        slot[layout.key_end + t * key_dim + c + x] =
            t < length ? kv[x] * __expf(ev[x] - bv[x]) : 0.0f;
        if (t == 0) slot[layout.decay_end + c + x] = ev[x];
      }
    });
  }

  // Scores: this warp's kItems tiles by mma, and for per-channel decay its own row block's
  // diagonal block on the SIMT cores.
  const int warp = threadIdx.x / kWarpSize;
  const int g = threadIdx.x % kWarpSize / 4;
  const int j = threadIdx.x % 4;
  const int row0 = kSubChunk * warp;
  int item_row[kItems];
  int item_tile[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) ScoreTile<kChannels>(kItems * warp + i, item_row[i], item_tile[i]);
  float p[kItems][4] = {};
  float a[kItems][4] = {};
  float p_diagonal[2][4] = {};
  float a_diagonal[2][4] = {};
  if (kChannels) DiagonalScores<kDelta>(q_s, k_s, b_s, stride, padded, row0, p_diagonal, a_diagonal);
#pragma unroll 1
  for (int c0 = 0; c0 < padded; c0 += 8) {
    FragmentA qa, ka;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int rows = kSubChunk * item_row[i];
      // r, the boundary before the row block (per-channel decay; row block 0 has no items).
      const float* reference = b_s + (rows > 0 ? rows - 1 : 0) * stride + c0;
      if (i == 0 || item_row[i] != item_row[i > 0 ? i - 1 : 0]) {
        auto operand_a = [&](const float* source) {
          return MakeFragmentA([&](int r, int c) {
            const int at = (rows + r) * stride + c0 + c;
            if (!kChannels) return source[at];
            return source[at] * __expf(b_s[at] - reference[c]);
          });
        };
        qa = operand_a(q_s);
        if (kDelta) ka = operand_a(k_s);
      }
      const int s0 = 8 * item_tile[i];
      const FragmentB kb = MakeFragmentB([&](int r, int c) {
        const int at = (s0 + c) * stride + c0 + r;
        if (!kChannels) return k_s[at];
        return k_s[at] * __expf(reference[r] - b_s[at]);
      });
      MmaTf32x3(p[i], qa, kb);
      if (kDelta) MmaTf32x3(a[i], ka, kb);
    }
  }

  // Mask, apply the scalar decay factors, store P; p and a become final P and A entries.
  auto finish = [&](int t, int s, float& pv, float& av) {
    float factor = 1.0f;
    if (kDecay == GateKind::kScalar && s <= t) factor = __expf(decay[t] - decay[s]);
    pv = s <= t && t < length ? pv * factor : 0.0f;
    av = s < t && t < length ? beta[t] * av * factor : 0.0f;
  };
  float* scores = slot + layout.scores;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      finish(kSubChunk * item_row[i] + g + 8 * (e / 2), 8 * item_tile[i] + 2 * j + e % 2, p[i][e],
             a[i][e]);
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int t = kSubChunk * item_row[i] + g + 8 * half;
      *reinterpret_cast<float2*>(&scores[t * kChunk + 8 * item_tile[i] + 2 * j]) =
          make_float2(p[i][2 * half], p[i][2 * half + 1]);
    }
  }
  // This warp's row block past the mma tiles: the diagonal block (per-channel decay) and
  // zeros above the diagonal.
  const int first_free = 2 * warp + (kChannels ? 0 : 2);
#pragma unroll
  for (int n = 0; n < 2 * kSubChunks; ++n) {
    if (n < first_free) continue;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const bool diagonal = kChannels && n < first_free + 2;
      float pv = diagonal ? p_diagonal[n % 2][e] : 0.0f;
      float av = diagonal ? a_diagonal[n % 2][e] : 0.0f;
      finish(row0 + g + 8 * (e / 2), 8 * n + 2 * j + e % 2, pv, av);
      if (kChannels && n < 2 * warp + 2) {
        p_diagonal[n % 2][e] = pv;
        a_diagonal[n % 2][e] = av;
      }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const bool diagonal = kChannels && n < first_free + 2;
      const int t = row0 + g + 8 * half;
      *reinterpret_cast<float2*>(&scores[t * kChunk + 8 * n + 2 * j]) =
          diagonal ? make_float2(p_diagonal[n % 2][2 * half], p_diagonal[n % 2][2 * half + 1])
                   : make_float2(0.0f, 0.0f);
    }
  }
  if (!kDelta) return;

  // The UT transform. First the right-hand sides of the key columns, in place of K.
  __syncthreads();  // every read of q, k and b by the scores is done
  ForEachQuad(padded, [&](int t, int c) {
    float4& kq = *reinterpret_cast<float4*>(k_s + t * stride + c);
    float4 value = kq;
    float factor = beta[t];
    if (kDecay == GateKind::kScalar) factor *= __expf(decay[t]);
    if (kChannels) {
      const float4 bq = *reinterpret_cast<const float4*>(b_s + t * stride + c);
      value.x *= factor * __expf(bq.x);
      value.y *= factor * __expf(bq.y);
      value.z *= factor * __expf(bq.z);
      value.w *= factor * __expf(bq.w);
    } else {
      value.x *= factor;
      value.y *= factor;
      value.z *= factor;
      value.w *= factor;
    }
    kq = value;
  });
  __syncthreads();  // b is free: A takes its place
  float* a_s = b_s;
  auto store_a = [&](int row_block, int tile, float v0, float v1, float v2, float v3) {
    float* at = &a_s[(kSubChunk * row_block + g) * kSquareStride + 8 * tile + 2 * j];
    *reinterpret_cast<float2*>(at) = make_float2(v0, v1);
    *reinterpret_cast<float2*>(at + 8 * kSquareStride) = make_float2(v2, v3);
  };
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    store_a(item_row[i], item_tile[i], a[i][0], a[i][1], a[i][2], a[i][3]);
  }
#pragma unroll
  for (int n = 0; n < 2 * kSubChunks; ++n) {
    if (n < first_free) continue;
    if (kChannels && n < first_free + 2) {
      const float(&d)[4] = a_diagonal[n % 2];
      store_a(warp, n, d[0], d[1], d[2], d[3]);
    } else {
      store_a(warp, n, 0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  __syncthreads();
  // D_w = (I + A_ww)^-1 by forward substitution, one column per lane.
  const int lane = threadIdx.x % kWarpSize;
  if (lane < kSubChunk) {
    float column[kSubChunk];
#pragma unroll
    for (int r = 0; r < kSubChunk; ++r) {
      float sum = r == lane ? 1.0f : 0.0f;
#pragma unroll
      for (int u = 0; u < r; ++u) {
        sum = fmaf(-a_s[(row0 + r) * kSquareStride + row0 + u], column[u], sum);
      }
      column[r] = sum;
    }
#pragma unroll
    for (int r = 0; r < kSubChunk; ++r) inverse[(row0 + r) * kInverseStride + lane] = column[r];
  }
  __syncthreads();
  SolveColumns<kRegisterWalkMaxKeys / 8 / kTensorWarps>(k_s, stride, padded / 8, a_s, inverse);
  __syncthreads();
  float* w = slot + layout.keys;
  ForEachQuad(padded, [&](int t, int c) {
    const float4 xq = *reinterpret_cast<const float4*>(k_s + t * stride + c);
    const float xv[4] = {xq.x, xq.y, xq.z, xq.w};
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      if (c + x < key_dim) w[t * key_dim + c + x] = xv[x];
    }
  });
  const int64_t v_row = static_cast<int64_t>(args.num_value_heads) * value_dim;
  const float* v = args.v + static_cast<int64_t>(span.start) * v_row + block.value_head * value_dim;
  float* u = slot + layout.values;
  float* tile = q_s;  // [C, kSolveStride]
  for (int32_t v0 = 0; v0 < value_dim; v0 += kSolveTile) {
    const int columns = value_dim - v0 < kSolveTile ? value_dim - v0 : kSolveTile;
    __syncthreads();  // the tile's space is free
    ForEachInTile<kSolveTile, kInterThreads>(
        [&](int t, int c) {
          return t < length && c < columns ? beta[t] * __ldg(v + t * v_row + v0 + c) : 0.0f;
        },
        [&](int t, int c, float value) { tile[t * kSolveStride + c] = value; });
    __syncthreads();
    SolveColumns<kSolveTile / 8 / kTensorWarps>(tile, kSolveStride, kSolveTile / 8, a_s,
                                                inverse);
    __syncthreads();
    ForEachQuad(kSolveTile, [&](int t, int c) {
      const float4 xq = *reinterpret_cast<const float4*>(tile + t * kSolveStride + c);
      const float xv[4] = {xq.x, xq.y, xq.z, xq.w};
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        if (c + x < columns) u[t * value_dim + v0 + c + x] = xv[x];
      }
    });
  }
}
#endif  // LUMEN_GPU_NVIDIA_PATHS

// ---------------------------------------------------------------------------------------
// The launcher.

bool ArgsValid(const ChunkwiseArgs& args) {
  if (args.num_sequences < 0 || args.max_seqlen < 0) return false;
  if (args.num_heads <= 0 || args.num_value_heads <= 0 ||
      args.num_value_heads % args.num_heads != 0) {
    return false;
  }
  if (args.key_dim <= 0 || args.value_dim <= 0) return false;
  if (args.num_sequences == 0 || args.max_seqlen == 0) return true;
  if (!args.q || !args.k || !args.v || !args.o || !args.states || !args.cu_seqlens) return false;
  if ((args.decay != GateKind::kNone) != (args.log_decay != nullptr)) return false;
  if (args.delta_rule != (args.beta != nullptr)) return false;
  if (args.normalize) {
    // z never decays and the delta rule has no normalizer: only plain linear attention.
    if (!args.normalizers || args.decay != GateKind::kNone || args.delta_rule) return false;
  }
  return true;
}

// Whether launch 3 runs split (3a and 3b, the tensor-core kernels) rather than as one walk.
bool UsesSplitWalk(const ChunkwiseArgs& args) {
#if LUMEN_GPU_NVIDIA_PATHS
  return !args.normalize && args.key_dim <= kRegisterWalkMaxKeys;
#else
  return false;
#endif
}

// Whether launch 1 of a split call runs on the tensor cores (IntraChunkTensorKernel): where
// that measured faster than the SIMT kernel on the H200, additive writes and per-channel
// decays. The delta rule with scalar or no decay keeps IntraChunkKernel: there the tensor
// kernel (four warps a block, two blocks a multiprocessor, its solve a serial chain of block
// rows) measured slower (B = 4 x T = 8192: delta_net 8.33 against 7.16 ms, gated_delta_net
// 8.95 against 7.70), though it computes those families too.
template <GateKind kDecay, bool kDelta, bool kNormalize>
constexpr bool kTensorIntraChunk = !kNormalize && (kDecay == GateKind::kPerChannel || !kDelta);

// One unit of scratch: one chunk of one sequence, every value head.
int64_t UnitBytes(const Plan& plan, const ChunkwiseArgs& args) {
  return plan.layout.slot_floats * 4 * int64_t{args.num_value_heads};
}

// The units the budget holds (at least one).
int64_t BudgetUnits(const Plan& plan, const ChunkwiseArgs& args) {
  return std::max<int64_t>(1, kScratchBudgetBytes / UnitBytes(plan, args));
}

Plan MakePlan(const ChunkwiseArgs& args) {
  Plan plan;
  SlotLayout& layout = plan.layout;
  int64_t offset = int64_t{kChunk} * kChunk;
  if (args.delta_rule) {
    layout.keys = offset;
    offset += int64_t{kChunk} * args.key_dim;
    layout.values = offset;
    offset += int64_t{kChunk} * args.value_dim;
  }
  if (UsesSplitWalk(args)) {
    layout.start_state = offset;
    offset += int64_t{args.key_dim} * args.value_dim;
    if (args.decay == GateKind::kScalar) {
      layout.token_decay = offset;
      offset += kChunk;
    }
    if (args.decay == GateKind::kPerChannel) {
      layout.key_end = offset;
      offset += int64_t{kChunk} * args.key_dim;
      layout.decay_end = offset;
      offset += (args.key_dim + 3) / 4 * 4;
    }
  }
  if (args.normalize) {
    layout.normalizer = offset;
    offset += args.key_dim;
  }
  layout.slot_floats = (offset + 3) / 4 * 4;
  plan.max_chunks = static_cast<int32_t>((int64_t{args.max_seqlen} + kChunk - 1) / kChunk);
  const int64_t units = BudgetUnits(plan, args);
  const int64_t sequences = args.num_sequences;
  if (units >= sequences) {
    plan.sequences_per_round = args.num_sequences;
    layout.chunks_per_round =
        static_cast<int32_t>(std::min<int64_t>(plan.max_chunks, units / sequences));
  } else {
    plan.sequences_per_round = static_cast<int32_t>(units);
    layout.chunks_per_round = 1;
  }
  return plan;
}

int64_t ScratchBytes(const Plan& plan, const ChunkwiseArgs& args) {
  return int64_t{plan.sequences_per_round} * plan.layout.chunks_per_round * UnitBytes(plan, args);
}

// Asks once per kernel for the largest shared-memory carveout: every kernel here is limited
// by shared memory per multiprocessor. A preference only (a device that did not get it runs
// the same code with fewer blocks per multiprocessor), so the first device's answer stands.
template <auto kKernel>
cudaError_t PreferSharedMemory() {
  static const cudaError_t status =
      cudaFuncSetAttribute(reinterpret_cast<const void*>(kKernel),
                           cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared);
  return status;
}

#if LUMEN_GPU_NVIDIA_PATHS
// Raises a kernel's dynamic shared-memory limit to `bytes`, once per kernel (the largest any
// shape of its dispatch asks for).
template <auto kKernel>
cudaError_t AllowDynamicSharedMemory(int bytes) {
  static const cudaError_t status = cudaFuncSetAttribute(
      reinterpret_cast<const void*>(kKernel), cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  return status;
}
#endif

template <GateKind kDecay, bool kDelta, bool kNormalize>
cudaError_t LaunchRounds(const ChunkwiseArgs& args, const Plan& plan, float* scratch,
                         cudaStream_t stream) {
  const SlotLayout& layout = plan.layout;
  const bool split = UsesSplitWalk(args);
  constexpr bool kTensorIntra = kTensorIntraChunk<kDecay, kDelta, kNormalize>;
  const bool tensor_intra = split && kTensorIntra;
  cudaError_t status = cudaSuccess;
  if (!tensor_intra) status = PreferSharedMemory<IntraChunkKernel<kDecay, kDelta, kNormalize>>();
#if LUMEN_GPU_NVIDIA_PATHS
  if constexpr (kTensorIntra) {
    if (tensor_intra && status == cudaSuccess) {
      status = PreferSharedMemory<IntraChunkTensorKernel<kDecay, kDelta>>();
    }
    if (tensor_intra && status == cudaSuccess) {
      status = AllowDynamicSharedMemory<IntraChunkTensorKernel<kDecay, kDelta>>(
          IntraTensorSharedLayout(kRegisterWalkMaxKeys, kDecay, kDelta).total *
          static_cast<int>(sizeof(float)));
    }
  }
  if constexpr (!kNormalize) {
    if (split && status == cudaSuccess) {
      status = PreferSharedMemory<StateWalkTensorKernel<kDecay, kDelta>>();
    }
    if (split && status == cudaSuccess) {
      status = PreferSharedMemory<ChunkOutputTensorKernel<kDecay, kDelta>>();
    }
  }
#endif
  if (!split && status == cudaSuccess) {
    status = PreferSharedMemory<InterChunkKernel<kDecay, kDelta, kNormalize>>();
  }
  if (status != cudaSuccess) return status;
  const int32_t value_tiles = ValueTiles(args.value_dim);
  for (int32_t first_sequence = 0; first_sequence < args.num_sequences;
       first_sequence += plan.sequences_per_round) {
    const int32_t sequences =
        std::min(plan.sequences_per_round, args.num_sequences - first_sequence);
    for (int32_t first_chunk = 0; first_chunk < plan.max_chunks;
         first_chunk += layout.chunks_per_round) {
      const Round round{first_sequence, first_chunk};
      const int32_t chunks = std::min(layout.chunks_per_round, plan.max_chunks - first_chunk);
      // gridDim.x as LocateGridSlot reads it: a block per (sequence, value head), times
      // value_tiles for the launches over tiles of value columns.
      const int32_t head_blocks = sequences * args.num_value_heads;
      const dim3 intra_grid(head_blocks, chunks);
      bool launched = false;
#if LUMEN_GPU_NVIDIA_PATHS
      if constexpr (kTensorIntra) {
        if (tensor_intra) {
          const int intra_bytes = IntraTensorSharedLayout(args.key_dim, kDecay, kDelta).total *
                                  static_cast<int>(sizeof(float));
          IntraChunkTensorKernel<kDecay, kDelta>
              <<<intra_grid, kInterThreads, intra_bytes, stream>>>(args, layout, round, scratch);
          launched = true;
        }
      }
#endif
      if (!launched) {
        IntraChunkKernel<kDecay, kDelta, kNormalize>
            <<<intra_grid, kIntraThreads, 0, stream>>>(args, layout, round, scratch);
      }
      if (kNormalize) {
        NormalizerPrefixKernel<<<head_blocks, 128, 0, stream>>>(args, layout, round, scratch);
      }
      const int32_t walks = head_blocks * value_tiles;
      launched = false;
#if LUMEN_GPU_NVIDIA_PATHS
      if constexpr (!kNormalize) {
        if (split) {
          StateWalkTensorKernel<kDecay, kDelta>
              <<<walks, kInterThreads, 0, stream>>>(args, layout, round, scratch);
          ChunkOutputTensorKernel<kDecay, kDelta>
              <<<dim3(walks, chunks), kInterThreads, 0, stream>>>(args, layout, round, scratch);
          launched = true;
        }
      }
#endif
      if (!launched) {
        InterChunkKernel<kDecay, kDelta, kNormalize>
            <<<walks, kInterThreads, 0, stream>>>(args, layout, round, scratch);
      }
      status = cudaGetLastError();
      if (status != cudaSuccess) return status;
    }
  }
  return cudaSuccess;
}

}  // namespace

ChunkwiseArgs SizingArgs(ChunkwiseArgs shape) {
  static float placeholder;
  static float* placeholder_table[1] = {&placeholder};
  static int32_t placeholder_offsets[1];
  shape.q = shape.k = shape.v = shape.o = &placeholder;
  shape.log_decay = shape.decay != GateKind::kNone ? &placeholder : nullptr;
  shape.beta = shape.delta_rule ? &placeholder : nullptr;
  shape.states = placeholder_table;
  shape.normalizers = shape.normalize ? placeholder_table : nullptr;
  shape.cu_seqlens = placeholder_offsets;
  return shape;
}

int64_t ChunkwiseScratchBytes(const ChunkwiseArgs& args) {
  if (!ArgsValid(args) || args.num_sequences == 0 || args.max_seqlen == 0) return 0;
  return ScratchBytes(MakePlan(args), args);
}

int64_t MostChunkwiseScratchBytes(const ChunkwiseArgs& args) {
  if (!ArgsValid(args) || args.num_sequences == 0 || args.max_seqlen == 0) return 0;
  // MakePlan gives n sequences n * min(M, U / n) units while n <= U, and U beyond: the most is
  // U once n reaches U. Below, the n that share one quotient U / n form a run over which the
  // units grow with n, so the last n of each run is the only one to try.
  const Plan plan = MakePlan(args);
  const int64_t units = BudgetUnits(plan, args);
  const int64_t most_sequences = args.num_sequences;
  if (most_sequences >= units) return units * UnitBytes(plan, args);
  int64_t most = 0;
  for (int64_t n = 1; n <= most_sequences;) {
    const int64_t quotient = units / n;
    const int64_t last = std::min(most_sequences, units / quotient);
    most = std::max(most, last * std::min<int64_t>(plan.max_chunks, quotient));
    n = last + 1;
  }
  return most * UnitBytes(plan, args);
}

cudaError_t LaunchChunkwise(const ChunkwiseArgs& args, void* scratch, cudaStream_t stream) {
  if (!ArgsValid(args)) return cudaErrorInvalidValue;
  if (args.num_sequences == 0 || args.max_seqlen == 0) return cudaSuccess;
  if (!scratch) return cudaErrorInvalidValue;
  const Plan plan = MakePlan(args);
  float* buffer = static_cast<float*>(scratch);
  if (args.normalize) return LaunchRounds<GateKind::kNone, false, true>(args, plan, buffer, stream);
  switch (args.decay) {
    case GateKind::kNone:
      return args.delta_rule ? LaunchRounds<GateKind::kNone, true, false>(args, plan, buffer, stream)
                             : LaunchRounds<GateKind::kNone, false, false>(args, plan, buffer, stream);
    case GateKind::kScalar:
      return args.delta_rule
                 ? LaunchRounds<GateKind::kScalar, true, false>(args, plan, buffer, stream)
                 : LaunchRounds<GateKind::kScalar, false, false>(args, plan, buffer, stream);
    case GateKind::kPerChannel:
      return args.delta_rule
                 ? LaunchRounds<GateKind::kPerChannel, true, false>(args, plan, buffer, stream)
                 : LaunchRounds<GateKind::kPerChannel, false, false>(args, plan, buffer, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace lumen::cuda
