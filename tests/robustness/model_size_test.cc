// Models at the edge of what a session's size can be: every size derived from a model must
// fit in int64_t, so a model whose state or snapshot would not is rejected when it is built
// (it used to build with a negative state size, then crash in a step).

#include <string>

#include "tests/robustness/robustness_util.h"

namespace lumen_robust {
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
}  // namespace lumen_robust
