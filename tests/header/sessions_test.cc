// lumen.h's "Sessions" section: sessions, token counts and reading state.

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/header/header_claims.h"
#include "tests/reference/layer_reference.h"
#include "tests/reference/session_fixture.h"

namespace lumen_fixture {
namespace {

TEST_CASE("lumen_session_destroy(NULL) is a no-op", "[header]") {
  LUMEN_CLAIM("lumen_session_destroy", "NULL is a no-op.");
  REQUIRE(lumen_model_builder_create(nullptr) == LUMEN_ERROR_INVALID_ARGUMENT);
  const std::string message = lumen_last_error_message();
  lumen_session_destroy(nullptr);
  CHECK(lumen_last_error_message() == message);
}

// The token limit takes sessions edited to 2^62 tokens through snapshots: the token-limit
// tests of tests/api prove each part of the sentence.
#define LUMEN_TOKEN_LIMIT_SENTENCE                                                             \
  "A layer consumes at most 2^62 tokens (4611686018427387904; at a billion tokens a second, " \
  "146 years): a layer call that would take a session's layer past it fails with "            \
  "LUMEN_ERROR_INVALID_ARGUMENT before anything changes (reset or restore the session to go " \
  "on), and a snapshot whose token count exceeds it is LUMEN_ERROR_CORRUPT_SNAPSHOT."
LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_session_tokens", LUMEN_TOKEN_LIMIT_SENTENCE,
                             "tests/api/token_limit_test.cc",
                             "a session at 2^62 tokens restores, refuses more tokens, and "
                             "snapshots again");
LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_session_tokens", LUMEN_TOKEN_LIMIT_SENTENCE,
                             "tests/api/token_limit_test.cc",
                             "a session just below 2^62 tokens takes the tokens that reach it, "
                             "no more");
LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_session_tokens", LUMEN_TOKEN_LIMIT_SENTENCE,
                             "tests/api/token_limit_test.cc",
                             "a snapshot whose token count passes 2^62 is corrupt and changes "
                             "nothing");

TEST_CASE("reading a part the layer does not keep is INVALID_ARGUMENT", "[header]") {
  LUMEN_CLAIM("lumen_session_read_state",
              "count must equal lumen_model_state_count; a part the layer does not keep is "
              "LUMEN_ERROR_INVALID_ARGUMENT.");
  const RefLayer layer = SmallLayer(LUMEN_FAMILY_GLA);  // no normalizer, no convolution
  const Stack stack({layer});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 3, 1);
  int64_t count = 0;
  REQUIRE_OK(lumen_model_state_count(stack.model.get(), 0, LUMEN_STATE_MATRIX, &count));
  std::vector<float> values(static_cast<size_t>(count) + 1, 7.0f);
  REQUIRE_OK(lumen_session_read_state(session.get(), 0, LUMEN_STATE_MATRIX, values.data(),
                                      count));
  for (int64_t wrong : {count - 1, count + 1, int64_t{0}}) {
    INFO("count " << wrong << " for " << count);
    CHECK(lumen_session_read_state(session.get(), 0, LUMEN_STATE_MATRIX, values.data(),
                                   wrong) == LUMEN_ERROR_INVALID_ARGUMENT);
  }
  for (int32_t part : {LUMEN_STATE_NORMALIZER, LUMEN_STATE_CONV_Q, LUMEN_STATE_CONV_K,
                       LUMEN_STATE_CONV_V}) {
    INFO("part " << part);
    std::vector<float> out(4, 7.0f);
    const lumen_status status =
        lumen_session_read_state(session.get(), 0, part, out.data(), 0);
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(out == std::vector<float>(4, 7.0f));
  }
}

TEST_CASE("writing state leaves the token count as it was", "[header]") {
  LUMEN_CLAIM("lumen_session_write_state", "The token count is unchanged.");
  const RefLayer layer = SmallLayer(LUMEN_FAMILY_DELTA_NET);
  const Stack stack({layer});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 7, 2);
  int64_t count = 0;
  REQUIRE_OK(lumen_model_state_count(stack.model.get(), 0, LUMEN_STATE_MATRIX, &count));
  std::vector<float> values(static_cast<size_t>(count), 0.25f);
  REQUIRE_OK(lumen_session_write_state(session.get(), 0, LUMEN_STATE_MATRIX, values.data(),
                                       count));
  int64_t tokens = -1;
  REQUIRE_OK(lumen_session_tokens(session.get(), 0, &tokens));
  CHECK(tokens == 7);
  std::vector<float> read(static_cast<size_t>(count));
  REQUIRE_OK(lumen_session_read_state(session.get(), 0, LUMEN_STATE_MATRIX, read.data(), count));
  CHECK(read == values);
}

}  // namespace
}  // namespace lumen_fixture
