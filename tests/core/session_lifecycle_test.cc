// A session's life through the public C API: a step after a prefill after steps continues
// the same sequence; reading, forking, snapshotting or prefilling in between changes no
// later bit; fork copies and diverges; reset zeroes; token counts advance per layer; state
// sizes are fixed, whatever the token count.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/core/session_test_util.h"
#include "tests/reference/layer_reference.h"

namespace lumen_test {
namespace {

TEST_CASE("a step after a prefill after steps continues the same sequence", "[session]") {
  const int config = GENERATE(range(0, NumConfigs()));
  const uint32_t seed = SeedFor({2, config});
  std::mt19937 rng(seed);
  Fixture f(MakeLayer(config, 19, 33, rng));
  INFO(f.layer.Describe() << " seed=" << seed);
  const int64_t T = 70;
  const TokenData data = RandomTokens(f.layer, T, rng);
  const EncodedTokens tokens = EncodeTokens(data, LUMEN_DTYPE_FLOAT32);
  RefState ref = ZeroState(f.layer);
  std::vector<double> ref_o;
  RunReference(f.layer, T, ToRefInputs(data, LUMEN_DTYPE_FLOAT32), &ref, &ref_o);

  // From a zero state: 3 steps, a prefill of 64, 3 steps.
  SessionPtr s = f.Session();
  OutputBuffer out;
  out.Reset(T * f.layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  int64_t t = 0;
  auto call = [&](int64_t n, bool step) {
    const lumen_layer_inputs in = InputsFor(f.layer, tokens, t, n);
    lumen_layer_output o = out.Output(t * f.layer.VPerToken(), n * f.layer.VPerToken());
    const lumen_status st =
        step ? lumen_session_step(s.get(), 0, &in, &o)
             : lumen_session_prefill(s.get(), 0, static_cast<int32_t>(n), &in, &o);
    INFO("at token " << t << ": " << LastError(st));
    REQUIRE(st == LUMEN_OK);
    t += n;
    CHECK(Tokens(s.get()) == t);
  };
  for (int i = 0; i < 3; ++i) call(1, true);
  call(64, false);
  for (int i = 0; i < 3; ++i) call(1, true);
  Expect("o", out.Values(), ref_o, kPrefillBound);
  ExpectState("final", Read(s.get(), f.layer), ref, kPrefillBound);
}

TEST_CASE("reading, forking, snapshotting or prefilling between steps changes no later bit",
          "[session][held]") {
  // The CPU backend holds a delta-rule step's last write beside the state and applies it
  // when anything outside a step looks at the session: that must never show. A session
  // that is read, forked, snapshotted and restored, or given an empty prefill between steps
  // must give the same bits as one stepped alone, outputs and final state.
  const int config = GENERATE(range(0, NumConfigs()));
  const uint32_t seed = SeedFor({3, config});
  std::mt19937 rng(seed);
  Fixture f(MakeLayer(config, 19, 33, rng), 2);
  INFO(Configs()[config].name << " seed=" << seed);
  const int64_t T = 24;
  const TokenData data = RandomTokens(f.layer, T, rng);
  const EncodedTokens tokens = EncodeTokens(data, LUMEN_DTYPE_FLOAT32);
  const StateValues initial = RandomValues(f.layer, rng);
  SessionPtr alone = f.Session();
  SessionPtr probed = f.Session();
  Write(alone.get(), f.layer, initial);
  Write(probed.get(), f.layer, initial);
  OutputBuffer alone_out, probed_out;
  alone_out.Reset(T * f.layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  probed_out.Reset(T * f.layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  auto step = [&](lumen_session* s, OutputBuffer* out, int64_t t) {
    const lumen_layer_inputs in = InputsFor(f.layer, tokens, t, 1);
    lumen_layer_output o = out->Output(t * f.layer.VPerToken(), f.layer.VPerToken());
    const lumen_status st = lumen_session_step(s, 0, &in, &o);
    INFO("at token " << t << ": " << LastError(st));
    REQUIRE(st == LUMEN_OK);
  };
  for (int64_t t = 0; t < T; ++t) {
    step(alone.get(), &alone_out, t);
    step(probed.get(), &probed_out, t);
    switch (t % 5) {
      case 0:
        Read(probed.get(), f.layer);
        break;
      case 1: {  // continue in the fork, which copied the held write; the parent reads alike
        lumen_session* fork = nullptr;
        REQUIRE(lumen_session_fork(probed.get(), &fork) == LUMEN_OK);
        CHECK(BitwiseEqual(Read(probed.get(), f.layer), Read(alone.get(), f.layer)));
        probed.reset(fork);
        break;
      }
      case 2: {  // continue in a fresh session restored from a snapshot
        int64_t size = 0;
        REQUIRE(lumen_session_snapshot_size(probed.get(), nullptr, &size) == LUMEN_OK);
        std::vector<char> bytes(size);
        REQUIRE(lumen_session_snapshot(probed.get(), nullptr, bytes.data(), size, nullptr) ==
                LUMEN_OK);
        probed = f.Session();
        REQUIRE(lumen_session_restore(probed.get(), bytes.data(), size) == LUMEN_OK);
        break;
      }
      case 3: {  // a prefill that gives it no tokens leaves its held write where it is
        SessionPtr other = f.Session();
        lumen_session* sessions[] = {probed.get(), other.get()};
        const int32_t cu_seqlens[] = {0, 0, 1};
        const lumen_layer_inputs in = InputsFor(f.layer, tokens, t, 1);
        OutputBuffer other_out;
        other_out.Reset(f.layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
        lumen_layer_output o = other_out.Output(0, f.layer.VPerToken());
        const lumen_status st =
            lumen_engine_prefill_varlen(f.engine.get(), 0, sessions, 2, cu_seqlens, &in, &o);
        INFO(LastError(st));
        REQUIRE(st == LUMEN_OK);
        break;
      }
      default:
        break;
    }
  }
  CHECK(BitwiseEqual(alone_out.Values(), probed_out.Values()));
  CHECK(BitwiseEqual(Read(alone.get(), f.layer), Read(probed.get(), f.layer)));
}

TEST_CASE("fork copies the session and diverging leaves the parent untouched", "[session][fork]") {
  const int config = GENERATE(range(0, NumConfigs()));
  const uint32_t seed = SeedFor({5, config});
  std::mt19937 rng(seed);
  Fixture f(MakeLayer(config, 19, 33, rng));
  INFO(f.layer.Describe() << " seed=" << seed);

  SessionPtr parent = f.Session();
  const TokenData prefix = RandomTokens(f.layer, 21, rng);
  OutputBuffer out;
  std::string error;
  REQUIRE(RunSession(parent.get(), 0, f.layer, EncodeTokens(prefix, LUMEN_DTYPE_FLOAT32),
                     Path::kPrefill, {}, LUMEN_DTYPE_FLOAT32, &out, &error) == LUMEN_OK);
  const StateValues before = Read(parent.get(), f.layer);

  lumen_session* raw = nullptr;
  const lumen_status st = lumen_session_fork(parent.get(), &raw);
  INFO(LastError(st));
  REQUIRE(st == LUMEN_OK);
  REQUIRE(raw != nullptr);
  SessionPtr child(raw);
  // The fork equals the parent, bit for bit, tokens included.
  const StateValues forked = Read(child.get(), f.layer);
  CHECK(BitwiseEqual(forked, before));
  CHECK(Tokens(child.get()) == 21);

  // Diverge: the child takes new tokens by prefill and by step.
  const TokenData more = RandomTokens(f.layer, 9, rng);
  const EncodedTokens more_enc = EncodeTokens(more, LUMEN_DTYPE_FLOAT32);
  REQUIRE(RunSession(child.get(), 0, f.layer, more_enc, Path::kPrefill, {},
                     LUMEN_DTYPE_FLOAT32, &out, &error) == LUMEN_OK);
  REQUIRE(RunSession(child.get(), 0, f.layer, more_enc, Path::kStep, {}, LUMEN_DTYPE_FLOAT32,
                     &out, &error) == LUMEN_OK);
  CHECK(Tokens(child.get()) == 21 + 18);
  const StateValues parent_after = Read(parent.get(), f.layer);
  CHECK(BitwiseEqual(parent_after, before));
  CHECK(Tokens(parent.get()) == 21);

  // The child continued from the parent's state: check it against the reference.
  RefState ref = ToRef(before);
  std::vector<double> ref_o;
  RunReference(f.layer, 9, ToRefInputs(more, LUMEN_DTYPE_FLOAT32), &ref, &ref_o);
  RunReference(f.layer, 9, ToRefInputs(more, LUMEN_DTYPE_FLOAT32), &ref, &ref_o);
  ExpectState("child", Read(child.get(), f.layer), ref, kPrefillBound);

  // Destroying the parent first leaves the child usable (it holds its own references).
  parent.reset();
  CHECK(RunSession(child.get(), 0, f.layer, more_enc, Path::kStep, {}, LUMEN_DTYPE_FLOAT32,
                   &out, &error) == LUMEN_OK);
}

TEST_CASE("reset zeroes state and token counts of every layer", "[session]") {
  std::mt19937 rng(SeedFor({6}));
  std::vector<RefLayer> layers;
  for (int config = 0; config < NumConfigs(); ++config) {
    layers.push_back(MakeLayer(config, 19, 33, rng));
  }
  std::string error;
  ModelPtr model = BuildModel(layers, &error);
  INFO(error);
  REQUIRE(model);
  EnginePtr engine = MakeEngine(model.get(), 0, &error);
  REQUIRE(engine);
  SessionPtr s = MakeSession(engine.get(), &error);
  REQUIRE(s);
  for (int32_t i = 0; i < static_cast<int32_t>(layers.size()); ++i) {
    const TokenData data = RandomTokens(layers[i], 5 + i, rng);
    OutputBuffer out;
    REQUIRE(RunSession(s.get(), i, layers[i], EncodeTokens(data, LUMEN_DTYPE_FLOAT32),
                       Path::kPrefill, {}, LUMEN_DTYPE_FLOAT32, &out, &error) == LUMEN_OK);
    CHECK(Tokens(s.get(), i) == 5 + i);
  }
  // Layers count their own tokens.
  for (int32_t i = 0; i < static_cast<int32_t>(layers.size()); ++i) {
    CHECK(Tokens(s.get(), i) == 5 + i);
  }
  REQUIRE(lumen_session_reset(s.get()) == LUMEN_OK);
  for (int32_t i = 0; i < static_cast<int32_t>(layers.size()); ++i) {
    INFO("layer " << i << ": " << layers[i].Describe());
    CHECK(Tokens(s.get(), i) == 0);
    const StateValues v = Read(s.get(), layers[i], i);
    CHECK(std::all_of(v.matrix.begin(), v.matrix.end(), [](float x) { return x == 0.0f; }));
    CHECK(std::all_of(v.normalizer.begin(), v.normalizer.end(),
                      [](float x) { return x == 0.0f; }));
    for (const std::vector<float>& window : v.conv) {
      CHECK(std::all_of(window.begin(), window.end(), [](float x) { return x == 0.0f; }));
    }
  }
  // After a reset the session runs like a new one.
  const TokenData data = RandomTokens(layers[0], 7, rng);
  RefState ref = ZeroState(layers[0]);
  std::vector<double> ref_o;
  RunReference(layers[0], 7, ToRefInputs(data, LUMEN_DTYPE_FLOAT32), &ref, &ref_o);
  OutputBuffer out;
  REQUIRE(RunSession(s.get(), 0, layers[0], EncodeTokens(data, LUMEN_DTYPE_FLOAT32),
                     Path::kStep, {}, LUMEN_DTYPE_FLOAT32, &out, &error) == LUMEN_OK);
  Expect("o after reset", out.Values(), ref_o, kStepBound);
}

TEST_CASE("token counts advance per layer, by step and by prefill", "[session]") {
  std::mt19937 rng(SeedFor({7}));
  const RefLayer a = MakeLayer(0, 19, 33, rng);
  const RefLayer b = MakeLayer(NumConfigs() - 1, 33, 19, rng);
  std::string error;
  ModelPtr model = BuildModel({a, b}, &error);
  REQUIRE(model);
  EnginePtr engine = MakeEngine(model.get(), 0, &error);
  REQUIRE(engine);
  SessionPtr s = MakeSession(engine.get(), &error);
  REQUIRE(s);
  CHECK(Tokens(s.get(), 0) == 0);
  CHECK(Tokens(s.get(), 1) == 0);
  OutputBuffer out;
  REQUIRE(RunSession(s.get(), 0, a, EncodeTokens(RandomTokens(a, 3, rng), LUMEN_DTYPE_FLOAT32),
                     Path::kStep, {}, LUMEN_DTYPE_FLOAT32, &out, &error) == LUMEN_OK);
  CHECK(Tokens(s.get(), 0) == 3);
  CHECK(Tokens(s.get(), 1) == 0);
  REQUIRE(RunSession(s.get(), 1, b, EncodeTokens(RandomTokens(b, 65, rng), LUMEN_DTYPE_FLOAT32),
                     Path::kPrefill, {}, LUMEN_DTYPE_FLOAT32, &out, &error) == LUMEN_OK);
  CHECK(Tokens(s.get(), 0) == 3);
  CHECK(Tokens(s.get(), 1) == 65);
  REQUIRE(RunSession(s.get(), 1, b, EncodeTokens(RandomTokens(b, 2, rng), LUMEN_DTYPE_FLOAT32),
                     Path::kStep, {}, LUMEN_DTYPE_FLOAT32, &out, &error) == LUMEN_OK);
  CHECK(Tokens(s.get(), 1) == 67);
  // Writing a state leaves the count alone.
  StateValues v = Read(s.get(), b, 1);
  Write(s.get(), b, v, 1);
  CHECK(Tokens(s.get(), 1) == 67);
}

TEST_CASE("state sizes are fixed and independent of the token count", "[session]") {
  std::mt19937 rng(SeedFor({8}));
  std::vector<RefLayer> layers;
  for (int config = 0; config < NumConfigs(); ++config) {
    layers.push_back(MakeLayer(config, 19, 33, rng));
  }
  std::string error;
  ModelPtr model = BuildModel(layers, &error);
  INFO(error);
  REQUIRE(model);
  int64_t total = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(layers.size()); ++i) {
    INFO("layer " << i << ": " << layers[i].Describe());
    int64_t matrix = -1, normalizer = -1, bytes = -1, conv = 0;
    REQUIRE(lumen_model_state_count(model.get(), i, LUMEN_STATE_MATRIX, &matrix) == LUMEN_OK);
    REQUIRE(lumen_model_state_count(model.get(), i, LUMEN_STATE_NORMALIZER, &normalizer) ==
            LUMEN_OK);
    for (int part = 0; part < 3; ++part) {
      int64_t count = -1;
      REQUIRE(lumen_model_state_count(model.get(), i, LUMEN_STATE_CONV_Q + part, &count) ==
              LUMEN_OK);
      CHECK(count == layers[i].ConvCount(part));
      conv += count;
    }
    REQUIRE(lumen_model_state_bytes(model.get(), i, &bytes) == LUMEN_OK);
    CHECK(matrix == layers[i].MatrixCount());
    CHECK(normalizer == layers[i].NormalizerCount());
    CHECK(bytes == 4 * (matrix + normalizer + conv));  // fp32 storage
    total += (bytes + 63) / 64 * 64;
  }
  // The whole model's figure is the layers' bytes, each padded to 64 bytes (the header).
  int64_t all = -1;
  REQUIRE(lumen_model_state_bytes(model.get(), -1, &all) == LUMEN_OK);
  CHECK(all == total);

  // Still the same after a session has consumed tokens (sizes belong to the model, and the
  // session's state must not grow: read_state still takes exactly the same counts).
  EnginePtr engine = MakeEngine(model.get(), 0, &error);
  REQUIRE(engine);
  SessionPtr s = MakeSession(engine.get(), &error);
  REQUIRE(s);
  OutputBuffer out;
  REQUIRE(RunSession(s.get(), 0, layers[0], EncodeTokens(RandomTokens(layers[0], 130, rng),
                                                         LUMEN_DTYPE_FLOAT32),
                     Path::kPrefill, {}, LUMEN_DTYPE_FLOAT32, &out, &error) == LUMEN_OK);
  int64_t after = -1;
  REQUIRE(lumen_model_state_bytes(model.get(), -1, &after) == LUMEN_OK);
  CHECK(after == all);
  StateValues v = Read(s.get(), layers[0], 0);
  CHECK(static_cast<int64_t>(v.matrix.size()) == layers[0].MatrixCount());

  // bf16 storage keeps fewer bytes than fp32.
  RefLayer half = layers[0];
  half.state_dtype = LUMEN_DTYPE_BFLOAT16;
  ModelPtr half_model = BuildModel({half}, &error);
  INFO(error);
  REQUIRE(half_model);
  int64_t half_bytes = -1, full_bytes = -1;
  REQUIRE(lumen_model_state_bytes(half_model.get(), 0, &half_bytes) == LUMEN_OK);
  REQUIRE(lumen_model_state_bytes(model.get(), 0, &full_bytes) == LUMEN_OK);
  CHECK(half_bytes > 0);
  CHECK(half_bytes < full_bytes);
}

}  // namespace
}  // namespace lumen_test
