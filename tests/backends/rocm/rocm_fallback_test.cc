// A ROCm-enabled library where there is no AMD GPU (CI, the NVIDIA machine) and, run with
// LUMEN_TEST_HIP_RUNTIME_HIDDEN=1 under hide_hip_runtime.so, where the HIP runtime itself is
// missing: the library loads, LUMEN_BACKEND_ROCM is refused with a message, and AUTO runs the
// model on another backend. Public API only.

#include <catch2/catch.hpp>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/reference/layer_reference.h"

using namespace lumen_test;

namespace {

bool RuntimeHidden() {
  const char* hidden = std::getenv("LUMEN_TEST_HIP_RUNTIME_HIDDEN");
  return hidden != nullptr && std::string(hidden) == "1";
}

RefLayer TestLayer() {
  RefLayer layer;
  layer.family = LUMEN_FAMILY_GATED_DELTA_NET;
  layer.num_heads = 2;
  layer.num_value_heads = 4;
  layer.key_dim = 16;
  layer.value_dim = 8;
  return layer;
}

}  // namespace

TEST_CASE("ROCm is refused with a reason where it cannot run", "[rocm]") {
  std::string error;
  ModelPtr model = BuildModel({TestLayer()}, &error);
  REQUIRE(model);
  lumen_engine_options options;
  lumen_engine_options_init(&options);
  options.backend = LUMEN_BACKEND_ROCM;
  lumen_engine* engine = nullptr;
  const lumen_status status = lumen_engine_create(model.get(), &options, &engine);
  if (status == LUMEN_OK) {
    // A machine with a supported AMD GPU: nothing to refuse.
    REQUIRE_FALSE(RuntimeHidden());
    lumen_engine_destroy(engine);
    return;
  }
  CHECK(status == LUMEN_ERROR_UNSUPPORTED);
  CHECK(engine == nullptr);
  const std::string message = lumen_last_error_message();
  INFO(message);
  CHECK(message.find("ROCm") != std::string::npos);
  if (RuntimeHidden()) CHECK(message.find("cannot load the HIP runtime") != std::string::npos);
}

TEST_CASE("AUTO runs the model without the ROCm backend and matches the reference", "[rocm]") {
  const RefLayer layer = TestLayer();
  std::string error;
  ModelPtr model = BuildModel({layer}, &error);
  REQUIRE(model);
  lumen_engine* raw = nullptr;
  REQUIRE(lumen_engine_create(model.get(), nullptr, &raw) == LUMEN_OK);
  EnginePtr engine(raw);
  int32_t backend = LUMEN_BACKEND_AUTO;
  REQUIRE(lumen_engine_backend(engine.get(), &backend) == LUMEN_OK);
  if (RuntimeHidden()) CHECK(backend != LUMEN_BACKEND_ROCM);
  SessionPtr session = MakeSession(engine.get(), &error);
  REQUIRE(session);

  std::mt19937 rng(TestSeed());
  const int64_t T = 19;
  const TokenData data = RandomTokens(layer, T, rng);
  const EncodedTokens tokens = EncodeTokens(data, LUMEN_DTYPE_FLOAT32);
  OutputBuffer out;
  REQUIRE(RunSession(session.get(), 0, layer, tokens, Path::kPrefill, {T},
                     LUMEN_DTYPE_FLOAT32, &out, &error) == LUMEN_OK);
  RefState state = ZeroState(layer);
  std::vector<double> expected;
  RunReference(layer, T, ToRefInputs(data, LUMEN_DTYPE_FLOAT32), &state, &expected);
  const ErrorReport report = Measure(out.Values(), expected);
  INFO(report.Describe());
  CHECK(report.Passes(kPrefillBound));
}
