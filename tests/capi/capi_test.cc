// The C API's contract (lumen.h): versions, statuses and messages, NULL handling, argument
// checks with the right status and a message naming the problem, and that every failing
// call leaves its objects (and the caller's output buffers) unchanged.

#include <catch2/catch.hpp>

#include <cstddef>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lumen/lumen.h"
#include "tests/reference/layer_reference.h"

extern "C" int lumen_test_header_is_c(void);

namespace lumen_test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// True if `message` mentions one of `words`. Words of one or two characters ("q", "HV") must
// match case and stand alone; longer ones match anywhere, ignoring case.
bool Mentions(const std::string& message, const std::vector<std::string>& words) {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string lm = lower(message);
  for (const std::string& w : words) {
    if (w.size() > 2) {
      if (lm.find(lower(w)) != std::string::npos) return true;
      continue;
    }
    for (size_t pos = message.find(w); pos != std::string::npos;
         pos = message.find(w, pos + 1)) {
      const bool left_ok = pos == 0 || !std::isalnum(static_cast<unsigned char>(message[pos - 1]));
      const size_t end = pos + w.size();
      const bool right_ok =
          end >= message.size() || !std::isalnum(static_cast<unsigned char>(message[end]));
      if (left_ok && right_ok) return true;
    }
  }
  return false;
}

std::string Join(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " | ") + w;
  return s;
}

// Checks a failure: the status, a non-empty message, and (if given) that it names the problem.
void CheckFailure(lumen_status got, lumen_status expected,
                  const std::vector<std::string>& words) {
  const std::string message = lumen_last_error_message();
  INFO("status " << lumen_status_string(got) << ", expected " << lumen_status_string(expected)
                 << "; message \"" << message << "\"");
  CHECK(got == expected);
  CHECK(!message.empty());
  if (!words.empty()) {
    INFO("the message should mention one of: " << Join(words));
    CHECK(Mentions(message, words));
  }
}

RefLayer Layer(int32_t family, int32_t H, int32_t HV, int32_t K, int32_t V) {
  RefLayer l;
  l.family = family;
  l.num_heads = H;
  l.num_value_heads = HV;
  l.key_dim = K;
  l.value_dim = V;
  return l;
}

// ---------------------------------------------------------------------------------------------

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
}

