// The chunkwise form: per chunk of C tokens, a C x C masked product for the tokens' effect
// on each other and K x V products for the state they start from, as fla's chunk kernels do.
// The delta rule solves its chunk in the UT (WY) form: (I + A) U = diag(beta) (V - Kh S0).
//
// Notation inside a chunk (tokens t = 0..C-1, starting state S0, normalizer z0):
//   e_t = exp(g_t)                     token t's decay, per key channel or one per token
//   F[t, s] = e_{s+1} ... e_t (s <= t)  decay from token s's write to token t's read
//   a_t = e_0 ... e_t, z_s = e_{s+1} ... e_{C-1}   decays from the chunk start, to its end
//   P[t, s] = sum_i q_ti k_si F_i[t, s] (s <= t), A[t, s] = beta_t sum_i k_ti k_si F_i[t, s]
//   Qh = Q ⊙ a, Kh = K ⊙ a: reads of S0 decayed up to token t
//   O = Qh S0 + P U, S_C = diag(a_{C-1}) S0 + (K ⊙ z)^T U
// Every decay is a product of factors e <= 1, never a quotient, so chunks are always C long:
// a difference of cumulative log-decays exp(b_t - b_s) loses fp32's relative precision when
// |b| is large (b's rounding error grows with |b|), and a split exp(b_t) exp(-b_s) leaves
// fp32's range.
//   - No gate or one gate per token: P = tril(Q K^T) ⊙ F, the decay applied after the product.
//   - Per-channel gates (gla, kda): F differs by channel, so it must be inside the product.
//     Where the chunk's whole decay a_last = a_t z_t stays above kMinSplitFactor in every
//     channel, F[t, s] = a_t z_s / a_last gives P = tril(Qh ((K ⊙ z) ⊘ a_last)^T), with Qh
//     and K ⊙ z the rows the state's reads and update take anyway and the columns
//     k_s z_s / a_last <= k_s / a_last finite. Otherwise the chunk is
//     cut into sub-chunks (halves of it, down to 16 tokens: the longest whose every
//     sub-chunk keeps its decay above kMinSplitFactor, else 16);
//     rows of sub-chunk j are scaled against its first token r (q_t F[t, r] <= 1), columns s
//     before it by F[r, s] <= 1, and their product is then exactly q_t k_s F[t, s]. Inside a
//     sub-chunk the columns are k_s / F[s, r] >= 1, which stays finite while the sub-chunk's
//     decay is above kMinSplitFactor in every channel; a sub-chunk whose decay is stronger
//     (average log-decay below -4 per token in some channel) gets each of its terms with its
//     own product of e.
// Decay factors below kNegligibleFactor are taken as 0, so no factor is ever denormal (a
// denormal operand slows multiplies on x86 by two orders of magnitude): a term that small is
// far below the rounding of the terms beside it (the diagonal term has factor 1).

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/cpu/head_kernels.h"
#include "backends/cpu/kernel_table.h"
#include "backends/cpu/prefetch.h"
#include "backends/cpu/small_matmul.h"
#include "backends/cpu/transpose.h"
#include "backends/cpu/vector_math.h"

