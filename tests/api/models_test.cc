// Building models through lumen.h: layer options and parameters (convolutions' and
// Mamba-2's included) are checked at add_layer, set_param and build with the right status
// and a message naming the problem; the convolution's SiLU holds far into its tails; model
// queries resolve defaults and check the layer index; and every size derived from a model
// fits in int64_t, so a model whose state or snapshot would not is rejected when it is
// built (it used to build with a negative state size, then crash in a step).

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/api/api_test_util.h"
#include "tests/reference/layer_reference.h"
#include "tests/reference/session_fixture.h"

namespace lumen_test {
namespace {

lumen_status AddLayer(lumen_model_builder* b, const lumen_layer_options& o) {
  int32_t index = 12345;
  const lumen_status st = lumen_model_builder_add_layer(b, &o, &index);
  if (st != LUMEN_OK) {
    INFO("out_layer written on failure");
    CHECK(index == 12345);
  }
  return st;
}

TEST_CASE("bad layer options are rejected with a message naming the problem", "[capi]") {
  lumen_model_builder* raw = nullptr;
  REQUIRE(lumen_model_builder_create(&raw) == LUMEN_OK);
  BuilderPtr builder(raw);
  auto base = [](int32_t family) {
    return ToOptions(Layer(family, 2, 4, 8, 6));
  };
  const struct {
    const char* name;
    std::function<void(lumen_layer_options*)> mutate;
    std::vector<std::string> words;
  } bad[] = {
      {"HV % H != 0", [](lumen_layer_options* o) { o->num_heads = 3; o->num_value_heads = 4; },
       {"num_value_heads", "HV", "value heads"}},
      {"HV < H", [](lumen_layer_options* o) { o->num_heads = 4; o->num_value_heads = 2; },
       {"num_value_heads", "HV", "value heads"}},
      {"num_heads = 0", [](lumen_layer_options* o) { o->num_heads = 0; }, {"num_heads", "H"}},
      {"num_heads < 0", [](lumen_layer_options* o) { o->num_heads = -2; }, {"num_heads", "H"}},
      {"num_value_heads < 0", [](lumen_layer_options* o) { o->num_value_heads = -4; },
       {"num_value_heads", "HV"}},
      {"key_dim = 0", [](lumen_layer_options* o) { o->key_dim = 0; }, {"key_dim", "K"}},
      {"key_dim < 0", [](lumen_layer_options* o) { o->key_dim = -8; }, {"key_dim", "K"}},
      {"value_dim = 0", [](lumen_layer_options* o) { o->value_dim = 0; }, {"value_dim", "V"}},
      {"family = 0", [](lumen_layer_options* o) { o->family = 0; }, {"family"}},
      {"family = 8", [](lumen_layer_options* o) { o->family = 8; }, {"family"}},
      {"family = -1", [](lumen_layer_options* o) { o->family = -1; }, {"family"}},
      {"feature_map = 3", [](lumen_layer_options* o) { o->feature_map = 3; },
       {"feature_map", "feature map"}},
      {"state_dtype = FLOAT16", [](lumen_layer_options* o) { o->state_dtype = LUMEN_DTYPE_FLOAT16; },
       {"state_dtype", "dtype"}},
      {"state_dtype = 9", [](lumen_layer_options* o) { o->state_dtype = 9; },
       {"state_dtype", "dtype"}},
      {"scale = NaN", [](lumen_layer_options* o) { o->scale = kNaN; }, {"scale"}},
      {"normalize_eps < 0",
       [](lumen_layer_options* o) {
         o->normalize = 1;
         o->feature_map = LUMEN_FEATURE_MAP_ELU1;
         o->normalize_eps = -1.0f;
       },
       {"normalize_eps", "eps"}},
      {"conv_size < 0", [](lumen_layer_options* o) { o->conv_size = -1; }, {"conv_size"}},
      {"conv_size = 65", [](lumen_layer_options* o) { o->conv_size = 65; }, {"conv_size"}},
      {"conv_activation = 2",
       [](lumen_layer_options* o) {
         o->conv_size = 4;
         o->conv_activation = 2;
       },
       {"conv_activation"}},
      {"conv_activation = -1", [](lumen_layer_options* o) { o->conv_activation = -1; },
       {"conv_activation"}},
      {"allow_neg_eigval without beta", [](lumen_layer_options* o) { o->allow_neg_eigval = 1; },
       {"allow_neg_eigval", "delta family"}},
      {"allow_neg_eigval = 2",
       [](lumen_layer_options* o) {
         o->family = LUMEN_FAMILY_DELTA_NET;
         o->allow_neg_eigval = 2;
       },
       {"allow_neg_eigval", "0 or 1"}},
      {"gate_lower_bound without gate_raw",
       [](lumen_layer_options* o) {
         o->family = LUMEN_FAMILY_KDA;
         o->gate_lower_bound = -5.0f;
       },
       {"gate_lower_bound", "gate_raw"}},
      {"gate_lower_bound on ssd",
       [](lumen_layer_options* o) {
         o->family = LUMEN_FAMILY_SSD;
         o->gate_raw = 1;
         o->gate_lower_bound = -5.0f;
       },
       {"gate_lower_bound", "gated_delta_net and kda"}},
      {"gate_lower_bound > 0",
       [](lumen_layer_options* o) {
         o->family = LUMEN_FAMILY_KDA;
         o->gate_raw = 1;
         o->gate_lower_bound = 1.0f;
       },
       {"gate_lower_bound", "<= 0"}},
      {"gate_lower_bound = -inf",
       [](lumen_layer_options* o) {
         o->family = LUMEN_FAMILY_GATED_DELTA_NET;
         o->gate_raw = 1;
         o->gate_lower_bound = -std::numeric_limits<float>::infinity();
       },
       {"gate_lower_bound", "finite"}},
  };
  for (const auto& b : bad) {
    INFO(b.name << " (on linear_attn)");
    lumen_layer_options o = base(LUMEN_FAMILY_LINEAR_ATTN);
    b.mutate(&o);
    CheckFailure(AddLayer(builder.get(), o), LUMEN_ERROR_INVALID_ARGUMENT, b.words);
  }

  // Options the family does not take.
  const struct {
    const char* name;
    int32_t family;
    std::function<void(lumen_layer_options*)> mutate;
    std::vector<std::string> words;
  } not_taken[] = {
      {"normalize on gla", LUMEN_FAMILY_GLA, [](lumen_layer_options* o) { o->normalize = 1; },
       {"normalize"}},
      {"normalize on gated_delta_net", LUMEN_FAMILY_GATED_DELTA_NET,
       [](lumen_layer_options* o) { o->normalize = 1; }, {"normalize"}},
      {"feature_map on ssd", LUMEN_FAMILY_SSD,
       [](lumen_layer_options* o) { o->feature_map = LUMEN_FEATURE_MAP_ELU1; },
       {"feature_map", "feature map"}},
      {"feature_map on kda", LUMEN_FAMILY_KDA,
       [](lumen_layer_options* o) { o->feature_map = LUMEN_FEATURE_MAP_RELU; },
       {"feature_map", "feature map"}},
      {"gate_raw on gla", LUMEN_FAMILY_GLA, [](lumen_layer_options* o) { o->gate_raw = 1; },
       {"gate_raw"}},
      {"gate_raw on delta_net", LUMEN_FAMILY_DELTA_NET,
       [](lumen_layer_options* o) { o->gate_raw = 1; }, {"gate_raw"}},
      {"gate_raw on linear_attn", LUMEN_FAMILY_LINEAR_ATTN,
       [](lumen_layer_options* o) { o->gate_raw = 1; }, {"gate_raw"}},
      {"beta_sigmoid on retention", LUMEN_FAMILY_RETENTION,
       [](lumen_layer_options* o) { o->beta_sigmoid = 1; }, {"beta_sigmoid"}},
      {"beta_sigmoid on gla", LUMEN_FAMILY_GLA,
       [](lumen_layer_options* o) { o->beta_sigmoid = 1; }, {"beta_sigmoid"}},
  };
  for (const auto& b : not_taken) {
    INFO(b.name);
    lumen_layer_options o = base(b.family);
    b.mutate(&o);
    CheckFailure(AddLayer(builder.get(), o), LUMEN_ERROR_INVALID_ARGUMENT, b.words);
  }

  // None of the rejected layers was added: a good one gets index 0.
  int32_t index = -1;
  const lumen_layer_options good = base(LUMEN_FAMILY_GLA);
  REQUIRE(lumen_model_builder_add_layer(builder.get(), &good, &index) == LUMEN_OK);
  CHECK(index == 0);
  REQUIRE(lumen_model_builder_add_layer(builder.get(), &good, nullptr) == LUMEN_OK);
  lumen_model* model = nullptr;
  REQUIRE(lumen_model_builder_build(builder.get(), &model) == LUMEN_OK);
  ModelPtr owned(model);
  int32_t n = -1;
  REQUIRE(lumen_model_num_layers(model, &n) == LUMEN_OK);
  CHECK(n == 2);
}

TEST_CASE("parameters: layer index, count, applicability and values are checked", "[capi]") {
  lumen_model_builder* raw = nullptr;
  REQUIRE(lumen_model_builder_create(&raw) == LUMEN_OK);
  BuilderPtr builder(raw);
  RefLayer gdn = Layer(LUMEN_FAMILY_GATED_DELTA_NET, 2, 4, 8, 6);
  gdn.gate_raw = true;
  RefLayer kda = Layer(LUMEN_FAMILY_KDA, 2, 4, 8, 6);
  kda.gate_raw = true;
  const RefLayer ret = Layer(LUMEN_FAMILY_RETENTION, 2, 4, 8, 6);
  const RefLayer gla = Layer(LUMEN_FAMILY_GLA, 2, 4, 8, 6);
  for (const RefLayer* l : std::vector<const RefLayer*>{&gdn, &kda, &ret, &gla}) {
    const lumen_layer_options o = ToOptions(*l);
    REQUIRE(lumen_model_builder_add_layer(builder.get(), &o, nullptr) == LUMEN_OK);
  }
  const std::vector<float> four = {0.1f, 0.2f, 0.3f, 0.4f};
  const std::vector<float> many(64, 0.5f);
  const std::vector<float> decays = {0.9f, 0.95f, 0.99f, 0.5f};
  auto set = [&](int32_t layer, int32_t p, const std::vector<float>& v, int64_t count) {
    return lumen_model_builder_set_param(builder.get(), layer, p, v.data(), count);
  };

  CheckFailure(set(4, LUMEN_PARAM_A_LOG, four, 4), LUMEN_ERROR_OUT_OF_RANGE, {"layer"});
  CheckFailure(set(-1, LUMEN_PARAM_A_LOG, four, 4), LUMEN_ERROR_OUT_OF_RANGE, {"layer"});
  {
    INFO("A_log with a wrong count");
    CheckFailure(set(0, LUMEN_PARAM_A_LOG, four, 3), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"A_log", "count", "size"});
    CheckFailure(set(0, LUMEN_PARAM_A_LOG, many, 5), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"A_log", "count", "size"});
  }
  {
    INFO("dt_bias of kda needs HV * K values, not HV");
    CheckFailure(set(1, LUMEN_PARAM_DT_BIAS, four, 4), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"dt_bias", "count", "size"});
    INFO("dt_bias of gated_delta_net needs HV values, not HV * K");
    CheckFailure(set(0, LUMEN_PARAM_DT_BIAS, many, 32), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"dt_bias", "count", "size"});
  }
  {
    INFO("retention decays: wrong count, outside (0, 1), not finite");
    CheckFailure(set(2, LUMEN_PARAM_DECAY, decays, 3), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"decay", "count", "size"});
    for (float bad : {0.0f, 1.0f, -0.5f, 1.5f, kNaN, kInf}) {
      INFO("decay value " << bad);
      std::vector<float> d = decays;
      d[2] = bad;
      CheckFailure(set(2, LUMEN_PARAM_DECAY, d, 4), LUMEN_ERROR_INVALID_ARGUMENT, {"decay"});
    }
  }
  {
    INFO("A_log not finite");
    std::vector<float> a = four;
    a[1] = kNaN;
    CheckFailure(set(0, LUMEN_PARAM_A_LOG, a, 4), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"finite", "A_log", "nan"});
    a[1] = -kInf;
    CheckFailure(set(0, LUMEN_PARAM_A_LOG, a, 4), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"finite", "A_log", "inf"});
  }
  {
    INFO("parameters the layer does not take");
    CheckFailure(set(3, LUMEN_PARAM_DECAY, four, 4), LUMEN_ERROR_INVALID_ARGUMENT, {"decay"});
    CheckFailure(set(3, LUMEN_PARAM_A_LOG, four, 4), LUMEN_ERROR_INVALID_ARGUMENT, {"A_log"});
    CheckFailure(set(2, LUMEN_PARAM_DT_BIAS, four, 4), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"dt_bias"});
    CheckFailure(set(0, LUMEN_PARAM_DECAY, four, 4), LUMEN_ERROR_INVALID_ARGUMENT, {"decay"});
    CheckFailure(set(0, 42, four, 4), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"param"});
  }
  CheckFailure(lumen_model_builder_set_param(builder.get(), 0, LUMEN_PARAM_A_LOG, nullptr, 4),
               LUMEN_ERROR_INVALID_ARGUMENT, {});

  // Build checks completeness: gate_raw needs A_log and dt_bias.
  lumen_model* model = reinterpret_cast<lumen_model*>(0x1);
  CheckFailure(lumen_model_builder_build(builder.get(), &model), LUMEN_ERROR_INVALID_ARGUMENT,
               {"A_log", "dt_bias"});
  CHECK(model == reinterpret_cast<lumen_model*>(0x1));  // out written only on success
  REQUIRE(set(0, LUMEN_PARAM_A_LOG, four, 4) == LUMEN_OK);
  REQUIRE(set(1, LUMEN_PARAM_A_LOG, four, 4) == LUMEN_OK);
  REQUIRE(set(1, LUMEN_PARAM_DT_BIAS, many, 32) == LUMEN_OK);
  {
    INFO("gated_delta_net (layer 0) still lacks dt_bias");
    CheckFailure(lumen_model_builder_build(builder.get(), &model), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"dt_bias"});
  }
  REQUIRE(set(0, LUMEN_PARAM_DT_BIAS, four, 4) == LUMEN_OK);
  REQUIRE(set(2, LUMEN_PARAM_DECAY, decays, 4) == LUMEN_OK);
  model = nullptr;
  const lumen_status st = lumen_model_builder_build(builder.get(), &model);
  INFO(LastError(st));
  REQUIRE(st == LUMEN_OK);
  ModelPtr owned(model);
  // The builder may build again.
  lumen_model* again = nullptr;
  CHECK(lumen_model_builder_build(builder.get(), &again) == LUMEN_OK);
  lumen_model_destroy(again);

  // A model with no layers cannot be built.
  lumen_model_builder* empty = nullptr;
  REQUIRE(lumen_model_builder_create(&empty) == LUMEN_OK);
  BuilderPtr empty_owned(empty);
  CheckFailure(lumen_model_builder_build(empty, &again), LUMEN_ERROR_INVALID_ARGUMENT,
               {"layer"});
}

