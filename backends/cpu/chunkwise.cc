// The chunkwise form: per chunk of C tokens, a C x C masked product for the tokens' effect
// on each other and K x V products for the state they start from, as fla's chunk kernels do.
// The delta rule solves its chunk in the UT (WY) form: (I + A) U = diag(beta) (V - Kh S0).
//
// Notation inside a chunk (tokens t = 1..C, starting state S0, normalizer z0):
//   b_t  = g_1 + ... + g_t      cumulative log-decay per key channel (<= 0)
//   b'_t = b_t - b_1            the same without the first token's own decay
//   Q~ = Q ⊙ exp(b'), K- = K ⊙ exp(-b'), so (Q~ K-^T)[t, s] = sum_i q_t k_s exp(b_t - b_s)
//   Qh = Q ⊙ exp(b), Kh = K ⊙ exp(b): reads of S0 decayed up to token t

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/cpu/head_kernels.h"
#include "backends/cpu/kernel_targets.h"
#include "backends/cpu/small_matmul.h"
#include "backends/cpu/vector_math.h"

namespace lumen::cpu {
namespace {

// A chunk ends before the token whose b' falls below -kMaxChunkLogDecay in any channel.
// The split Q~ K-^T factors exp(b_t - b_s) into exp(b'_t) * exp(-b'_s); with |b'| <= 60,
// exp(-b') <= 1.2e26 stays far from fp32 overflow (3.4e38) and exp(b') >= 8.8e-27 far from
// denormals (1.2e-38), so every product q exp(b') * k exp(-b') keeps fp32 relative precision
// for inputs of any sane magnitude, and entries above the diagonal (at most q k exp(60)) stay
// finite too. Strong decays only shorten chunks; the recurrence is the same for any split.
// b' (not b) is bounded so one token with a huge decay, such as -100, cannot push everything
// after it out of range: its own factor exp(g_1) multiplies S0 only. The bound is wide so
// that per-channel gates with strong heads (kda's -exp(A_log) dt reaches -1.6 per token)
// still get chunks of 40 tokens or more.
constexpr float kMaxChunkLogDecay = 60.0f;

// Views into ChunkWorkspace::buffer; C = kChunkSize rows are reserved, the first
// `length` used. Matrices indexed by token use the chunk's length as leading dimension.
struct ChunkScratch {
  float* log_decay;    // [C, G] b'_t; G = K for a vector gate, 1 for a scalar gate
  float* first_decay;  // [K] exp(g_1), the first token's decay, kept out of b'
  float* factor;       // [K] one row of decay factors
  float* q_tilde;      // [C, K] Q ⊙ exp(b')
  float* k_minus_t;    // [K, C] (K ⊙ exp(-b'))^T, so P and A are matrix products
  float* q_hat;        // [C, K] Q ⊙ exp(b)
  float* k_plus;       // [C, K] K ⊙ exp(b'), delta rule
  float* k_hat;        // [C, K] K ⊙ exp(b), delta rule
  float* k_end_t;      // [K, C] (K ⊙ exp(b_C - b))^T: each write decayed to the chunk end
  float* scores;       // [C, C] P = tril(Q~ K-^T), diagonal included
  float* transform;    // [C, C] K+ K-^T, then row by row -A, A = strict_tril(diag(beta)
                       // K+ K-^T), delta rule
  float* values;       // [C, V] U for the delta rule (additive writes read V in place)
};

int32_t GateWidth(GateKind gate, int32_t key_dim) {
  switch (gate) {
    case GateKind::kNone: return 0;
    case GateKind::kScalar: return 1;
    case GateKind::kVector: return key_dim;
  }
  return 0;
}

ChunkScratch CarveScratch(int32_t key_dim, int32_t value_dim, ChunkWorkspace* workspace) {
  const int64_t c = kChunkSize;
  const int64_t k = key_dim;
  const int64_t needed = c * k + 2 * k + 6 * c * k + 2 * c * c + c * value_dim;
  if (static_cast<int64_t>(workspace->buffer.size()) < needed) {
    workspace->buffer.resize(needed);
  }
  float* p = workspace->buffer.data();
  auto take = [&p](int64_t count) {
    float* view = p;
    p += count;
    return view;
  };
  ChunkScratch s;
  s.log_decay = take(c * k);
  s.first_decay = take(k);
  s.factor = take(k);
  s.q_tilde = take(c * k);
  s.k_minus_t = take(c * k);
  s.q_hat = take(c * k);
  s.k_plus = take(c * k);
  s.k_hat = take(c * k);
  s.k_end_t = take(c * k);
  s.scores = take(c * c);
  s.transform = take(c * c);
  s.values = take(c * value_dim);
  return s;
}

// out[i] = exp(to[i] - from[i]) over the gate's channels, broadcast to K; from may be null
// (read as 0). No gate: all ones.
void DecayFactors(GateKind gate, int32_t key_dim, const float* from, const float* to,
                  float* out) {
  switch (gate) {
    case GateKind::kNone:
      std::fill(out, out + key_dim, 1.0f);
      break;
    case GateKind::kScalar:
      std::fill(out, out + key_dim, std::exp(to[0] - (from ? from[0] : 0.0f)));
      break;
    case GateKind::kVector:
      if (from == nullptr) {
#pragma omp simd
        for (int32_t i = 0; i < key_dim; ++i) out[i] = VectorExp(to[i]);
      } else {
#pragma omp simd
        for (int32_t i = 0; i < key_dim; ++i) out[i] = VectorExp(to[i] - from[i]);
      }
      break;
  }
}

// Step 1: the chunk's length and b'. Stops before the first token whose b' would leave
// [-kMaxChunkLogDecay, 0] in some channel; the first token always belongs to the chunk.
int32_t MeasureChunk(GateKind gate, const HeadSequence& seq, int32_t start,
                     const ChunkScratch& s) {
  const int32_t max_length = std::min(kChunkSize, seq.num_tokens - start);
  const int32_t width = GateWidth(gate, seq.key_dim);
  if (width == 0) {
    DecayFactors(gate, seq.key_dim, nullptr, nullptr, s.first_decay);
    return max_length;
  }
  const float* g = seq.g + start * seq.g_stride;
  DecayFactors(gate, seq.key_dim, nullptr, g, s.first_decay);
  std::fill(s.log_decay, s.log_decay + width, 0.0f);
  int32_t length = 1;
  for (; length < max_length; ++length) {
    const float* g_t = g + length * seq.g_stride;
    const float* prev = s.log_decay + (length - 1) * width;
    float* row = s.log_decay + length * width;
    float lowest = 0.0f;
    for (int32_t i = 0; i < width; ++i) {
      row[i] = prev[i] + g_t[i];
      lowest = std::min(lowest, row[i]);
    }
    if (lowest < -kMaxChunkLogDecay) break;
  }
  return length;
}

// Step 2: the decayed copies of Q and K the products below read.
void ScaleInputs(const HeadRule& rule, const HeadSequence& seq, int32_t start,
                 int32_t length, const ChunkScratch& s) {
  const int32_t key_dim = seq.key_dim;
  const int32_t width = GateWidth(rule.gate, key_dim);
  const float* last_log = s.log_decay + (length - 1) * width;
  for (int32_t t = 0; t < length; ++t) {
    const float* q = seq.q + (start + t) * seq.q_stride;
    const float* k = seq.k + (start + t) * seq.k_stride;
    const float* log_t = s.log_decay + t * width;
    const int64_t row = static_cast<int64_t>(t) * key_dim;
    const float* first = s.first_decay;
    float* f = s.factor;
    DecayFactors(rule.gate, key_dim, nullptr, log_t, f);  // exp(b'_t)
    float* q_tilde = s.q_tilde + row;
    float* q_hat = s.q_hat + row;
#pragma omp simd
    for (int32_t i = 0; i < key_dim; ++i) {
      q_tilde[i] = q[i] * f[i];
      q_hat[i] = q_tilde[i] * first[i];
    }
    if (rule.gate == GateKind::kVector) {
      for (int32_t i = 0; i < key_dim; ++i) s.k_minus_t[i * length + t] = k[i] / f[i];
    } else {  // one factor for every channel: divide once
      const float inverse = 1.0f / f[0];
      for (int32_t i = 0; i < key_dim; ++i) s.k_minus_t[i * length + t] = k[i] * inverse;
    }
    if (rule.delta) {
      float* k_plus = s.k_plus + row;
      float* k_hat = s.k_hat + row;
#pragma omp simd
      for (int32_t i = 0; i < key_dim; ++i) {
        k_plus[i] = k[i] * f[i];
        k_hat[i] = k_plus[i] * first[i];
      }
    }
    DecayFactors(rule.gate, key_dim, log_t, last_log, f);  // exp(b_C - b_t) <= 1
    for (int32_t i = 0; i < key_dim; ++i) s.k_end_t[i * length + t] = k[i] * f[i];
  }
}

// Step 3: P = tril(Q~ K-^T), diagonal included. The whole C x C product costs twice the
// triangle's multiply-adds but runs as one register-blocked product; the entries above the
// diagonal are then zeroed, so P U can run as whole blocks of rows.
template <class Shape>
void ComputeScores(int32_t key_dim, int32_t length, const ChunkScratch& s) {
  MatMul<Shape>(length, length, key_dim, s.q_tilde, key_dim, s.k_minus_t, length, s.scores,
                length, Landing::kOverwrite);
  for (int32_t t = 0; t + 1 < length; ++t) {
    std::fill(s.scores + t * length + t + 1, s.scores + (t + 1) * length, 0.0f);
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
// A[t, s] = beta_t k+_t . k-_s for s < t.
template <class Shape>
void SolveDeltaValues(const HeadSequence& seq, int32_t start, int32_t length,
                      const float* state, const ChunkScratch& s) {
  const int32_t key_dim = seq.key_dim;
  const int32_t value_dim = seq.value_dim;
  float* u = s.values;  // [C, V]
  MatMul<Shape>(length, length, key_dim, s.k_plus, key_dim, s.k_minus_t, length, s.transform,
                length, Landing::kOverwrite);
  MatMul<Shape>(length, value_dim, key_dim, s.k_hat, key_dim, state, value_dim, u, value_dim,
                Landing::kOverwrite);
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

// Step 5: O = Qh S0 + P U, written straight into the output rows.
template <class Shape>
void ComputeOutput(const HeadSequence& seq, int32_t start, int32_t length,
                   const float* state, const ChunkValues& u, const ChunkScratch& s) {
  const int32_t value_dim = seq.value_dim;
  float* o = seq.o + start * seq.o_stride;
  MatMul<Shape>(length, value_dim, seq.key_dim, s.q_hat, seq.key_dim, state, value_dim, o,
                seq.o_stride, Landing::kOverwrite);
  LowerMatMulAdd<Shape>(length, value_dim, s.scores, length, u.rows, u.stride, o,
                        seq.o_stride);
}

// Step 6 (linear attention only, so no decay): o_t /= (q_t . z0 + sum_{s<=t} P[t, s] + eps);
// z0 += sum_s k_s.
void Normalize(const HeadRule& rule, const HeadSequence& seq, int32_t start, int32_t length,
               float* normalizer, const ChunkScratch& s) {
  const int32_t key_dim = seq.key_dim;
  for (int32_t t = 0; t < length; ++t) {
    float den = Dot(s.q_hat + t * key_dim, normalizer, key_dim);
    const float* p = s.scores + t * length;
    for (int32_t r = 0; r <= t; ++r) den += p[r];
    den += rule.normalize_eps;
    float* o = seq.o + (start + t) * seq.o_stride;
#pragma omp simd
    for (int32_t j = 0; j < seq.value_dim; ++j) o[j] /= den;
  }
  for (int32_t t = 0; t < length; ++t) {
    Axpy(key_dim, 1.0f, seq.k + (start + t) * seq.k_stride, normalizer);
  }
}

// Step 7: S_C = Diag(exp(b_C)) S0 + (K ⊙ exp(b_C - b))^T U, the decay applied as the
// product lands: one pass over the state.
template <class Shape>
void UpdateState(const HeadRule& rule, const HeadSequence& seq, int32_t length,
                 const ChunkValues& u, float* state, const ChunkScratch& s) {
  const int32_t key_dim = seq.key_dim;
  const int32_t value_dim = seq.value_dim;
  if (rule.gate == GateKind::kNone) {
    MatMul<Shape>(key_dim, value_dim, length, s.k_end_t, length, u.rows, u.stride, state,
                  value_dim);
    return;
  }
  const int32_t width = GateWidth(rule.gate, key_dim);
  DecayFactors(rule.gate, key_dim, nullptr, s.log_decay + (length - 1) * width, s.factor);
#pragma omp simd
  for (int32_t i = 0; i < key_dim; ++i) s.factor[i] *= s.first_decay[i];  // exp(g_1) exp(b'_C)
  MatMul<Shape>(key_dim, value_dim, length, s.k_end_t, length, u.rows, u.stride, state,
                value_dim, Landing::kScaleAdd, s.factor);
}

template <class Shape>
void RunChunks(const HeadRule& rule, const HeadSequence& seq, float* state, float* normalizer,
               ChunkWorkspace* workspace) {
  const ChunkScratch scratch = CarveScratch(seq.key_dim, seq.value_dim, workspace);
  int32_t start = 0;
  while (start < seq.num_tokens) {
    const int32_t length = MeasureChunk(rule.gate, seq, start, scratch);
    ScaleInputs(rule, seq, start, length, scratch);
    ComputeScores<Shape>(seq.key_dim, length, scratch);
    ChunkValues u{seq.v + start * seq.v_stride, seq.v_stride};
    if (rule.delta) {
      SolveDeltaValues<Shape>(seq, start, length, state, scratch);
      u = {scratch.values, seq.value_dim};
    }
    ComputeOutput<Shape>(seq, start, length, state, u, scratch);
    if (rule.normalize) Normalize(rule, seq, start, length, normalizer, scratch);
    UpdateState<Shape>(rule, seq, length, u, state, scratch);
    start += length;
  }
}

// One build per SIMD level, each with the register tiles that level's registers hold.
#if LUMEN_KERNEL_LEVELS
LUMEN_KERNEL_AVX512
void RunChunksAvx512(const HeadRule& rule, const HeadSequence& seq, float* state,
                     float* normalizer, ChunkWorkspace* workspace) {
  RunChunks<Avx512Shape>(rule, seq, state, normalizer, workspace);
}

LUMEN_KERNEL_AVX2
void RunChunksAvx2(const HeadRule& rule, const HeadSequence& seq, float* state,
                   float* normalizer, ChunkWorkspace* workspace) {
  RunChunks<Avx2Shape>(rule, seq, state, normalizer, workspace);
}
#endif

LUMEN_KERNEL_BASELINE
void RunChunksBaseline(const HeadRule& rule, const HeadSequence& seq, float* state,
                       float* normalizer, ChunkWorkspace* workspace) {
  RunChunks<Vector128Shape>(rule, seq, state, normalizer, workspace);
}

}  // namespace

void RunChunkwise(const HeadRule& rule, const HeadSequence& seq, float* state,
                  float* normalizer, ChunkWorkspace* workspace) {
  if (seq.num_tokens <= 0) return;
  switch (CpuKernelLevel()) {
#if LUMEN_KERNEL_LEVELS
    case KernelLevel::kAvx512:
      RunChunksAvx512(rule, seq, state, normalizer, workspace);
      return;
    case KernelLevel::kAvx2:
      RunChunksAvx2(rule, seq, state, normalizer, workspace);
      return;
#endif
    default:
      RunChunksBaseline(rule, seq, state, normalizer, workspace);
      return;
  }
}

void ReserveChunkWorkspace(int32_t key_dim, int32_t value_dim, ChunkWorkspace* workspace) {
  CarveScratch(key_dim, value_dim, workspace);
}

}  // namespace lumen::cpu