TEST_CASE("every status has a distinct name", "[capi]") {
  const lumen_status all[] = {LUMEN_OK,
                              LUMEN_ERROR_INVALID_ARGUMENT,
                              LUMEN_ERROR_OUT_OF_RANGE,
                              LUMEN_ERROR_MODEL_MISMATCH,
                              LUMEN_ERROR_OUT_OF_MEMORY,
                              LUMEN_ERROR_UNSUPPORTED,
                              LUMEN_ERROR_BACKEND,
                              LUMEN_ERROR_INTERNAL,
                              LUMEN_ERROR_BUFFER_TOO_SMALL,
                              LUMEN_ERROR_CORRUPT_SNAPSHOT,
                              LUMEN_ERROR_SNAPSHOT_VERSION,
                              LUMEN_ERROR_IO};
  // Values are fixed forever.
  CHECK(LUMEN_OK == 0);
  CHECK(LUMEN_ERROR_INVALID_ARGUMENT == 1);
  CHECK(LUMEN_ERROR_OUT_OF_RANGE == 2);
  CHECK(LUMEN_ERROR_MODEL_MISMATCH == 3);
  CHECK(LUMEN_ERROR_OUT_OF_MEMORY == 4);
  CHECK(LUMEN_ERROR_UNSUPPORTED == 5);
  CHECK(LUMEN_ERROR_BACKEND == 6);
  CHECK(LUMEN_ERROR_INTERNAL == 7);
  CHECK(LUMEN_ERROR_BUFFER_TOO_SMALL == 8);
  CHECK(LUMEN_ERROR_CORRUPT_SNAPSHOT == 9);
  CHECK(LUMEN_ERROR_SNAPSHOT_VERSION == 10);
  CHECK(LUMEN_ERROR_IO == 11);
  std::set<std::string> names;
  for (lumen_status s : all) {
    const char* name = lumen_status_string(s);
    REQUIRE(name != nullptr);
    INFO("status " << static_cast<int>(s) << " -> \"" << name << "\"");
    CHECK(std::strlen(name) > 0);
    CHECK(names.insert(name).second);
  }
  CHECK(std::string(lumen_status_string(LUMEN_OK)) == "LUMEN_OK");
  // An unknown value still gives a string, distinct from the known ones.
  const char* unknown = lumen_status_string(1000);
  REQUIRE(unknown != nullptr);
  CHECK(names.count(unknown) == 0);
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

TEST_CASE("options_init functions fill the documented defaults", "[capi]") {
  lumen_layer_options lo;
  std::memset(&lo, 0x5a, sizeof lo);
  lumen_layer_options_init(&lo);
  CHECK(lo.struct_size == sizeof(lumen_layer_options));
  CHECK(lo.family == 0);
  CHECK(lo.num_heads == 0);
  CHECK(lo.num_value_heads == 0);
  CHECK(lo.key_dim == 0);
  CHECK(lo.value_dim == 0);
  CHECK(lo.scale == 0.0f);
  CHECK(lo.feature_map == LUMEN_FEATURE_MAP_IDENTITY);
  CHECK(lo.normalize == 0);
  CHECK(lo.normalize_eps == 0.0f);
  CHECK(lo.qk_l2norm == 0);
  CHECK(lo.beta_sigmoid == 0);
  CHECK(lo.gate_raw == 0);
  CHECK(lo.state_dtype == LUMEN_DTYPE_FLOAT32);
  CHECK(lo.conv_size == 0);
  CHECK(lo.conv_activation == LUMEN_CONV_ACTIVATION_SILU);

  lumen_engine_options eo;
  std::memset(&eo, 0x5a, sizeof eo);
  lumen_engine_options_init(&eo);
  CHECK(eo.struct_size == sizeof(lumen_engine_options));
  CHECK(eo.backend == LUMEN_BACKEND_AUTO);
  CHECK(eo.num_threads == 0);
  CHECK(eo.device == 0);

  lumen_layer_inputs in;
  std::memset(&in, 0x5a, sizeof in);
  lumen_layer_inputs_init(&in);
  CHECK(in.struct_size == sizeof(lumen_layer_inputs));
  CHECK(in.dtype == LUMEN_DTYPE_FLOAT32);
  CHECK(in.memory == LUMEN_MEMORY_HOST);
  CHECK(in.q == nullptr);
  CHECK(in.k == nullptr);
  CHECK(in.v == nullptr);
  CHECK(in.g == nullptr);
  CHECK(in.beta == nullptr);
  CHECK(in.q_count == 0);
  CHECK(in.k_count == 0);
  CHECK(in.v_count == 0);
  CHECK(in.g_count == 0);
  CHECK(in.beta_count == 0);

  lumen_reservation reservation;
  std::memset(&reservation, 0x5a, sizeof reservation);
  lumen_reservation_init(&reservation);
  CHECK(reservation.struct_size == sizeof(lumen_reservation));
  CHECK(reservation.max_sessions == 1);
  CHECK(reservation.max_tokens == 1);

  lumen_layer_output out;
  std::memset(&out, 0x5a, sizeof out);
  lumen_layer_output_init(&out);
  CHECK(out.struct_size == sizeof(lumen_layer_output));
  CHECK(out.dtype == LUMEN_DTYPE_FLOAT32);
  CHECK(out.memory == LUMEN_MEMORY_HOST);
  CHECK(out.o == nullptr);
  CHECK(out.o_count == 0);
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

// ---------------------------------------------------------------------------------------------
// Building models

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

TEST_CASE("layer options are written only as far as the caller's struct reaches", "[capi]") {
  RefLayer layer = Layer(LUMEN_FAMILY_GATED_DELTA_NET, 1, 1, 4, 4);
  std::string error;
  ModelPtr model = BuildModel({layer}, &error);
  INFO(error);
  REQUIRE(model);
  // A 0.1.0 caller's struct (it ends before conv_size) followed by bytes it does not own; it
  // did not have to set struct_size, so both 0 and garbage mean 0.1.0's size.
  const size_t v0_size = offsetof(lumen_layer_options, conv_size);
  for (uint32_t declared : {0u, 1u, 5000u, static_cast<uint32_t>(v0_size)}) {
    INFO("struct_size " << declared);
    unsigned char buffer[sizeof(lumen_layer_options) + 16];
    std::memset(buffer, 0x5a, sizeof buffer);
    std::memcpy(buffer, &declared, sizeof declared);
    REQUIRE(lumen_model_layer_options(model.get(), 0,
                                      reinterpret_cast<lumen_layer_options*>(buffer)) == LUMEN_OK);
    lumen_layer_options seen;
    std::memcpy(&seen, buffer, v0_size);
    CHECK(seen.struct_size == v0_size);
    CHECK(seen.family == LUMEN_FAMILY_GATED_DELTA_NET);
    for (size_t i = v0_size; i < sizeof buffer; ++i) CHECK(buffer[i] == 0x5a);
  }
  // A newer caller's larger struct: the known fields are written, its own tail is kept.
  unsigned char buffer[sizeof(lumen_layer_options) + 16];
  std::memset(buffer, 0x5a, sizeof buffer);
  const uint32_t declared = sizeof buffer;
  std::memcpy(buffer, &declared, sizeof declared);
  REQUIRE(lumen_model_layer_options(model.get(), 0,
                                    reinterpret_cast<lumen_layer_options*>(buffer)) == LUMEN_OK);
  lumen_layer_options seen;
  std::memcpy(&seen, buffer, sizeof seen);
  CHECK(seen.struct_size == sizeof(lumen_layer_options));
  CHECK(seen.conv_size == 0);
  for (size_t i = sizeof(lumen_layer_options); i < sizeof buffer; ++i) CHECK(buffer[i] == 0x5a);
}

TEST_CASE("a session hands out its model, which outlives the caller's handles", "[capi]") {
  std::string error;
  ModelPtr model = BuildModel({Layer(LUMEN_FAMILY_GLA, 2, 4, 8, 6)}, &error);
  INFO(error);
  REQUIRE(model);
  lumen_engine* engine = nullptr;
  REQUIRE(lumen_engine_create(model.get(), nullptr, &engine) == LUMEN_OK);
  lumen_session* session = nullptr;
  REQUIRE(lumen_session_create(engine, &session) == LUMEN_OK);
  model.reset();
  lumen_engine_destroy(engine);
  lumen_model* own = nullptr;
  REQUIRE(lumen_session_model(session, &own) == LUMEN_OK);
  REQUIRE(own != nullptr);
  int64_t count = -1;
  REQUIRE(lumen_model_state_count(own, 0, LUMEN_STATE_MATRIX, &count) == LUMEN_OK);
  CHECK(count == 4 * 8 * 6);
  std::vector<float> state(count, -1.0f);
  CHECK(lumen_session_read_state(session, 0, LUMEN_STATE_MATRIX, state.data(), count) ==
        LUMEN_OK);
  CHECK(state == std::vector<float>(count, 0.0f));
  lumen_model_destroy(own);
  lumen_session_destroy(session);
}

TEST_CASE("lumen_layer_inputs of 0.1.0's size (no stream) are accepted", "[capi]") {
  std::string error;
  const RefLayer layer = Layer(LUMEN_FAMILY_SSD, 1, 2, 4, 4);
  ModelPtr model = BuildModel({layer}, &error);
  REQUIRE(model);
  EnginePtr engine = MakeEngine(model.get(), 1, &error);
  REQUIRE(engine);
  SessionPtr session = MakeSession(engine.get(), &error);
  REQUIRE(session);
  std::mt19937 rng(TestSeed());
  const EncodedTokens tokens = EncodeTokens(RandomTokens(layer, 1, rng), LUMEN_DTYPE_FLOAT32);
  OutputBuffer out;
  out.Reset(layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  lumen_layer_output o = out.Output(0, layer.VPerToken());
  // Bytes past the old struct_size are not the caller's: lumen must not read them.
  lumen_layer_inputs in = InputsFor(layer, tokens, 0, 1);
  in.stream = reinterpret_cast<void*>(0xdead);
  in.struct_size = offsetof(lumen_layer_inputs, stream);
  CHECK(lumen_session_step(session.get(), 0, &in, &o) == LUMEN_OK);
  in.struct_size = offsetof(lumen_layer_inputs, stream) - 1;
  CheckFailure(lumen_session_step(session.get(), 0, &in, &o),
               LUMEN_ERROR_INVALID_ARGUMENT, {"struct_size"});
}

// lumen_engine_reserve checks its arguments on every backend; on the CPU it changes nothing
// (no device scratch: lumen_engine_scratch_bytes stays 0, and calls still run).
TEST_CASE("reserving scratch: arguments are checked, the CPU holds none", "[capi]") {
  std::string error;
  ModelPtr model = BuildModel({Layer(LUMEN_FAMILY_GATED_DELTA_NET, 2, 4, 8, 8)}, &error);
  INFO(error);
  REQUIRE(model);
  lumen_engine_options options;
  lumen_engine_options_init(&options);
  options.backend = LUMEN_BACKEND_CPU;
  options.num_threads = 1;
  lumen_engine* raw = nullptr;
  REQUIRE(lumen_engine_create(model.get(), &options, &raw) == LUMEN_OK);
  EnginePtr engine(raw);
  lumen_reservation reservation;
  lumen_reservation_init(&reservation);
  reservation.max_sessions = 64;
  reservation.max_tokens = 8192;
  CHECK(lumen_engine_reserve(engine.get(), &reservation) == LUMEN_OK);
  CHECK(std::string(lumen_last_error_message()).empty());
  int64_t bytes = -1;
  REQUIRE(lumen_engine_scratch_bytes(engine.get(), &bytes) == LUMEN_OK);
  CHECK(bytes == 0);

  CheckFailure(lumen_engine_reserve(nullptr, &reservation), LUMEN_ERROR_INVALID_ARGUMENT,
               {"engine"});
  CheckFailure(lumen_engine_reserve(engine.get(), nullptr), LUMEN_ERROR_INVALID_ARGUMENT,
               {"reservation"});
  CheckFailure(lumen_engine_scratch_bytes(nullptr, &bytes), LUMEN_ERROR_INVALID_ARGUMENT,
               {"engine"});
  CheckFailure(lumen_engine_scratch_bytes(engine.get(), nullptr), LUMEN_ERROR_INVALID_ARGUMENT,
               {"out"});
  constexpr int32_t kInt32Min = std::numeric_limits<int32_t>::min();
  constexpr int32_t kInt32Max = std::numeric_limits<int32_t>::max();
  const struct {
    int32_t sessions, tokens;
  } bad[] = {{0, 1}, {1, 0}, {-1, 5}, {5, -1}, {kInt32Min, kInt32Min}, {(1 << 20) + 1, 1},
             {kInt32Max, 1}};
  for (const auto& b : bad) {
    INFO("max_sessions " << b.sessions << ", max_tokens " << b.tokens);
    lumen_reservation r = reservation;
    r.max_sessions = b.sessions;
    r.max_tokens = b.tokens;
    CheckFailure(lumen_engine_reserve(engine.get(), &r), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"max_sessions"});
  }
  lumen_reservation small = reservation;
  small.struct_size = sizeof(lumen_reservation) - 4;
  CheckFailure(lumen_engine_reserve(engine.get(), &small), LUMEN_ERROR_INVALID_ARGUMENT,
               {"lumen_reservation"});
  // The largest count accepted; the engine still runs after every failure.
  reservation.max_sessions = 1 << 20;
  reservation.max_tokens = kInt32Max;
  CHECK(lumen_engine_reserve(engine.get(), &reservation) == LUMEN_OK);
  REQUIRE(lumen_engine_scratch_bytes(engine.get(), &bytes) == LUMEN_OK);
  CHECK(bytes == 0);
  SessionPtr session = MakeSession(engine.get(), &error);
  REQUIRE(session);
  std::mt19937 rng(3);
  const RefLayer layer = Layer(LUMEN_FAMILY_GATED_DELTA_NET, 2, 4, 8, 8);
  const EncodedTokens tokens = EncodeTokens(RandomTokens(layer, 4, rng), LUMEN_DTYPE_FLOAT32);
  const lumen_layer_inputs in = InputsFor(layer, tokens, 0, 4);
  OutputBuffer out;
  out.Reset(4 * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  lumen_layer_output o = out.Output(0, 4 * layer.VPerToken());
  REQUIRE(lumen_session_prefill(session.get(), 0, 4, &in, &o) == LUMEN_OK);
  int64_t count = 0;
  REQUIRE(lumen_session_tokens(session.get(), 0, &count) == LUMEN_OK);
  CHECK(count == 4);
}

TEST_CASE("engine creation: backends and options", "[capi]") {
  std::string error;
  ModelPtr model = BuildModel({Layer(LUMEN_FAMILY_SSD, 1, 1, 4, 4)}, &error);
  REQUIRE(model);
  lumen_engine* engine = nullptr;
  REQUIRE(lumen_engine_create(model.get(), nullptr, &engine) == LUMEN_OK);  // defaults
  EnginePtr owned(engine);
  int32_t backend = LUMEN_BACKEND_AUTO;
  REQUIRE(lumen_engine_backend(engine, &backend) == LUMEN_OK);
  CHECK(backend != LUMEN_BACKEND_AUTO);
  // AUTO picks CUDA, then ROCm, only where this build has it and a GPU is present.
  CHECK((backend == LUMEN_BACKEND_CPU || backend == LUMEN_BACKEND_CUDA ||
         backend == LUMEN_BACKEND_ROCM));
  const bool gpu_present = backend == LUMEN_BACKEND_CUDA;
  const bool amd_gpu_present = backend == LUMEN_BACKEND_ROCM;
  CHECK(std::string(lumen_backend_string(backend)) ==
        (gpu_present ? "CUDA" : amd_gpu_present ? "ROCM" : "CPU"));
  int32_t threads = 0;
  REQUIRE(lumen_engine_num_threads(engine, &threads) == LUMEN_OK);
  if (backend == LUMEN_BACKEND_CPU) {
    CHECK(threads == static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency())));
  }
  CheckFailure(lumen_engine_num_threads(nullptr, &threads), LUMEN_ERROR_INVALID_ARGUMENT, {});
  CheckFailure(lumen_engine_num_threads(engine, nullptr), LUMEN_ERROR_INVALID_ARGUMENT, {});
  {
    lumen_engine_options three;
    lumen_engine_options_init(&three);
    three.num_threads = 3;
    lumen_engine* engine3 = nullptr;
    REQUIRE(lumen_engine_create(model.get(), &three, &engine3) == LUMEN_OK);
    EnginePtr owned3(engine3);
    REQUIRE(lumen_engine_num_threads(engine3, &threads) == LUMEN_OK);
    CHECK(threads == 3);
  }
  // Every backend has a distinct name; other values are UNKNOWN.
  std::set<std::string> names;
  for (int32_t b : {LUMEN_BACKEND_AUTO, LUMEN_BACKEND_CPU, LUMEN_BACKEND_CUDA,
                    LUMEN_BACKEND_ROCM}) {
    CHECK(names.insert(lumen_backend_string(b)).second);
  }
  CHECK(std::string(lumen_backend_string(99)) == "UNKNOWN");

  lumen_engine_options options;
  lumen_engine_options_init(&options);
  lumen_engine* sentinel = reinterpret_cast<lumen_engine*>(0x1);
  lumen_engine* out = sentinel;
  options.backend = LUMEN_BACKEND_CUDA;
  if (gpu_present) {
    lumen_engine* cuda = nullptr;
    CHECK(lumen_engine_create(model.get(), &options, &cuda) == LUMEN_OK);
    lumen_engine_destroy(cuda);
  } else {
    // Without a GPU or driver (or without CUDA in the build): a clear refusal, and AUTO
    // above fell back to the CPU.
    CheckFailure(lumen_engine_create(model.get(), &options, &out), LUMEN_ERROR_UNSUPPORTED,
                 {"CUDA"});
    CHECK(out == sentinel);
  }
  options.backend = LUMEN_BACKEND_ROCM;
  if (!amd_gpu_present) {
    // Without an AMD GPU, the HIP runtime, or ROCm in the build: a clear refusal.
    CheckFailure(lumen_engine_create(model.get(), &options, &out), LUMEN_ERROR_UNSUPPORTED,
                 {"ROCm"});
    CHECK(out == sentinel);
  }
  options.backend = 42;
  CheckFailure(lumen_engine_create(model.get(), &options, &out), LUMEN_ERROR_INVALID_ARGUMENT,
               {"backend"});
  CHECK(out == sentinel);
  options.backend = LUMEN_BACKEND_CPU;
  for (int32_t threads : {-1, 1025}) {
    INFO("num_threads " << threads);
    options.num_threads = threads;
    CheckFailure(lumen_engine_create(model.get(), &options, &out), LUMEN_ERROR_INVALID_ARGUMENT,
                 {"num_threads"});
    CHECK(out == sentinel);
  }

  // The model may go first: the engine keeps its own reference.
  model.reset();
  std::string e2;
  SessionPtr s = MakeSession(engine, &e2);
  INFO(e2);
  CHECK(s);
}

// ---------------------------------------------------------------------------------------------
// Failing calls change nothing

// A three-layer model: a scalar-gated delta layer, a normalizing linear attention layer (so a
// normalizer exists), and kda with raw gates (parameters).
std::vector<RefLayer> FailureLayers() {
  // Layer 0, which most failing calls target, carries conv windows that must not change.
  RefLayer gdn = Layer(LUMEN_FAMILY_GATED_DELTA_NET, 2, 4, 8, 6);
  gdn.conv_size = 4;
  std::mt19937 rng(7);
  RandomParams(&gdn, rng);
  RefLayer la = Layer(LUMEN_FAMILY_LINEAR_ATTN, 1, 1, 5, 7);
  la.feature_map = LUMEN_FEATURE_MAP_ELU1;
  la.normalize = true;
  RefLayer kda = Layer(LUMEN_FAMILY_KDA, 1, 2, 4, 3);
  kda.gate_raw = true;
  kda.qk_l2norm = true;
  kda.a_log = {0.5f, 1.0f};
  kda.dt_bias = std::vector<float>(8, -3.0f);
  return {gdn, la, kda};
}

struct Snapshot {
  std::vector<std::vector<float>> parts;
  std::vector<int64_t> tokens;
  bool operator==(const Snapshot& o) const {
    if (tokens != o.tokens || parts.size() != o.parts.size()) return false;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (parts[i].size() != o.parts[i].size() ||
          (!parts[i].empty() &&
           std::memcmp(parts[i].data(), o.parts[i].data(), parts[i].size() * 4) != 0)) {
        return false;
      }
    }
    return true;
  }
};

