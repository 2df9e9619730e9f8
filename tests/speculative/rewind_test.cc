// Rewind through the public C API (lumen.h, "Rewind"): going back j tokens gives bitwise the
// session as it was j tokens earlier (every state part and token count), for every family
// with and without the short convolution, across checkpoints, commits and further steps.

#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "lumen/lumen.h"
#include "tests/core/session_test_util.h"
#include "tests/reference/layer_reference.h"
#include "tests/reference/require_ok.h"

namespace lumen_test {
namespace {

constexpr int32_t kK = 19;
constexpr int32_t kV = 33;

void Step(lumen_session* session, const RefLayer& layer, const EncodedTokens& tokens,
          int64_t t) {
  const lumen_layer_inputs in = InputsFor(layer, tokens, t, 1);
  OutputBuffer out;
  out.Reset(layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  lumen_layer_output o = out.Output(0, layer.VPerToken());
  REQUIRE_OK(lumen_session_step(session, 0, &in, &o));
}

int32_t Available(lumen_session* session) {
  int32_t available = -1;
  REQUIRE_OK(lumen_session_rewind_available(session, &available));
  return available;
}

TEST_CASE("rewind(j) is bitwise the session j tokens earlier", "[rewind]") {
  const int config = GENERATE(range(0, NumConfigs()));
  const uint32_t seed = SeedFor({40, config});
  std::mt19937 rng(seed);
  Fixture f(MakeLayer(config, kK, kV, rng), 2);
  INFO(f.layer.Describe() << " seed=" << seed);
  const int32_t depth = std::uniform_int_distribution<int32_t>(1, 6)(rng);
  const int64_t steps = 3 * depth + 2;  // past several checkpoints
  const EncodedTokens tokens =
      EncodeTokens(RandomTokens(f.layer, steps + 4, rng), LUMEN_DTYPE_FLOAT32);
  SessionPtr session = f.Session();
  Write(session.get(), f.layer, RandomValues(f.layer, rng));
  Step(session.get(), f.layer, tokens, 0);  // before the depth: not kept
  REQUIRE_OK(lumen_session_set_rewind_depth(session.get(), depth));
  CHECK(Available(session.get()) == 0);
  std::vector<StateValues> history = {Read(session.get(), f.layer)};
  for (int64_t t = 1; t <= steps; ++t) {
    Step(session.get(), f.layer, tokens, t);
    history.push_back(Read(session.get(), f.layer));
    CHECK(Available(session.get()) == std::min<int64_t>(t, depth));
  }
  const int32_t j = std::uniform_int_distribution<int32_t>(1, depth)(rng);
  INFO("depth=" << depth << " j=" << j);
  REQUIRE_OK(lumen_session_rewind(session.get(), j));
  CHECK(BitwiseEqual(Read(session.get(), f.layer), history[steps - j]));
  CHECK(Tokens(session.get()) == 1 + steps - j);
  // What is left of the history still goes back exactly.
  const int32_t more = Available(session.get());
  CHECK(more <= depth);
  REQUIRE_OK(lumen_session_rewind(session.get(), more));
  const int64_t back = steps - j - more;
  CHECK(BitwiseEqual(Read(session.get(), f.layer), history[back]));
  CHECK(Tokens(session.get()) == 1 + back);
  // Going on from there is stepping on from the earlier session.
  SessionPtr fresh = f.Session();
  Write(fresh.get(), f.layer, history[back]);
  Step(session.get(), f.layer, tokens, steps + 1);
  Step(fresh.get(), f.layer, tokens, steps + 1);
  CHECK(BitwiseEqual(Read(session.get(), f.layer), Read(fresh.get(), f.layer)));
}

TEST_CASE("rewind goes back over committed tentative tokens", "[rewind][tentative]") {
  const uint32_t seed = SeedFor({41});
  std::mt19937 rng(seed);
  Fixture f(MakeLayer(NumConfigs() - 8, kK, kV, rng), 2);  // gated_delta_net with a window
  INFO("seed=" << seed);
  const EncodedTokens tokens =
      EncodeTokens(RandomTokens(f.layer, 8, rng), LUMEN_DTYPE_FLOAT32);
  SessionPtr session = f.Session();
  REQUIRE_OK(lumen_session_set_rewind_depth(session.get(), 8));
  Step(session.get(), f.layer, tokens, 0);
  const StateValues after_one = Read(session.get(), f.layer);
  const lumen_layer_inputs in = InputsFor(f.layer, tokens, 1, 5);
  OutputBuffer out;
  out.Reset(5 * f.layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  lumen_layer_output o = out.Output(0, 5 * f.layer.VPerToken());
  REQUIRE_OK(lumen_session_step_tentative(session.get(), 0, 5, &in, &o));
  CHECK(lumen_session_rewind(session.get(), 1) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  REQUIRE_OK(lumen_session_commit(session.get(), 4));
  CHECK(Available(session.get()) == 5);
  REQUIRE_OK(lumen_session_rewind(session.get(), 4));
  CHECK(BitwiseEqual(Read(session.get(), f.layer), after_one));
  CHECK(Tokens(session.get()) == 1);
}

TEST_CASE("a prefill or a restore starts the rewind history afresh", "[rewind]") {
  const uint32_t seed = SeedFor({42});
  std::mt19937 rng(seed);
  Fixture f(MakeLayer(12, kK, kV, rng), 2);
  const EncodedTokens tokens =
      EncodeTokens(RandomTokens(f.layer, 8, rng), LUMEN_DTYPE_FLOAT32);
  SessionPtr session = f.Session();
  REQUIRE_OK(lumen_session_set_rewind_depth(session.get(), 4));
  Step(session.get(), f.layer, tokens, 0);
  Step(session.get(), f.layer, tokens, 1);
  CHECK(Available(session.get()) == 2);
  const lumen_layer_inputs in = InputsFor(f.layer, tokens, 2, 3);
  OutputBuffer out;
  out.Reset(3 * f.layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  lumen_layer_output o = out.Output(0, 3 * f.layer.VPerToken());
  REQUIRE_OK(lumen_session_prefill(session.get(), 0, 3, &in, &o));
  CHECK(Available(session.get()) == 0);
  CHECK(lumen_session_rewind(session.get(), 1) == LUMEN_ERROR_INVALID_ARGUMENT);
  Step(session.get(), f.layer, tokens, 5);
  CHECK(Available(session.get()) == 1);
  REQUIRE_OK(lumen_session_reset(session.get()));
  CHECK(Available(session.get()) == 0);
  REQUIRE_OK(lumen_session_set_rewind_depth(session.get(), 0));
  CHECK(lumen_session_rewind(session.get(), 0) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(lumen_session_set_rewind_depth(session.get(), LUMEN_MAX_REWIND_TOKENS + 1) ==
        LUMEN_ERROR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace lumen_test
