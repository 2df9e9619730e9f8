#pragma once
// What the CPU benchmarks run: the families at the shape (HV = 32, K = V = 128, fp32
// state, 2 MiB per session) with the options the published models use, their nominal
// chunkwise flops, and input buffers every family accepts. `lumen bench --cpu` and
// `lumen bench --builds` both time these cases, each through a table of C API calls.

#include <lumen/lumen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tools/lumen/lumen_api.h"
#include "tools/lumen/lumen_handles.h"

namespace lumen::cli {

constexpr int32_t kBenchHeads = 32;
constexpr int32_t kBenchKeyDim = 128;
constexpr int32_t kBenchValueDim = 128;
constexpr int64_t kBenchStateBytes = int64_t{kBenchHeads} * kBenchKeyDim * kBenchValueDim * 4;
// Chunk length the prefill's nominal flop count assumes (lumen's kChunkSize on the CPU).
constexpr double kBenchChunk = 32;
// Bytes a misaligned buffer starts after a cache line, as malloc often gives.
constexpr int64_t kMisalignBytes = 16;

struct FamilySetup {
  lumen_family family;
  bool scalar_gate;  // g [T, HV]
  bool vector_gate;  // g [T, HV, K]
  bool gate_raw;     // g raw, with A_log and dt_bias (as the models run it)
  bool delta;        // beta, qk_l2norm and beta_sigmoid
};

// The family's name (lumen_family_string of the linked library).
const char* FamilyName(const FamilySetup& family);

// Every family, in the order the tables print them.
extern const FamilySetup kBenchFamilies[7];

// Whether a --families list names this family (an empty list: every family).
bool Selected(const std::vector<std::string>& families, const FamilySetup& family);

// The family called `name`, or nullptr.
const FamilySetup* FindFamily(const std::string& name);

// Nominal flops per token of the chunkwise form at chunk length kBenchChunk, all heads.
double PrefillFlopsPerToken(const FamilySetup& family);

// Stops `program` with the build's own message if one of its calls failed.
void CheckCall(const char* program, const LumenApi& api, lumen_status status, const char* call);

// A one-layer model of `family` built by `api`'s library; the caller destroys it with that
// library's lumen_model_destroy. Stops the program on an error.
lumen_model* BuildBenchModel(const char* program, const LumenApi& api, const FamilySetup& family);

// A 64-byte aligned buffer of `count` elements of fp32 or bf16, plus slack for a view 16
// bytes off the line.
class BenchBuffer {
 public:
  BenchBuffer(int64_t count, int32_t dtype);
  int64_t ElementBytes() const { return dtype_ == LUMEN_DTYPE_FLOAT32 ? 4 : 2; }
  int64_t Bytes() const { return count_ * ElementBytes(); }
  // Fills every element (slack included) with lo + (hi - lo) * u, u uniform in [0, 1).
  void Fill(float lo, float hi, uint64_t seed);
  // The buffer `misalign` bytes after its cache-line start, plus `first` elements.
  char* View(int64_t misalign, int64_t first) const {
    return static_cast<char*>(data_.get()) + misalign + first * ElementBytes();
  }

 private:
  int32_t dtype_;
  int64_t count_;
  Owned<void> data_;
};

// One buffer per tensor for `tokens` tokens, filled with values that every family accepts
// (g in [-0.08, -0.005]: a log-decay and a raw gate alike; beta in [0, 1]: a probability and
// a logit alike).
struct BenchInputs {
  int32_t dtype;
  BenchBuffer q, k, v, g_scalar, g_vector, beta, o;
  BenchInputs(int64_t tokens, int32_t input_dtype);

  // The inputs and output of `tokens` tokens starting at token `first`.
  void Describe(const LumenApi& api, const FamilySetup& family, int64_t first, int64_t tokens,
                int64_t misalign, lumen_layer_inputs* in, lumen_layer_output* out) const;
};

}  // namespace lumen::cli
