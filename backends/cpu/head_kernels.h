#pragma once
// The math of one value head over a run of tokens, on prepared fp32 inputs.
//
// Every family reduces to two switches: how the state decays before a token's write
// (GateKind) and whether the write is additive or the delta rule. The caller has already
// applied feature maps, L2 norms, sigmoid(beta), the raw-gate transform and the scale
// (folded into q), and materialised retention's fixed decay as a scalar log-gate.

#include <cstdint>
#include <vector>

#include "src/layer_spec.h"

namespace lumen::cpu {

struct HeadRule {
  GateKind gate = GateKind::kNone;
  bool delta = false;       // delta rule: u = beta (v - S'^T k); S = S' + k u^T
  bool normalize = false;   // linear_attn normalizer z; o = S^T q / (q . z + eps).
                            // Only with kNone and additive writes: z never decays.
  float normalize_eps = 1e-6f;
};

// Token t of the head reads q + t * q_stride, and so on. Strides are in floats.
struct HeadSequence {
  int32_t num_tokens = 0;
  int32_t key_dim = 0;    // K
  int32_t value_dim = 0;  // V
  const float* q = nullptr;    int64_t q_stride = 0;     // [K] per token, scale folded in
  const float* k = nullptr;    int64_t k_stride = 0;     // [K]
  const float* v = nullptr;    int64_t v_stride = 0;     // [V]
  const float* g = nullptr;    int64_t g_stride = 0;     // 1 or K log-decays per token, <= 0;
                                                         // stride 0: one fixed decay
  const float* beta = nullptr; int64_t beta_stride = 0;  // 1 per token (delta rule)
  float* o = nullptr;          int64_t o_stride = 0;     // [V] per token, written
};

// Scratch for the chunkwise form; reused across calls by one thread.
struct ChunkWorkspace {
  std::vector<float> buffer;
  int64_t chunks_run = 0;  // chunks RunChunkwise has run with this workspace (tests count them)
};

// Largest number of tokens in one chunk of the chunkwise form. 32 measured faster than 64 (by
// 8-69% on one thread) and 128 for every family but kda, which was level, and about level
// with 16 (docs/performance.md, "CPU"): a chunk's q, k and v rows (16 KiB each at K = V = 128) stay
// in L1 beside a strip of the state, and the C x C products do half the flops of 64's.
inline constexpr int32_t kChunkSize = 32;

// The floats of scratch a chunkwise run of heads of these dims carves out of its workspace
// (chunkwise.cc, CarveScratch: fifteen [C, K] blocks, two rows, two [C, C] blocks, U and a
// copy of the state).
inline int64_t ChunkScratchFloats(int32_t key_dim, int32_t value_dim) {
  const int64_t c = kChunkSize;
  const int64_t k = key_dim > 1 ? key_dim : 1;
  return 15 * c * k + 2 * (c > k ? c : k) + 2 * c * c + c * value_dim + k * value_dim;
}

// Sizes the workspace for heads of these dims, so that RunChunkwise never allocates (a call
// that cannot get memory must fail before it changes any state).
void ReserveChunkWorkspace(int32_t key_dim, int32_t value_dim, ChunkWorkspace* workspace);

// The delta rule's last write k u^T, held out of the stored matrix so that a step passes
// over S once (recurrent.cc says how): while `held` is set, the head's state is the stored
// matrix plus k u^T. Whoever keeps it beside the state applies it before anything else reads
// or replaces the matrix.
struct HeldWrite {
  float* k = nullptr;  // [K]
  float* u = nullptr;  // [V]
  bool held = false;
};

// Runs the tokens one at a time. state: [K, V]; normalizer: [K] or nullptr. The delta rule
// needs `write` (other rules ignore it and may pass nullptr): the step adds a held write as
// it reads each row and leaves its own last token's write held there.
void RunRecurrent(const HeadRule& rule, const HeadSequence& seq, float* state,
                  float* normalizer, HeldWrite* write);

// Adds a held write into the stored matrix, state [K, V] += k u^T, and clears it. Its
// rounding is the step's own, so the state's bits do not depend on when it runs.
void ApplyHeldWrite(int32_t key_dim, int32_t value_dim, float* state, HeldWrite* write);

// A head's state matrix [K, V] across the chunkwise calls of one prefill. Every chunk reads it
// once or twice and writes it once, so where enough chunks follow, the matrix moves in place
// to the chunk layout: the column panels the chunk products read and write in place
// (small_matmul.h, MatrixLayout::kPanels, at the kernel level this CPU runs), never packed
// again. The call with no tokens after it leaves the matrix row-major again.
struct ChunkState {
  float* matrix = nullptr;  // [K, V], where the state lives between prefills
  bool in_panels = false;   // in the chunk layout now
};

// Runs the tokens in chunks of kChunkSize (the last one shorter) with chunk-local C x C products
// and, for the delta rule, the UT (WY) triangular solve. Agrees with RunRecurrent to the bounds
// (docs/spec.md §4) for any decays (see chunkwise.cc); any split of a sequence across calls gives
// the same result to those bounds. tokens_after: how many of the sequence's tokens later calls of
// this prefill run (ChunkState).
void RunChunkwise(const HeadRule& rule, const HeadSequence& seq, int64_t tokens_after,
                  ChunkState* state, float* normalizer, ChunkWorkspace* workspace);

}  // namespace lumen::cpu
