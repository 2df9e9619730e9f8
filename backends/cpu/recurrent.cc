// The recurrent form: one token at a time, straight from SPEC §2.

#include <algorithm>
#include <cmath>

#include "backends/cpu/head_kernels.h"
#include "backends/cpu/kernel_targets.h"

namespace lumen::cpu {
namespace {

// Columns of the state the delta rule handles together. Columns of S evolve independently
// (u_j reads only column j), so a tile's u fits on the stack and the tile stays in cache
// between the two passes.
constexpr int32_t kColumnTile = 256;

// Decay of row i before the token's write; `scalar_decay` is exp(g) for a scalar gate.
inline float RowDecay(GateKind gate, const float* g, float scalar_decay, int32_t i) {
  return gate == GateKind::kVector ? std::exp(g[i]) : scalar_decay;
}

// S[i, :] = a_i S[i, :] + k_i v; o = S^T q, in one pass over S.
void AdditiveToken(GateKind gate, int32_t key_dim, int32_t value_dim, const float* q,
                   const float* k, const float* v, const float* g, float* state, float* o) {
  const float scalar_decay = gate == GateKind::kScalar ? std::exp(g[0]) : 1.0f;
  std::fill(o, o + value_dim, 0.0f);
  for (int32_t i = 0; i < key_dim; ++i) {
    const float a = RowDecay(gate, g, scalar_decay, i);
    const float k_i = k[i];
    const float q_i = q[i];
    float* row = state + static_cast<int64_t>(i) * value_dim;  // [V]
#pragma omp simd
    for (int32_t j = 0; j < value_dim; ++j) {
      const float s = a * row[j] + k_i * v[j];
      row[j] = s;
      o[j] += q_i * s;
    }
  }
}

// S' = Decay S; u = beta (v - S'^T k); S = S' + k u^T; o = S^T q. Pass 1 decays and reads
// S'^T k, pass 2 writes and reads the output, column tile by column tile.
void DeltaToken(GateKind gate, int32_t key_dim, int32_t value_dim, const float* q,
                const float* k, const float* v, const float* g, float beta, float* state,
                float* o) {
  const float scalar_decay = gate == GateKind::kScalar ? std::exp(g[0]) : 1.0f;
  float u[kColumnTile];
  for (int32_t j0 = 0; j0 < value_dim; j0 += kColumnTile) {
    const int32_t width = std::min(kColumnTile, value_dim - j0);
    std::fill(u, u + width, 0.0f);
    for (int32_t i = 0; i < key_dim; ++i) {
      const float a = RowDecay(gate, g, scalar_decay, i);
      const float k_i = k[i];
      float* row = state + static_cast<int64_t>(i) * value_dim + j0;
#pragma omp simd
      for (int32_t j = 0; j < width; ++j) {
        const float s = a * row[j];
        row[j] = s;
        u[j] += k_i * s;
      }
    }
    float* o_tile = o + j0;
    const float* v_tile = v + j0;
#pragma omp simd
    for (int32_t j = 0; j < width; ++j) {
      u[j] = beta * (v_tile[j] - u[j]);
      o_tile[j] = 0.0f;
    }
    for (int32_t i = 0; i < key_dim; ++i) {
      const float k_i = k[i];
      const float q_i = q[i];
      float* row = state + static_cast<int64_t>(i) * value_dim + j0;
#pragma omp simd
      for (int32_t j = 0; j < width; ++j) {
        const float s = row[j] + k_i * u[j];
        row[j] = s;
        o_tile[j] += q_i * s;
      }
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
    if (rule.delta) {
      DeltaToken(rule.gate, key_dim, value_dim, q, k, v, g, seq.beta[t * seq.beta_stride],
                 state, o);
    } else {
      AdditiveToken(rule.gate, key_dim, value_dim, q, k, v, g, state, o);
    }
    if (rule.normalize) {
      NormalizeToken(key_dim, value_dim, q, k, rule.normalize_eps, normalizer, o);
    }
  }
}

}  // namespace lumen::cpu
