#pragma once
// A float64 reference of one lumen layer, written straight from the recurrences of docs/spec.md §2,
// plus the small helpers the tests share: the error metric (docs/spec.md §4), bf16/fp16 rounding,
// and the glue that runs the same data through lumen's public C API.
//
// The reference knows nothing of lumen's implementation: it uses lumen.h only for the
// vocabulary (family, feature map and dtype values, the options struct it is compared with).
// It is itself checked against tests/data/vectors by tests/core/conformance_test.cc.

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"

namespace lumen_test {

// ---------------------------------------------------------------------------------------------
// The layer and the reference recurrence
// ---------------------------------------------------------------------------------------------

// What a layer is, as the reference sees it. Parameters are kept as the float32 values that
// are handed to lumen, so the reference and the library start from identical numbers.
struct RefLayer {
  int32_t family = LUMEN_FAMILY_LINEAR_ATTN;
  int32_t num_heads = 1;        // H
  int32_t num_value_heads = 1;  // HV, HV % H == 0
  int32_t key_dim = 1;          // K
  int32_t value_dim = 1;        // V
  float scale = 0.0f;           // 0: K^-0.5
  int32_t feature_map = LUMEN_FEATURE_MAP_IDENTITY;
  bool normalize = false;
  float normalize_eps = 0.0f;   // 0: 1e-6
  bool qk_l2norm = false;
  bool beta_sigmoid = false;
  bool allow_neg_eigval = false;  // beta in [0, 2]: 2 * sigmoid(logit) with beta_sigmoid
  bool gate_raw = false;
  float gate_lower_bound = 0.0f;  // < 0 with gate_raw: fla's lower-bounded gate
  int32_t state_dtype = LUMEN_DTYPE_FLOAT32;
  std::vector<float> a_log;    // [HV] with gate_raw
  std::vector<float> dt_bias;  // [HV] (gated_delta_net, ssd) or [HV * K] (kda) with gate_raw
  std::vector<float> decay;    // [HV] retention gammas; empty: 1 - 2^(-5-h)
  int32_t conv_size = 0;       // W; 0: no convolution
  int32_t conv_activation = LUMEN_CONV_ACTIVATION_SILU;
  std::vector<float> conv_weight[3];  // per part q, k, v: [C, W]
  std::vector<float> conv_bias[3];    // per part: [C], or empty (no bias)
  std::vector<float> d_skip;          // [HV] Mamba-2's D (ssd with gate_raw), or empty