TEST_CASE("convolution and Mamba-2 parameters are checked, at set_param and at build",
          "[capi][conv]") {
  lumen_model_builder* raw = nullptr;
  REQUIRE(lumen_model_builder_create(&raw) == LUMEN_OK);
  BuilderPtr builder(raw);
  RefLayer conv = Layer(LUMEN_FAMILY_GATED_DELTA_NET, 2, 4, 8, 6);  // C: 16, 16, 24
  conv.conv_size = 3;
  RefLayer mamba2 = Layer(LUMEN_FAMILY_SSD, 1, 4, 8, 6);
  mamba2.gate_raw = true;
  const RefLayer plain = Layer(LUMEN_FAMILY_GLA, 2, 4, 8, 6);
  RefLayer ssd = Layer(LUMEN_FAMILY_SSD, 1, 4, 8, 6);
  for (const RefLayer* l : std::vector<const RefLayer*>{&conv, &mamba2, &plain, &ssd}) {
    const lumen_layer_options o = ToOptions(*l);
    REQUIRE(lumen_model_builder_add_layer(builder.get(), &o, nullptr) == LUMEN_OK);
  }
  auto set = [&](int32_t layer, int32_t p, const std::vector<float>& v) {
    return lumen_model_builder_set_param(builder.get(), layer, p, v.data(),
                                         static_cast<int64_t>(v.size()));
  };
  const std::vector<float> q_weight(16 * 3, 0.25f), v_weight(24 * 3, 0.25f);
  const std::vector<float> q_bias(16, 0.5f), v_bias(24, 0.5f), four(4, 0.5f);
  {
    INFO("conv weights and biases need their [C, W] and [C] sizes");
    CheckFailure(set(0, LUMEN_PARAM_CONV_Q_WEIGHT, v_weight), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"conv_q_weight"});
    CheckFailure(set(0, LUMEN_PARAM_CONV_V_WEIGHT, q_weight), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"conv_v_weight"});
    CheckFailure(set(0, LUMEN_PARAM_CONV_K_BIAS, v_bias), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"conv_k_bias"});
    CheckFailure(set(0, LUMEN_PARAM_CONV_V_BIAS, q_bias), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"conv_v_bias"});
  }
  {
    INFO("conv weights must be finite");
    std::vector<float> w = q_weight;
    w[7] = kNaN;
    CheckFailure(set(0, LUMEN_PARAM_CONV_K_WEIGHT, w), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"conv_k_weight", "finite"});
    w[7] = kInf;
    CheckFailure(set(0, LUMEN_PARAM_CONV_Q_BIAS, std::vector<float>(w.begin(), w.begin() + 16)),
                 LUMEN_ERROR_INVALID_ARGUMENT, {"conv_q_bias", "finite"});
  }
  {
    INFO("parameters the layer does not take");
    CheckFailure(set(2, LUMEN_PARAM_CONV_Q_WEIGHT, q_weight), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"conv_size"});
    CheckFailure(set(2, LUMEN_PARAM_CONV_V_BIAS, v_bias), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"conv_size"});
    CheckFailure(set(0, LUMEN_PARAM_D, four), LUMEN_ERROR_INVALID_ARGUMENT, {"D"});
    CheckFailure(set(3, LUMEN_PARAM_D, four), LUMEN_ERROR_INVALID_ARGUMENT, {"gate_raw"});
    CheckFailure(set(3, LUMEN_PARAM_A_LOG, four), LUMEN_ERROR_INVALID_ARGUMENT, {"gate_raw"});
  }
  {
    INFO("D of Mamba-2: [HV], finite");
    CheckFailure(set(1, LUMEN_PARAM_D, std::vector<float>(3, 1.0f)),
                 LUMEN_ERROR_INVALID_ARGUMENT, {"D"});
    std::vector<float> d = four;
    d[0] = kNaN;
    CheckFailure(set(1, LUMEN_PARAM_D, d), LUMEN_ERROR_INVALID_ARGUMENT, {"D", "finite"});
  }

  // Build names the first missing parameter: the conv weights, then Mamba-2's A_log, dt_bias.
  lumen_model* model = nullptr;
  CheckFailure(lumen_model_builder_build(builder.get(), &model), LUMEN_ERROR_INVALID_ARGUMENT,
               {"conv_q_weight"});
  REQUIRE(set(0, LUMEN_PARAM_CONV_Q_WEIGHT, q_weight) == LUMEN_OK);
  REQUIRE(set(0, LUMEN_PARAM_CONV_K_WEIGHT, q_weight) == LUMEN_OK);
  CheckFailure(lumen_model_builder_build(builder.get(), &model), LUMEN_ERROR_INVALID_ARGUMENT,
               {"conv_v_weight"});
  REQUIRE(set(0, LUMEN_PARAM_CONV_V_WEIGHT, v_weight) == LUMEN_OK);
  CheckFailure(lumen_model_builder_build(builder.get(), &model), LUMEN_ERROR_INVALID_ARGUMENT,
               {"A_log"});
  REQUIRE(set(1, LUMEN_PARAM_A_LOG, four) == LUMEN_OK);
  CheckFailure(lumen_model_builder_build(builder.get(), &model), LUMEN_ERROR_INVALID_ARGUMENT,
               {"dt_bias"});
  REQUIRE(set(1, LUMEN_PARAM_DT_BIAS, four) == LUMEN_OK);
  REQUIRE(set(1, LUMEN_PARAM_D, four) == LUMEN_OK);  // optional, as are the conv biases
  CHECK(model == nullptr);
  const lumen_status st = lumen_model_builder_build(builder.get(), &model);
  INFO(LastError(st));
  REQUIRE(st == LUMEN_OK);
  ModelPtr owned(model);

  // The windows are state parts of the layer with a convolution only.
  int64_t count = -1;
  const int64_t expected[3] = {16 * 2, 16 * 2, 24 * 2};
  for (int part = 0; part < 3; ++part) {
    REQUIRE(lumen_model_state_count(model, 0, LUMEN_STATE_CONV_Q + part, &count) == LUMEN_OK);
    CHECK(count == expected[part]);
    REQUIRE(lumen_model_state_count(model, 2, LUMEN_STATE_CONV_Q + part, &count) == LUMEN_OK);
    CHECK(count == 0);
  }
  int64_t bytes = -1;
  REQUIRE(lumen_model_state_bytes(model, 0, &bytes) == LUMEN_OK);
  CHECK(bytes == 4 * (4 * 8 * 6 + 16 * 2 + 16 * 2 + 24 * 2));
  lumen_layer_options o;
  lumen_layer_options_init(&o);
  REQUIRE(lumen_model_layer_options(model, 0, &o) == LUMEN_OK);
  CHECK(o.conv_size == 3);
  CHECK(o.conv_activation == LUMEN_CONV_ACTIVATION_SILU);

  std::string error;
  EnginePtr engine = MakeEngine(model, 1, &error);
  REQUIRE(engine);
  SessionPtr session = MakeSession(engine.get(), &error);
  REQUIRE(session);
  std::vector<float> window(32, 0.0f);
  CheckFailure(lumen_session_read_state(session.get(), 2, LUMEN_STATE_CONV_Q, window.data(), 32),
               LUMEN_ERROR_INVALID_ARGUMENT, {"conv"});
  CheckFailure(lumen_session_read_state(session.get(), 0, LUMEN_STATE_CONV_V, window.data(), 32),
               LUMEN_ERROR_INVALID_ARGUMENT, {"48", "count"});
  CheckFailure(lumen_session_read_state(session.get(), 0, 5, window.data(), 32),
               LUMEN_ERROR_INVALID_ARGUMENT, {"part"});
  window[3] = kNaN;
  CheckFailure(lumen_session_write_state(session.get(), 0, LUMEN_STATE_CONV_K, window.data(), 32),
               LUMEN_ERROR_INVALID_ARGUMENT, {"finite"});
  std::vector<float> read_back(32, 1.0f);
  REQUIRE(lumen_session_read_state(session.get(), 0, LUMEN_STATE_CONV_K, read_back.data(), 32) ==
          LUMEN_OK);
  CHECK(std::all_of(read_back.begin(), read_back.end(), [](float x) { return x == 0.0f; }));
}

