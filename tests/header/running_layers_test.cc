// lumen.h's "Running layers" section: layer inputs, steps, batched steps and varlen prefills,
// their statuses and what a failing call leaves.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
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

using lumen_test::EncodedTokens;
using lumen_test::OutputBuffer;

// `n` random tokens of the layer, and an output buffer for them.
struct Tokens {
  Tokens(const RefLayer& layer, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    encoded = lumen_test::EncodeTokens(lumen_test::RandomTokens(layer, n, rng),
                                       LUMEN_DTYPE_FLOAT32);
    inputs = lumen_test::InputsFor(layer, encoded, 0, n);
    out.Reset(n * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
    output = out.Output(0, n * layer.VPerToken());
  }
  // The output's bytes, to check that a failing call wrote none.
  std::vector<uint8_t> OutputBytes() const { return out.bytes; }

  EncodedTokens encoded;
  lumen_layer_inputs inputs;
  OutputBuffer out;
  lumen_layer_output output;
};

TEST_CASE("an input the layer does not take must be NULL with count 0", "[header]") {
  LUMEN_CLAIM("lumen_layer_inputs",
              "g is needed by ssd, gla, gated_delta_net and kda; beta by the delta family; for "
              "a layer that does not take one, the pointer must be NULL and its count 0 "
              "(anything else is LUMEN_ERROR_INVALID_ARGUMENT, as it usually means a mixed-up "
              "model).");
  const RefLayer layer = SmallLayer(LUMEN_FAMILY_LINEAR_ATTN);  // takes neither g nor beta
  const Stack stack({layer});
  SessionPtr session = stack.NewSession();
  Tokens tokens(layer, 1, 1);
  const std::vector<float> extra(64, 0.5f);
  struct Case {
    const char* name;
    const void* lumen_layer_inputs::*pointer;
    int64_t lumen_layer_inputs::*count;
  };
  for (const Case& c : {Case{"g", &lumen_layer_inputs::g, &lumen_layer_inputs::g_count},
                        Case{"beta", &lumen_layer_inputs::beta,
                             &lumen_layer_inputs::beta_count}}) {
    for (int with : {0, 1, 2}) {  // a pointer, a count, both
      INFO(c.name << (with == 0 ? " pointer" : with == 1 ? " count" : " pointer and count"));
      lumen_layer_inputs inputs = tokens.inputs;
      if (with != 1) inputs.*c.pointer = extra.data();
      if (with != 0) inputs.*c.count = 4;
      const lumen_status status =
          lumen_session_step(session.get(), 0, &inputs, &tokens.output);
      INFO(Describe(status));
      CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
    }
  }
  CHECK(lumen_session_step(session.get(), 0, &tokens.inputs, &tokens.output) == LUMEN_OK);
}

TEST_CASE("memory the CPU backend does not read is UNSUPPORTED", "[header]") {
  LUMEN_CLAIM("lumen_layer_inputs",
              "memory other than what the engine's backend reads (the CPU backend: HOST only) "
              "is LUMEN_ERROR_UNSUPPORTED.");
  const RefLayer layer = SmallLayer(LUMEN_FAMILY_GLA);
  const Stack stack({layer});
  // A CPU engine whatever the tests' backend is.
  lumen_engine_options options;
  lumen_engine_options_init(&options);
  options.backend = LUMEN_BACKEND_CPU;
  lumen_engine* engine = nullptr;
  REQUIRE_OK(lumen_engine_create(stack.model.get(), &options, &engine));
  EnginePtr cpu(engine);
  lumen_session* raw = nullptr;
  REQUIRE_OK(lumen_session_create(cpu.get(), &raw));
  SessionPtr session(raw);
  const SessionState before = Capture(session.get(), stack.layers);
  Tokens tokens(layer, 1, 2);
  lumen_layer_inputs inputs = tokens.inputs;
  inputs.memory = LUMEN_MEMORY_DEVICE;
  CHECK(lumen_session_step(session.get(), 0, &inputs, &tokens.output) ==
        LUMEN_ERROR_UNSUPPORTED);
  lumen_layer_output output = tokens.output;
  output.memory = LUMEN_MEMORY_DEVICE;
  CHECK(lumen_session_step(session.get(), 0, &tokens.inputs, &output) ==
        LUMEN_ERROR_UNSUPPORTED);
  CHECK(Capture(session.get(), stack.layers).SameBits(before));
}

#define LUMEN_INPUT_VALUES_SENTENCE                                                            \
  "Values are checked before anything runs: NaN or infinity in any input, g > 0 as a "         \
  "log-decay (any finite value with gate_raw), and beta outside [0, 1] ([0, 2] with "          \
  "allow_neg_eigval; any finite logit with beta_sigmoid) fail the call with "                  \
  "LUMEN_ERROR_INVALID_ARGUMENT, naming the tensor, the "                                      \
  "token (and, in a call of several sessions, which session's token), the head and the "       \
  "channel; no session changes."
LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_layer_inputs", LUMEN_INPUT_VALUES_SENTENCE,
                             "tests/api/input_values_test.cc",
                             "out-of-domain inputs fail naming tensor, token and head, and "
                             "change nothing");
LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_layer_inputs", LUMEN_INPUT_VALUES_SENTENCE,
                             "tests/api/input_values_test.cc",
                             "allow_neg_eigval: beta outside [0, 2] fails naming the range");
LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_layer_inputs", LUMEN_INPUT_VALUES_SENTENCE,
                             "tests/api/input_values_test.cc",
                             "a batched step names the session whose input is out of domain "
                             "and changes none");

TEST_CASE("a failing step is OUT_OF_RANGE or INVALID_ARGUMENT and changes nothing",
          "[header]") {
  LUMEN_CLAIM("lumen_session_step",
              "Returns LUMEN_ERROR_OUT_OF_RANGE for a bad layer and "
              "LUMEN_ERROR_INVALID_ARGUMENT for missing or wrongly sized buffers, input values "
              "outside their domain (lumen_layer_inputs) or a layer at its 2^62 tokens "
              "(lumen_session_tokens); the session is unchanged on any error.");
  const RefLayer layer = SmallLayer(LUMEN_FAMILY_GATED_DELTA_NET);
  const Stack stack({layer});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 5, 3);
  const SessionState before = Capture(session.get(), stack.layers);
  Tokens tokens(layer, 1, 4);
  const std::vector<uint8_t> output_before = tokens.OutputBytes();
  auto step = [&](int32_t index, const lumen_layer_inputs& inputs,
                  const lumen_layer_output& output) {
    lumen_layer_output o = output;
    return lumen_session_step(session.get(), index, &inputs, &o);
  };
  CHECK(step(1, tokens.inputs, tokens.output) == LUMEN_ERROR_OUT_OF_RANGE);
  CHECK(step(-1, tokens.inputs, tokens.output) == LUMEN_ERROR_OUT_OF_RANGE);
  lumen_layer_inputs missing = tokens.inputs;
  missing.q = nullptr;
  CHECK(step(0, missing, tokens.output) == LUMEN_ERROR_INVALID_ARGUMENT);
  lumen_layer_inputs short_k = tokens.inputs;
  short_k.k_count -= 1;
  CHECK(step(0, short_k, tokens.output) == LUMEN_ERROR_INVALID_ARGUMENT);
  lumen_layer_output short_o = tokens.output;
  short_o.o_count += 1;
  CHECK(step(0, tokens.inputs, short_o) == LUMEN_ERROR_INVALID_ARGUMENT);
  // An input value outside its domain: g > 0 as a log-decay.
  EncodedTokens bad = tokens.encoded;
  const float positive = 0.5f;
  std::memcpy(bad.g.data(), &positive, sizeof positive);
  const lumen_layer_inputs bad_inputs = lumen_test::InputsFor(layer, bad, 0, 1);
  CHECK(step(0, bad_inputs, tokens.output) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(Capture(session.get(), stack.layers).SameBits(before));
  CHECK(tokens.OutputBytes() == output_before);
}