  bool HasG() const;          // ssd, gla, gated_delta_net, kda
  bool VectorGate() const;    // gla, kda
  bool HasBeta() const;       // delta_net, gated_delta_net, kda
  bool DeltaRule() const;     // same as HasBeta
  bool HasNormalizer() const; // linear_attn with normalize
  int64_t QPerToken() const;     // H * K (also k)
  int64_t VPerToken() const;     // HV * V (also o)
  int64_t GPerToken() const;     // HV, HV * K or 0
  int64_t BetaPerToken() const;  // HV or 0
  int64_t MatrixCount() const;   // HV * K * V
  int64_t NormalizerCount() const;  // HV * K or 0
  int64_t ConvChannels(int part) const;  // H * K for q and k (parts 0, 1), HV * V for v (2)
  int64_t ConvCount(int part) const;     // C * (W - 1), 0 without a convolution
  std::string Describe() const;
};

// The state of one layer in float64: matrix [HV, K, V], normalizer [HV, K] (empty if none),
// conv windows [C, W-1] of q, k, v (empty without a convolution).
struct RefState {
  std::vector<double> matrix;
  std::vector<double> normalizer;
  std::vector<double> conv[3];
};

RefState ZeroState(const RefLayer& layer);

// The inputs of T tokens as float64 values (exactly the numbers lumen sees, i.e. already
// rounded to bf16/fp16 where the test feeds those). Shapes per docs/spec.md §1: q, k [T, H, K],
// v [T, HV, V], g [T, HV] or [T, HV, K] (raw when gate_raw), beta [T, HV] (logits when
// beta_sigmoid). g and beta are empty for families without them.
struct RefInputs {
  std::vector<double> q, k, v, g, beta;
};

// Advances `state` over tokens [0, T) of `inputs` and appends T * HV * V outputs to *o.
void RunReference(const RefLayer& layer, int64_t num_tokens, const RefInputs& inputs,
                  RefState* state, std::vector<double>* o);

// ---------------------------------------------------------------------------------------------
// the error metric of docs/spec.md §4
// ---------------------------------------------------------------------------------------------

struct ErrorReport {
  double rel_rms = 0.0;  // ||out - ref|| / ||ref||
  double max_abs = 0.0;
  int64_t non_finite = 0;  // NaN or Inf in out
  int64_t count = 0;
  // Passes the bound of docs/spec.md §4: no NaN/Inf, and rel_rms <= bound or max_abs <= 1e-6.
  bool Passes(double bound) const;
  std::string Describe() const;
};

ErrorReport Measure(const float* out, const double* ref, int64_t count);
ErrorReport Measure(const std::vector<float>& out, const std::vector<double>& ref);

inline constexpr double kStepBound = 1e-5;     // fp32 inputs, recurrent form
inline constexpr double kPrefillBound = 1e-4;  // fp32 inputs, chunkwise form
inline constexpr double kHalfBound = 5e-3;     // bf16/fp16 inputs (or bf16 state)

// ---------------------------------------------------------------------------------------------
// bf16 / fp16 (round to nearest even)
// ---------------------------------------------------------------------------------------------

uint16_t FloatToBf16(float x);
float Bf16ToFloat(uint16_t h);
uint16_t FloatToHalf(float x);
float HalfToFloat(uint16_t h);
// The value x takes after a round trip through `dtype`.
float RoundTo(float x, int32_t dtype);
std::vector<float> RoundAll(const std::vector<float>& x, int32_t dtype);
int64_t DTypeBytes(int32_t dtype);
// Encodes float values as `dtype` bytes, and back.
std::vector<uint8_t> Encode(const std::vector<float>& x, int32_t dtype);
std::vector<float> Decode(const void* data, int64_t count, int32_t dtype);
std::vector<double> ToDouble(const std::vector<float>& x);

// ---------------------------------------------------------------------------------------------
// Random data
// ---------------------------------------------------------------------------------------------

// Token inputs in float32, shapes as RefInputs.
struct TokenData {
  int64_t num_tokens = 0;
  std::vector<float> q, k, v, g, beta;
};

// Fresh random inputs of a realistic kind: q, k, v ~ N(0, 1); keys L2-normalised for the delta
// family unless qk_l2norm; g = log(U(0.8, 1)) per token (or raw pre-activations ~ N(0, 1) with
// gate_raw); beta ~ U(0.05, 0.95) (U(0.05, 1.95) with allow_neg_eigval; logits ~ N(0, 1.5) with
// beta_sigmoid).
TokenData RandomTokens(const RefLayer& layer, int64_t num_tokens, std::mt19937& rng);
// A random state: matrix entries ~ N(0, 0.3); normalizer ~ U(0.5, 2) (positive, as a sum of
// positive features would be).
void RandomState(const RefLayer& layer, std::mt19937& rng, std::vector<float>* matrix,
                 std::vector<float>* normalizer);
// Fills the layer's parameters (A_log, dt_bias with gate_raw; conv weights with conv_size,
// biases and D where the layer already has them non-empty) with realistic random values.
void RandomParams(RefLayer* layer, std::mt19937& rng);
// Random conv windows (raw inputs ~ N(0, 1)), one per part; empty without a convolution.
void RandomConvState(const RefLayer& layer, std::mt19937& rng, std::vector<float> conv[3]);
// Tokens [t0, t0 + n) of `data`.
TokenData Slice(const RefLayer& layer, const TokenData& data, int64_t t0, int64_t n);
// Concatenates token data.
void Append(TokenData* to, const TokenData& from);
// The float64 inputs of `data` after rounding to `dtype`.
RefInputs ToRefInputs(const TokenData& data, int32_t dtype);

// ---------------------------------------------------------------------------------------------
// Driving the C API
// ---------------------------------------------------------------------------------------------

struct ModelDeleter { void operator()(lumen_model* m) const { lumen_model_destroy(m); } };
struct EngineDeleter { void operator()(lumen_engine* e) const { lumen_engine_destroy(e); } };
struct SessionDeleter { void operator()(lumen_session* s) const { lumen_session_destroy(s); } };
struct BuilderDeleter {
  void operator()(lumen_model_builder* b) const { lumen_model_builder_destroy(b); }
};
using ModelPtr = std::unique_ptr<lumen_model, ModelDeleter>;
using EnginePtr = std::unique_ptr<lumen_engine, EngineDeleter>;
using SessionPtr = std::unique_ptr<lumen_session, SessionDeleter>;
using BuilderPtr = std::unique_ptr<lumen_model_builder, BuilderDeleter>;

lumen_layer_options ToOptions(const RefLayer& layer);

// "LUMEN_ERROR_...: message" for the last failure, for test output.
std::string LastError(lumen_status status);

// Builds a model of the given layers (parameters set through the builder). Returns nullptr
// and fills *error on failure.
ModelPtr BuildModel(const std::vector<RefLayer>& layers, std::string* error);
// The backend the public-API tests run on: LUMEN_BACKEND_CPU, or LUMEN_BACKEND_CUDA when the
// environment sets LUMEN_TEST_BACKEND=CUDA (the `gpu` ctest label runs them so on a GPU).
int32_t TestBackend();
// An engine on the test backend with num_threads threads (0: all cores).
EnginePtr MakeEngine(const lumen_model* model, int32_t num_threads, std::string* error);
SessionPtr MakeSession(lumen_engine* engine, std::string* error);

// Token inputs encoded in one dtype, ready to point lumen_layer_inputs at.
struct EncodedTokens {
  int32_t dtype = LUMEN_DTYPE_FLOAT32;
  int64_t num_tokens = 0;
  std::vector<uint8_t> q, k, v, g, beta;
};
EncodedTokens EncodeTokens(const TokenData& data, int32_t dtype);
// lumen_layer_inputs covering tokens [t0, t0 + n) of `tokens`.
lumen_layer_inputs InputsFor(const RefLayer& layer, const EncodedTokens& tokens, int64_t t0,
                             int64_t n);

// Output buffer of `count` elements of `dtype`, poisoned with NaN.
struct OutputBuffer {
  int32_t dtype = LUMEN_DTYPE_FLOAT32;
  std::vector<uint8_t> bytes;
  void Reset(int64_t count, int32_t dtype);  // (re)allocates and poisons
  lumen_layer_output Output(int64_t t0_elements, int64_t count);
  std::vector<float> Values() const;
};

// How a run of tokens is split into calls.
enum class Path { kStep, kPrefill };

// Runs tokens [0, T) of `tokens` through layer `layer` of `session`: one call per token on
// the step path, or one prefill per entry of `splits` (which must sum to T). Outputs are
// written into *out (resized and poisoned first, dtype out_dtype). Returns the first failing
// status with its message in *error.
lumen_status RunSession(lumen_session* session, int32_t layer_index, const RefLayer& layer,
                        const EncodedTokens& tokens, Path path,
                        const std::vector<int64_t>& splits, int32_t out_dtype,
                        OutputBuffer* out, std::string* error);

// Reads both parts of a layer's state (normalizer empty when the layer keeps none).
// Reads / writes the three conv windows (nothing without a convolution).
lumen_status ReadConvState(const lumen_session* session, int32_t layer_index,
                           const RefLayer& layer, std::vector<float> conv[3]);
lumen_status WriteConvState(lumen_session* session, int32_t layer_index, const RefLayer& layer,
                            const std::vector<float> conv[3]);

lumen_status ReadState(const lumen_session* session, int32_t layer_index,
                       const RefLayer& layer, std::vector<float>* matrix,
                       std::vector<float>* normalizer);
// Writes both parts (normalizer ignored when the layer keeps none).
lumen_status WriteState(lumen_session* session, int32_t layer_index, const RefLayer& layer,
                        const std::vector<float>& matrix, const std::vector<float>& normalizer);

// A random seed, different per test run; print it with INFO so a failure can be replayed.
// LUMEN_TEST_SEED in the environment fixes it.
uint32_t TestSeed();

}  // namespace lumen_test