Snapshot Take(const lumen_session* s, const std::vector<RefLayer>& layers) {
  Snapshot snap;
  for (int32_t i = 0; i < static_cast<int32_t>(layers.size()); ++i) {
    std::vector<float> m, z, conv[3];
    REQUIRE(ReadState(s, i, layers[i], &m, &z) == LUMEN_OK);
    REQUIRE(ReadConvState(s, i, layers[i], conv) == LUMEN_OK);
    snap.parts.push_back(m);
    snap.parts.push_back(z);
    for (const std::vector<float>& window : conv) snap.parts.push_back(window);
    int64_t t = -1;
    REQUIRE(lumen_session_tokens(s, i, &t) == LUMEN_OK);
    snap.tokens.push_back(t);
  }
  return snap;
}

struct World {
  std::vector<RefLayer> layers = FailureLayers();
  ModelPtr model;
  EnginePtr engine;
  std::vector<SessionPtr> sessions;  // three sessions with history
  std::mt19937 rng{TestSeed()};

  World() {
    std::string error;
    model = BuildModel(layers, &error);
    INFO(error);
    REQUIRE(model);
    engine = MakeEngine(model.get(), 2, &error);
    REQUIRE(engine);
    for (int j = 0; j < 3; ++j) {
      sessions.push_back(MakeSession(engine.get(), &error));
      REQUIRE(sessions.back());
      for (int32_t i = 0; i < 3; ++i) {
        std::vector<float> m, z, conv[3];
        RandomState(layers[i], rng, &m, &z);
        RandomConvState(layers[i], rng, conv);
        REQUIRE(WriteState(sessions.back().get(), i, layers[i], m, z) == LUMEN_OK);
        REQUIRE(WriteConvState(sessions.back().get(), i, layers[i], conv) == LUMEN_OK);
        OutputBuffer out;
        REQUIRE(RunSession(sessions.back().get(), i, layers[i],
                           EncodeTokens(RandomTokens(layers[i], 2 + j + i, rng),
                                        LUMEN_DTYPE_FLOAT32),
                           Path::kStep, {}, LUMEN_DTYPE_FLOAT32, &out, &error) == LUMEN_OK);
      }
    }
  }
};

