// lumen.h's "Rewind" section: the rewind depth, what can be gone back, and their statuses.
// tests/speculative/rewind_test.cc proves the bitwise equality for every family.

#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "lumen/lumen.h"
#include "tests/header/header_claims.h"
#include "tests/reference/layer_reference.h"
#include "tests/reference/session_fixture.h"

namespace lumen_fixture {
namespace {

// Steps `count` random tokens through every layer of the session, one at a time.
void Steps(const Stack& stack, lumen_session* session, int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int64_t t = 0; t < count; ++t) {
    for (size_t i = 0; i < stack.layers.size(); ++i) {
      const RefLayer& layer = stack.layers[i];
      const lumen_test::EncodedTokens tokens = lumen_test::EncodeTokens(
          lumen_test::RandomTokens(layer, 1, rng), LUMEN_DTYPE_FLOAT32);
      const lumen_layer_inputs in = lumen_test::InputsFor(layer, tokens, 0, 1);
      lumen_test::OutputBuffer out;
      out.Reset(layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
      lumen_layer_output o = out.Output(0, layer.VPerToken());
      REQUIRE_OK(lumen_session_step(session, static_cast<int32_t>(i), &in, &o));
    }
  }
}

int32_t Available(const lumen_session* session) {
  int32_t available = -1;
  REQUIRE_OK(lumen_session_rewind_available(session, &available));
  return available;
}

RefLayer Layer(int32_t family) {
  RefLayer layer = SmallLayer(family);
  std::mt19937 rng(3);
  lumen_test::RandomParams(&layer, rng);
  return layer;
}

TEST_CASE("the rewind depth's statuses", "[header]") {
  LUMEN_CLAIM("lumen_session_set_rewind_depth",
              "Returns LUMEN_ERROR_INVALID_ARGUMENT for a depth outside that range, "
              "LUMEN_ERROR_UNSUPPORTED on engines other than the CPU's, and "
              "LUMEN_ERROR_UNCOMMITTED_TOKENS while the session holds tentative tokens.");
  const Stack stack({Layer(LUMEN_FAMILY_GATED_DELTA_NET)});
  SessionPtr session = stack.NewSession();
  CHECK(lumen_session_set_rewind_depth(session.get(), -1) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(lumen_session_set_rewind_depth(session.get(), LUMEN_MAX_REWIND_TOKENS + 1) ==
        LUMEN_ERROR_INVALID_ARGUMENT);
  REQUIRE_OK(lumen_session_set_rewind_depth(session.get(), LUMEN_MAX_REWIND_TOKENS));
  Steps(stack, session.get(), 2, 1);
  CHECK(Available(session.get()) == 2);
  const RefLayer& layer = stack.layers[0];
  std::mt19937 rng(2);
  const lumen_test::EncodedTokens tokens =
      lumen_test::EncodeTokens(lumen_test::RandomTokens(layer, 2, rng), LUMEN_DTYPE_FLOAT32);
  const lumen_layer_inputs in = lumen_test::InputsFor(layer, tokens, 0, 2);
  lumen_test::OutputBuffer out;
  out.Reset(2 * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  lumen_layer_output o = out.Output(0, 2 * layer.VPerToken());
  REQUIRE_OK(lumen_session_step_tentative(session.get(), 0, 2, &in, &o));
  CHECK(lumen_session_set_rewind_depth(session.get(), 3) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  REQUIRE_OK(lumen_session_commit(session.get(), 0));
  CHECK(Available(session.get()) == 2);  // the failed call changed nothing
}

LUMEN_CLAIM_UNPROVEN("Rewind", "CPU engines only, for now (others: LUMEN_ERROR_UNSUPPORTED).",
                     "needs a GPU engine; the GPU suite will prove the GPU's rewind when the "
                     "CUDA backend runs several tokens per recurrent call");

TEST_CASE("what a session can go back: the fewest steps any layer kept, at most the depth",
          "[header]") {
  LUMEN_CLAIM("lumen_session_rewind_available",
              "Writes to *out how many tokens the session can go back now: the fewest steps "
              "any layer has kept since its history started, at most the depth (0 without a "
              "depth).");
  const Stack stack({Layer(LUMEN_FAMILY_KDA), Layer(LUMEN_FAMILY_RETENTION)});
  SessionPtr session = stack.NewSession();
  CHECK(Available(session.get()) == 0);
  Steps(stack, session.get(), 1, 4);
  CHECK(Available(session.get()) == 0);
  REQUIRE_OK(lumen_session_set_rewind_depth(session.get(), 3));
  Steps(stack, session.get(), 2, 5);
  CHECK(Available(session.get()) == 2);
  Steps(stack, session.get(), 5, 6);
  CHECK(Available(session.get()) == 3);
  // Layer 1 alone takes a step more: layer 0, with one step fewer kept, limits the session.
  REQUIRE_OK(lumen_session_set_rewind_depth(session.get(), 3));
  Steps(stack, session.get(), 1, 8);
  std::mt19937 rng(9);
  const RefLayer& retention = stack.layers[1];
  const lumen_test::EncodedTokens tokens = lumen_test::EncodeTokens(
      lumen_test::RandomTokens(retention, 1, rng), LUMEN_DTYPE_FLOAT32);
  const lumen_layer_inputs in = lumen_test::InputsFor(retention, tokens, 0, 1);
  lumen_test::OutputBuffer out;
  out.Reset(retention.VPerToken(), LUMEN_DTYPE_FLOAT32);
  lumen_layer_output o = out.Output(0, retention.VPerToken());
  REQUIRE_OK(lumen_session_step(session.get(), 1, &in, &o));
  CHECK(Available(session.get()) == 1);
}

TEST_CASE("rewind refuses what it cannot do and changes nothing", "[header]") {
  LUMEN_CLAIM("lumen_session_rewind",
              "Returns LUMEN_ERROR_INVALID_ARGUMENT for a session without a depth or "
              "num_tokens outside that range, and LUMEN_ERROR_UNCOMMITTED_TOKENS while the "
              "session holds tentative tokens, changing nothing.");
  const Stack stack({Layer(LUMEN_FAMILY_GATED_DELTA_NET)});
  SessionPtr session = stack.NewSession();
  CHECK(lumen_session_rewind(session.get(), 0) == LUMEN_ERROR_INVALID_ARGUMENT);
  REQUIRE_OK(lumen_session_set_rewind_depth(session.get(), 4));
  Steps(stack, session.get(), 3, 7);
  const SessionState before = Capture(session.get(), stack.layers);
  CHECK(lumen_session_rewind(session.get(), 4) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(lumen_session_rewind(session.get(), -1) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(Capture(session.get(), stack.layers).SameBits(before));
  SessionPtr earlier = stack.NewSession();
  Steps(stack, earlier.get(), 1, 7);  // the same first token
  REQUIRE_OK(lumen_session_rewind(session.get(), 2));
  CHECK(Capture(session.get(), stack.layers).SameBits(Capture(earlier.get(), stack.layers)));
}

}  // namespace
}  // namespace lumen_fixture