TEST_CASE("the convolution's SiLU holds far into both tails", "[capi][conv]") {
  // Inputs of magnitude up to ~300 put the convolution's outputs deep in SiLU's tails, where
  // exp(-x) overflows or vanishes.
  RefLayer layer = Layer(LUMEN_FAMILY_LINEAR_ATTN, 1, 1, 8, 8);
  layer.conv_size = 3;
  std::mt19937 rng(TestSeed());
  RandomParams(&layer, rng);
  TokenData data = RandomTokens(layer, 40, rng);
  for (std::vector<float>* x : {&data.q, &data.k, &data.v}) {
    for (float& e : *x) e *= 100.0f;
  }
  std::string error;
  ModelPtr model = BuildModel({layer}, &error);
  REQUIRE(model);
  EnginePtr engine = MakeEngine(model.get(), 1, &error);
  RefState ref = ZeroState(layer);
  std::vector<double> ref_o;
  RunReference(layer, 40, ToRefInputs(data, LUMEN_DTYPE_FLOAT32), &ref, &ref_o);
  for (Path path : {Path::kStep, Path::kPrefill}) {
    SessionPtr session = MakeSession(engine.get(), &error);
    OutputBuffer out;
    REQUIRE(RunSession(session.get(), 0, layer, EncodeTokens(data, LUMEN_DTYPE_FLOAT32), path,
                       {}, LUMEN_DTYPE_FLOAT32, &out, &error) == LUMEN_OK);
    const ErrorReport e = Measure(out.Values(), ref_o);
    INFO((path == Path::kStep ? "step: " : "prefill: ") << e.Describe());
    CHECK(e.Passes(path == Path::kStep ? kStepBound : kPrefillBound));
  }
}

