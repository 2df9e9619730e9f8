// lumen.h's "Model" section: layer options and presets, builders, parameters, building, and
// the model's queries.

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "lumen/lumen.h"
#include "tests/header/header_claims.h"
#include "tests/reference/layer_reference.h"
#include "tests/reference/session_fixture.h"

namespace lumen_fixture {
namespace {

using lumen_test::BuilderPtr;

lumen_status Fails(lumen_status status, const std::vector<std::string>& words) {
  const std::string message = lumen_last_error_message();
  INFO(lumen_status_string(status) << ": \"" << message << "\"");
  CHECK(!message.empty());
  for (const std::string& word : words) {
    INFO("the message should name " << word);
    CHECK(message.find(word) != std::string::npos);
  }
  return status;
}

BuilderPtr NewBuilder() {
  lumen_model_builder* builder = nullptr;
  REQUIRE_OK(lumen_model_builder_create(&builder));
  return BuilderPtr(builder);
}

TEST_CASE("lumen_layer_options_init(NULL) and the presets with NULL are no-ops", "[header]") {
  LUMEN_CLAIM("lumen_layer_options_init", "NULL is a no-op.");
  LUMEN_CLAIM("Presets", "NULL is a no-op.");
  REQUIRE(lumen_model_builder_create(nullptr) == LUMEN_ERROR_INVALID_ARGUMENT);
  const std::string message = lumen_last_error_message();
  lumen_layer_options_init(nullptr);
  lumen_layer_options_init_qwen3_next_gated_delta_net(nullptr);
  lumen_layer_options_init_kimi_linear_kda(nullptr);
  lumen_layer_options_init_mamba2(nullptr);
  CHECK(lumen_last_error_message() == message);
}

TEST_CASE("lumen_model_builder_create(NULL) is INVALID_ARGUMENT", "[header]") {
  LUMEN_CLAIM("lumen_model_builder_create", "Returns LUMEN_ERROR_INVALID_ARGUMENT if out is NULL.");
  Fails(lumen_model_builder_create(nullptr), {"NULL"});
  CHECK(lumen_model_builder_create(nullptr) == LUMEN_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("destroying a NULL builder or model is a no-op", "[header]") {
  LUMEN_CLAIM("lumen_model_builder_destroy", "NULL is a no-op.");
  LUMEN_CLAIM("lumen_model_destroy", "NULL is a no-op.");
  REQUIRE(lumen_model_builder_create(nullptr) == LUMEN_ERROR_INVALID_ARGUMENT);
  const std::string message = lumen_last_error_message();
  lumen_model_builder_destroy(nullptr);
  lumen_model_destroy(nullptr);
  CHECK(lumen_last_error_message() == message);
}

TEST_CASE("add_layer rejects bad options with INVALID_ARGUMENT naming the problem",
          "[header]") {
  LUMEN_CLAIM("lumen_model_builder_add_layer",
              "Returns LUMEN_ERROR_INVALID_ARGUMENT with a message naming the problem.");
  BuilderPtr builder = NewBuilder();
  const lumen_layer_options valid = lumen_test::ToOptions(SmallLayer(LUMEN_FAMILY_GLA));
  struct Case {
    const char* name;
    void (*spoil)(lumen_layer_options&);
  };
  const Case cases[] = {
      {"family", [](lumen_layer_options& o) { o.family = 99; }},
      {"num_heads", [](lumen_layer_options& o) { o.num_heads = 0; }},
      {"num_value_heads", [](lumen_layer_options& o) { o.num_value_heads = 3; }},
      {"key_dim", [](lumen_layer_options& o) { o.key_dim = -1; }},
      {"scale", [](lumen_layer_options& o) { o.scale = -1.0f; }},
      {"feature_map", [](lumen_layer_options& o) { o.feature_map = LUMEN_FEATURE_MAP_RELU; }},
      {"beta_sigmoid", [](lumen_layer_options& o) { o.beta_sigmoid = 1; }},
      {"allow_neg_eigval", [](lumen_layer_options& o) { o.allow_neg_eigval = 1; }},
      {"gate_lower_bound", [](lumen_layer_options& o) { o.gate_lower_bound = -5.0f; }},
      {"qk_l2norm", [](lumen_layer_options& o) { o.qk_l2norm = 2; }},
      {"state_dtype", [](lumen_layer_options& o) { o.state_dtype = LUMEN_DTYPE_FLOAT16; }},
      {"conv_size", [](lumen_layer_options& o) { o.conv_size = 65; }},
      {"conv_activation", [](lumen_layer_options& o) { o.conv_activation = 7; }},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    lumen_layer_options options = valid;
    c.spoil(options);
    int32_t index = -5;
    const lumen_status status = lumen_model_builder_add_layer(builder.get(), &options, &index);
    CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(index == -5);
    const std::string message = lumen_last_error_message();
    INFO("message \"" << message << "\"");
    // The message names the field, or the dimension's letter in docs/spec.md.
    auto names = [&](const char* field, const char* letter) {
      return std::strcmp(c.name, field) == 0 && message.find(letter) != std::string::npos;
    };
    CHECK((message.find(c.name) != std::string::npos || names("num_value_heads", "HV") ||
           names("num_heads", "H ") || names("key_dim", "K ")));
  }
}

TEST_CASE("set_param: OUT_OF_RANGE for a bad layer, INVALID_ARGUMENT for a parameter the "
          "layer does not take, a wrong count or values that are not finite",
          "[header]") {
  LUMEN_CLAIM("lumen_model_builder_set_param",
              "Returns LUMEN_ERROR_OUT_OF_RANGE for a bad layer index and "
              "LUMEN_ERROR_INVALID_ARGUMENT for a parameter the layer does not take (e.g. conv "
              "weights without conv_size, D but not ssd with gate_raw), a wrong count or values "
              "that are not finite (decays must lie in (0, 1)).");
  BuilderPtr builder = NewBuilder();
  RefLayer retention = SmallLayer(LUMEN_FAMILY_RETENTION);  // HV = 4
  RefLayer gdn = SmallLayer(LUMEN_FAMILY_GATED_DELTA_NET);
  gdn.gate_raw = true;
  for (const RefLayer& layer : {retention, gdn}) {
    const lumen_layer_options o = lumen_test::ToOptions(layer);
    REQUIRE_OK(lumen_model_builder_add_layer(builder.get(), &o, nullptr));
  }
  auto set = [&](int32_t layer, int32_t param, std::vector<float> values) {
    return lumen_model_builder_set_param(builder.get(), layer, param, values.data(),
                                         static_cast<int64_t>(values.size()));
  };
  const std::vector<float> decays = {0.5f, 0.6f, 0.7f, 0.8f};
  CHECK(Fails(set(2, LUMEN_PARAM_DECAY, decays), {}) == LUMEN_ERROR_OUT_OF_RANGE);
  CHECK(Fails(set(-1, LUMEN_PARAM_DECAY, decays), {}) == LUMEN_ERROR_OUT_OF_RANGE);
  CHECK(Fails(set(0, LUMEN_PARAM_CONV_Q_WEIGHT, std::vector<float>(8 * 4, 1.0f)), {}) ==
        LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(Fails(set(1, LUMEN_PARAM_D, decays), {}) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(Fails(set(0, LUMEN_PARAM_DECAY, {0.5f, 0.6f, 0.7f}), {}) ==
        LUMEN_ERROR_INVALID_ARGUMENT);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(Fails(set(1, LUMEN_PARAM_A_LOG, {0.0f, nan, 0.0f, 0.0f}), {}) ==
        LUMEN_ERROR_INVALID_ARGUMENT);
  for (float decay : {0.0f, 1.0f, 1.5f}) {
    INFO("decay " << decay);
    CHECK(Fails(set(0, LUMEN_PARAM_DECAY, {0.5f, decay, 0.7f, 0.8f}), {"decay"}) ==
          LUMEN_ERROR_INVALID_ARGUMENT);
  }
  CHECK(set(0, LUMEN_PARAM_DECAY, decays) == LUMEN_OK);
}

TEST_CASE("build names a layer's missing parameters, and wants 1 to 2^20 layers", "[header]") {
  LUMEN_CLAIM("lumen_model_builder_build",
              "Builds an immutable model from the builder's layers, checking that every layer "
              "has the parameters it needs (A_log and dt_bias with gate_raw; the three conv "
              "weights with conv_size > 0; LUMEN_ERROR_INVALID_ARGUMENT names the layer and what "
              "is missing), that there are 1 to 1048576 (2^20) layers, and that a session's "
              "state fits in 2^62 bytes both as stored and at 4 bytes per element (an fp32 "
              "snapshot), so that every size the library derives from the model fits in "
              "int64_t.");
  LUMEN_CLAIM("lumen_model_builder_build",
              "Returns LUMEN_ERROR_INVALID_ARGUMENT with a message otherwise.");
  lumen_model* model = nullptr;
  {
    INFO("no layer");
    BuilderPtr builder = NewBuilder();
    CHECK(Fails(lumen_model_builder_build(builder.get(), &model), {}) ==
          LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(model == nullptr);
  }
  {
    INFO("layer 1 has gate_raw without dt_bias; then a convolution without its v weights");
    BuilderPtr builder = NewBuilder();
    RefLayer gdn = SmallLayer(LUMEN_FAMILY_GATED_DELTA_NET);
    gdn.gate_raw = true;
    const lumen_layer_options plain = lumen_test::ToOptions(SmallLayer(LUMEN_FAMILY_GLA));
    const lumen_layer_options raw = lumen_test::ToOptions(gdn);
    REQUIRE_OK(lumen_model_builder_add_layer(builder.get(), &plain, nullptr));
    REQUIRE_OK(lumen_model_builder_add_layer(builder.get(), &raw, nullptr));
    std::vector<float> a_log(4, 0.0f);
    REQUIRE_OK(lumen_model_builder_set_param(builder.get(), 1, LUMEN_PARAM_A_LOG, a_log.data(),
                                             4));
    CHECK(Fails(lumen_model_builder_build(builder.get(), &model), {"1", "dt_bias"}) ==
          LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(model == nullptr);
    REQUIRE_OK(lumen_model_builder_set_param(builder.get(), 1, LUMEN_PARAM_DT_BIAS,
                                             a_log.data(), 4));
    lumen_layer_options conv = plain;
    conv.conv_size = 2;
    REQUIRE_OK(lumen_model_builder_add_layer(builder.get(), &conv, nullptr));
    std::vector<float> qk(2 * 4 * 2, 0.5f);
    REQUIRE_OK(lumen_model_builder_set_param(builder.get(), 2, LUMEN_PARAM_CONV_Q_WEIGHT,
                                             qk.data(), 16));
    REQUIRE_OK(lumen_model_builder_set_param(builder.get(), 2, LUMEN_PARAM_CONV_K_WEIGHT,
                                             qk.data(), 16));
    CHECK(Fails(lumen_model_builder_build(builder.get(), &model), {"2", "v"}) ==
          LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(model == nullptr);
  }
  {
    INFO("2^20 layers build, 2^20 + 1 do not");
    BuilderPtr builder = NewBuilder();
    lumen_layer_options tiny;
    lumen_layer_options_init(&tiny);
    tiny.family = LUMEN_FAMILY_LINEAR_ATTN;
    tiny.num_heads = tiny.key_dim = tiny.value_dim = 1;
    int32_t refused = 0;
    for (int32_t i = 0; i < (1 << 20); ++i) {
      refused += lumen_model_builder_add_layer(builder.get(), &tiny, nullptr) != LUMEN_OK;
    }
    REQUIRE(refused == 0);
    REQUIRE_OK(lumen_model_builder_build(builder.get(), &model));
    lumen_test::ModelPtr owner(model);
    model = nullptr;
    REQUIRE_OK(lumen_model_builder_add_layer(builder.get(), &tiny, nullptr));
    CHECK(Fails(lumen_model_builder_build(builder.get(), &model), {"1048576"}) ==
          LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(model == nullptr);
  }
}

TEST_CASE("build leaves the builder unchanged, and it may build again", "[header]") {
  LUMEN_CLAIM("lumen_model_builder_build", "The builder is left unchanged and may build again.");
  BuilderPtr builder = NewBuilder();
  RefLayer gdn = SmallLayer(LUMEN_FAMILY_GATED_DELTA_NET);
  gdn.gate_raw = true;
  const lumen_layer_options raw = lumen_test::ToOptions(gdn);
  REQUIRE_OK(lumen_model_builder_add_layer(builder.get(), &raw, nullptr));
  const std::vector<float> a_log = {0.1f, 0.2f, 0.3f, 0.4f};
  REQUIRE_OK(lumen_model_builder_set_param(builder.get(), 0, LUMEN_PARAM_A_LOG, a_log.data(), 4));
  // A failing build (dt_bias missing) leaves the builder as it was: finish it and build.
  lumen_model* model = nullptr;
  REQUIRE(lumen_model_builder_build(builder.get(), &model) == LUMEN_ERROR_INVALID_ARGUMENT);
  REQUIRE_OK(lumen_model_builder_set_param(builder.get(), 0, LUMEN_PARAM_DT_BIAS, a_log.data(),
                                           4));
  REQUIRE_OK(lumen_model_builder_build(builder.get(), &model));
  lumen_test::ModelPtr first(model);
  // A successful build leaves it too: the same layers build again, and more can be added.
  REQUIRE_OK(lumen_model_builder_build(builder.get(), &model));
  lumen_test::ModelPtr second(model);
  const lumen_layer_options plain = lumen_test::ToOptions(SmallLayer(LUMEN_FAMILY_GLA));
  REQUIRE_OK(lumen_model_builder_add_layer(builder.get(), &plain, nullptr));
  REQUIRE_OK(lumen_model_builder_build(builder.get(), &model));
  lumen_test::ModelPtr third(model);
  int32_t layers[3] = {};
  REQUIRE_OK(lumen_model_num_layers(first.get(), &layers[0]));
  REQUIRE_OK(lumen_model_num_layers(second.get(), &layers[1]));
  REQUIRE_OK(lumen_model_num_layers(third.get(), &layers[2]));
  CHECK(layers[0] == 1);
  CHECK(layers[1] == 1);
  CHECK(layers[2] == 2);
  // The models share the layer the builder held, parameters included.
  int64_t first_bytes = 0, second_bytes = 0;
  REQUIRE_OK(lumen_model_state_bytes(first.get(), 0, &first_bytes));
  REQUIRE_OK(lumen_model_state_bytes(second.get(), 0, &second_bytes));
  CHECK(first_bytes == second_bytes);
}

LUMEN_CLAIM_PROVEN_ELSEWHERE(
    "lumen_model_builder_build",
    "Builds an immutable model from the builder's layers, checking that every layer has the "
    "parameters it needs (A_log and dt_bias with gate_raw; the three conv weights with "
    "conv_size > 0; LUMEN_ERROR_INVALID_ARGUMENT names the layer and what is missing), that "
    "there are 1 to 1048576 (2^20) layers, and that a session's state fits in 2^62 bytes both "
    "as stored and at 4 bytes per element (an fp32 snapshot), so that every size the library "
    "derives from the model fits in int64_t.",
    "tests/api/models_test.cc",
    "a model whose state passes 2^62 bytes is rejected when it is built");
LUMEN_CLAIM_PROVEN_ELSEWHERE(
    "lumen_model_builder_build",
    "Builds an immutable model from the builder's layers, checking that every layer has the "
    "parameters it needs (A_log and dt_bias with gate_raw; the three conv weights with "
    "conv_size > 0; LUMEN_ERROR_INVALID_ARGUMENT names the layer and what is missing), that "
    "there are 1 to 1048576 (2^20) layers, and that a session's state fits in 2^62 bytes both "
    "as stored and at 4 bytes per element (an fp32 snapshot), so that every size the library "
    "derives from the model fits in int64_t.",
    "tests/api/models_test.cc",
    "a model whose fp32 snapshot passes 2^62 bytes is rejected, though its bf16 state fits");

TEST_CASE("lumen_model_layer_options writes the whole fields inside the caller's struct_size",
          "[header][struct_size]") {
  LUMEN_CLAIM("lumen_model_layer_options",
              "Set out->struct_size first (lumen_layer_options_init does): the call writes the "
              "fields that lie wholly inside that size, none beyond this header's sizeof, and "
              "sets struct_size to the bytes written.");
  LUMEN_CLAIM("lumen_model_layer_options",
              "A struct_size below 0.1.0's struct or above 4096 is taken as 0.1.0's struct "
              "(whose callers did not set it).");
  RefLayer layer = SmallLayer(LUMEN_FAMILY_GLA);
  const Stack stack({layer});
  const uint32_t v0 = offsetof(lumen_layer_options, conv_size);
  const uint32_t with_conv_size = offsetof(lumen_layer_options, conv_activation);
  const uint32_t v02 = offsetof(lumen_layer_options, allow_neg_eigval);
  const uint32_t with_eigval = offsetof(lumen_layer_options, gate_lower_bound);
  const uint32_t full = sizeof(lumen_layer_options);
  struct Case {
    uint32_t declared, written;
  };
  for (const Case& c : {Case{v0, v0}, Case{v0 + 1, v0}, Case{v0 + 3, v0},
                        Case{with_conv_size, with_conv_size},
                        Case{with_conv_size + 2, with_conv_size}, Case{v02, v02},
                        Case{v02 + 2, v02}, Case{with_eigval, with_eigval},
                        Case{with_eigval + 1, with_eigval}, Case{full, full},
                        Case{full + 16, full}, Case{4096, full}, Case{0, v0}, Case{v0 - 1, v0},
                        Case{4097, v0}}) {
    INFO("struct_size " << c.declared);
    unsigned char buffer[sizeof(lumen_layer_options) + 32];
    std::memset(buffer, 0x5a, sizeof buffer);
    std::memcpy(buffer, &c.declared, sizeof c.declared);
    REQUIRE_OK(lumen_model_layer_options(stack.model.get(), 0,
                                         reinterpret_cast<lumen_layer_options*>(buffer)));
    uint32_t written = 0;
    std::memcpy(&written, buffer, sizeof written);
    CHECK(written == c.written);
    lumen_layer_options seen;
    std::memcpy(&seen, buffer, sizeof seen);
    CHECK(seen.family == LUMEN_FAMILY_GLA);
    if (c.written > v0) CHECK(seen.conv_size == 0);
    // Not a byte past what was written.
    size_t first_changed_past = sizeof buffer;
    for (size_t i = c.written; i < sizeof buffer; ++i) {
      if (buffer[i] != 0x5a) {
        first_changed_past = i;
        break;
      }
    }
    CHECK(first_changed_past == sizeof buffer);
  }
}

TEST_CASE("an unknown state part is INVALID_ARGUMENT", "[header]") {
  LUMEN_CLAIM("lumen_model_state_count", "An unknown part is LUMEN_ERROR_INVALID_ARGUMENT.");
  const Stack stack({SmallLayer(LUMEN_FAMILY_GLA)});
  for (int32_t part : {-1, LUMEN_STATE_CONV_V + 1, 1000}) {
    INFO("part " << part);
    int64_t count = -7;
    CHECK(Fails(lumen_model_state_count(stack.model.get(), 0, part, &count), {}) ==
          LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(count == -7);
  }
}

TEST_CASE("state counts in fla's layout: a conv window holds W columns; an unknown part or "
          "layout is INVALID_ARGUMENT",
          "[header]") {
  LUMEN_CLAIM("lumen_model_state_count_as",
              "An unknown part or layout is LUMEN_ERROR_INVALID_ARGUMENT.");
  RefLayer layer = SmallLayer(LUMEN_FAMILY_GLA);  // H = 2, HV = 4, K = V = 4
  layer.value_dim = 3;
  layer.conv_size = 3;
  std::mt19937 rng(3);
  lumen_test::RandomParams(&layer, rng);
  const Stack stack({layer, SmallLayer(LUMEN_FAMILY_GLA)});
  const struct {
    int32_t layer, part, layout;
    int64_t count;
  } expected[] = {
      {0, LUMEN_STATE_MATRIX, LUMEN_LAYOUT_FLA, 4 * 4 * 3},
      {0, LUMEN_STATE_NORMALIZER, LUMEN_LAYOUT_FLA, 0},
      {0, LUMEN_STATE_CONV_Q, LUMEN_LAYOUT_FLA, 2 * 4 * 3},
      {0, LUMEN_STATE_CONV_V, LUMEN_LAYOUT_FLA, 4 * 3 * 3},
      {0, LUMEN_STATE_CONV_V, LUMEN_LAYOUT_LUMEN, 4 * 3 * 2},
      {1, LUMEN_STATE_CONV_K, LUMEN_LAYOUT_FLA, 0},
  };
  for (const auto& e : expected) {
    INFO("layer " << e.layer << " part " << e.part << " layout " << e.layout);
    int64_t count = -7;
    REQUIRE_OK(lumen_model_state_count_as(stack.model.get(), e.layer, e.part, e.layout, &count));
    CHECK(count == e.count);
  }
  for (const auto& [part, layout] : {std::pair{-1, int32_t{LUMEN_LAYOUT_FLA}},
                                     std::pair{LUMEN_STATE_CONV_V + 1, int32_t{LUMEN_LAYOUT_FLA}},
                                     std::pair{int32_t{LUMEN_STATE_MATRIX}, 2},
                                     std::pair{int32_t{LUMEN_STATE_MATRIX}, -1}}) {
    INFO("part " << part << " layout " << layout);
    int64_t count = -7;
    CHECK(Fails(lumen_model_state_count_as(stack.model.get(), 0, part, layout, &count), {}) ==
          LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(count == -7);
  }
}

LUMEN_CLAIM_PROVEN_ELSEWHERE(
    "lumen_model_state_bytes",
    "A CPU engine allocates a little more beside it: for each delta-rule layer with fp32 "
    "state, 64 bytes and (K + V) floats per value head, where a step holds back its last write "
    "so that the next one passes over the state once (never visible in the state).",
    "tests/core/session_lifecycle_test.cc",
    "reading, forking, snapshotting or prefilling between steps changes no later bit");

}  // namespace
}  // namespace lumen_fixture
