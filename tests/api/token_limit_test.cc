// Token counts stop at 2^62 (lumen_session_tokens): a snapshot past it is corrupt, and a call
// that would take a layer past it fails before anything changes. (A snapshot with INT64_MAX
// tokens used to restore, and the next step overflowed the count.)

#include <string>

#include "tests/reference/session_fixture.h"

namespace lumen_fixture {
namespace {

constexpr int64_t kMaxTokens = int64_t{1} << 62;

// One token (or `count`) of random inputs through layer 0 of each session, batched.
lumen_status RunTokens(const Stack& stack, std::vector<lumen_session*> sessions,
                       int32_t count) {
  std::mt19937 rng(7);
  const RefLayer& layer = stack.layers[0];
  const int32_t n = static_cast<int32_t>(sessions.size());
  const lumen_test::EncodedTokens tokens = lumen_test::EncodeTokens(
      lumen_test::RandomTokens(layer, int64_t{n} * count, rng), LUMEN_DTYPE_FLOAT32);
  const lumen_layer_inputs inputs = lumen_test::InputsFor(layer, tokens, 0, int64_t{n} * count);
  lumen_test::OutputBuffer out;
  out.Reset(int64_t{n} * count * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  lumen_layer_output output = out.Output(0, int64_t{n} * count * layer.VPerToken());
  if (n == 1 && count == 1) return lumen_session_step(sessions[0], 0, &inputs, &output);
  if (n == 1) return lumen_session_prefill(sessions[0], 0, count, &inputs, &output);
  if (count == 1) {
    return lumen_engine_step_batch(stack.engine.get(), 0, sessions.data(), n, &inputs, &output);
  }
  std::vector<int32_t> cu_seqlens;
  for (int32_t i = 0; i <= n; ++i) cu_seqlens.push_back(i * count);
  return lumen_engine_prefill_varlen(stack.engine.get(), 0, sessions.data(), n,
                                     cu_seqlens.data(), &inputs, &output);
}

TEST_CASE("a snapshot whose token count passes 2^62 is corrupt and changes nothing",
          "[tokens]") {
  const Stack stack({SmallLayer(LUMEN_FAMILY_DELTA_NET), SmallLayer(LUMEN_FAMILY_GLA)});
  SessionPtr source = stack.NewSession(), target = stack.NewSession();
  AddHistory(stack, source.get(), 5, 1);
  AddHistory(stack, target.get(), 9, 2);
  const SessionState before = Capture(target.get(), stack.layers);
  for (uint64_t tokens : {uint64_t{INT64_MAX}, uint64_t(kMaxTokens) + 1, uint64_t{1} << 63,
                          ~uint64_t{0}}) {
    for (int32_t layer : {0, 1}) {
      INFO("layer " << layer << " with " << tokens << " tokens");
      const Bytes bytes = WithTokenCount(source.get(), layer, tokens);
      const lumen_status status = lumen_session_restore(target.get(), bytes.data(),
                                                        static_cast<int64_t>(bytes.size()));
      const std::string message = lumen_last_error_message();
      INFO(Describe(status));
      CHECK(status == LUMEN_ERROR_CORRUPT_SNAPSHOT);
      CHECK(message.find("layer " + std::to_string(layer)) != std::string::npos);
      CHECK(Capture(target.get(), stack.layers).SameBits(before));
    }
  }
}

TEST_CASE("a session at 2^62 tokens restores, refuses more tokens, and snapshots again",
          "[tokens]") {
  const Stack stack({SmallLayer(LUMEN_FAMILY_DELTA_NET)});
  SessionPtr source = stack.NewSession(), session = stack.NewSession();
  AddHistory(stack, source.get(), 5, 3);
  const Bytes at_limit = WithTokenCount(source.get(), 0, kMaxTokens);
  REQUIRE_OK(lumen_session_restore(session.get(), at_limit.data(),
                                   static_cast<int64_t>(at_limit.size())));
  const SessionState before = Capture(session.get(), stack.layers);
  CHECK(before.tokens[0] == kMaxTokens);

  SECTION("a step fails and changes nothing") {
    const lumen_status status = RunTokens(stack, {session.get()}, 1);
    const std::string message = lumen_last_error_message();
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(message.find("limit") != std::string::npos);
    CHECK(Capture(session.get(), stack.layers).SameBits(before));
  }
  SECTION("a prefill fails and changes nothing") {
    const lumen_status status = RunTokens(stack, {session.get()}, 3);
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(Capture(session.get(), stack.layers).SameBits(before));
  }
  SECTION("a batch with one session at the limit changes none of them") {
    SessionPtr fresh = stack.NewSession();
    const SessionState fresh_before = Capture(fresh.get(), stack.layers);
    for (int32_t count : {1, 2}) {
      const lumen_status status = RunTokens(stack, {fresh.get(), session.get()}, count);
      const std::string message = lumen_last_error_message();
      INFO(count << " tokens each: " << Describe(status));
      CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
      CHECK(message.find("session 1") != std::string::npos);
      CHECK(Capture(session.get(), stack.layers).SameBits(before));
      CHECK(Capture(fresh.get(), stack.layers).SameBits(fresh_before));
    }
  }
  SECTION("its own snapshot restores") {
    const Bytes again = TakeSnapshot(session.get());
    SessionPtr copy = stack.NewSession();
    REQUIRE_OK(lumen_session_restore(copy.get(), again.data(), static_cast<int64_t>(again.size())));
    CHECK(Capture(copy.get(), stack.layers).SameBits(before));
  }
}

TEST_CASE("a session just below 2^62 tokens takes the tokens that reach it, no more",
          "[tokens]") {
  const Stack stack({SmallLayer(LUMEN_FAMILY_DELTA_NET)});
  SessionPtr source = stack.NewSession(), session = stack.NewSession();
  AddHistory(stack, source.get(), 5, 4);
  const Bytes below = WithTokenCount(source.get(), 0, kMaxTokens - 2);
  REQUIRE_OK(
      lumen_session_restore(session.get(), below.data(), static_cast<int64_t>(below.size())));
  const SessionState before = Capture(session.get(), stack.layers);
  // Three tokens would pass the limit: refused whole.
  CHECK(RunTokens(stack, {session.get()}, 3) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(Capture(session.get(), stack.layers).SameBits(before));
  REQUIRE_OK(RunTokens(stack, {session.get()}, 2));
  int64_t tokens = 0;
  REQUIRE_OK(lumen_session_tokens(session.get(), 0, &tokens));
  CHECK(tokens == kMaxTokens);
  CHECK(RunTokens(stack, {session.get()}, 1) == LUMEN_ERROR_INVALID_ARGUMENT);
  // A reset starts the count again.
  REQUIRE_OK(lumen_session_reset(session.get()));
  REQUIRE_OK(RunTokens(stack, {session.get()}, 1));
}

}  // namespace
}  // namespace lumen_fixture
