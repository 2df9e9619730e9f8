// lumen.h's "Tentative tokens" section: tentative steps, their commit, the calls refused
// meanwhile, and their statuses. tests/speculative proves the bitwise equality with plain
// steps for every family.

#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/header/header_claims.h"
#include "tests/reference/layer_reference.h"
#include "tests/reference/session_fixture.h"
#include "tests/reference/temp_dir.h"

namespace lumen_fixture {
namespace {

using lumen_test::EncodedTokens;
using lumen_test::OutputBuffer;

// `n` random tokens of a layer encoded as fp32, their inputs and an output buffer.
struct Tokens {
  Tokens(const RefLayer& layer, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    data = lumen_test::RandomTokens(layer, n, rng);
    encoded = lumen_test::EncodeTokens(data, LUMEN_DTYPE_FLOAT32);
    inputs = lumen_test::InputsFor(layer, encoded, 0, n);
    out.Reset(n * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
    output = out.Output(0, n * layer.VPerToken());
  }
  // Token t alone, and an output for it.
  lumen_layer_inputs One(const RefLayer& layer, int64_t t) const {
    return lumen_test::InputsFor(layer, encoded, t, 1);
  }

  lumen_test::TokenData data;
  EncodedTokens encoded;
  lumen_layer_inputs inputs;
  OutputBuffer out;
  lumen_layer_output output;
};

// Steps tokens [0, m) of `tokens` one by one through layer `layer_index`.
void StepPlainly(lumen_session* session, int32_t layer_index, const RefLayer& layer,
                 const Tokens& tokens, int64_t m) {
  for (int64_t t = 0; t < m; ++t) {
    const lumen_layer_inputs in = tokens.One(layer, t);
    OutputBuffer out;
    out.Reset(layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
    lumen_layer_output o = out.Output(0, layer.VPerToken());
    REQUIRE_OK(lumen_session_step(session, layer_index, &in, &o));
  }
}

RefLayer DeltaLayer() {
  RefLayer layer = SmallLayer(LUMEN_FAMILY_GATED_DELTA_NET);
  std::mt19937 rng(5);
  lumen_test::RandomParams(&layer, rng);
  return layer;
}

TEST_CASE("a tentative step leaves the session and keeps its own copy of the inputs",
          "[header]") {
  LUMEN_CLAIM("lumen_session_step_tentative",
              "Runs num_tokens tokens (1 to LUMEN_MAX_TENTATIVE_TOKENS) of layer `layer` of "
              "one session tentatively: writes every token's output, [num_tokens, HV, V], "
              "leaves the session's state and token counts unchanged, and keeps a copy of the "
              "inputs (the caller's buffers may be reused at once) for lumen_session_commit.");
  const RefLayer layer = DeltaLayer();
  const Stack stack({layer});
  SessionPtr session = stack.NewSession(), plain = stack.NewSession();
  AddHistory(stack, session.get(), 3, 1);
  AddHistory(stack, plain.get(), 3, 1);
  const SessionState before = Capture(session.get(), stack.layers);
  const int32_t n = LUMEN_MAX_TENTATIVE_TOKENS;
  Tokens tokens(layer, n, 2);
  REQUIRE_OK(lumen_session_step_tentative(session.get(), 0, n, &tokens.inputs, &tokens.output));
  for (float value : tokens.out.Values()) CHECK(std::isfinite(value));  // every token written
  int64_t count = -1;
  REQUIRE_OK(lumen_session_tokens(session.get(), 0, &count));
  CHECK(count == 3);
  // The caller's buffers are reused at once: the commit replays the kept copy.
  Tokens kept = tokens;
  std::fill(tokens.encoded.q.begin(), tokens.encoded.q.end(), 0x7f);
  REQUIRE_OK(lumen_session_commit(session.get(), 0));
  CHECK(Capture(session.get(), stack.layers).SameBits(before));
  REQUIRE_OK(lumen_session_step_tentative(session.get(), 0, n, &kept.inputs, &kept.output));
  std::fill(kept.encoded.k.begin(), kept.encoded.k.end(), 0x7f);
  REQUIRE_OK(lumen_session_commit(session.get(), 5));
  Tokens again(layer, n, 2);  // the same tokens, regenerated
  StepPlainly(plain.get(), 0, layer, again, 5);
  CHECK(Capture(session.get(), stack.layers).SameBits(Capture(plain.get(), stack.layers)));
}

TEST_CASE("tentative steps' errors change nothing", "[header]") {
  LUMEN_CLAIM("lumen_session_step_tentative",
              "Returns the errors of lumen_session_step; LUMEN_ERROR_INVALID_ARGUMENT for "
              "num_tokens outside [1, LUMEN_MAX_TENTATIVE_TOKENS] or other than the session's "
              "other layers' tentative count; LUMEN_ERROR_UNCOMMITTED_TOKENS when the layer "
              "already ran tentative tokens that are not committed yet; "
              "LUMEN_ERROR_UNSUPPORTED for a layer its engine does not run tentatively (see "
              "\"Tentative tokens\").");
  LUMEN_CLAIM("lumen_session_step_tentative", "The session is unchanged on any error.");
  const RefLayer layer = DeltaLayer();
  const Stack stack({layer, layer});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 2, 3);
  const SessionState before = Capture(session.get(), stack.layers);
  Tokens tokens(layer, LUMEN_MAX_TENTATIVE_TOKENS + 1, 4);
  lumen_layer_inputs in = tokens.inputs;
  lumen_layer_output& out = tokens.output;
  auto with_count = [&](int32_t n) {
    in = lumen_test::InputsFor(layer, tokens.encoded, 0, n);
    out = tokens.out.Output(0, n * layer.VPerToken());
    return n;
  };
  CHECK(lumen_session_step_tentative(session.get(), 2, with_count(2), &in, &out) ==
        LUMEN_ERROR_OUT_OF_RANGE);
  in.v_count -= 1;
  CHECK(lumen_session_step_tentative(session.get(), 0, 2, &in, &out) ==
        LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(lumen_session_step_tentative(session.get(), 0, with_count(0), &in, &out) ==
        LUMEN_ERROR_INVALID_ARGUMENT);
  const int32_t too_many = with_count(LUMEN_MAX_TENTATIVE_TOKENS + 1);
  CHECK(lumen_session_step_tentative(session.get(), 0, too_many, &in, &out) ==
        LUMEN_ERROR_INVALID_ARGUMENT);
  REQUIRE_OK(lumen_session_step_tentative(session.get(), 0, with_count(3), &in, &out));
  CHECK(lumen_session_step_tentative(session.get(), 0, with_count(3), &in, &out) ==
        LUMEN_ERROR_UNCOMMITTED_TOKENS);
  CHECK(lumen_session_step_tentative(session.get(), 1, with_count(2), &in, &out) ==
        LUMEN_ERROR_INVALID_ARGUMENT);
  int32_t held = 0;
  REQUIRE_OK(lumen_session_tentative_tokens(session.get(), &held));
  CHECK(held == 3);
  REQUIRE_OK(lumen_session_commit(session.get(), 0));
  CHECK(Capture(session.get(), stack.layers).SameBits(before));

  RefLayer windowed = layer;
  windowed.conv_size = 4;
  windowed.state_dtype = LUMEN_DTYPE_BFLOAT16;
  std::mt19937 rng(6);
  lumen_test::RandomParams(&windowed, rng);
  const Stack bf16({windowed});
  SessionPtr other = bf16.NewSession();
  Tokens more(windowed, 2, 7);
  CHECK(lumen_session_step_tentative(other.get(), 0, 2, &more.inputs, &more.output) ==
        LUMEN_ERROR_UNSUPPORTED);
}

TEST_CASE("the CPU backend runs tentative tokens on every layer but bf16 ones with a window",
          "[header]") {
  LUMEN_CLAIM("Tentative tokens",
              "The CPU backend runs every layer but one with a bfloat16 state and a short "
              "convolution (LUMEN_ERROR_UNSUPPORTED).");
  for (int32_t family : {LUMEN_FAMILY_LINEAR_ATTN, LUMEN_FAMILY_RETENTION, LUMEN_FAMILY_SSD,
                         LUMEN_FAMILY_GLA, LUMEN_FAMILY_DELTA_NET, LUMEN_FAMILY_GATED_DELTA_NET,
                         LUMEN_FAMILY_KDA}) {
    for (int32_t conv_size : {0, 4}) {
      for (int32_t dtype : {LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_BFLOAT16}) {
        RefLayer layer = SmallLayer(family);
        layer.conv_size = conv_size;
        layer.state_dtype = dtype;
        layer.qk_l2norm = layer.DeltaRule();
        std::mt19937 rng(8);
        lumen_test::RandomParams(&layer, rng);
        INFO(layer.Describe());
        const Stack stack({layer});
        SessionPtr session = stack.NewSession();
        Tokens tokens(layer, 2, 9);
        const lumen_status status =
            lumen_session_step_tentative(session.get(), 0, 2, &tokens.inputs, &tokens.output);
        if (dtype == LUMEN_DTYPE_BFLOAT16 && conv_size > 0) {
          CHECK(status == LUMEN_ERROR_UNSUPPORTED);
        } else {
          CHECK(status == LUMEN_OK);
        }
      }
    }
  }
}

LUMEN_CLAIM_PROVEN_ELSEWHERE(
    "Tentative tokens",
    "GPU engines run the layers of their register step kernel (fp32 state, key_dim 128, "
    "value_dim a multiple of 32, no normaliser, the identity feature map: the published "
    "models' layers), over host or device buffers, and answer LUMEN_ERROR_UNSUPPORTED for "
    "other layers.",
    "tests/backends/cuda/cuda_token_runs_test.cc",
    "CUDA tentative tokens and their commit are bitwise plain steps");

TEST_CASE("until commit, every call on the session's state fails and changes nothing",
          "[header]") {
  LUMEN_CLAIM("Tentative tokens",
              "Until commit, every other call that reads or changes the session's state "
              "(step, prefill, the batched calls, reset, fork, read_state, write_state, "
              "snapshot, restore, save, load, the stores' save and load, rewind) fails with "
              "LUMEN_ERROR_UNCOMMITTED_TOKENS and changes nothing; lumen_session_tokens counts "
              "committed tokens only.");
  LUMEN_CLAIM("Tentative tokens", "Snapshots therefore never contain tentative tokens.");
  const RefLayer layer = DeltaLayer();
  const Stack stack({layer});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 2, 10);
  const SessionState before = Capture(session.get(), stack.layers);
  const Bytes snapshot = TakeSnapshot(session.get());
  Tokens tokens(layer, 4, 11);
  REQUIRE_OK(lumen_session_step_tentative(session.get(), 0, 4, &tokens.inputs, &tokens.output));

  const lumen_layer_inputs one = tokens.One(layer, 0);
  OutputBuffer out;
  out.Reset(layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  lumen_layer_output o = out.Output(0, layer.VPerToken());
  lumen_session* handle = session.get();
  const int32_t cu_seqlens[] = {0, 1};
  CHECK(lumen_session_step(session.get(), 0, &one, &o) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  CHECK(lumen_session_prefill(session.get(), 0, 1, &one, &o) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  CHECK(lumen_engine_step_batch(stack.engine.get(), 0, &handle, 1, &one, &o) ==
        LUMEN_ERROR_UNCOMMITTED_TOKENS);
  CHECK(lumen_engine_prefill_varlen(stack.engine.get(), 0, &handle, 1, cu_seqlens, &one, &o) ==
        LUMEN_ERROR_UNCOMMITTED_TOKENS);
  CHECK(lumen_session_reset(session.get()) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  lumen_session* copy = nullptr;
  CHECK(lumen_session_fork(session.get(), &copy) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  std::vector<float> matrix(layer.MatrixCount());
  CHECK(lumen_session_read_state(session.get(), 0, LUMEN_STATE_MATRIX, matrix.data(),
                                 layer.MatrixCount()) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  CHECK(lumen_session_write_state(session.get(), 0, LUMEN_STATE_MATRIX, before.matrices[0].data(),
                                  layer.MatrixCount()) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  Bytes buffer(snapshot.size());
  CHECK(lumen_session_snapshot(session.get(), nullptr, buffer.data(),
                               static_cast<int64_t>(buffer.size()), nullptr) ==
        LUMEN_ERROR_UNCOMMITTED_TOKENS);
  CHECK(lumen_session_restore(session.get(), snapshot.data(),
                              static_cast<int64_t>(snapshot.size())) ==
        LUMEN_ERROR_UNCOMMITTED_TOKENS);
  lumen_test::TempDir dir;
  const std::string path = (dir.path() / "session.lumen").string();
  CHECK(lumen_session_save(session.get(), path.c_str(), nullptr) ==
        LUMEN_ERROR_UNCOMMITTED_TOKENS);
  CHECK(lumen_session_load(session.get(), path.c_str()) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  lumen_store* store = nullptr;
  REQUIRE_OK(lumen_store_open(("file://" + (dir.path() / "store").string()).c_str(), nullptr,
                              &store));
  CHECK(lumen_store_save(store, "key", session.get(), nullptr, nullptr) ==
        LUMEN_ERROR_UNCOMMITTED_TOKENS);
  CHECK(lumen_store_load(store, "key", session.get(), nullptr) ==
        LUMEN_ERROR_UNCOMMITTED_TOKENS);
  lumen_store_destroy(store);
  CHECK(lumen_session_rewind(session.get(), 0) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  int64_t count = -1;
  REQUIRE_OK(lumen_session_tokens(session.get(), 0, &count));
  CHECK(count == 2);

  REQUIRE_OK(lumen_session_commit(session.get(), 0));
  CHECK(Capture(session.get(), stack.layers).SameBits(before));
  CHECK(TakeSnapshot(session.get()) == snapshot);
}

TEST_CASE("batched tentative steps: n = 0 is a no-op, errors change no session", "[header]") {
  LUMEN_CLAIM("lumen_engine_step_tentative_batch", "n = 0 is a no-op.");
  LUMEN_CLAIM("lumen_engine_step_tentative_batch",
              "Same errors as lumen_session_step_tentative and lumen_engine_step_batch; no "
              "session changes on any error.");
  const RefLayer layer = DeltaLayer();
  const Stack stack({layer}), elsewhere({layer});
  SessionPtr a = stack.NewSession(), b = stack.NewSession(), foreign = elsewhere.NewSession();
  Tokens tokens(layer, 4, 12);
  lumen_layer_inputs no_inputs;
  lumen_layer_inputs_init(&no_inputs);
  lumen_layer_output no_output;
  lumen_layer_output_init(&no_output);
  const int32_t start[] = {0};
  REQUIRE_OK(lumen_engine_step_tentative_batch(stack.engine.get(), 0, nullptr, 0, start,
                                               &no_inputs, &no_output));
  auto held = [](lumen_session* session) {
    int32_t count = -1;
    REQUIRE_OK(lumen_session_tentative_tokens(session, &count));
    return count;
  };
  std::vector<lumen_session*> pair = {a.get(), b.get()};
  const std::vector<int32_t> empty_second = {0, 4, 4};  // b gets no tokens
  CHECK(lumen_engine_step_tentative_batch(stack.engine.get(), 0, pair.data(), 2,
                                          empty_second.data(), &tokens.inputs,
                                          &tokens.output) == LUMEN_ERROR_INVALID_ARGUMENT);
  std::vector<lumen_session*> twice = {a.get(), a.get()};
  const std::vector<int32_t> halves = {0, 2, 4};
  CHECK(lumen_engine_step_tentative_batch(stack.engine.get(), 0, twice.data(), 2, halves.data(),
                                          &tokens.inputs, &tokens.output) ==
        LUMEN_ERROR_INVALID_ARGUMENT);
  std::vector<lumen_session*> mixed = {a.get(), foreign.get()};
  CHECK(lumen_engine_step_tentative_batch(stack.engine.get(), 0, mixed.data(), 2, halves.data(),
                                          &tokens.inputs, &tokens.output) ==
        LUMEN_ERROR_MODEL_MISMATCH);
  CHECK(held(a.get()) == 0);
  CHECK(held(b.get()) == 0);
  CHECK(held(foreign.get()) == 0);
  REQUIRE_OK(lumen_engine_step_tentative_batch(stack.engine.get(), 0, pair.data(), 2,
                                               halves.data(), &tokens.inputs, &tokens.output));
  CHECK(held(a.get()) == 2);
  CHECK(held(b.get()) == 2);
}

TEST_CASE("commit refuses what it cannot accept and changes nothing", "[header]") {
  LUMEN_CLAIM("lumen_session_commit",
              "Returns LUMEN_ERROR_INVALID_ARGUMENT when the session holds no tentative tokens "
              "(e.g. a second commit) or num_accepted is outside [0, n], changing nothing.");
  LUMEN_CLAIM("lumen_engine_commit_batch", "n = 0 is a no-op.");
  LUMEN_CLAIM("lumen_engine_commit_batch",
              "Same errors as lumen_session_commit and lumen_engine_step_batch; on an argument "
              "error no session changes.");
  const RefLayer layer = DeltaLayer();
  const Stack stack({layer});
  SessionPtr a = stack.NewSession(), b = stack.NewSession(), plain = stack.NewSession();
  AddHistory(stack, a.get(), 2, 13);
  AddHistory(stack, b.get(), 2, 13);
  AddHistory(stack, plain.get(), 2, 13);
  CHECK(lumen_session_commit(a.get(), 0) == LUMEN_ERROR_INVALID_ARGUMENT);
  Tokens tokens(layer, 3, 14);
  REQUIRE_OK(lumen_session_step_tentative(a.get(), 0, 3, &tokens.inputs, &tokens.output));
  REQUIRE_OK(lumen_session_step_tentative(b.get(), 0, 3, &tokens.inputs, &tokens.output));
  CHECK(lumen_session_commit(a.get(), 4) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(lumen_session_commit(a.get(), -1) == LUMEN_ERROR_INVALID_ARGUMENT);
  REQUIRE_OK(lumen_engine_commit_batch(stack.engine.get(), nullptr, 0, nullptr));
  std::vector<lumen_session*> pair = {a.get(), b.get()};
  const std::vector<int32_t> too_many = {2, 4};
  CHECK(lumen_engine_commit_batch(stack.engine.get(), pair.data(), 2, too_many.data()) ==
        LUMEN_ERROR_INVALID_ARGUMENT);
  std::vector<lumen_session*> twice = {a.get(), a.get()};
  const std::vector<int32_t> ones = {1, 1};
  CHECK(lumen_engine_commit_batch(stack.engine.get(), twice.data(), 2, ones.data()) ==
        LUMEN_ERROR_INVALID_ARGUMENT);
  for (lumen_session* session : pair) {
    int32_t held = -1;
    REQUIRE_OK(lumen_session_tentative_tokens(session, &held));
    CHECK(held == 3);
  }
  const std::vector<int32_t> accepted = {2, 3};
  REQUIRE_OK(lumen_engine_commit_batch(stack.engine.get(), pair.data(), 2, accepted.data()));
  CHECK(lumen_session_commit(a.get(), 2) == LUMEN_ERROR_INVALID_ARGUMENT);  // a second commit
  StepPlainly(plain.get(), 0, layer, tokens, 2);
  CHECK(Capture(a.get(), stack.layers).SameBits(Capture(plain.get(), stack.layers)));
}

LUMEN_CLAIM_UNPROVEN("lumen_session_commit",
                     "Should the replay run out of memory (LUMEN_ERROR_OUT_OF_MEMORY), the "
                     "layers replayed before it keep their tokens and the others keep theirs "
                     "tentative: commit again with the same num_accepted to finish.",
                     "the public API cannot make the allocator fail between two layers' "
                     "replays of one commit");

}  // namespace
}  // namespace lumen_fixture
