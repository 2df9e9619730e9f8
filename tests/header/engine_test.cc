// lumen.h's "Engine" section: engine options, creation, the backend in use, reservations.

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "lumen/lumen.h"
#include "tests/header/header_claims.h"
#include "tests/reference/layer_reference.h"
#include "tests/reference/session_fixture.h"

namespace lumen_fixture {
namespace {

lumen_status CreateEngine(const lumen_model* model, int32_t backend, int32_t num_threads,
                          EnginePtr* engine) {
  lumen_engine_options options;
  lumen_engine_options_init(&options);
  options.backend = backend;
  options.num_threads = num_threads;
  lumen_engine* raw = nullptr;
  const lumen_status status = lumen_engine_create(model, &options, &raw);
  engine->reset(raw);
  return status;
}

TEST_CASE("num_threads is at most 1024", "[header]") {
  LUMEN_CLAIM("lumen_engine_options.num_threads",
              "CPU worker threads including the caller, at most 1024; 0 = one per hardware "
              "thread");
  const Stack stack({SmallLayer(LUMEN_FAMILY_GLA)});
  EnginePtr engine;
  REQUIRE_OK(CreateEngine(stack.model.get(), LUMEN_BACKEND_CPU, 1024, &engine));
  int32_t threads = 0;
  REQUIRE_OK(lumen_engine_num_threads(engine.get(), &threads));
  CHECK(threads == 1024);
  for (int32_t too_many : {1025, INT32_MAX}) {
    INFO(too_many << " threads");
    const lumen_status status =
        CreateEngine(stack.model.get(), LUMEN_BACKEND_CPU, too_many, &engine);
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(engine == nullptr);
  }
}

TEST_CASE("a backend this build or machine lacks is UNSUPPORTED", "[header]") {
  LUMEN_CLAIM("lumen_engine_create",
              "Returns LUMEN_ERROR_UNSUPPORTED when the backend was not built, no usable device "
              "is present (see \"GPU engines\" above), or the backend does not run one of the "
              "model's layers.");
  const Stack stack({SmallLayer(LUMEN_FAMILY_GLA)});
  // A device ordinal no machine has: whether or not CUDA is built, no usable device.
  lumen_engine_options options;
  lumen_engine_options_init(&options);
  options.backend = LUMEN_BACKEND_CUDA;
  options.device = 4096;
  lumen_engine* engine = nullptr;
  lumen_status status = lumen_engine_create(stack.model.get(), &options, &engine);
  INFO(Describe(status));
  CHECK(status == LUMEN_ERROR_UNSUPPORTED);
  CHECK(engine == nullptr);
  options.backend = LUMEN_BACKEND_ROCM;
  status = lumen_engine_create(stack.model.get(), &options, &engine);
  INFO(Describe(status));
  CHECK(status == LUMEN_ERROR_UNSUPPORTED);
  CHECK(engine == nullptr);
}

LUMEN_CLAIM_UNPROVEN(
    "lumen_engine_create",
    "Returns LUMEN_ERROR_UNSUPPORTED when the backend was not built, no usable device is "
    "present (see \"GPU engines\" above), or the backend does not run one of the model's "
    "layers.",
    "the last case cannot be reached today: every backend runs every layer a model can hold "
    "(no backend's LoadModel refuses one); the engine's AUTO fallback is written for it");

TEST_CASE("lumen_engine_destroy(NULL) is a no-op", "[header]") {
  LUMEN_CLAIM("lumen_engine_destroy", "NULL is a no-op.");
  REQUIRE(lumen_model_builder_create(nullptr) == LUMEN_ERROR_INVALID_ARGUMENT);
  const std::string message = lumen_last_error_message();
  lumen_engine_destroy(nullptr);
  CHECK(lumen_last_error_message() == message);
}

TEST_CASE("the backend in use is never AUTO", "[header]") {
  LUMEN_CLAIM("lumen_engine_backend",
              "Writes the backend actually used (a lumen_backend value, never AUTO) to *out.");
  const Stack stack({SmallLayer(LUMEN_FAMILY_GLA)});
  for (int32_t asked : {LUMEN_BACKEND_AUTO, LUMEN_BACKEND_CPU}) {
    EnginePtr engine;
    REQUIRE_OK(CreateEngine(stack.model.get(), asked, 1, &engine));
    int32_t backend = -1;
    REQUIRE_OK(lumen_engine_backend(engine.get(), &backend));
    INFO("asked " << lumen_backend_string(asked) << ", got " << lumen_backend_string(backend));
    CHECK(backend != LUMEN_BACKEND_AUTO);
    CHECK(std::string(lumen_backend_string(backend)) != "UNKNOWN");
    if (asked == LUMEN_BACKEND_CPU) CHECK(backend == LUMEN_BACKEND_CPU);
  }
}

LUMEN_CLAIM_PROVEN_ELSEWHERE(
    "lumen_engine_reserve",
    "Makes the engine ready, now, for every layer call of at most reservation->max_sessions "
    "sessions and reservation->max_tokens tokens: any layer of the model, step or prefill, "
    "every input and output dtype, buffers in device memory.",
    "tests/backends/cuda/cuda_graphs_test.cc",
    "a reserved CUDA engine captures prefills and conv steps without a first run");

LUMEN_CLAIM_UNPROVEN(
    "lumen_engine_reserve",
    "The scratch never shrinks while the engine lives: reserving less than it holds changes "
    "nothing.",
    "GPU engines only (a CPU engine holds no device scratch), and the CUDA suite does not yet "
    "reserve less after more and compare lumen_engine_scratch_bytes");

TEST_CASE("reserve: a NULL reservation, a bad struct_size, fewer than 1 or more than 2^20 "
          "sessions, fewer than 1 token are INVALID_ARGUMENT",
          "[header]") {
  LUMEN_CLAIM("lumen_engine_reserve",
              "Returns LUMEN_ERROR_INVALID_ARGUMENT for a NULL reservation, a bad struct_size, "
              "max_sessions or max_tokens below 1, or max_sessions above 2^20 (1048576); "
              "LUMEN_ERROR_OUT_OF_MEMORY, with the bytes asked for, when the device cannot hold "
              "the scratch (the engine may then hold none: lumen_engine_scratch_bytes says); "
              "LUMEN_ERROR_BACKEND for a failure of the GPU runtime.");
  const Stack stack({SmallLayer(LUMEN_FAMILY_GLA)});
  lumen_engine* engine = stack.engine.get();
  auto reserve = [&](int32_t sessions, int32_t tokens, uint32_t struct_size) {
    lumen_reservation reservation;
    lumen_reservation_init(&reservation);
    reservation.max_sessions = sessions;
    reservation.max_tokens = tokens;
    reservation.struct_size = struct_size;
    return lumen_engine_reserve(engine, &reservation);
  };
  const uint32_t size = sizeof(lumen_reservation);
  CHECK(lumen_engine_reserve(engine, nullptr) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(reserve(1, 1, size - 4) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(reserve(0, 1, size) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(reserve(1, 0, size) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(reserve(-1, 1, size) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(reserve((1 << 20) + 1, 1 << 21, size) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(reserve(1 << 20, 1 << 20, size) == LUMEN_OK);
  CHECK(reserve(1, INT32_MAX, size) == LUMEN_OK);
}

TEST_CASE("reserving on a CPU engine checks the arguments and changes nothing", "[header]") {
  LUMEN_CLAIM("lumen_engine_reserve",
              "CPU engine: checks the arguments and changes nothing (its layer calls keep their "
              "scratch in host memory and need no reservation).");
  const RefLayer layer = SmallLayer(LUMEN_FAMILY_DELTA_NET);
  const Stack stack({layer});
  EnginePtr engine;
  REQUIRE_OK(CreateEngine(stack.model.get(), LUMEN_BACKEND_CPU, 1, &engine));
  lumen_session* raw = nullptr;
  REQUIRE_OK(lumen_session_create(engine.get(), &raw));
  SessionPtr session(raw);
  AddHistory(stack, session.get(), 3, 1);
  const SessionState before = Capture(session.get(), stack.layers);
  int64_t scratch = -1;
  lumen_reservation reservation;
  lumen_reservation_init(&reservation);
  reservation.max_sessions = 64;
  reservation.max_tokens = 4096;
  REQUIRE_OK(lumen_engine_reserve(engine.get(), &reservation));
  REQUIRE_OK(lumen_engine_scratch_bytes(engine.get(), &scratch));
  CHECK(scratch == 0);
  reservation.max_tokens = 0;
  CHECK(lumen_engine_reserve(engine.get(), &reservation) == LUMEN_ERROR_INVALID_ARGUMENT);
  REQUIRE_OK(lumen_engine_scratch_bytes(engine.get(), &scratch));
  CHECK(scratch == 0);
  CHECK(Capture(session.get(), stack.layers).SameBits(before));
}

LUMEN_CLAIM_UNPROVEN(
    "lumen_engine_reserve",
    "Returns LUMEN_ERROR_INVALID_ARGUMENT for a NULL reservation, a bad struct_size, "
    "max_sessions or max_tokens below 1, or max_sessions above 2^20 (1048576); "
    "LUMEN_ERROR_OUT_OF_MEMORY, with the bytes asked for, when the device cannot hold the "
    "scratch (the engine may then hold none: lumen_engine_scratch_bytes says); "
    "LUMEN_ERROR_BACKEND for a failure of the GPU runtime.",
    "OUT_OF_MEMORY and BACKEND are GPU failures: the CUDA suite runs out of device memory "
    "creating sessions (cuda_errors_test.cc), not reserving, and a runtime failure cannot be "
    "caused on demand");

}  // namespace
}  // namespace lumen_fixture