TEST_CASE("a layer call writes its output only on success and only reads its inputs",
          "[header]") {
  LUMEN_CLAIM("lumen_layer_output.o", "written only on success");
  LUMEN_CLAIM("lumen_layer_inputs",
              "Host buffers are only read during the call; device buffers until the call's work "
              "on its stream has run (see \"GPU engines\").");
  const RefLayer layer = SmallLayer(LUMEN_FAMILY_KDA);
  const Stack stack({layer});
  SessionPtr session = stack.NewSession();
  Tokens tokens(layer, 5, 11);
  const EncodedTokens inputs_before = tokens.encoded;
  const std::vector<uint8_t> poisoned = tokens.OutputBytes();
  // A failing prefill (one token short in v) writes no byte of o.
  lumen_layer_inputs short_v = tokens.inputs;
  short_v.v_count -= 1;
  REQUIRE(lumen_session_prefill(session.get(), 0, 5, &short_v, &tokens.output) ==
          LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(tokens.OutputBytes() == poisoned);
  // A successful one writes all of o, and leaves every input as it was.
  REQUIRE_OK(lumen_session_prefill(session.get(), 0, 5, &tokens.inputs, &tokens.output));
  for (float value : tokens.out.Values()) REQUIRE(std::isfinite(value));
  CHECK(tokens.encoded.q == inputs_before.q);
  CHECK(tokens.encoded.k == inputs_before.k);
  CHECK(tokens.encoded.v == inputs_before.v);
  CHECK(tokens.encoded.g == inputs_before.g);
  CHECK(tokens.encoded.beta == inputs_before.beta);
}

LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_session_step",
                             "Returns LUMEN_ERROR_OUT_OF_RANGE for a bad layer and "
                             "LUMEN_ERROR_INVALID_ARGUMENT for missing or wrongly sized buffers, "
                             "input values outside their domain (lumen_layer_inputs) or a layer "
                             "at its 2^62 tokens (lumen_session_tokens); the session is "
                             "unchanged on any error.",
                             "tests/api/token_limit_test.cc",
                             "a session at 2^62 tokens restores, refuses more tokens, and "
                             "snapshots again");

TEST_CASE("a failing prefill has the step's statuses and changes nothing", "[header]") {
  LUMEN_CLAIM("lumen_session_prefill",
              "Same errors as lumen_session_step; the session is unchanged on any error.");
  const RefLayer layer = SmallLayer(LUMEN_FAMILY_GATED_DELTA_NET);
  const Stack stack({layer});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 5, 3);
  const SessionState before = Capture(session.get(), stack.layers);
  Tokens tokens(layer, 3, 4);
  const std::vector<uint8_t> output_before = tokens.OutputBytes();
  auto prefill = [&](int32_t index, int32_t n, const lumen_layer_inputs& inputs) {
    lumen_layer_output o = tokens.output;
    return lumen_session_prefill(session.get(), index, n, &inputs, &o);
  };
  CHECK(prefill(1, 3, tokens.inputs) == LUMEN_ERROR_OUT_OF_RANGE);
  CHECK(prefill(0, 2, tokens.inputs) == LUMEN_ERROR_INVALID_ARGUMENT);  // counts for 3 tokens
  CHECK(prefill(0, 0, tokens.inputs) == LUMEN_ERROR_INVALID_ARGUMENT);
  lumen_layer_inputs missing = tokens.inputs;
  missing.v = nullptr;
  CHECK(prefill(0, 3, missing) == LUMEN_ERROR_INVALID_ARGUMENT);
  // The last token's beta outside [0, 1]: the first two tokens must not have run either.
  EncodedTokens bad = tokens.encoded;
  const float too_big = 1.5f;
  std::memcpy(bad.beta.data() + bad.beta.size() - sizeof too_big, &too_big, sizeof too_big);
  CHECK(prefill(0, 3, lumen_test::InputsFor(layer, bad, 0, 3)) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(Capture(session.get(), stack.layers).SameBits(before));
  CHECK(tokens.OutputBytes() == output_before);
}

TEST_CASE("a batched step of no session is a no-op", "[header]") {
  LUMEN_CLAIM("lumen_engine_step_batch", "n = 0 is a no-op.");
  const RefLayer layer = SmallLayer(LUMEN_FAMILY_GLA);
  const Stack stack({layer});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 2, 5);
  const SessionState before = Capture(session.get(), stack.layers);
  lumen_layer_inputs inputs;
  lumen_layer_inputs_init(&inputs);
  lumen_layer_output output;
  lumen_layer_output_init(&output);
  CHECK(lumen_engine_step_batch(stack.engine.get(), 0, nullptr, 0, &inputs, &output) ==
        LUMEN_OK);
  lumen_session* sessions[] = {session.get()};
  CHECK(lumen_engine_step_batch(stack.engine.get(), 0, sessions, 0, &inputs, &output) ==
        LUMEN_OK);
  CHECK(Capture(session.get(), stack.layers).SameBits(before));
}