TEST_CASE("model queries resolve defaults and check the layer index", "[capi]") {
  RefLayer a = Layer(LUMEN_FAMILY_LINEAR_ATTN, 2, 0, 16, 8);  // HV = 0 means H
  a.feature_map = LUMEN_FEATURE_MAP_ELU1;
  a.normalize = true;
  const RefLayer b = Layer(LUMEN_FAMILY_RETENTION, 2, 6, 9, 5);
  std::string error;
  ModelPtr model = BuildModel({a, b}, &error);
  INFO(error);
  REQUIRE(model);
  int32_t n = 0;
  REQUIRE(lumen_model_num_layers(model.get(), &n) == LUMEN_OK);
  CHECK(n == 2);
  lumen_layer_options o;
  lumen_layer_options_init(&o);
  REQUIRE(lumen_model_layer_options(model.get(), 0, &o) == LUMEN_OK);
  CHECK(o.struct_size == sizeof(lumen_layer_options));
  CHECK(o.family == LUMEN_FAMILY_LINEAR_ATTN);
  CHECK(o.num_value_heads == 2);
  CHECK(o.scale == Approx(0.25f));
  CHECK(o.normalize_eps == Approx(1e-6f));
  CHECK(o.feature_map == LUMEN_FEATURE_MAP_ELU1);
  CHECK(o.normalize == 1);
  REQUIRE(lumen_model_layer_options(model.get(), 1, &o) == LUMEN_OK);
  CHECK(o.num_value_heads == 6);
  CHECK(o.scale == Approx(1.0 / 3.0));
  int64_t count = -1;
  REQUIRE(lumen_model_state_count(model.get(), 0, LUMEN_STATE_MATRIX, &count) == LUMEN_OK);
  CHECK(count == 2 * 16 * 8);
  REQUIRE(lumen_model_state_count(model.get(), 0, LUMEN_STATE_NORMALIZER, &count) == LUMEN_OK);
  CHECK(count == 2 * 16);
  REQUIRE(lumen_model_state_count(model.get(), 1, LUMEN_STATE_NORMALIZER, &count) == LUMEN_OK);
  CHECK(count == 0);

  lumen_layer_options untouched;
  std::memset(&untouched, 0x5a, sizeof untouched);
  lumen_layer_options probe = untouched;
  CheckFailure(lumen_model_layer_options(model.get(), 2, &probe), LUMEN_ERROR_OUT_OF_RANGE,
               {"layer"});
  CHECK(std::memcmp(&probe, &untouched, sizeof probe) == 0);
  CheckFailure(lumen_model_layer_options(model.get(), -1, &probe), LUMEN_ERROR_OUT_OF_RANGE,
               {"layer"});
  count = 777;
  CheckFailure(lumen_model_state_count(model.get(), 2, LUMEN_STATE_MATRIX, &count),
               LUMEN_ERROR_OUT_OF_RANGE, {"layer"});
  CHECK(count == 777);
  CheckFailure(lumen_model_state_count(model.get(), 0, 7, &count),
               LUMEN_ERROR_INVALID_ARGUMENT, {"part"});
  CheckFailure(lumen_model_state_bytes(model.get(), 2, &count), LUMEN_ERROR_OUT_OF_RANGE,
               {"layer"});
  CheckFailure(lumen_model_state_bytes(model.get(), -2, &count), LUMEN_ERROR_OUT_OF_RANGE,
               {"layer"});
  CHECK(count == 777);
}

}  // namespace
}  // namespace lumen_test

