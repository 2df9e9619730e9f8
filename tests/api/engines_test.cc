// Engines through lumen.h: creation on each backend (AUTO, the CPU, a clear refusal of a GPU
// backend the build or the machine lacks), thread counts, scratch reservations, and the
// handles' lifetimes: an engine and a session keep the model they need.

#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lumen/lumen.h"
#include "tests/api/api_test_util.h"
#include "tests/reference/layer_reference.h"

namespace lumen_test {
namespace {

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

}  // namespace
}  // namespace lumen_test