namespace lumen::cpu {
namespace {

constexpr float kNegligibleFactor = 1e-30f;
// e^-60: columns k_s / F[s, r] <= 1.2e26 stay far from fp32 overflow (3.4e38) and the rows'
// q_t F[t, r] >= 8.8e-27 far from denormals, for inputs of any sane magnitude.
constexpr float kMinSplitFactor = 8.8e-27f;
// Shortest sub-chunk of a per-channel gate: one 16-float vector of columns. Longer ones
// (up to kChunkSize) are taken where every sub-chunk's decay allows the split
// inside it: fewer, larger products and fewer scaled copies of the columns.
constexpr int32_t kSubChunk = 16;

inline float Negligible(float factor) { return factor < kNegligibleFactor ? 0.0f : factor; }

// Views into ChunkWorkspace::buffer; C = kChunkSize rows are reserved, the first `length`
// used. Matrices indexed by token use the chunk's length as leading dimension.
struct ChunkScratch {
  const float* q;     // [C, K] the chunk's q rows, contiguous: in place or copied into q_rows
  const float* k;     // [C, K] its k rows, likewise
  float* q_rows;      // [C, K] room for copies of strided rows
  float* k_rows;      // [C, K]
  float* k_t;         // [K, C] K^T (no gate or a scalar gate)
  float* decay;       // [C, G] e_t; G = K for a vector gate, 1 for a scalar gate
  float* from_start;  // [C, G] a_t
  float* to_end;      // [C, G] z_t
  float* q_hat;       // [C, K] Qh
  float* k_hat;       // [C, K] Kh, delta rule
  float* k_end_t;     // [K, C] (K ⊙ z)^T; a vector gate: K ⊙ z, [C, K]
  float* local;       // [C, K] vector gate: F[t, r] for t in the sub-chunk that starts at r
  float* tail;        // [C, K] vector gate: F[last, s] for s in the sub-chunk that ends at last
  float* rows;        // [C, K] vector gate: one sub-chunk's q rows times F[t, r], or Q ⊘ z
  float* rows_k;      // [C, K] the same for k, delta rule
  float* columns;     // [C, K] vector gate: k rows scaled against one sub-chunk's start
  float* columns_t;   // [K, C] their transpose
  float* factor;      // [K] one row of decay factors
  float* running;     // [K] another, or [C] a row of F for a scalar gate
  float* scores;      // [C, C] P, zero above the diagonal
  float* transform;   // [C, C] K K^T ⊙ F, then row by row -A (strictly lower), delta rule
  float* values;      // [C, V] U for the delta rule (additive writes read V in place)
  float* state_copy;  // [K, V] the state while it moves between layouts
};

int32_t GateWidth(GateKind gate, int32_t key_dim) {
  switch (gate) {
    case GateKind::kNone: return 0;
    case GateKind::kScalar: return 1;
    case GateKind::kPerChannel: return key_dim;
  }
  return 0;
}

// The workspace's buffer holds ChunkScratchFloats (head_kernels.h) floats at least:
// RunChunkwise reserves them before it calls a level's kernel, so that no level's build
// instantiates a std::vector's growth of its own (kernel_targets.h).
ChunkScratch CarveScratch(int32_t key_dim, int32_t value_dim, ChunkWorkspace* workspace) {
  const int64_t c = kChunkSize;
  const int64_t k = std::max(key_dim, 1);
  float* p = workspace->buffer.data();
  auto take = [&p](int64_t count) {
    float* view = p;
    p += count;
    return view;
  };
  ChunkScratch s;
  s.q = s.q_rows = take(c * k);
  s.k = s.k_rows = take(c * k);
  s.k_t = take(c * k);
  s.decay = take(c * k);
  s.from_start = take(c * k);
  s.to_end = take(c * k);
  s.q_hat = take(c * k);
  s.k_hat = take(c * k);
  s.k_end_t = take(c * k);
  s.local = take(c * k);
  s.tail = take(c * k);
  s.rows = take(c * k);
  s.rows_k = take(c * k);
  s.columns = take(c * k);
  s.columns_t = take(c * k);
  s.factor = take(std::max(c, k));
  s.running = take(std::max(c, k));
  s.scores = take(c * c);
  s.transform = take(c * c);
  s.values = take(c * value_dim);
  s.state_copy = take(k * value_dim);
  return s;
}

// Step 1: the chunk's q and k rows, contiguous (read in place where they are already, as
// PrepareHeadInputs leaves transformed rows), and K^T where the scores read it. The rows of
// v, g and o that the later steps read or write in place are asked for now, into L2
// (prefetch.h).
void LoadChunk(const HeadRule& rule, const HeadSequence& seq, int32_t start, int32_t length,
               ChunkScratch* chunk) {
  ChunkScratch& s = *chunk;
  const int32_t key_dim = seq.key_dim;
  const int64_t row_bytes = seq.value_dim * int64_t{sizeof(float)};
  const bool vector_gate = rule.gate == GateKind::kPerChannel;
  for (int32_t t = 0; t < length; ++t) {
    PrefetchBytes<2>(seq.v + (start + t) * seq.v_stride, row_bytes);
    PrefetchBytes<2>(seq.o + (start + t) * seq.o_stride, row_bytes);
    if (vector_gate) {
      PrefetchBytes<2>(seq.g + (start + t) * seq.g_stride, key_dim * sizeof(float));
    }
  }
  auto rows = [&](const float* x, int64_t stride, float* copy) -> const float* {
    if (stride == key_dim) return x + start * stride;
    for (int32_t t = 0; t < length; ++t) {
      std::copy_n(x + (start + t) * stride, key_dim, copy + t * key_dim);
    }
    return copy;
  };
  s.q = rows(seq.q, seq.q_stride, s.q_rows);
  s.k = rows(seq.k, seq.k_stride, s.k_rows);
  if (rule.gate != GateKind::kPerChannel) Transpose(length, key_dim, s.k, key_dim, s.k_t, length);
}

// Step 2: e, a and z, then Qh, Kh and (K ⊙ z)^T (for a vector gate K ⊙ z, which the state
// update reads as A^T). No gate: Qh = Q, Kh = K, (K ⊙ z)^T = K^T, read where they are.
void ScaleChunk(const HeadRule& rule, const HeadSequence& seq, int32_t start, int32_t length,
                const ChunkScratch& s) {
  const int32_t key_dim = seq.key_dim;
  const int32_t width = GateWidth(rule.gate, key_dim);
  if (width == 0) return;
  for (int32_t t = 0; t < length; ++t) {
    const float* g = seq.g + (start + t) * seq.g_stride;
    float* e = s.decay + t * width;
#pragma omp simd
    for (int32_t i = 0; i < width; ++i) e[i] = ExpAboveFloor(g[i], kNegligibleFactor);
  }
  std::copy_n(s.decay, width, s.from_start);
  for (int32_t t = 1; t < length; ++t) {
    const float* prev = s.from_start + (t - 1) * width;
    const float* e = s.decay + t * width;
    float* a = s.from_start + t * width;
#pragma omp simd
    for (int32_t i = 0; i < width; ++i) a[i] = Negligible(prev[i] * e[i]);
  }
  std::fill_n(s.to_end + (length - 1) * width, width, 1.0f);
  for (int32_t t = length - 2; t >= 0; --t) {
    const float* next = s.to_end + (t + 1) * width;
    const float* e = s.decay + (t + 1) * width;
    float* z = s.to_end + t * width;
#pragma omp simd
    for (int32_t i = 0; i < width; ++i) z[i] = Negligible(next[i] * e[i]);
  }
  for (int32_t t = 0; t < length; ++t) {
    const int64_t row = static_cast<int64_t>(t) * key_dim;
    const float* a = s.from_start + t * width;
    const float* q = s.q + row;
    const float* k = s.k + row;
    float* q_hat = s.q_hat + row;
    float* k_hat = s.k_hat + row;
    if (rule.gate == GateKind::kScalar) {
#pragma omp simd
      for (int32_t i = 0; i < key_dim; ++i) q_hat[i] = q[i] * a[0];
      if (rule.delta) {
#pragma omp simd
        for (int32_t i = 0; i < key_dim; ++i) k_hat[i] = k[i] * a[0];
      }
    } else {
#pragma omp simd
      for (int32_t i = 0; i < key_dim; ++i) q_hat[i] = q[i] * a[i];
      if (rule.delta) {
#pragma omp simd
        for (int32_t i = 0; i < key_dim; ++i) k_hat[i] = k[i] * a[i];
      }
    }
  }
  if (rule.gate == GateKind::kScalar) {  // (K ⊙ z)^T: row i of K^T times z
    for (int32_t i = 0; i < key_dim; ++i) {
      const float* k_t = s.k_t + i * length;
      float* out = s.k_end_t + i * length;
#pragma omp simd
      for (int32_t t = 0; t < length; ++t) out[t] = k_t[t] * s.to_end[t];
    }
  } else {  // K ⊙ z row by row
    for (int32_t t = 0; t < length; ++t) {
      const int64_t row = static_cast<int64_t>(t) * key_dim;
      const float* z = s.to_end + row;
      const float* k = s.k + row;
      float* out = s.k_end_t + row;
#pragma omp simd
      for (int32_t i = 0; i < key_dim; ++i) out[i] = k[i] * z[i];
    }
  }
}

// scores = tril(rows_q columns) and, for the delta rule, transform = rows_k columns below the
// diagonal (rows_* [C, K], columns [K, C]). Each block of rows multiplies only the columns up
// to its end (the triangle and a block's corner).
template <class Shape>
void TriangleProducts(const HeadRule& rule, int32_t key_dim, int32_t length,
                      const float* rows_q, const float* rows_k, const float* columns,
                      const ChunkScratch& s) {
  for (int32_t row = 0; row < length; row += kSubChunk) {
    const int32_t end = std::min(row + kSubChunk, length);
    const int64_t offset = static_cast<int64_t>(row) * key_dim;
    MatMul<Shape>(end - row, end, key_dim, rows_q + offset, key_dim, columns, length,
                  s.scores + row * length, length, Landing::kOverwrite);
    if (rule.delta) {
      MatMul<Shape>(end - row, end, key_dim, rows_k + offset, key_dim, columns, length,
                    s.transform + row * length, length, Landing::kOverwrite);
    }
  }
  for (int32_t t = 0; t < length; ++t) {
    std::fill(s.scores + t * length + t + 1, s.scores + (t + 1) * length, 0.0f);
  }
}

// Step 3, no gate or a scalar gate: P = tril(Q K^T) ⊙ F and, for the delta rule,
// K K^T ⊙ F below the diagonal (TriangleProducts); F runs row by row,
// F[t, :t] = F[t - 1, :t] e_t.
template <class Shape>
void ScoresByToken(const HeadRule& rule, int32_t key_dim, int32_t length,
                   const ChunkScratch& s) {
  TriangleProducts<Shape>(rule, key_dim, length, s.q, s.k, s.k_t, s);
  if (rule.gate == GateKind::kNone) return;
  float* f = s.running;  // F[t, 0:t+1]
  for (int32_t t = 0; t < length; ++t) {
    float* p = s.scores + t * length;
    float* a = s.transform + t * length;
    const float e = s.decay[t];
#pragma omp simd
    for (int32_t r = 0; r < t; ++r) f[r] = Negligible(f[r] * e);
    f[t] = 1.0f;
#pragma omp simd
    for (int32_t r = 0; r <= t; ++r) p[r] *= f[r];
    if (rule.delta) {
#pragma omp simd
      for (int32_t r = 0; r < t; ++r) a[r] *= f[r];
    }
  }
}

// F[t, r] for every t of each sub-chunk of `sub` tokens (r its first token; `local`),
// F[last, s] for every s (last its last token; `tail`) where a later sub-chunk reads it.
void SubChunkDecays(int32_t key_dim, int32_t length, int32_t sub, const ChunkScratch& s) {
  for (int32_t first = 0; first < length; first += sub) {
    const int32_t last = std::min(first + sub, length) - 1;
    std::fill_n(s.local + first * key_dim, key_dim, 1.0f);
    for (int32_t t = first + 1; t <= last; ++t) {
      const float* prev = s.local + (t - 1) * key_dim;
      const float* e = s.decay + t * key_dim;
      float* out = s.local + t * key_dim;
#pragma omp simd
      for (int32_t i = 0; i < key_dim; ++i) out[i] = Negligible(prev[i] * e[i]);
    }
    // Only columns of earlier sub-chunks read `tail`: a chunk that is one sub-chunk has none.
    if (last == length - 1 && first == 0) break;
    std::fill_n(s.tail + last * key_dim, key_dim, 1.0f);
    for (int32_t t = last - 1; t >= first; --t) {
      const float* next = s.tail + (t + 1) * key_dim;
      const float* e = s.decay + (t + 1) * key_dim;
      float* out = s.tail + t * key_dim;
#pragma omp simd
      for (int32_t i = 0; i < key_dim; ++i) out[i] = Negligible(next[i] * e[i]);
    }
  }
}

// The terms of sub-chunk [first, end) with each other, one product of e per term:
// P[t, s] = q_t . (k_s ⊙ F[t, s]), and the same with k_t for the delta rule.
void ExactSubChunk(const HeadRule& rule, int32_t key_dim, int32_t length, int32_t first,
                   int32_t end, const ChunkScratch& s) {
  float* f = s.running;
  float* w = s.factor;
  for (int32_t c = first; c < end; ++c) {
    const float* k_c = s.k + c * key_dim;
    std::fill_n(f, key_dim, 1.0f);
    for (int32_t t = c; t < end; ++t) {
      if (t > c) {
        const float* e = s.decay + t * key_dim;
#pragma omp simd
        for (int32_t i = 0; i < key_dim; ++i) f[i] = Negligible(f[i] * e[i]);
      }
#pragma omp simd
      for (int32_t i = 0; i < key_dim; ++i) w[i] = k_c[i] * f[i];
      s.scores[t * length + c] = Dot(s.q + t * key_dim, w, key_dim);
      if (rule.delta) s.transform[t * length + c] = Dot(s.k + t * key_dim, w, key_dim);
    }
  }
}

// Whether a row of decays (one per channel) stays at or above kMinSplitFactor in every
// channel, so that a split scaled against it keeps its columns finite.
bool SplitsAt(const float* decay, int32_t key_dim) {
  float weakest = 1.0f;
  for (int32_t i = 0; i < key_dim; ++i) weakest = std::min(weakest, decay[i]);
  return weakest >= kMinSplitFactor;
}

// Whether every sub-chunk of the current `local` keeps its decay above kMinSplitFactor.
bool SplitsEverywhere(int32_t key_dim, int32_t length, int32_t sub, const ChunkScratch& s) {
  for (int32_t first = 0; first < length; first += sub) {
    if (!SplitsAt(s.local + (std::min(first + sub, length) - 1) * key_dim, key_dim)) {
      return false;
    }
  }
  return true;
}

// The longest sub-chunk shorter than the chunk (half of it, a quarter, ... kSubChunk) that
// splits everywhere, else kSubChunk; leaves its decays in `local` and `tail`. (A chunk whose
// whole decay stays above the bound takes ScoresFromChunkEnd.)
int32_t ChooseSubChunk(int32_t key_dim, int32_t length, const ChunkScratch& s) {
  for (int32_t sub = kChunkSize / 2; sub > kSubChunk; sub /= 2) {
    SubChunkDecays(key_dim, length, sub, s);
    if (SplitsEverywhere(key_dim, length, sub, s)) return sub;
  }
  SubChunkDecays(key_dim, length, kSubChunk, s);
  return kSubChunk;
}

// Step 3, a gate per channel whose decay over the whole chunk, a_last = a_t z_t, stays above
// kMinSplitFactor in every channel: P and K K^T ⊙ F from the chunk's end (see the top), the
// rows Qh and Kh that the state's reads take anyway against columns (K ⊙ z) ⊘ a_last.
// Returns false, doing nothing, where the decay is stronger.
template <class Shape>
bool ScoresFromChunkEnd(const HeadRule& rule, int32_t key_dim, int32_t length,
                        const ChunkScratch& s) {
  const float* total = s.from_start + (length - 1) * key_dim;
  if (!SplitsAt(total, key_dim)) return false;
  Transpose(length, key_dim, s.k_end_t, key_dim, s.columns_t, length);
  for (int32_t i = 0; i < key_dim; ++i) {
    const float inverse = 1.0f / total[i];
    float* column = s.columns_t + i * length;
#pragma omp simd
    for (int32_t t = 0; t < length; ++t) column[t] *= inverse;
  }
  TriangleProducts<Shape>(rule, key_dim, length, s.q_hat, s.k_hat, s.columns_t, s);
  return true;
}

// Step 3, any other gate per channel: P and K K^T ⊙ F by sub-chunks of rows (see the top).
template <class Shape>
void ScoresBySubChunk(const HeadRule& rule, int32_t key_dim, int32_t length,
                      const ChunkScratch& s) {
  const int32_t sub = ChooseSubChunk(key_dim, length, s);
  float* between = s.factor;  // F[first, end of an earlier sub-chunk]
  for (int32_t first = 0; first < length; first += sub) {
    const int32_t end = std::min(first + sub, length);
    const bool split = SplitsAt(s.local + (end - 1) * key_dim, key_dim);  // F[last, first]
    // Rows: q_t F[t, first].
    for (int32_t t = first; t < end; ++t) {
      const float* d = s.local + t * key_dim;
      const float* q = s.q + t * key_dim;
      const float* k = s.k + t * key_dim;
      float* row_q = s.rows + (t - first) * key_dim;
      float* row_k = s.rows_k + (t - first) * key_dim;
#pragma omp simd
      for (int32_t i = 0; i < key_dim; ++i) row_q[i] = q[i] * d[i];
      if (rule.delta) {
#pragma omp simd
        for (int32_t i = 0; i < key_dim; ++i) row_k[i] = k[i] * d[i];
      }
    }
    // Columns s < first: k_s F[first, s] = k_s F[end of s's sub-chunk, s] times the decay
    // from there to `first`, built from the nearest sub-chunk back.
    const float* e_first = s.decay + first * key_dim;
    std::copy_n(e_first, key_dim, between);
    for (int32_t before = first - sub; before >= 0; before -= sub) {
      for (int32_t c = before; c < before + sub; ++c) {
        const float* tail = s.tail + c * key_dim;
        const float* k = s.k + c * key_dim;
        float* out = s.columns + c * key_dim;
#pragma omp simd
        for (int32_t i = 0; i < key_dim; ++i) out[i] = k[i] * Negligible(tail[i] * between[i]);
      }
      if (before > 0) {  // on past sub-chunk `before`: its whole decay, e_before F[last, before]
        const float* e = s.decay + before * key_dim;
        const float* whole = s.local + (before + sub - 1) * key_dim;
#pragma omp simd
        for (int32_t i = 0; i < key_dim; ++i) {
          between[i] = Negligible(between[i] * Negligible(e[i] * whole[i]));
        }
      }
    }
    // Columns inside the sub-chunk: k_s / F[s, first].
    int32_t columns = first;
    if (split) {
      for (int32_t c = first; c < end; ++c) {
        const float* d = s.local + c * key_dim;
        const float* k = s.k + c * key_dim;
        float* out = s.columns + c * key_dim;
#pragma omp simd
        for (int32_t i = 0; i < key_dim; ++i) out[i] = k[i] / d[i];
      }
      columns = end;
    }
    if (columns > 0) {
      Transpose(columns, key_dim, s.columns, key_dim, s.columns_t, columns);
      // By blocks of rows: a split sub-chunk's block takes the columns up to its own end
      // only (those past it lie above the diagonal), as ScoresByToken's blocks do.
      for (int32_t row = first; row < end; row += kSubChunk) {
        const int32_t block = std::min(kSubChunk, end - row);
        const int32_t used = split ? row + block : columns;
        const int64_t offset = static_cast<int64_t>(row - first) * key_dim;
        MatMul<Shape>(block, used, key_dim, s.rows + offset, key_dim, s.columns_t, columns,
                      s.scores + row * length, length, Landing::kOverwrite);
        if (rule.delta) {
          MatMul<Shape>(block, used, key_dim, s.rows_k + offset, key_dim, s.columns_t,
                        columns, s.transform + row * length, length, Landing::kOverwrite);
        }
      }
    }
    if (!split) ExactSubChunk(rule, key_dim, length, first, end, s);
    for (int32_t t = first; t < end; ++t) {
      std::fill(s.scores + t * length + t + 1, s.scores + (t + 1) * length, 0.0f);
    }
  }
}

// The rows U the chunk writes into the state: V itself for additive writes, the solved U
// for the delta rule.
struct ChunkValues {
  const float* rows;
  int64_t stride;  // floats between rows
};

// Rows of U the forward substitution solves together: the rows before a block reach it as
// one matrix product; only the block's own triangle runs row by row.
constexpr int32_t kSolveBlock = 16;

// Step 4 (delta rule): solve (I + A) U = diag(beta) (V - Kh S0) by forward substitution,
// A[t, s] = beta_t (K K^T ⊙ F)[t, s] for s < t.
template <class Shape>
void SolveDeltaValues(const HeadRule& rule, const HeadSequence& seq, int32_t start,
                      int32_t length, const float* state, MatrixLayout layout,
                      const ChunkScratch& s) {
  const int32_t key_dim = seq.key_dim;
  const int32_t value_dim = seq.value_dim;
  float* u = s.values;  // [C, V]
  const float* k_hat = rule.gate == GateKind::kNone ? s.k : s.k_hat;
  MatMul<Shape>(length, value_dim, key_dim, k_hat, key_dim, state, value_dim, u, value_dim,
                Landing::kOverwrite, nullptr, nullptr, layout);
  for (int32_t block = 0; block < length; block += kSolveBlock) {
    const int32_t end = std::min(length, block + kSolveBlock);
    for (int32_t t = block; t < end; ++t) {
      const float beta = seq.beta[(start + t) * seq.beta_stride];
      const float* v = seq.v + (start + t) * seq.v_stride;
      float* u_t = u + t * value_dim;
#pragma omp simd
      for (int32_t j = 0; j < value_dim; ++j) u_t[j] = beta * (v[j] - u_t[j]);
      float* minus_a = s.transform + t * length;  // row t of -A
      for (int32_t r = 0; r < t; ++r) minus_a[r] *= -beta;
    }
    // U[block] += -A[block, :block] U[:block]: those rows are final already.
    if (block > 0) {
      MatMul<Shape>(end - block, value_dim, block, s.transform + block * length, length, u,
                    value_dim, u + block * value_dim, value_dim);
    }
    for (int32_t t = block + 1; t < end; ++t) {
      const float* minus_a = s.transform + t * length;
      float* u_t = u + t * value_dim;
      for (int32_t r = block; r < t; ++r) Axpy(value_dim, minus_a[r], u + r * value_dim, u_t);
    }
  }
}

// Step 5: O = Qh S0 + P U, summed in the same register tiles and written once, straight
// into the output rows.
template <class Shape>
void ComputeOutput(const HeadRule& rule, const HeadSequence& seq, int32_t start,
                   int32_t length, const float* state, MatrixLayout layout,
                   const ChunkValues& u, const ChunkScratch& s) {
  const int32_t value_dim = seq.value_dim;
  float* o = seq.o + start * seq.o_stride;
  const float* q_hat = rule.gate == GateKind::kNone ? s.q : s.q_hat;
  const LowerTerm intra_chunk{s.scores, length, u.rows, u.stride};
  static_assert(kChunkSize <= kPanelDepth, "a chunk's P U is one panel");
  MatMul<Shape>(length, value_dim, seq.key_dim, q_hat, seq.key_dim, state, value_dim, o,
                seq.o_stride, Landing::kOverwrite, nullptr, &intra_chunk, layout);
}

// Step 6 (linear attention only, so no decay): o_t /= (q_t . z0 + sum_{s<=t} P[t, s] + eps);
// z0 += sum_s k_s.
void Normalize(const HeadRule& rule, const HeadSequence& seq, int32_t start, int32_t length,
               float* normalizer, const ChunkScratch& s) {
  const int32_t key_dim = seq.key_dim;
  for (int32_t t = 0; t < length; ++t) {
    float den = Dot(s.q + t * key_dim, normalizer, key_dim);
    const float* p = s.scores + t * length;
    for (int32_t r = 0; r <= t; ++r) den += p[r];
    den += rule.normalize_eps;
    float* o = seq.o + (start + t) * seq.o_stride;
#pragma omp simd
    for (int32_t j = 0; j < seq.value_dim; ++j) o[j] /= den;
  }
  for (int32_t t = 0; t < length; ++t) Axpy(key_dim, 1.0f, s.k + t * key_dim, normalizer);
}

// Step 7: S_C = diag(a_{C-1}) S0 + (K ⊙ z)^T U, the decay applied as the product lands: one
// pass over the state.
template <class Shape>
void UpdateState(const HeadRule& rule, const HeadSequence& seq, int32_t length,
                 const ChunkValues& u, float* state, MatrixLayout layout,
                 const ChunkScratch& s) {
  const int32_t key_dim = seq.key_dim;
  const int32_t value_dim = seq.value_dim;
  if (rule.gate == GateKind::kNone) {
    MatMul<Shape>(key_dim, value_dim, length, s.k_t, length, u.rows, u.stride, state,
                  value_dim, Landing::kAdd, nullptr, nullptr, MatrixLayout::kRows, layout);
    return;
  }
  const float* total = s.from_start + (length - 1) * GateWidth(rule.gate, key_dim);
  if (rule.gate == GateKind::kScalar) {
    std::fill_n(s.factor, key_dim, total[0]);
    MatMul<Shape>(key_dim, value_dim, length, s.k_end_t, length, u.rows, u.stride, state,
                  value_dim, Landing::kScaleAdd, s.factor, nullptr, MatrixLayout::kRows,
                  layout);
    return;
  }
  MatMul<Shape, ALayout::kColumns>(key_dim, value_dim, length, s.k_end_t, key_dim, u.rows,
                                   u.stride, state, value_dim, Landing::kScaleAdd, total,
                                   nullptr, MatrixLayout::kRows, layout);
}

// Chunks that must follow a chunk for the state to move to the chunk layout after it. Each
// move is a copy and a pass back in place; the two cost about what packing the state costs
// over four chunks. Measured on one thread, the layout made T = 4096 prefills 1-11% faster;
// a move with one chunk to follow made T = 64 8% slower, with four it is level (docs/history/
// cpu_rounds.md).
constexpr int64_t kChunksToMoveState = 4;

// Moves the state [K, V] in place between row-major and the chunk layout (ChunkState).
template <class Shape>
void MoveState(bool to_panels, int32_t key_dim, int32_t value_dim, ChunkState* state,
               const ChunkScratch& s) {
  std::copy_n(state->matrix, int64_t{key_dim} * value_dim, s.state_copy);
  if (to_panels) {
    ToPanels<Shape>(key_dim, value_dim, s.state_copy, value_dim, state->matrix);
  } else {
    FromPanels<Shape>(key_dim, value_dim, s.state_copy, state->matrix, value_dim);
  }
  state->in_panels = to_panels;
}

template <class Shape>
void RunChunks(const HeadRule& rule, const HeadSequence& seq, int64_t tokens_after,
               ChunkState* state, float* normalizer, ChunkWorkspace* workspace) {
  const int32_t key_dim = seq.key_dim, value_dim = seq.value_dim;
  ChunkScratch scratch = CarveScratch(key_dim, value_dim, workspace);
  for (int32_t start = 0; start < seq.num_tokens; start += kChunkSize) {
    const int32_t length = std::min(kChunkSize, seq.num_tokens - start);
    LoadChunk(rule, seq, start, length, &scratch);
    ScaleChunk(rule, seq, start, length, scratch);
    if (rule.gate == GateKind::kPerChannel) {
      if (!ScoresFromChunkEnd<Shape>(rule, seq.key_dim, length, scratch)) {
        ScoresBySubChunk<Shape>(rule, seq.key_dim, length, scratch);
      }
    } else {
      ScoresByToken<Shape>(rule, seq.key_dim, length, scratch);
    }
    float* matrix = state->matrix;
    const MatrixLayout layout = state->in_panels ? MatrixLayout::kPanels : MatrixLayout::kRows;
    ChunkValues u{seq.v + start * seq.v_stride, seq.v_stride};
    if (rule.delta) {
      SolveDeltaValues<Shape>(rule, seq, start, length, matrix, layout, scratch);
      u = {scratch.values, value_dim};
    }
    ComputeOutput<Shape>(rule, seq, start, length, matrix, layout, u, scratch);
    if (rule.normalize) Normalize(rule, seq, start, length, normalizer, scratch);
    UpdateState<Shape>(rule, seq, length, u, matrix, layout, scratch);
    // Moved while the chunk's update has it in cache, where enough chunks follow to repay
    // the two moves.
    const int64_t tokens_left = seq.num_tokens - start - length + tokens_after;
    if (!state->in_panels && tokens_left >= kChunksToMoveState * kChunkSize) {
      MoveState<Shape>(true, key_dim, value_dim, state, scratch);
    }
    ++workspace->chunks_run;
  }
  if (tokens_after == 0 && state->in_panels) {
    MoveState<Shape>(false, key_dim, value_dim, state, scratch);
  }
}

// The register tiles of the level this file is compiled at (kernel_targets.h), and the
// panels they read.
#if defined(__AVX512F__)
using Shape = Avx512Shape;
#elif defined(__AVX2__)
using Shape = Avx2Shape;
#else
using Shape = Vector128Shape;
#endif

}  // namespace

inline namespace LUMEN_KERNEL_NAMESPACE {

LUMEN_KERNEL_ENTRY
void RunChunkwiseAtLevel(const HeadRule& rule, const HeadSequence& seq, int64_t tokens_after,
                         ChunkState* state, float* normalizer, ChunkWorkspace* workspace) {
  RunChunks<Shape>(rule, seq, tokens_after, state, normalizer, workspace);
}

}  // namespace LUMEN_KERNEL_NAMESPACE
}  // namespace lumen::cpu
