// Input values outside their domain fail the call with INVALID_ARGUMENT naming the tensor,
// the token and the head, and change no session: NaN or Inf anywhere in q, k, v, g, beta; a
// log-gate g > 0 (any finite raw gate with gate_raw); beta outside [0, 1] ([0, 2] with
// allow_neg_eigval; any finite logit with beta_sigmoid). In fp32, bf16 and fp16 inputs. (They used to return LUMEN_OK and leave
// a non-finite state.)

#include <cfloat>
#include <cmath>
#include <limits>
#include <string>

#include "tests/reference/session_fixture.h"

namespace lumen_fixture {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Layers covering every input and both readings of g and beta:
//   0 gated_delta_net: scalar log-gate, beta in [0, 1]
//   1 kda with gate_raw and beta_sigmoid: raw vector gate, beta logits
//   2 gla: vector log-gate, no beta
//   3 linear_attn with qk_l2norm and elu1: q and k transformed after the check
//   4 delta_net with allow_neg_eigval: beta in [0, 2]
std::vector<RefLayer> Layers() {
  std::mt19937 rng(11);
  RefLayer gdn = SmallLayer(LUMEN_FAMILY_GATED_DELTA_NET);
  RefLayer kda = SmallLayer(LUMEN_FAMILY_KDA);
  kda.gate_raw = true;
  kda.beta_sigmoid = true;
  lumen_test::RandomParams(&kda, rng);
  RefLayer gla = SmallLayer(LUMEN_FAMILY_GLA);
  RefLayer linear = SmallLayer(LUMEN_FAMILY_LINEAR_ATTN);
  linear.qk_l2norm = true;
  linear.feature_map = LUMEN_FEATURE_MAP_ELU1;
  RefLayer negative_eigenvalues = SmallLayer(LUMEN_FAMILY_DELTA_NET);
  negative_eigenvalues.allow_neg_eigval = true;
  return {gdn, kda, gla, linear, negative_eigenvalues};
}

// Where to put the value: tensor, token, head, channel.
struct Spot {
  const char* tensor;
  int64_t token, head, channel;
};

// The heads and per-head width of `tensor` in `layer`, as laid out [T, heads, per_head].
void Shape(const RefLayer& layer, const std::string& tensor, int64_t* heads, int64_t* per_head) {
  if (tensor == "q" || tensor == "k") {
    *heads = layer.num_heads;
    *per_head = layer.key_dim;
  } else if (tensor == "v") {
    *heads = layer.num_value_heads;
    *per_head = layer.value_dim;
  } else if (tensor == "g") {
    *heads = layer.num_value_heads;
    *per_head = layer.VectorGate() ? layer.key_dim : 1;
  } else {
    *heads = layer.num_value_heads;
    *per_head = 1;
  }
}

std::vector<float>& Tensor(lumen_test::TokenData& data, const std::string& tensor) {
  if (tensor == "q") return data.q;
  if (tensor == "k") return data.k;
  if (tensor == "v") return data.v;
  if (tensor == "g") return data.g;
  return data.beta;
}

// Runs `num_tokens` random tokens with `value` at `spot` through layer `index` of the
// sessions: a step (one session, one token), a prefill (one session), or a batched step.
lumen_status RunWith(const Stack& stack, int32_t index, std::vector<lumen_session*> sessions,
                     int64_t num_tokens, int32_t dtype, const Spot& spot, float value) {
  const RefLayer& layer = stack.layers[index];
  std::mt19937 rng(23);
  lumen_test::TokenData data = lumen_test::RandomTokens(layer, num_tokens, rng);
  int64_t heads = 0, per_head = 0;
  Shape(layer, spot.tensor, &heads, &per_head);
  Tensor(data, spot.tensor).at((spot.token * heads + spot.head) * per_head + spot.channel) = value;
  const lumen_test::EncodedTokens tokens = lumen_test::EncodeTokens(data, dtype);
  const lumen_layer_inputs inputs = lumen_test::InputsFor(layer, tokens, 0, num_tokens);
  lumen_test::OutputBuffer out;
  out.Reset(num_tokens * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  lumen_layer_output output = out.Output(0, num_tokens * layer.VPerToken());
  if (sessions.size() > 1) {
    return lumen_engine_step_batch(stack.engine.get(), index, sessions.data(),
                                   static_cast<int32_t>(sessions.size()), &inputs, &output);
  }
  if (num_tokens == 1) return lumen_session_step(sessions[0], index, &inputs, &output);
  return lumen_session_prefill(sessions[0], index, static_cast<int32_t>(num_tokens), &inputs,
                               &output);
}

struct BadValue {
  int32_t layer;
  const char* tensor;
  float value;
};

// Every value here must be refused, in every dtype (all are exact in bf16 and fp16).
const BadValue kBadValues[] = {
    {0, "q", kNaN},     {0, "k", kInf},     {0, "v", -kInf},     {0, "g", kNaN},
    {0, "g", 0.5f},     {0, "g", -kInf},    {0, "beta", -0.25f}, {0, "beta", 1.5f},
    {0, "beta", kNaN},  {1, "q", -kInf},    {1, "v", kNaN},      {1, "g", kInf},
    {1, "g", kNaN},     {1, "beta", kNaN},  {1, "beta", -kInf},  {2, "g", 2.0f},
    {2, "g", -kInf},    {2, "k", kNaN},     {3, "q", kNaN},      {3, "k", kInf},
    {3, "v", kInf},     {4, "beta", 2.5f},   {4, "beta", -0.25f}, {4, "beta", kNaN},
};

TEST_CASE("out-of-domain inputs fail naming tensor, token and head, and change nothing",
          "[input_values]") {
  const Stack stack(Layers());
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 6, 1);
  const SessionState before = Capture(session.get(), stack.layers);
  for (int32_t dtype : {LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_BFLOAT16, LUMEN_DTYPE_FLOAT16}) {
    for (const BadValue& bad : kBadValues) {
      for (int64_t num_tokens : {1, 3}) {
        const RefLayer& layer = stack.layers[bad.layer];
        int64_t heads = 0, per_head = 0;
        Shape(layer, bad.tensor, &heads, &per_head);
        const Spot spot{bad.tensor, num_tokens - 1, heads - 1, per_head - 1};
        INFO("layer " << bad.layer << " " << bad.tensor << " = " << bad.value << ", dtype "
                      << dtype << ", " << num_tokens << " tokens");
        const lumen_status status =
            RunWith(stack, bad.layer, {session.get()}, num_tokens, dtype, spot, bad.value);
        const std::string message = lumen_last_error_message();
        INFO(Describe(status));
        CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
        CHECK(message.rfind(std::string(bad.tensor) + " at token " +
                                std::to_string(num_tokens - 1) + ", head " +
                                std::to_string(heads - 1),
                            0) == 0);
        CHECK(Capture(session.get(), stack.layers).SameBits(before));
      }
    }
  }
}

TEST_CASE("a batched step names the session whose input is out of domain and changes none",
          "[input_values]") {
  const Stack stack(Layers());
  SessionPtr a = stack.NewSession(), b = stack.NewSession(), c = stack.NewSession();
  AddHistory(stack, b.get(), 4, 2);
  const SessionState before_a = Capture(a.get(), stack.layers);
  const SessionState before_b = Capture(b.get(), stack.layers);
  const SessionState before_c = Capture(c.get(), stack.layers);
  // One token per session: token 2 is session 2's token 0.
  const lumen_status status = RunWith(stack, 0, {a.get(), b.get(), c.get()}, 3,
                                      LUMEN_DTYPE_FLOAT32, {"beta", 2, 1, 0}, 7.0f);
  const std::string message = lumen_last_error_message();
  INFO(Describe(status));
  CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(message.find("beta at token 2 (session 2's token 0), head 1") != std::string::npos);
  CHECK(Capture(a.get(), stack.layers).SameBits(before_a));
  CHECK(Capture(b.get(), stack.layers).SameBits(before_b));
  CHECK(Capture(c.get(), stack.layers).SameBits(before_c));
}

TEST_CASE("a long prefill's inputs, checked in parallel pieces, name the first bad value",
          "[input_values]") {
  // 40000 tokens of q are 320000 values: several pieces of the parallel scan (16-bit inputs
  // are converted piece by piece, each piece checked as it is converted), two of them bad;
  // the later piece may finish first, but the earlier value must be named.
  const Stack stack(Layers());
  SessionPtr session = stack.NewSession();
  const RefLayer& layer = stack.layers[0];
  const int64_t num_tokens = 40000;
  std::mt19937 rng(29);
  lumen_test::TokenData data = lumen_test::RandomTokens(layer, num_tokens, rng);
  const int64_t per_token = int64_t{layer.num_heads} * layer.key_dim;
  data.q.at(30000 * per_token + 1) = kInf;
  data.q.at(20000 * per_token + layer.key_dim) = kNaN;  // token 20000, head 1
  const SessionState before = Capture(session.get(), stack.layers);
  for (int32_t dtype : {LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_BFLOAT16, LUMEN_DTYPE_FLOAT16}) {
    INFO("dtype " << dtype);
    const lumen_test::EncodedTokens tokens = lumen_test::EncodeTokens(data, dtype);
    const lumen_layer_inputs inputs = lumen_test::InputsFor(layer, tokens, 0, num_tokens);
    lumen_test::OutputBuffer out;
    out.Reset(num_tokens * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
    lumen_layer_output output = out.Output(0, num_tokens * layer.VPerToken());
    const lumen_status status = lumen_session_prefill(
        session.get(), 0, static_cast<int32_t>(num_tokens), &inputs, &output);
    const std::string message = lumen_last_error_message();
    INFO(Describe(status) << ": " << message);
    CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(message.rfind("q at token 20000, head 1", 0) == 0);
    CHECK(Capture(session.get(), stack.layers).SameBits(before));
  }
}

TEST_CASE("values at the edges of their domains, raw gates and beta logits are accepted",
          "[input_values]") {
  const Stack stack(Layers());
  SessionPtr session = stack.NewSession();
  const struct {
    int32_t layer;
    const char* tensor;
    float value;
  } accepted[] = {
      {0, "g", 0.0f},     {0, "g", -0.0f},     {0, "g", -80.0f},   {0, "beta", 0.0f},
      {0, "beta", 1.0f},  {0, "q", 1e30f},     {1, "g", 30.0f},    {1, "g", -30.0f},
      {1, "beta", 9.0f},  {1, "beta", -9.0f},  {2, "g", 0.0f},     {3, "v", -FLT_MAX},
      {4, "beta", 0.0f},  {4, "beta", 1.5f},   {4, "beta", 2.0f},
  };
  for (const auto& ok : accepted) {
    INFO("layer " << ok.layer << " " << ok.tensor << " = " << ok.value);
    const lumen_status status = RunWith(stack, ok.layer, {session.get()}, 2,
                                        LUMEN_DTYPE_FLOAT32, {ok.tensor, 1, 0, 0}, ok.value);
    INFO(Describe(status));
    CHECK(status == LUMEN_OK);
  }
}

TEST_CASE("allow_neg_eigval: beta outside [0, 2] fails naming the range", "[input_values]") {
  const Stack stack(Layers());
  SessionPtr session = stack.NewSession();
  for (int64_t num_tokens : {1, 3}) {
    const lumen_status status = RunWith(stack, 4, {session.get()}, num_tokens,
                                        LUMEN_DTYPE_FLOAT32, {"beta", 0, 1, 0}, 2.5f);
    const std::string message = lumen_last_error_message();
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(message.rfind("beta at token 0, head 1 is 2.5: it must lie in [0, 2] with "
                        "allow_neg_eigval", 0) == 0);
  }
  // Without the option the same value names [0, 1].
  const lumen_status status =
      RunWith(stack, 0, {session.get()}, 1, LUMEN_DTYPE_FLOAT32, {"beta", 0, 1, 0}, 1.5f);
  CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(lumen_last_error_message()).find("must lie in [0, 1]") != std::string::npos);
}

}  // namespace
}  // namespace lumen_fixture
