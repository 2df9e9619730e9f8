// The recurrent form: one token at a time, straight from docs/spec.md §2.
//
// A step is bound by the state's bytes, so every rule makes one read-modify-write pass over
// S, its sums in registers. The additive rules take whole rows in order, like a plain
// read-modify-write pass. The delta rule needs S'^T k over a whole column before it knows
// its write u, so written straight away it would pass twice over S (a read for S'^T k, then
// the write). Instead each head's last write k u^T is held out of the stored matrix
// (HeldWrite): the next token adds it to each row as it reads the row, decays the row and
// stores it (S'), summing S'^T k and S'^T q on the way, and leaves its own u held. The
// caller keeps the held write beside the state and applies it (ApplyHeldWrite) before
// anything else reads the matrix; both add it with the same arithmetic (AddHeld), so the
// state's bits do not depend on when that happens. The next tile of columns is prefetched
// into L2 while one is walked. Outputs are stored once per tile: the caller's o may share a
// cache line with another head's, which another thread writes.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/head_kernels.h"
#include "backends/cpu/kernel_table.h"
#include "backends/cpu/prefetch.h"
#include "backends/cpu/vector_math.h"

namespace lumen::cpu {
namespace {

template <int32_t kWidth>
struct FloatVectorOf;
template <>
struct FloatVectorOf<1> {
  using Type = float;
};
template <>
struct FloatVectorOf<4> {
  typedef float Type __attribute__((vector_size(16)));
};
template <>
struct FloatVectorOf<8> {
  typedef float Type __attribute__((vector_size(32)));
};
template <>
struct FloatVectorOf<16> {
  typedef float Type __attribute__((vector_size(64)));
};

// A column tile at one SIMD level: kVectors vectors of kWidth floats per row.
template <int32_t kWidthArg, int32_t kVectorsArg>
struct TileShape {
  static constexpr int32_t kWidth = kWidthArg;
  static constexpr int32_t kVectors = kVectorsArg;
  static constexpr int32_t kColumns = kWidth * kVectors;
};

// The tiles of one level: up to whole rows of 128 columns where the registers hold a tile's
// sums (the additive rule's output sums and a row of v; the delta rule's two sums and the
// held u), narrower tiles where they do not. The wider the tile, the fewer strided walks
// over a head: on a Zen 5 core, AVX-512's delta tile of 64 columns (half rows) made steps
// 15-33% slower than whole rows, AVX2's of 16 columns 1-14% slower than 32 (whose 12 sums
// leave too few of the 16 registers for 64), and SSE2's of 8 columns 2-28% slower than 16.
// NEON shares SSE2's tiles (its 32 registers hold them with room to spare; not measured on
// an Arm core).
template <class AdditiveArg, class DeltaArg>
struct LevelTiles {
  using Additive = AdditiveArg;
  using Delta = DeltaArg;
};
using Avx512Tiles = LevelTiles<TileShape<16, 8>, TileShape<16, 8>>;  // 32 registers of 16
using Avx2Tiles = LevelTiles<TileShape<8, 4>, TileShape<8, 4>>;      // 16 of 8
// SSE2: 16 registers of 4 floats; NEON: 32.
using Vector128Tiles = LevelTiles<TileShape<4, 4>, TileShape<4, 4>>;

// Rows whose per-token factors are kept on the stack at once. Heads with more rows (rare:
// models use K <= 256) recompute a block's factors for each tile and pass.
constexpr int32_t kFactorRows = 512;

// Per-row decays a_i of one token for a block of rows.
struct RowFactors {
  float decay[kFactorRows];
};

// One token of one head, as the tile kernels read it.
struct Token {
  const float* q;  // [K]
  const float* k;  // [K]
  const float* v;  // [V]
  const float* g;  // 1 or K log-decays, or nullptr
  float beta;      // delta rule
  float* o;        // [V]
};

// The factors of rows [first, first + count). Inlined by hand: GCC would otherwise split
// its loop into a function of its own, built for the baseline level, whatever the caller's.
[[gnu::always_inline]] inline void ComputeFactors(GateKind gate, const Token& token,
                                                  int32_t first, int32_t count,
                                                  RowFactors* factors) {
  if (gate == GateKind::kPerChannel) {
    const float* g = token.g + first;
#pragma omp simd
    for (int32_t i = 0; i < count; ++i) factors->decay[i] = VectorExp(g[i]);
  } else {
    const float a = gate == GateKind::kScalar ? std::exp(token.g[0]) : 1.0f;
    std::fill(factors->decay, factors->decay + count, a);
  }
}

// Vectors move through memcpy (any alignment) and pointers: a vector returned by value
// from a function built for another level would change the ABI.
template <typename Vec>
[[gnu::always_inline]] inline void Load(const float* p, Vec* x) {
  std::memcpy(x, p, sizeof(Vec));
}

template <typename Vec>
[[gnu::always_inline]] inline void Store(float* p, Vec x) {
  std::memcpy(p, &x, sizeof(Vec));
}

// Runs kernel(column, width, vectors, prefetch_bytes) over one token's tiles: whole tiles
// of the shape, then single vectors, then single columns; width and vectors are
// std::integral_constant, prefetch_bytes what of each row of the next tile to prefetch.
template <class Shape, class TileKernel>
[[gnu::always_inline]] inline void ForEachTile(int32_t value_dim, TileKernel kernel) {
  constexpr int32_t kWidth = Shape::kWidth;
  constexpr int32_t kColumns = Shape::kColumns;
  int32_t column = 0;
  for (; column + kColumns <= value_dim; column += kColumns) {
    const int32_t next = std::min(kColumns, value_dim - column - kColumns);
    kernel(column, std::integral_constant<int32_t, kWidth>{},
           std::integral_constant<int32_t, Shape::kVectors>{}, next * 4);
  }
  for (; column + kWidth <= value_dim; column += kWidth) {
    kernel(column, std::integral_constant<int32_t, kWidth>{},
           std::integral_constant<int32_t, 1>{}, 0);
  }
  for (; column < value_dim; ++column) {
    kernel(column, std::integral_constant<int32_t, 1>{}, std::integral_constant<int32_t, 1>{},
           0);
  }
}

// Walks the rows in blocks of kFactorRows, computing each block's factors first unless the
// whole head's are already there (factors_ready: K <= kFactorRows).
struct FactorBlocks {
  GateKind gate;
  const Token* token;
  int32_t key_dim;
  bool factors_ready;
  RowFactors* factors;