// ---------------------------------------------------------------------------------------------
// Sizes at the int64 edge

namespace lumen_fixture {
namespace {

using lumen_test::BuilderPtr;

constexpr int64_t kMaxSessionBytes = int64_t{1} << 62;

// linear_attn at the largest dims a layer may have: HV = 65536, K = V = 16384, so its state
// is 2^44 elements, 2^46 bytes in fp32.
lumen_layer_options LargestLayer(int32_t state_dtype) {
  lumen_layer_options options;
  lumen_layer_options_init(&options);
  options.family = LUMEN_FAMILY_LINEAR_ATTN;
  options.num_heads = 1;
  options.num_value_heads = 65536;
  options.key_dim = 16384;
  options.value_dim = 16384;
  options.state_dtype = state_dtype;
  return options;
}

// Builds a model of `count` copies of `layer`; returns its status (and model on success).
lumen_status Build(const lumen_layer_options& layer, int32_t count, ModelPtr* model) {
  lumen_model_builder* raw = nullptr;
  REQUIRE_OK(lumen_model_builder_create(&raw));
  BuilderPtr builder(raw);
  int32_t refused = 0;
  for (int32_t i = 0; i < count; ++i) {
    refused += lumen_model_builder_add_layer(builder.get(), &layer, nullptr) != LUMEN_OK;
  }
  REQUIRE(refused == 0);
  lumen_model* built = nullptr;
  const lumen_status status = lumen_model_builder_build(builder.get(), &built);
  model->reset(built);
  return status;
}

TEST_CASE("a model whose state passes 2^62 bytes is rejected when it is built", "[sizes]") {
  ModelPtr model;
  // 2^16 + 1 layers of 2^46 bytes: past 2^62 (the review's 2^17 layers overflowed int64).
  for (int32_t layers : {65537, 131072}) {
    INFO(layers << " layers");
    const lumen_status status = Build(LargestLayer(LUMEN_DTYPE_FLOAT32), layers, &model);
    const std::string message = lumen_last_error_message();
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(message.find("too large") != std::string::npos);
    CHECK(model == nullptr);
  }
}

TEST_CASE("a model whose fp32 snapshot passes 2^62 bytes is rejected, though its bf16 state "
          "fits", "[sizes]") {
  ModelPtr model;
  // 2^17 layers of 2^45 bf16 bytes: a state of exactly 2^62, a snapshot of 2^63 and more.
  const lumen_status status = Build(LargestLayer(LUMEN_DTYPE_BFLOAT16), 131072, &model);
  INFO(Describe(status));
  CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(model == nullptr);
}

TEST_CASE("a model of exactly 2^62 bytes builds, reports its size, and a session of it fails "
          "cleanly", "[sizes]") {
  ModelPtr model;
  REQUIRE_OK(Build(LargestLayer(LUMEN_DTYPE_FLOAT32), 65536, &model));
  int64_t bytes = -1;
  REQUIRE_OK(lumen_model_state_bytes(model.get(), -1, &bytes));
  CHECK(bytes == kMaxSessionBytes);
  REQUIRE_OK(lumen_model_state_bytes(model.get(), 65535, &bytes));
  CHECK(bytes == int64_t{1} << 46);
  int64_t count = -1;
  REQUIRE_OK(lumen_model_state_count(model.get(), 0, LUMEN_STATE_MATRIX, &count));
  CHECK(count == int64_t{1} << 44);

  lumen_engine* raw_engine = nullptr;
  REQUIRE_OK(lumen_engine_create(model.get(), nullptr, &raw_engine));
  EnginePtr engine(raw_engine);
  // 4 EiB cannot be allocated: the session is refused, nothing crashes.
  lumen_session* session = nullptr;
  const lumen_status status = lumen_session_create(engine.get(), &session);
  INFO(Describe(status));
  CHECK(status == LUMEN_ERROR_OUT_OF_MEMORY);
  CHECK(session == nullptr);
}

}  // namespace
}  // namespace lumen_fixture
