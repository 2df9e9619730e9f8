// The layer presets of lumen.h (Qwen3-Next's gated_delta_net, Kimi Linear's kda, Mamba-2):
// the published dims and options, and each one, at smaller dims set afterwards, builds and
// runs like the float64 reference. Run again on CUDA by the `gpu` label
// (lumen_presets_on_cuda).

#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/reference/layer_reference.h"

namespace lumen_test {
namespace {

TEST_CASE("presets describe the published layers and every field stays settable",
          "[capi][conv]") {
  lumen_layer_options o;
  lumen_layer_options_init_qwen3_next_gated_delta_net(&o);
  CHECK(o.struct_size == sizeof(lumen_layer_options));
  CHECK(o.family == LUMEN_FAMILY_GATED_DELTA_NET);
  CHECK(o.num_heads == 16);
  CHECK(o.num_value_heads == 32);
  CHECK(o.key_dim == 128);
  CHECK(o.value_dim == 128);
  CHECK(o.conv_size == 4);
  CHECK(o.conv_activation == LUMEN_CONV_ACTIVATION_SILU);
  CHECK((o.qk_l2norm == 1 && o.beta_sigmoid == 1 && o.gate_raw == 1));
  // Qwen3-Next's config keeps beta = sigmoid(logit) and the unbounded raw gate.
  CHECK((o.allow_neg_eigval == 0 && o.gate_lower_bound == 0.0f));
  CHECK(o.scale == 0.0f);
  CHECK(o.state_dtype == LUMEN_DTYPE_FLOAT32);

  lumen_layer_options_init_kimi_linear_kda(&o);
  CHECK(o.family == LUMEN_FAMILY_KDA);
  CHECK(o.num_heads == 32);
  CHECK(o.num_value_heads == 32);
  CHECK(o.key_dim == 128);
  CHECK(o.value_dim == 128);
  CHECK(o.conv_size == 4);
  CHECK((o.qk_l2norm == 1 && o.beta_sigmoid == 1 && o.gate_raw == 1));

  lumen_layer_options_init_mamba2(&o);
  CHECK(o.family == LUMEN_FAMILY_SSD);
  CHECK(o.num_heads == 1);
  CHECK(o.num_value_heads == 80);
  CHECK(o.key_dim == 128);
  CHECK(o.value_dim == 64);
  CHECK(o.scale == 1.0f);
  CHECK(o.conv_size == 4);
  CHECK((o.gate_raw == 1 && o.qk_l2norm == 0 && o.beta_sigmoid == 0));

  lumen_layer_options_init_qwen3_next_gated_delta_net(nullptr);  // no-op
  lumen_layer_options_init_kimi_linear_kda(nullptr);
  lumen_layer_options_init_mamba2(nullptr);

  // Each preset, at smaller dims set afterwards, builds and runs a prefill and a step that
  // match the float64 reference.
  auto from = [](const lumen_layer_options& p) {
    RefLayer l;
    l.family = p.family;
    l.num_heads = p.num_heads;
    l.num_value_heads = p.num_value_heads;
    l.key_dim = p.key_dim;
    l.value_dim = p.value_dim;
    l.scale = p.scale;
    l.qk_l2norm = p.qk_l2norm != 0;
    l.beta_sigmoid = p.beta_sigmoid != 0;
    l.allow_neg_eigval = p.allow_neg_eigval != 0;
    l.gate_lower_bound = p.gate_lower_bound;
    l.gate_raw = p.gate_raw != 0;
    l.conv_size = p.conv_size;
    l.conv_activation = p.conv_activation;
    return l;
  };
  std::mt19937 rng(TestSeed());
  for (void (*init)(lumen_layer_options*) :
       {&lumen_layer_options_init_qwen3_next_gated_delta_net,
        &lumen_layer_options_init_kimi_linear_kda, &lumen_layer_options_init_mamba2}) {
    init(&o);
    o.num_heads = o.num_heads == 1 ? 1 : 2;
    o.num_value_heads = 4;
    o.key_dim = 16;
    o.value_dim = 8;
    RefLayer layer = from(o);
    if (o.family == LUMEN_FAMILY_SSD) {
      for (auto& bias : layer.conv_bias) bias = {0.0f};  // Mamba-2's conv1d has biases
      layer.d_skip = {0.0f};
    }
    RandomParams(&layer, rng);
    INFO(layer.Describe());
    std::string error;
    ModelPtr model = BuildModel({layer}, &error);
    INFO(error);
    REQUIRE(model);
    EnginePtr engine = MakeEngine(model.get(), 1, &error);
    SessionPtr session = MakeSession(engine.get(), &error);
    REQUIRE(session);
    const TokenData data = RandomTokens(layer, 9, rng);
    RefState ref = ZeroState(layer);
    std::vector<double> ref_o;
    RunReference(layer, 9, ToRefInputs(data, LUMEN_DTYPE_FLOAT32), &ref, &ref_o);
    OutputBuffer out;
    REQUIRE(RunSession(session.get(), 0, layer, EncodeTokens(data, LUMEN_DTYPE_FLOAT32),
                       Path::kPrefill, {8, 1}, LUMEN_DTYPE_FLOAT32, &out, &error) == LUMEN_OK);
    const ErrorReport e = Measure(out.Values(), ref_o);
    INFO(e.Describe());
    CHECK(e.Passes(kPrefillBound));
  }
}

}  // namespace
}  // namespace lumen_test