TEST_CASE("a batched step: MODEL_MISMATCH for another engine's session, INVALID_ARGUMENT for "
          "a session twice, and no session changes",
          "[header]") {
  LUMEN_CLAIM("lumen_engine_step_batch",
              "Returns the errors of lumen_session_step, LUMEN_ERROR_MODEL_MISMATCH if a "
              "session belongs to another engine and LUMEN_ERROR_INVALID_ARGUMENT if a session "
              "appears twice; no session changes on any error.");
  const RefLayer layer = SmallLayer(LUMEN_FAMILY_DELTA_NET);
  const Stack stack({layer}), other({layer});
  SessionPtr a = stack.NewSession(), b = stack.NewSession(), foreign = other.NewSession();
  AddHistory(stack, a.get(), 3, 6);
  AddHistory(stack, b.get(), 4, 7);
  AddHistory(other, foreign.get(), 2, 8);
  const SessionState a_before = Capture(a.get(), stack.layers);
  const SessionState b_before = Capture(b.get(), stack.layers);
  const SessionState foreign_before = Capture(foreign.get(), other.layers);
  Tokens tokens(layer, 2, 9);
  auto batch = [&](lumen_session* first, lumen_session* second, int32_t index) {
    lumen_session* sessions[] = {first, second};
    return lumen_engine_step_batch(stack.engine.get(), index, sessions, 2, &tokens.inputs,
                                   &tokens.output);
  };
  CHECK(batch(a.get(), foreign.get(), 0) == LUMEN_ERROR_MODEL_MISMATCH);
  CHECK(batch(a.get(), a.get(), 0) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(batch(a.get(), b.get(), 1) == LUMEN_ERROR_OUT_OF_RANGE);
  lumen_layer_inputs short_v = tokens.inputs;
  short_v.v_count -= 1;
  lumen_session* sessions[] = {a.get(), b.get()};
  CHECK(lumen_engine_step_batch(stack.engine.get(), 0, sessions, 2, &short_v, &tokens.output) ==
        LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(Capture(a.get(), stack.layers).SameBits(a_before));
  CHECK(Capture(b.get(), stack.layers).SameBits(b_before));
  CHECK(Capture(foreign.get(), other.layers).SameBits(foreign_before));
  CHECK(batch(a.get(), b.get(), 0) == LUMEN_OK);
}

TEST_CASE("varlen: cu_seqlens that start elsewhere than 0 or decrease are rejected",
          "[header]") {
  LUMEN_CLAIM("lumen_engine_prefill_varlen",
              "Session i consumes tokens cu_seqlens[i] .. cu_seqlens[i+1] of the concatenated "
              "inputs (cu_seqlens has n + 1 entries, starts at 0, never decreases; host "
              "memory).");
  const RefLayer layer = SmallLayer(LUMEN_FAMILY_GLA);
  const Stack stack({layer});
  SessionPtr a = stack.NewSession(), b = stack.NewSession();
  const SessionState a_before = Capture(a.get(), stack.layers);
  const SessionState b_before = Capture(b.get(), stack.layers);
  Tokens tokens(layer, 4, 10);
  lumen_session* sessions[] = {a.get(), b.get()};
  auto varlen = [&](std::vector<int32_t> cu) {
    const lumen_status status = lumen_engine_prefill_varlen(
        stack.engine.get(), 0, sessions, 2, cu.data(), &tokens.inputs, &tokens.output);
    INFO(Describe(status));
    return status;
  };
  CHECK(varlen({0, 3, 2}) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(varlen({1, 2, 4}) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(varlen({0, 5, 4}) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(Capture(a.get(), stack.layers).SameBits(a_before));
  CHECK(Capture(b.get(), stack.layers).SameBits(b_before));
  // Equal entries (a session of no tokens) are fine: the sequence never decreases.
  CHECK(varlen({0, 0, 4}) == LUMEN_OK);
  int64_t count = -1;
  REQUIRE_OK(lumen_session_tokens(a.get(), 0, &count));
  CHECK(count == 0);
  REQUIRE_OK(lumen_session_tokens(b.get(), 0, &count));
  CHECK(count == 4);
}

}  // namespace
}  // namespace lumen_fixture
