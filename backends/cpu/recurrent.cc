// The recurrent form: one token at a time, straight from SPEC §2.
//
// A step is bound by the state's bytes, so each token makes as few passes over S as its rule
// allows: the additive rules one read-modify-write pass, the delta rule a read pass and a
// read-modify-write pass over each column tile while the tile is still in cache. The output is
// summed on the stack and stored once per tile: the caller's o may share a cache line with
// another head's, which another thread writes.

#include <algorithm>
#include <cmath>

#include "backends/cpu/head_kernels.h"
#include "backends/cpu/kernel_targets.h"
#include "backends/cpu/vector_math.h"

namespace lumen::cpu {
namespace {

// Columns of the state handled together. Columns of S evolve independently (u_j reads only
// column j), so a tile's sums fit on the stack (in registers for V = 128). Whole rows of 128
// columns are read in order, which the hardware prefetcher streams from memory (tiles of 32
// columns, which would keep the delta rule's tile in L1, measured slower out of cache), and
// a K x 128 tile (64 KiB at K = 128) is still in L2 for the delta rule's second pass.
constexpr int32_t kColumnTile = 128;

// Row decays of a token are computed once into the stack when K is at most this; larger
// heads recompute exp(g_i) where they need it.
constexpr int32_t kMaxStackKeyDim = 512;

// The per-row decays a_i = exp(g_i) of one token, or a single scalar one.
class RowDecays {
 public:
  RowDecays(GateKind gate, int32_t key_dim, const float* g) : gate_(gate), g_(g) {
    scalar_ = gate == GateKind::kScalar ? std::exp(g[0]) : 1.0f;
    stored_ = gate == GateKind::kVector && key_dim <= kMaxStackKeyDim;
    if (stored_) {
#pragma omp simd
      for (int32_t i = 0; i < key_dim; ++i) values_[i] = VectorExp(g[i]);
    }
  }
  float operator()(int32_t i) const {
    if (gate_ != GateKind::kVector) return scalar_;
    return stored_ ? values_[i] : std::exp(g_[i]);
  }

 private:
  GateKind gate_;
  const float* g_;
  float scalar_;
  bool stored_;
  float values_[kMaxStackKeyDim];
};

// S[i, :] = a_i S[i, :] + k_i v; o = S^T q: one pass over S, tile by tile.
void AdditiveToken(const RowDecays& decay, int32_t key_dim, int32_t value_dim,
                   const float* q, const float* k, const float* v, float* state, float* o) {
  for (int32_t j0 = 0; j0 < value_dim; j0 += kColumnTile) {
    const int32_t width = std::min(kColumnTile, value_dim - j0);
    const float* v_tile = v + j0;
    float out[kColumnTile] = {};
    for (int32_t i = 0; i < key_dim; ++i) {
      const float a = decay(i);
      const float k_i = k[i];
      const float q_i = q[i];
      float* row = state + static_cast<int64_t>(i) * value_dim + j0;
#pragma omp simd
      for (int32_t j = 0; j < width; ++j) {
        const float s = a * row[j] + k_i * v_tile[j];
        row[j] = s;
        out[j] += q_i * s;
      }
    }
    std::copy(out, out + width, o + j0);
  }
}

// S' = Decay S; u = beta (v - S'^T k); S = S' + k u^T; o = S^T q = S'^T q + (q . k) u.
// Per column tile: pass 1 reads S for S'^T k and S'^T q (the decay folded into k and q),
// pass 2 decays and writes the tile, which pass 1 left in cache.
void DeltaToken(const RowDecays& decay, int32_t key_dim, int32_t value_dim, const float* q,
                const float* k, const float* v, float beta, float* state, float* o) {
  float qk = 0.0f;
#pragma omp simd reduction(+ : qk)
  for (int32_t i = 0; i < key_dim; ++i) qk += q[i] * k[i];
  for (int32_t j0 = 0; j0 < value_dim; j0 += kColumnTile) {
    const int32_t width = std::min(kColumnTile, value_dim - j0);
    float u[kColumnTile] = {};
    float p[kColumnTile] = {};
    for (int32_t i = 0; i < key_dim; ++i) {
      const float a = decay(i);
      const float ak = a * k[i];
      const float aq = a * q[i];
      const float* row = state + static_cast<int64_t>(i) * value_dim + j0;
#pragma omp simd
      for (int32_t j = 0; j < width; ++j) {
        u[j] += ak * row[j];
        p[j] += aq * row[j];
      }
    }
    const float* v_tile = v + j0;
#pragma omp simd
    for (int32_t j = 0; j < width; ++j) u[j] = beta * (v_tile[j] - u[j]);
    for (int32_t i = 0; i < key_dim; ++i) {
      const float a = decay(i);
      const float k_i = k[i];
      float* row = state + static_cast<int64_t>(i) * value_dim + j0;
#pragma omp simd
      for (int32_t j = 0; j < width; ++j) row[j] = a * row[j] + k_i * u[j];
    }
    float* o_tile = o + j0;
#pragma omp simd
    for (int32_t j = 0; j < width; ++j) o_tile[j] = p[j] + qk * u[j];
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

}  // namespace

LUMEN_CPU_KERNEL
void RunRecurrent(const HeadRule& rule, const HeadSequence& seq, float* state,
                  float* normalizer) {
  const int32_t key_dim = seq.key_dim;
  const int32_t value_dim = seq.value_dim;
  for (int32_t t = 0; t < seq.num_tokens; ++t) {
    const float* q = seq.q + t * seq.q_stride;  // [K]
    const float* k = seq.k + t * seq.k_stride;  // [K]
    const float* v = seq.v + t * seq.v_stride;  // [V]
    const float* g = rule.gate == GateKind::kNone ? nullptr : seq.g + t * seq.g_stride;
    float* o = seq.o + t * seq.o_stride;  // [V]
    const RowDecays decay(rule.gate, key_dim, g);
    if (rule.delta) {
      DeltaToken(decay, key_dim, value_dim, q, k, v, seq.beta[t * seq.beta_stride], state, o);
    } else {
      AdditiveToken(decay, key_dim, value_dim, q, k, v, state, o);
    }
    if (rule.normalize) {
      NormalizeToken(key_dim, value_dim, q, k, rule.normalize_eps, normalizer, o);
    }
  }
}

}  // namespace lumen::cpu