  template <typename Body>
  [[gnu::always_inline]] void ForEach(Body body) const {
    for (int32_t first = 0; first < key_dim; first += kFactorRows) {
      const int32_t count = std::min(kFactorRows, key_dim - first);
      if (!factors_ready) ComputeFactors(gate, *token, first, count, factors);
      body(first, count);
    }
  }
};

// S[i, :] = a_i S[i, :] + k_i v; o = S^T q: one read-modify-write pass over each tile.
// kDecays false: every a_i is 1 (no gate), and the multiply is skipped.
template <int32_t kWidth, int32_t kVectors, bool kDecays>
[[gnu::always_inline]] inline void AdditiveTile(const FactorBlocks& blocks,
                                                int32_t value_dim, int32_t column,
                                                int32_t prefetch_bytes, float* state) {
  using Vec = typename FloatVectorOf<kWidth>::Type;
  const Token& token = *blocks.token;
  const RowFactors& f = *blocks.factors;
  Vec v[kVectors], out[kVectors];
#pragma GCC unroll 8
  for (int32_t c = 0; c < kVectors; ++c) {
    Load(token.v + column + c * kWidth, &v[c]);
    out[c] = Vec{};
  }
  blocks.ForEach([&](int32_t first, int32_t count) {
    float* rows = state + static_cast<int64_t>(first) * value_dim + column;
    const float* k = token.k + first;
    const float* q = token.q + first;
    for (int32_t i = 0; i < count; ++i) {
      float* row = rows + static_cast<int64_t>(i) * value_dim;
      if (prefetch_bytes > 0) PrefetchBytes<2>(row + kWidth * kVectors, prefetch_bytes);
      const float a = f.decay[i];
#pragma GCC unroll 8
      for (int32_t c = 0; c < kVectors; ++c) {
        Vec s;
        Load(row + c * kWidth, &s);
        s = (kDecays ? a * s : s) + k[i] * v[c];
        Store(row + c * kWidth, s);
        out[c] += q[i] * s;
      }
    }
  });
#pragma GCC unroll 8
  for (int32_t c = 0; c < kVectors; ++c) Store(token.o + column + c * kWidth, out[c]);
}

// Adds the held write to a row of S: s + k_i u. The one place that adds it, so that the step
// and ApplyHeldWrite round it alike: GCC contracts the vector form to one FMA where the level
// has one, but not every scalar one, so the single columns name the FMA.
template <typename Vec>
[[gnu::always_inline]] inline void AddHeld(float k_i, const Vec& u, Vec* s) {
  *s += k_i * u;
}
[[gnu::always_inline]] inline void AddHeld(float k_i, const float& u, float* s) {
  *s = std::fma(k_i, u, *s);
}

// S' = Decay (S + k_h u_h^T), the held write added first; u = beta (v - S'^T k);
// o = S^T q = S'^T q + (q . k) u with S = S' + k u^T. One pass over the tile stores S' and
// sums S'^T k and S'^T q; this token's u replaces the held one in `held_u` (its k is saved
// by the caller after the last tile). kDecays false: no gate; kHeld false: nothing held.
template <int32_t kWidth, int32_t kVectors, bool kDecays, bool kHeld>
[[gnu::always_inline]] inline void DeltaTile(const FactorBlocks& blocks, int32_t value_dim,
                                             int32_t column, int32_t prefetch_bytes,
                                             float qk, const float* held_k, float* held_u,
                                             float* state) {
  using Vec = typename FloatVectorOf<kWidth>::Type;
  const Token& token = *blocks.token;
  const RowFactors& f = *blocks.factors;
  Vec held[kVectors], key_sum[kVectors], query_sum[kVectors];
#pragma GCC unroll 8
  for (int32_t c = 0; c < kVectors; ++c) {
    key_sum[c] = query_sum[c] = Vec{};
    if (kHeld) Load(held_u + column + c * kWidth, &held[c]);
  }
  blocks.ForEach([&](int32_t first, int32_t count) {
    float* rows = state + static_cast<int64_t>(first) * value_dim + column;
    const float* k = token.k + first;
    const float* q = token.q + first;
    const float* k_held = held_k + first;
    for (int32_t i = 0; i < count; ++i) {
      float* row = rows + static_cast<int64_t>(i) * value_dim;
      if (prefetch_bytes > 0) PrefetchBytes<2>(row + kWidth * kVectors, prefetch_bytes);
      const float a = f.decay[i];
#pragma GCC unroll 8
      for (int32_t c = 0; c < kVectors; ++c) {
        Vec s;
        Load(row + c * kWidth, &s);
        if (kHeld) AddHeld(k_held[i], held[c], &s);
        if (kDecays) s = a * s;
        Store(row + c * kWidth, s);
        key_sum[c] += k[i] * s;
        query_sum[c] += q[i] * s;
      }
    }
  });
#pragma GCC unroll 8
  for (int32_t c = 0; c < kVectors; ++c) {
    Vec v;
    Load(token.v + column + c * kWidth, &v);
    const Vec u = token.beta * (v - key_sum[c]);
    Store(token.o + column + c * kWidth, query_sum[c] + qk * u);
    Store(held_u + column + c * kWidth, u);
  }
}

// S += k u^T over one tile, with the step's arithmetic (AddHeld).
template <int32_t kWidth, int32_t kVectors>
[[gnu::always_inline]] inline void ApplyTile(int32_t key_dim, int32_t value_dim, int32_t column,
                                             const float* held_k, const float* held_u,
                                             float* state) {
  using Vec = typename FloatVectorOf<kWidth>::Type;
  Vec held[kVectors];
#pragma GCC unroll 8
  for (int32_t c = 0; c < kVectors; ++c) Load(held_u + column + c * kWidth, &held[c]);
  for (int32_t i = 0; i < key_dim; ++i) {
    float* row = state + static_cast<int64_t>(i) * value_dim + column;
#pragma GCC unroll 8
    for (int32_t c = 0; c < kVectors; ++c) {
      Vec s;
      Load(row + c * kWidth, &s);
      AddHeld(held_k[i], held[c], &s);
      Store(row + c * kWidth, s);
    }
  }
}

// z += k; o /= (q . z + eps).
void NormalizeToken(int32_t key_dim, int32_t value_dim, const float* q, const float* k,
                    float eps, float* normalizer, float* o) {
  float den = 0.0f;
#pragma omp simd reduction(+ : den)
  for (int32_t i = 0; i < key_dim; ++i) {
    normalizer[i] += k[i];
    den += q[i] * normalizer[i];
  }
  den += eps;
#pragma omp simd
  for (int32_t j = 0; j < value_dim; ++j) o[j] /= den;
}

template <class Tiles>
[[gnu::always_inline]] inline void RunTokens(const HeadRule& rule, const HeadSequence& seq,
                                             float* state, float* normalizer,
                                             HeldWrite* write) {
  const int32_t key_dim = seq.key_dim;
  const int32_t value_dim = seq.value_dim;
  RowFactors factors;
  FactorBlocks blocks{rule.gate, nullptr, key_dim, key_dim <= kFactorRows, &factors};
  for (int32_t t = 0; t < seq.num_tokens; ++t) {
    Token token;
    token.q = seq.q + t * seq.q_stride;
    token.k = seq.k + t * seq.k_stride;
    token.v = seq.v + t * seq.v_stride;
    token.g = rule.gate == GateKind::kNone ? nullptr : seq.g + t * seq.g_stride;
    token.beta = rule.delta ? seq.beta[t * seq.beta_stride] : 0.0f;
    token.o = seq.o + t * seq.o_stride;
    blocks.token = &token;
    if (blocks.factors_ready) {
      ComputeFactors(rule.gate, token, 0, key_dim, &factors);
    }
    const bool decays = rule.gate != GateKind::kNone;
    if (rule.delta) {
      float qk = 0.0f;
#pragma omp simd reduction(+ : qk)
      for (int32_t i = 0; i < key_dim; ++i) qk += token.q[i] * token.k[i];
      const bool held = write->held;
      ForEachTile<typename Tiles::Delta>(value_dim, [&](int32_t column, auto width,
                                                        auto vectors, int32_t prefetch_bytes) {
        constexpr int32_t kWidth = decltype(width)::value;
        constexpr int32_t kVectors = decltype(vectors)::value;
        auto tile = [&](auto decays_now, auto held_now) {
          DeltaTile<kWidth, kVectors, decltype(decays_now)::value, decltype(held_now)::value>(
              blocks, value_dim, column, prefetch_bytes, qk, write->k, write->u, state);
        };
        if (decays) {
          held ? tile(std::true_type{}, std::true_type{})
               : tile(std::true_type{}, std::false_type{});
        } else {
          held ? tile(std::false_type{}, std::true_type{})
               : tile(std::false_type{}, std::false_type{});
        }
      });
      std::copy_n(token.k, key_dim, write->k);
      write->held = true;
    } else {
      ForEachTile<typename Tiles::Additive>(value_dim, [&](int32_t column, auto width,
                                                           auto vectors, int32_t prefetch_bytes) {
        constexpr int32_t kWidth = decltype(width)::value;
        constexpr int32_t kVectors = decltype(vectors)::value;
        if (decays) {
          AdditiveTile<kWidth, kVectors, true>(blocks, value_dim, column, prefetch_bytes, state);
        } else {
          AdditiveTile<kWidth, kVectors, false>(blocks, value_dim, column, prefetch_bytes,
                                                state);
        }
      });
    }
    if (rule.normalize) {
      NormalizeToken(key_dim, value_dim, token.q, token.k, rule.normalize_eps, normalizer,
                     token.o);
    }
  }
}

template <class Tiles>
[[gnu::always_inline]] inline void ApplyTiles(int32_t key_dim, int32_t value_dim,
                                              const HeldWrite& write, float* state) {
  ForEachTile<typename Tiles::Delta>(
      value_dim, [&](int32_t column, auto width, auto vectors, int32_t /*prefetch_bytes*/) {
        ApplyTile<decltype(width)::value, decltype(vectors)::value>(key_dim, value_dim, column,
                                                                    write.k, write.u, state);
      });
}

// The tiles of the level this file is compiled at (kernel_targets.h).
#if defined(__AVX512F__)
using Tiles = Avx512Tiles;
#elif defined(__AVX2__)
using Tiles = Avx2Tiles;
#else
using Tiles = Vector128Tiles;
#endif

}  // namespace

inline namespace LUMEN_KERNEL_NAMESPACE {

LUMEN_KERNEL_ENTRY
void RunRecurrentAtLevel(const HeadRule& rule, const HeadSequence& seq, float* state,
                         float* normalizer, HeldWrite* write) {
  RunTokens<Tiles>(rule, seq, state, normalizer, write);
}

LUMEN_KERNEL_ENTRY
void ApplyHeldWriteAtLevel(int32_t key_dim, int32_t value_dim, const HeldWrite& write,
                           float* state) {
  ApplyTiles<Tiles>(key_dim, value_dim, write, state);
}

}  // namespace LUMEN_KERNEL_NAMESPACE
}  // namespace lumen::cpu
