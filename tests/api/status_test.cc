// The C API's basic contract (lumen.h): the header compiles as C99 and works from C,
// versions, family names, the calling thread's last error message, destroy(NULL), and NULL
// handles and out-pointers rejected with INVALID_ARGUMENT, changing nothing. The statuses'
// names and values are tests/header/status_test.cc's.

#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lumen/lumen.h"
#include "tests/api/api_test_util.h"
#include "tests/reference/layer_reference.h"

extern "C" int lumen_test_header_is_c(void);

namespace lumen_test {
namespace {

TEST_CASE("lumen.h compiles as C99 and works from C", "[capi]") {
  CHECK(lumen_test_header_is_c() == 0);
}

TEST_CASE("version macros match the library", "[capi]") {
  CHECK(lumen_version_number() ==
        LUMEN_VERSION_MAJOR * 10000 + LUMEN_VERSION_MINOR * 100 + LUMEN_VERSION_PATCH);
  REQUIRE(lumen_version_string() != nullptr);
  const std::string expected = std::to_string(LUMEN_VERSION_MAJOR) + "." +
                               std::to_string(LUMEN_VERSION_MINOR) + "." +
                               std::to_string(LUMEN_VERSION_PATCH);
  CHECK(std::string(lumen_version_string()) == expected);
  // The header's own number equals the loaded library's (this build: one and the same).
  CHECK(lumen_version_number() == LUMEN_VERSION_NUMBER);
  CHECK(LUMEN_VERSION_NUMBER >= 200);  // 0.2.0 added LUMEN_VERSION_NUMBER itself
}

TEST_CASE("every family has its fla name, and anything else is unknown", "[capi]") {
  // Spelled out here, not taken from the library, so that a renamed family fails.
  const std::pair<int32_t, const char*> names[] = {
      {LUMEN_FAMILY_LINEAR_ATTN, "linear_attn"}, {LUMEN_FAMILY_RETENTION, "retention"},
      {LUMEN_FAMILY_SSD, "ssd"},                 {LUMEN_FAMILY_GLA, "gla"},
      {LUMEN_FAMILY_DELTA_NET, "delta_net"},     {LUMEN_FAMILY_GATED_DELTA_NET, "gated_delta_net"},
      {LUMEN_FAMILY_KDA, "kda"}};
  for (const auto& [family, name] : names) {
    REQUIRE(lumen_family_string(family) != nullptr);
    CHECK(std::string(lumen_family_string(family)) == name);
  }
  for (int32_t other : {0, 8, -1, 1 << 30}) {
    REQUIRE(lumen_family_string(other) != nullptr);
    CHECK(std::string(lumen_family_string(other)) == "unknown");
  }
}

TEST_CASE("the last error message belongs to the calling thread", "[capi]") {
  std::string fresh, after_failure;
  lumen_status status = LUMEN_OK;
  std::thread([&] {
    fresh = lumen_last_error_message();
    status = lumen_model_builder_create(nullptr);
    after_failure = lumen_last_error_message();
  }).join();
  CHECK(fresh.empty());
  CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(!after_failure.empty());

  // A failure here is not seen by another thread.
  CHECK(lumen_model_builder_build(nullptr, nullptr) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(std::strlen(lumen_last_error_message()) > 0);
  std::string other;
  std::thread([&] { other = lumen_last_error_message(); }).join();
  CHECK(other.empty());
}

TEST_CASE("destroy(NULL) is a no-op", "[capi]") {
  lumen_model_builder_destroy(nullptr);
  lumen_model_destroy(nullptr);
  lumen_engine_destroy(nullptr);
  lumen_session_destroy(nullptr);
  SUCCEED();
}

TEST_CASE("NULL handles and out-pointers are rejected", "[capi]") {
  std::string error;
  ModelPtr model = BuildModel({Layer(LUMEN_FAMILY_LINEAR_ATTN, 1, 1, 4, 4)}, &error);
  INFO(error);
  REQUIRE(model);
  EnginePtr engine = MakeEngine(model.get(), 1, &error);
  REQUIRE(engine);
  SessionPtr session = MakeSession(engine.get(), &error);
  REQUIRE(session);
  lumen_model_builder* raw_builder = nullptr;
  REQUIRE(lumen_model_builder_create(&raw_builder) == LUMEN_OK);
  BuilderPtr builder(raw_builder);
  lumen_layer_options options = ToOptions(Layer(LUMEN_FAMILY_LINEAR_ATTN, 1, 1, 4, 4));
  lumen_engine_options engine_options;
  lumen_engine_options_init(&engine_options);
  std::vector<float> q(4, 0.5f), k(4, 0.25f), v(4, 1.0f), o(4, 0.0f), state(16, 0.0f);
  lumen_layer_inputs in;
  lumen_layer_inputs_init(&in);
  in.q = q.data();
  in.q_count = 4;
  in.k = k.data();
  in.k_count = 4;
  in.v = v.data();
  in.v_count = 4;
  lumen_layer_output out;
  lumen_layer_output_init(&out);
  out.o = o.data();
  out.o_count = 4;
  lumen_session* handles[1] = {session.get()};
  lumen_session* null_handles[1] = {nullptr};
  const int32_t cu[2] = {0, 1};
  int32_t i32 = 0;
  int64_t i64 = 0;
  int32_t backend;
  lumen_layer_options options_out;
  lumen_model* model_out = nullptr;
  lumen_engine* engine_out = nullptr;
  lumen_session* session_out = nullptr;

  const struct {
    const char* name;
    std::function<lumen_status()> call;
  } calls[] = {
      {"builder_create(NULL)", [&] { return lumen_model_builder_create(nullptr); }},
      {"add_layer(NULL builder)",
       [&] { return lumen_model_builder_add_layer(nullptr, &options, nullptr); }},
      {"add_layer(NULL options)",
       [&] { return lumen_model_builder_add_layer(builder.get(), nullptr, nullptr); }},
      {"set_param(NULL builder)",
       [&] { return lumen_model_builder_set_param(nullptr, 0, LUMEN_PARAM_DECAY, q.data(), 1); }},
      {"build(NULL builder)", [&] { return lumen_model_builder_build(nullptr, &model_out); }},
      {"build(NULL out)", [&] { return lumen_model_builder_build(builder.get(), nullptr); }},
      {"num_layers(NULL model)", [&] { return lumen_model_num_layers(nullptr, &i32); }},
      {"num_layers(NULL out)", [&] { return lumen_model_num_layers(model.get(), nullptr); }},
      {"layer_options(NULL model)",
       [&] { return lumen_model_layer_options(nullptr, 0, &options_out); }},
      {"layer_options(NULL out)",
       [&] { return lumen_model_layer_options(model.get(), 0, nullptr); }},
      {"state_count(NULL model)",
       [&] { return lumen_model_state_count(nullptr, 0, LUMEN_STATE_MATRIX, &i64); }},
      {"state_count(NULL out)",
       [&] { return lumen_model_state_count(model.get(), 0, LUMEN_STATE_MATRIX, nullptr); }},
      {"state_bytes(NULL model)", [&] { return lumen_model_state_bytes(nullptr, 0, &i64); }},
      {"state_bytes(NULL out)", [&] { return lumen_model_state_bytes(model.get(), 0, nullptr); }},
      {"engine_create(NULL model)",
       [&] { return lumen_engine_create(nullptr, &engine_options, &engine_out); }},
      {"engine_create(NULL out)",
       [&] { return lumen_engine_create(model.get(), &engine_options, nullptr); }},
      {"engine_backend(NULL engine)", [&] { return lumen_engine_backend(nullptr, &backend); }},
      {"engine_backend(NULL out)", [&] { return lumen_engine_backend(engine.get(), nullptr); }},
      {"session_create(NULL engine)", [&] { return lumen_session_create(nullptr, &session_out); }},
      {"session_create(NULL out)", [&] { return lumen_session_create(engine.get(), nullptr); }},
      {"fork(NULL session)", [&] { return lumen_session_fork(nullptr, &session_out); }},
      {"fork(NULL out)", [&] { return lumen_session_fork(session.get(), nullptr); }},
      {"reset(NULL)", [&] { return lumen_session_reset(nullptr); }},
      {"session_model(NULL session)", [&] { return lumen_session_model(nullptr, &model_out); }},
      {"session_model(NULL out)", [&] { return lumen_session_model(session.get(), nullptr); }},
      {"tokens(NULL session)", [&] { return lumen_session_tokens(nullptr, 0, &i64); }},
      {"tokens(NULL out)", [&] { return lumen_session_tokens(session.get(), 0, nullptr); }},
      {"read_state(NULL session)",
       [&] { return lumen_session_read_state(nullptr, 0, LUMEN_STATE_MATRIX, state.data(), 16); }},
      {"read_state(NULL out)",
       [&] { return lumen_session_read_state(session.get(), 0, LUMEN_STATE_MATRIX, nullptr, 16); }},
      {"write_state(NULL session)",
       [&] { return lumen_session_write_state(nullptr, 0, LUMEN_STATE_MATRIX, state.data(), 16); }},
      {"write_state(NULL values)",
       [&] {
         return lumen_session_write_state(session.get(), 0, LUMEN_STATE_MATRIX, nullptr, 16);
       }},
      {"step(NULL session)", [&] { return lumen_session_step(nullptr, 0, &in, &out); }},
      {"step(NULL inputs)", [&] { return lumen_session_step(session.get(), 0, nullptr, &out); }},
      {"step(NULL output)", [&] { return lumen_session_step(session.get(), 0, &in, nullptr); }},
      {"prefill(NULL session)", [&] { return lumen_session_prefill(nullptr, 0, 1, &in, &out); }},
      {"prefill(NULL inputs)",
       [&] { return lumen_session_prefill(session.get(), 0, 1, nullptr, &out); }},
      {"prefill(NULL output)",
       [&] { return lumen_session_prefill(session.get(), 0, 1, &in, nullptr); }},
      {"step_batch(NULL engine)",
       [&] { return lumen_engine_step_batch(nullptr, 0, handles, 1, &in, &out); }},
      {"step_batch(NULL sessions)",
       [&] { return lumen_engine_step_batch(engine.get(), 0, nullptr, 1, &in, &out); }},
      {"step_batch(a NULL session)",
       [&] { return lumen_engine_step_batch(engine.get(), 0, null_handles, 1, &in, &out); }},
      {"step_batch(NULL inputs)",
       [&] { return lumen_engine_step_batch(engine.get(), 0, handles, 1, nullptr, &out); }},
      {"step_batch(NULL output)",
       [&] { return lumen_engine_step_batch(engine.get(), 0, handles, 1, &in, nullptr); }},
      {"prefill_varlen(NULL engine)",
       [&] { return lumen_engine_prefill_varlen(nullptr, 0, handles, 1, cu, &in, &out); }},
      {"prefill_varlen(NULL sessions)",
       [&] { return lumen_engine_prefill_varlen(engine.get(), 0, nullptr, 1, cu, &in, &out); }},
      {"prefill_varlen(a NULL session)",
       [&] {
         return lumen_engine_prefill_varlen(engine.get(), 0, null_handles, 1, cu, &in, &out);
       }},
      {"prefill_varlen(NULL cu_seqlens)",
       [&] {
         return lumen_engine_prefill_varlen(engine.get(), 0, handles, 1, nullptr, &in, &out);
       }},
      {"prefill_varlen(NULL inputs)",
       [&] { return lumen_engine_prefill_varlen(engine.get(), 0, handles, 1, cu, nullptr, &out); }},
      {"prefill_varlen(NULL output)",
       [&] { return lumen_engine_prefill_varlen(engine.get(), 0, handles, 1, cu, &in, nullptr); }},
  };
  for (const auto& c : calls) {
    INFO(c.name);
    CheckFailure(c.call(), LUMEN_ERROR_INVALID_ARGUMENT, {});
  }
  CHECK(model_out == nullptr);
  CHECK(engine_out == nullptr);
  CHECK(session_out == nullptr);
  int64_t tokens = -1;
  REQUIRE(lumen_session_tokens(session.get(), 0, &tokens) == LUMEN_OK);
  CHECK(tokens == 0);
  CHECK(o == std::vector<float>(4, 0.0f));
}

}  // namespace
}  // namespace lumen_test
