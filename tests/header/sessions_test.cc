// lumen.h's "Sessions" section: sessions, token counts and reading state.

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <random>
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

// A kda layer with K != V (a transposed matrix shows) and a convolution of width 3.
RefLayer LayoutLayer() {
  RefLayer layer = SmallLayer(LUMEN_FAMILY_KDA);
  layer.value_dim = 3;
  layer.conv_size = 3;
  std::mt19937 rng(17);
  lumen_test::RandomParams(&layer, rng);
  return layer;
}

TEST_CASE("state layouts: fla's is the matrix V-first and a conv window one column wider",
          "[header]") {
  const RefLayer layer = LayoutLayer();
  const Stack stack({layer});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 5, 3);
  const int64_t HV = layer.num_value_heads, K = layer.key_dim, V = layer.value_dim;
  std::vector<float> canonical(static_cast<size_t>(HV * K * V));
  REQUIRE_OK(lumen_session_read_state(session.get(), 0, LUMEN_STATE_MATRIX, canonical.data(),
                                      HV * K * V));
  std::vector<float> fla(canonical.size(), 7.0f);
  REQUIRE_OK(lumen_session_read_state_as(session.get(), 0, LUMEN_STATE_MATRIX,
                                         LUMEN_LAYOUT_FLA, fla.data(), HV * V * K));
  for (int64_t h = 0; h < HV; ++h) {
    for (int64_t i = 0; i < K; ++i) {
      for (int64_t j = 0; j < V; ++j) {
        REQUIRE(fla[(h * V + j) * K + i] == canonical[(h * K + i) * V + j]);
      }
    }
  }
  std::vector<float> same(canonical.size());
  REQUIRE_OK(lumen_session_read_state_as(session.get(), 0, LUMEN_STATE_MATRIX,
                                         LUMEN_LAYOUT_LUMEN, same.data(), HV * K * V));
  CHECK(same == canonical);

  const int64_t C = layer.ConvChannels(2), W = layer.conv_size;
  std::vector<float> window(static_cast<size_t>(C * (W - 1)));
  REQUIRE_OK(lumen_session_read_state(session.get(), 0, LUMEN_STATE_CONV_V, window.data(),
                                      C * (W - 1)));
  std::vector<float> fla_window(static_cast<size_t>(C * W), 7.0f);
  REQUIRE_OK(lumen_session_read_state_as(session.get(), 0, LUMEN_STATE_CONV_V,
                                         LUMEN_LAYOUT_FLA, fla_window.data(), C * W));
  for (int64_t c = 0; c < C; ++c) {
    CHECK(fla_window[c * W] == 0.0f);
    for (int64_t w = 1; w < W; ++w) REQUIRE(fla_window[c * W + w] == window[c * (W - 1) + w - 1]);
  }

  // Written back in fla's layout, with another oldest column (ignored): the same state.
  SessionPtr copy = stack.NewSession();
  for (int64_t c = 0; c < C; ++c) fla_window[c * W] = 123.0f;
  REQUIRE_OK(lumen_session_write_state_as(copy.get(), 0, LUMEN_STATE_MATRIX,
                                          LUMEN_LAYOUT_FLA, fla.data(), HV * V * K));
  REQUIRE_OK(lumen_session_write_state_as(copy.get(), 0, LUMEN_STATE_CONV_V,
                                          LUMEN_LAYOUT_FLA, fla_window.data(), C * W));
  std::vector<float> back(canonical.size());
  REQUIRE_OK(lumen_session_read_state(copy.get(), 0, LUMEN_STATE_MATRIX, back.data(),
                                      HV * K * V));
  CHECK(back == canonical);
  std::vector<float> back_window(window.size());
  REQUIRE_OK(lumen_session_read_state(copy.get(), 0, LUMEN_STATE_CONV_V, back_window.data(),
                                      C * (W - 1)));
  CHECK(back_window == window);
}