// Runs `call`, expecting `expected` and a message naming the problem, and checks that no
// session and no output element changed.
void ExpectRejected(World& w, const char* name, lumen_status expected,
                    const std::vector<std::string>& words, std::vector<uint8_t>* output,
                    const std::function<lumen_status()>& call) {
  INFO(name);
  std::vector<Snapshot> before;
  for (const auto& s : w.sessions) before.push_back(Take(s.get(), w.layers));
  const std::vector<uint8_t> output_before = output ? *output : std::vector<uint8_t>();
  CheckFailure(call(), expected, words);
  for (size_t j = 0; j < w.sessions.size(); ++j) {
    INFO("session " << j << " changed by a failing call");
    CHECK(Take(w.sessions[j].get(), w.layers) == before[j]);
  }
  if (output) {
    INFO("output written by a failing call");
    CHECK(*output == output_before);
  }
}

TEST_CASE("failing session calls leave sessions and outputs unchanged", "[capi]") {
  World w;
  lumen_session* s = w.sessions[0].get();
  const RefLayer& L0 = w.layers[0];
  const TokenData data = RandomTokens(L0, 4, w.rng);
  const EncodedTokens tokens = EncodeTokens(data, LUMEN_DTYPE_FLOAT32);
  OutputBuffer out;
  out.Reset(4 * L0.VPerToken(), LUMEN_DTYPE_FLOAT32);
  auto inputs = [&](int64_t n) { return InputsFor(L0, tokens, 0, n); };
  auto step_with = [&](const std::function<void(lumen_layer_inputs*, lumen_layer_output*)>& m,
                       int32_t layer = 0) {
    return [&, m, layer] {
      lumen_layer_inputs in = inputs(1);
      lumen_layer_output o = out.Output(0, L0.VPerToken());
      m(&in, &o);
      return lumen_session_step(s, layer, &in, &o);
    };
  };
  auto prefill_with = [&](const std::function<void(lumen_layer_inputs*, lumen_layer_output*)>& m,
                          int32_t n = 4) {
    return [&, m, n] {
      lumen_layer_inputs in = inputs(4);
      lumen_layer_output o = out.Output(0, 4 * L0.VPerToken());
      m(&in, &o);
      return lumen_session_prefill(s, 0, n, &in, &o);
    };
  };
  using M = std::function<void(lumen_layer_inputs*, lumen_layer_output*)>;
  const M none = [](lumen_layer_inputs*, lumen_layer_output*) {};
  const lumen_status kInvalid = LUMEN_ERROR_INVALID_ARGUMENT;

  SECTION("step") {
    ExpectRejected(w, "q_count + 1", kInvalid, {"q_count", "q"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->q_count++; }));
    ExpectRejected(w, "k_count - 1", kInvalid, {"k_count", "k"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->k_count--; }));
    ExpectRejected(w, "v_count of 2 tokens", kInvalid, {"v_count", "v"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->v_count *= 2; }));
    ExpectRejected(w, "g_count per key (gated_delta_net has a scalar gate)", kInvalid,
                   {"g_count", "g"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->g_count *= 8; }));
    ExpectRejected(w, "beta_count - 1", kInvalid, {"beta_count", "beta"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->beta_count--; }));
    ExpectRejected(w, "o_count - 1", kInvalid, {"o_count", "o", "output"}, &out.bytes,
                   step_with([](lumen_layer_inputs*, lumen_layer_output* o) { o->o_count--; }));
    ExpectRejected(w, "missing g", kInvalid, {"g"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) {
                     i->g = nullptr;
                     i->g_count = 0;
                   }));
    ExpectRejected(w, "missing beta", kInvalid, {"beta"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) {
                     i->beta = nullptr;
                     i->beta_count = 0;
                   }));
    ExpectRejected(w, "NULL q with a count", kInvalid, {"q"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->q = nullptr; }));
    ExpectRejected(w, "NULL o with a count", kInvalid, {"o", "output"}, &out.bytes,
                   step_with([](lumen_layer_inputs*, lumen_layer_output* o) { o->o = nullptr; }));
    ExpectRejected(w, "input dtype 7", kInvalid, {"dtype"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->dtype = 7; }));
    ExpectRejected(w, "output dtype -1", kInvalid, {"dtype"}, &out.bytes,
                   step_with([](lumen_layer_inputs*, lumen_layer_output* o) { o->dtype = -1; }));
    ExpectRejected(w, "input memory 5", kInvalid, {"memory"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->memory = 5; }));
    ExpectRejected(w, "layer 3 of 3", LUMEN_ERROR_OUT_OF_RANGE, {"layer"}, &out.bytes,
                   step_with(none, 3));
    ExpectRejected(w, "layer -1", LUMEN_ERROR_OUT_OF_RANGE, {"layer"}, &out.bytes,
                   step_with(none, -1));
    ExpectRejected(w, "layer 1 given layer 0's shapes", kInvalid, {}, &out.bytes,
                   step_with(none, 1));
  }

  SECTION("step: device memory on the CPU backend") {
    // The header: memory the backend does not read is LUMEN_ERROR_UNSUPPORTED.
    for (int which = 0; which < 2; ++which) {
      INFO((which == 0 ? "inputs.memory = DEVICE" : "output.memory = DEVICE"));
      const Snapshot before = Take(s, w.layers);
      const std::vector<uint8_t> out_before = out.bytes;
      lumen_layer_inputs in = inputs(1);
      lumen_layer_output o = out.Output(0, L0.VPerToken());
      (which == 0 ? in.memory : o.memory) = LUMEN_MEMORY_DEVICE;
      const lumen_status st = lumen_session_step(s, 0, &in, &o);
      INFO(LastError(st));
      CHECK(st == LUMEN_ERROR_UNSUPPORTED);
      CHECK(std::strlen(lumen_last_error_message()) > 0);
      CHECK(Mentions(lumen_last_error_message(), {"memory", "device", "host"}));
      CHECK(Take(s, w.layers) == before);
      CHECK(out.bytes == out_before);
    }
  }

  SECTION("prefill") {
    ExpectRejected(w, "num_tokens 0", kInvalid, {"num_tokens", "tokens"}, &out.bytes,
                   prefill_with(none, 0));
    ExpectRejected(w, "num_tokens -1", kInvalid, {"num_tokens", "tokens"}, &out.bytes,
                   prefill_with(none, -1));
    ExpectRejected(w, "num_tokens 3 with buffers of 4", kInvalid, {}, &out.bytes,
                   prefill_with(none, 3));
    ExpectRejected(w, "num_tokens 5 with buffers of 4", kInvalid, {}, &out.bytes,
                   prefill_with(none, 5));
    ExpectRejected(w, "q_count - 1", kInvalid, {"q_count", "q"}, &out.bytes,
                   prefill_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->q_count--; }));
    ExpectRejected(w, "g_count - 1", kInvalid, {"g_count", "g"}, &out.bytes,
                   prefill_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->g_count--; }));
    ExpectRejected(w, "o_count + 1", kInvalid, {"o_count", "o", "output"}, &out.bytes,
                   prefill_with([](lumen_layer_inputs*, lumen_layer_output* o) { o->o_count++; }));
    ExpectRejected(w, "missing beta", kInvalid, {"beta"}, &out.bytes,
                   prefill_with([](lumen_layer_inputs* i, lumen_layer_output*) {
                     i->beta = nullptr;
                     i->beta_count = 0;
                   }));
    ExpectRejected(w, "layer 3", LUMEN_ERROR_OUT_OF_RANGE, {"layer"}, &out.bytes, [&] {
      lumen_layer_inputs in = inputs(4);
      lumen_layer_output o = out.Output(0, 4 * L0.VPerToken());
      return lumen_session_prefill(s, 3, 4, &in, &o);
    });
  }

  SECTION("inputs a family does not take") {
    // linear_attn takes neither g nor beta; the header says "pass NULL and 0 otherwise".
    const RefLayer& L1 = w.layers[1];
    const EncodedTokens t1 = EncodeTokens(RandomTokens(L1, 1, w.rng), LUMEN_DTYPE_FLOAT32);
    OutputBuffer o1;
    o1.Reset(L1.VPerToken(), LUMEN_DTYPE_FLOAT32);
    const std::vector<float> extra(64, -0.1f);
    ExpectRejected(w, "g given to linear_attn", kInvalid, {"g"}, &o1.bytes, [&] {
      lumen_layer_inputs in = InputsFor(L1, t1, 0, 1);
      in.g = extra.data();
      in.g_count = L1.num_value_heads;
      lumen_layer_output o = o1.Output(0, L1.VPerToken());
      return lumen_session_step(s, 1, &in, &o);
    });
    ExpectRejected(w, "beta given to linear_attn", kInvalid, {"beta"}, &o1.bytes, [&] {
      lumen_layer_inputs in = InputsFor(L1, t1, 0, 1);
      in.beta = extra.data();
      in.beta_count = L1.num_value_heads;
      lumen_layer_output o = o1.Output(0, L1.VPerToken());
      return lumen_session_step(s, 1, &in, &o);
    });
  }

  SECTION("state access") {
    const int64_t mc = L0.MatrixCount();
    std::vector<float> values(mc, 0.25f);
    std::vector<float> read(mc + 8, 3.0f);
    ExpectRejected(w, "write_state count - 1", kInvalid, {"count"}, nullptr, [&] {
      return lumen_session_write_state(s, 0, LUMEN_STATE_MATRIX, values.data(), mc - 1);
    });
    ExpectRejected(w, "write_state count + 1", kInvalid, {"count"}, nullptr, [&] {
      std::vector<float> more(mc + 1, 0.25f);
      return lumen_session_write_state(s, 0, LUMEN_STATE_MATRIX, more.data(), mc + 1);
    });
    for (float bad : {kNaN, kInf, -kInf}) {
      INFO("value " << bad);
      std::vector<float> v = values;
      v[mc / 2] = bad;
      ExpectRejected(w, "write_state with a non-finite value", kInvalid, {"finite", "nan", "inf"},
                     nullptr, [&] {
                       return lumen_session_write_state(s, 0, LUMEN_STATE_MATRIX, v.data(), mc);
                     });
    }
    ExpectRejected(w, "write_state normalizer of a layer without one", kInvalid, {}, nullptr, [&] {
      return lumen_session_write_state(s, 0, LUMEN_STATE_NORMALIZER, values.data(),
                                       int64_t{L0.num_value_heads} * L0.key_dim);
    });
    ExpectRejected(w, "write_state part 9", kInvalid, {"part"}, nullptr, [&] {
      return lumen_session_write_state(s, 0, 9, values.data(), mc);
    });
    ExpectRejected(w, "write_state layer 3", LUMEN_ERROR_OUT_OF_RANGE, {"layer"}, nullptr, [&] {
      return lumen_session_write_state(s, 3, LUMEN_STATE_MATRIX, values.data(), mc);
    });
    ExpectRejected(w, "write_state normalizer with a NaN", kInvalid, {"finite", "nan"}, nullptr,
                   [&] {
                     const RefLayer& L1 = w.layers[1];
                     std::vector<float> z(L1.NormalizerCount(), 1.0f);
                     z[0] = kNaN;
                     return lumen_session_write_state(s, 1, LUMEN_STATE_NORMALIZER, z.data(),
                                                      L1.NormalizerCount());
                   });
    const std::vector<float> read_before = read;
    ExpectRejected(w, "read_state count - 1", kInvalid, {"count"}, nullptr, [&] {
      return lumen_session_read_state(s, 0, LUMEN_STATE_MATRIX, read.data(), mc - 1);
    });
    ExpectRejected(w, "read_state count + 8", kInvalid, {"count"}, nullptr, [&] {
      return lumen_session_read_state(s, 0, LUMEN_STATE_MATRIX, read.data(), mc + 8);
    });
    ExpectRejected(w, "read_state layer -1", LUMEN_ERROR_OUT_OF_RANGE, {"layer"}, nullptr, [&] {
      return lumen_session_read_state(s, -1, LUMEN_STATE_MATRIX, read.data(), mc);
    });
    CHECK(read == read_before);  // out written only on success
    int64_t t = 99;
    ExpectRejected(w, "tokens layer 3", LUMEN_ERROR_OUT_OF_RANGE, {"layer"}, nullptr,
                   [&] { return lumen_session_tokens(s, 3, &t); });
    CHECK(t == 99);
  }
}