TEST_CASE("state layouts: an unknown layout, a wrong count or a part not kept is "
          "INVALID_ARGUMENT, and a failed write changes nothing",
          "[header]") {
  LUMEN_CLAIM("lumen_session_read_state_as",
              "An unknown layout, a wrong count or a part the layer does not keep is "
              "LUMEN_ERROR_INVALID_ARGUMENT.");
  LUMEN_CLAIM("lumen_session_write_state_as",
              "Same errors as lumen_session_read_state_as; the session is unchanged on any "
              "error.");
  RefLayer gla = SmallLayer(LUMEN_FAMILY_GLA);  // no normalizer, no convolution
  const Stack stack({LayoutLayer(), gla});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 4, 2);
  const SessionState before = Capture(session.get(), stack.layers);
  const RefLayer& kda = stack.layers[0];
  const int64_t matrix = int64_t{kda.num_value_heads} * kda.key_dim * kda.value_dim;
  const int64_t window = kda.ConvChannels(0) * kda.conv_size;  // fla's [C, W]
  std::vector<float> buffer(static_cast<size_t>(matrix + window), 0.5f);
  struct Case {
    const char* what;
    int32_t layer, part, layout;
    int64_t count;
  };
  const Case cases[] = {
      {"layout 2", 0, LUMEN_STATE_MATRIX, 2, matrix},
      {"layout -1", 0, LUMEN_STATE_MATRIX, -1, matrix},
      {"matrix count - 1", 0, LUMEN_STATE_MATRIX, LUMEN_LAYOUT_FLA, matrix - 1},
      {"conv window of W-1 columns", 0, LUMEN_STATE_CONV_Q, LUMEN_LAYOUT_FLA,
       kda.ConvChannels(0) * (kda.conv_size - 1)},
      {"canonical count, wrong", 0, LUMEN_STATE_CONV_Q, LUMEN_LAYOUT_LUMEN, window},
      {"no normalizer", 0, LUMEN_STATE_NORMALIZER, LUMEN_LAYOUT_FLA, 0},
      {"no convolution", 1, LUMEN_STATE_CONV_K, LUMEN_LAYOUT_FLA, 0},
      {"part 9", 0, 9, LUMEN_LAYOUT_FLA, 1},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    std::vector<float> out(buffer.size(), 7.0f);
    const lumen_status read = lumen_session_read_state_as(session.get(), c.layer, c.part,
                                                          c.layout, out.data(), c.count);
    INFO(Describe(read));
    CHECK(read == LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(out == std::vector<float>(buffer.size(), 7.0f));
    const lumen_status write = lumen_session_write_state_as(session.get(), c.layer, c.part,
                                                            c.layout, buffer.data(), c.count);
    INFO(Describe(write));
    CHECK(write == LUMEN_ERROR_INVALID_ARGUMENT);
  }
  // A non-finite value, in the conv window's ignored column too.
  std::vector<float> fla_window(static_cast<size_t>(window), 0.5f);
  fla_window[0] = std::numeric_limits<float>::quiet_NaN();
  CHECK(lumen_session_write_state_as(session.get(), 0, LUMEN_STATE_CONV_Q,
                                     LUMEN_LAYOUT_FLA, fla_window.data(),
                                     window) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(Capture(session.get(), stack.layers).SameBits(before));
}

TEST_CASE("writing state in fla's layout leaves the token count as it was", "[header]") {
  LUMEN_CLAIM("lumen_session_write_state_as", "The token count is unchanged.");
  const RefLayer layer = LayoutLayer();
  const Stack stack({layer});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 6, 2);
  const int64_t window = layer.ConvChannels(1) * layer.conv_size;
  const std::vector<float> values(static_cast<size_t>(window), 0.25f);
  REQUIRE_OK(lumen_session_write_state_as(session.get(), 0, LUMEN_STATE_CONV_K,
                                          LUMEN_LAYOUT_FLA, values.data(), window));
  int64_t tokens = -1;
  REQUIRE_OK(lumen_session_tokens(session.get(), 0, &tokens));
  CHECK(tokens == 6);
}

}  // namespace
}  // namespace lumen_fixture