TEST_CASE("failing batched calls leave every session unchanged", "[capi]") {
  World w;
  const RefLayer& L0 = w.layers[0];
  std::vector<lumen_session*> three = {w.sessions[0].get(), w.sessions[1].get(),
                                       w.sessions[2].get()};
  const TokenData data = RandomTokens(L0, 3 * 40, w.rng);
  const EncodedTokens tokens = EncodeTokens(data, LUMEN_DTYPE_FLOAT32);
  OutputBuffer out;
  out.Reset(3 * 40 * L0.VPerToken(), LUMEN_DTYPE_FLOAT32);

  // A session of another engine of an equal model, and of another model.
  std::string error;
  ModelPtr same_model = BuildModel(w.layers, &error);
  REQUIRE(same_model);
  EnginePtr other_engine = MakeEngine(same_model.get(), 1, &error);
  REQUIRE(other_engine);
  SessionPtr foreign = MakeSession(other_engine.get(), &error);
  REQUIRE(foreign);
  EnginePtr same_model_engine = MakeEngine(w.model.get(), 1, &error);
  REQUIRE(same_model_engine);
  SessionPtr sibling = MakeSession(same_model_engine.get(), &error);
  REQUIRE(sibling);

  auto batch = [&](std::vector<lumen_session*> sessions, int64_t tokens_per_input,
                   int32_t layer = 0,
                   std::function<void(lumen_layer_inputs*, lumen_layer_output*)> m = {}) {
    return [&, sessions, tokens_per_input, layer, m] {
      lumen_layer_inputs in = InputsFor(L0, tokens, 0, tokens_per_input);
      lumen_layer_output o = out.Output(0, tokens_per_input * L0.VPerToken());
      if (m) m(&in, &o);
      return lumen_engine_step_batch(w.engine.get(), layer, sessions.data(),
                                     static_cast<int32_t>(sessions.size()), &in, &o);
    };
  };
  auto varlen = [&](std::vector<lumen_session*> sessions, std::vector<int32_t> cu,
                    int64_t total, int32_t layer = 0) {
    return [&, sessions, cu, total, layer] {
      lumen_layer_inputs in = InputsFor(L0, tokens, 0, total);
      lumen_layer_output o = out.Output(0, total * L0.VPerToken());
      return lumen_engine_prefill_varlen(w.engine.get(), layer, sessions.data(),
                                         static_cast<int32_t>(sessions.size()), cu.data(), &in,
                                         &o);
    };
  };
  const lumen_status kInvalid = LUMEN_ERROR_INVALID_ARGUMENT;

  SECTION("step_batch") {
    ExpectRejected(w, "a session of another engine (other model)", LUMEN_ERROR_MODEL_MISMATCH,
                   {"engine", "model"}, &out.bytes,
                   batch({three[0], foreign.get(), three[2]}, 3));
    ExpectRejected(w, "a session of another engine (same model)", LUMEN_ERROR_MODEL_MISMATCH,
                   {"engine", "model"}, &out.bytes, batch({three[0], three[1], sibling.get()}, 3));
    ExpectRejected(w, "a session twice", kInvalid, {"twice", "duplicate", "more than once", "same session"},
                   &out.bytes, batch({three[0], three[1], three[0]}, 3));
    ExpectRejected(w, "n = 3 with inputs of 2 tokens", kInvalid, {}, &out.bytes,
                   batch(three, 2));
    ExpectRejected(w, "n = 3 with inputs of 4 tokens", kInvalid, {}, &out.bytes,
                   batch(three, 4));
    ExpectRejected(w, "o_count of 2 sessions", kInvalid, {"o_count", "o", "output"}, &out.bytes,
                   batch(three, 3, 0, [&](lumen_layer_inputs*, lumen_layer_output* o) {
                     o->o_count = 2 * L0.VPerToken();
                   }));
    ExpectRejected(w, "missing g", kInvalid, {"g"}, &out.bytes,
                   batch(three, 3, 0, [](lumen_layer_inputs* i, lumen_layer_output*) {
                     i->g = nullptr;
                     i->g_count = 0;
                   }));
    ExpectRejected(w, "layer 3", LUMEN_ERROR_OUT_OF_RANGE, {"layer"}, &out.bytes,
                   batch(three, 3, 3));
    ExpectRejected(w, "n = -1", kInvalid, {}, &out.bytes, [&] {
      lumen_layer_inputs in = InputsFor(L0, tokens, 0, 1);
      lumen_layer_output o = out.Output(0, L0.VPerToken());
      return lumen_engine_step_batch(w.engine.get(), 0, three.data(), -1, &in, &o);
    });
  }

  SECTION("prefill_varlen") {
    ExpectRejected(w, "a session of another engine", LUMEN_ERROR_MODEL_MISMATCH,
                   {"engine", "model"}, &out.bytes,
                   varlen({three[0], three[1], foreign.get()}, {0, 5, 10, 20}, 20));
    ExpectRejected(w, "a session twice", kInvalid,
                   {"twice", "duplicate", "more than once", "same session"}, &out.bytes,
                   varlen({three[1], three[2], three[1]}, {0, 5, 10, 20}, 20));
    ExpectRejected(w, "cu_seqlens[0] != 0", kInvalid, {"cu_seqlens"}, &out.bytes,
                   varlen(three, {1, 5, 10, 20}, 19));
    ExpectRejected(w, "cu_seqlens decreasing", kInvalid, {"cu_seqlens"}, &out.bytes,
                   varlen(three, {0, 10, 5, 20}, 20));
    ExpectRejected(w, "cu_seqlens negative", kInvalid, {"cu_seqlens"}, &out.bytes,
                   varlen(three, {0, -5, 10, 20}, 20));
    ExpectRejected(w, "cu_seqlens[n] short of the inputs", kInvalid, {}, &out.bytes,
                   varlen(three, {0, 5, 10, 19}, 20));
    ExpectRejected(w, "cu_seqlens[n] past the inputs", kInvalid, {}, &out.bytes,
                   varlen(three, {0, 5, 10, 21}, 20));
    ExpectRejected(w, "layer 3", LUMEN_ERROR_OUT_OF_RANGE, {"layer"}, &out.bytes,
                   varlen(three, {0, 5, 10, 20}, 20, 3));
  }
}

}  // namespace
}  // namespace lumen_test
