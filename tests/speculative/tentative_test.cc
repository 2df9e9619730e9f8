// Tentative tokens through the public C API (lumen.h, "Tentative tokens"): a tentative call
// followed by commit(m) is bitwise a session that stepped the m accepted tokens plainly
// (outputs, every state part, token counts), for every family with and without the short
// convolution, alone and in batches of sessions with different n and m; misuse returns a
// status and changes nothing.

#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/core/session_test_util.h"
#include "tests/reference/layer_reference.h"
#include "tests/reference/require_ok.h"
#include "tests/reference/temp_dir.h"

namespace lumen_test {
namespace {

constexpr int32_t kK = 19;
constexpr int32_t kV = 33;

// Steps tokens [t0, t0 + n) of `data` one at a time through `layer_index`, returning the
// outputs back to back.
std::vector<float> StepPlainly(lumen_session* session, int32_t layer_index,
                               const RefLayer& layer, const TokenData& data, int64_t t0,
                               int64_t n, int32_t dtype = LUMEN_DTYPE_FLOAT32) {
  std::vector<float> outputs;
  const EncodedTokens enc = EncodeTokens(data, dtype);
  for (int64_t t = t0; t < t0 + n; ++t) {
    const lumen_layer_inputs in = InputsFor(layer, enc, t, 1);
    OutputBuffer out;
    out.Reset(layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
    lumen_layer_output o = out.Output(0, layer.VPerToken());
    REQUIRE_OK(lumen_session_step(session, layer_index, &in, &o));
    const std::vector<float> values = out.Values();
    outputs.insert(outputs.end(), values.begin(), values.end());
  }
  return outputs;
}

// Runs tokens [t0, t0 + n) of `data` tentatively through `layer_index`.
lumen_status StepTentatively(lumen_session* session, int32_t layer_index, const RefLayer& layer,
                             const TokenData& data, int64_t t0, int32_t n,
                             std::vector<float>* outputs,
                             int32_t dtype = LUMEN_DTYPE_FLOAT32) {
  const EncodedTokens enc = EncodeTokens(data, dtype);
  const lumen_layer_inputs in = InputsFor(layer, enc, t0, n);
  OutputBuffer out;
  out.Reset(n * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  lumen_layer_output o = out.Output(0, n * layer.VPerToken());
  const lumen_status status = lumen_session_step_tentative(session, layer_index, n, &in, &o);
  if (status == LUMEN_OK) *outputs = out.Values();
  return status;
}

TEST_CASE("tentative then commit(m) is bitwise m plain steps", "[tentative]") {
  const int config = GENERATE(range(0, NumConfigs()));
  const int32_t state_dtype = GENERATE(LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_BFLOAT16);
  // V = 130: whole tiles of every SIMD level and a tail, split into the column blocks of a
  // run of several tokens differently from a step's tiles.
  const int32_t value_dim = GENERATE(as<int32_t>{}, 33, 130);
  const uint32_t seed = SeedFor({28, config, state_dtype, value_dim});
  std::mt19937 rng(seed);
  RefLayer layer = MakeLayer(config, value_dim == 33 ? kK : 5, value_dim, rng);
  layer.state_dtype = state_dtype;
  if (state_dtype != LUMEN_DTYPE_FLOAT32 && layer.conv_size > 0) return;  // unsupported
  Fixture f(layer, 2);
  INFO(f.layer.Describe() << " seed=" << seed);
  const int32_t n = std::uniform_int_distribution<int32_t>(1, 8)(rng);
  const int32_t m = std::uniform_int_distribution<int32_t>(0, n)(rng);
  INFO("n=" << n << " m=" << m);
  const int64_t warmup = 3;  // steps first, so that the delta rule holds a write
  const TokenData tokens = RandomTokens(f.layer, warmup + n, rng);

  SessionPtr tentative = f.Session(), plain = f.Session(), all = f.Session();
  const StateValues initial = RandomValues(f.layer, rng);
  for (lumen_session* s : {tentative.get(), plain.get(), all.get()}) {
    Write(s, f.layer, initial);
    StepPlainly(s, 0, f.layer, tokens, 0, warmup);
  }
  const StateValues before = Read(tentative.get(), f.layer);

  std::vector<float> outputs;
  REQUIRE_OK(StepTentatively(tentative.get(), 0, f.layer, tokens, warmup, n, &outputs));
  int32_t held = -1;
  REQUIRE_OK(lumen_session_tentative_tokens(tentative.get(), &held));
  CHECK(held == n);
  CHECK(Tokens(tentative.get()) == warmup);  // committed tokens only
  // Every token's output is the one stepping all n tokens gives.
  CHECK(BitwiseEqual(outputs, StepPlainly(all.get(), 0, f.layer, tokens, warmup, n)));

  REQUIRE_OK(lumen_session_commit(tentative.get(), m));
  REQUIRE_OK(lumen_session_tentative_tokens(tentative.get(), &held));
  CHECK(held == 0);
  StepPlainly(plain.get(), 0, f.layer, tokens, warmup, m);
  const StateValues committed = Read(tentative.get(), f.layer);
  CHECK(BitwiseEqual(committed, Read(plain.get(), f.layer)));
  CHECK(Tokens(tentative.get()) == warmup + m);
  if (m == 0) CHECK(BitwiseEqual(committed, before));

  // The session goes on as the plain one does.
  const TokenData more = RandomTokens(f.layer, 2, rng);
  CHECK(BitwiseEqual(StepPlainly(tentative.get(), 0, f.layer, more, 0, 2),
                     StepPlainly(plain.get(), 0, f.layer, more, 0, 2)));
  CHECK(BitwiseEqual(Read(tentative.get(), f.layer), Read(plain.get(), f.layer)));
}

TEST_CASE("a batch of sessions with different n and m commits each as plain steps",
          "[tentative][batch]") {
  const int config = GENERATE(range(0, NumConfigs()));
  const uint32_t seed = SeedFor({29, config});
  std::mt19937 rng(seed);
  Fixture f(MakeLayer(config, kK, kV, rng), 2);
  INFO(f.layer.Describe() << " seed=" << seed);
  const std::vector<int32_t> n = {3, 1, 8, 5};
  const std::vector<int32_t> m = {1, 0, 8, 2};
  const int32_t count = static_cast<int32_t>(n.size());

  std::vector<SessionPtr> batch, plain;
  std::vector<lumen_session*> handles;
  std::vector<TokenData> streams;
  TokenData stacked;
  std::vector<int32_t> cu_seqlens = {0};
  for (int32_t i = 0; i < count; ++i) {
    const StateValues initial = RandomValues(f.layer, rng);
    batch.push_back(f.Session());
    plain.push_back(f.Session());
    Write(batch.back().get(), f.layer, initial);
    Write(plain.back().get(), f.layer, initial);
    handles.push_back(batch.back().get());
    streams.push_back(RandomTokens(f.layer, 1 + n[i], rng));
    StepPlainly(batch.back().get(), 0, f.layer, streams.back(), 0, 1);
    StepPlainly(plain.back().get(), 0, f.layer, streams.back(), 0, 1);
    Append(&stacked, Slice(f.layer, streams.back(), 1, n[i]));
    cu_seqlens.push_back(cu_seqlens.back() + n[i]);
  }
  const int64_t total = cu_seqlens.back();
  const int64_t per_o = f.layer.VPerToken();
  const EncodedTokens enc = EncodeTokens(stacked, LUMEN_DTYPE_FLOAT32);
  const lumen_layer_inputs in = InputsFor(f.layer, enc, 0, total);
  OutputBuffer out;
  out.Reset(total * per_o, LUMEN_DTYPE_FLOAT32);
  lumen_layer_output o = out.Output(0, total * per_o);
  REQUIRE_OK(lumen_engine_step_tentative_batch(f.engine.get(), 0, handles.data(), count,
                                               cu_seqlens.data(), &in, &o));
  const std::vector<float> values = out.Values();
  REQUIRE_OK(lumen_engine_commit_batch(f.engine.get(), handles.data(), count, m.data()));

  for (int32_t i = 0; i < count; ++i) {
    INFO("session " << i << ": n=" << n[i] << " m=" << m[i]);
    SessionPtr all = f.Session();
    {
      lumen_session* source = plain[i].get();
      lumen_session* copy = nullptr;
      REQUIRE_OK(lumen_session_fork(source, &copy));
      all.reset(copy);
    }
    const std::vector<float> session_o(values.begin() + cu_seqlens[i] * per_o,
                                       values.begin() + cu_seqlens[i + 1] * per_o);
    CHECK(BitwiseEqual(session_o, StepPlainly(all.get(), 0, f.layer, streams[i], 1, n[i])));
    StepPlainly(plain[i].get(), 0, f.layer, streams[i], 1, m[i]);
    CHECK(BitwiseEqual(Read(batch[i].get(), f.layer), Read(plain[i].get(), f.layer)));
    CHECK(Tokens(batch[i].get()) == 1 + m[i]);
  }
}

TEST_CASE("a commit replays every layer that ran tentative tokens", "[tentative]") {
  const uint32_t seed = SeedFor({30});
  std::mt19937 rng(seed);
  INFO("seed=" << seed);
  // Two layers of different families (one with a convolution), 16-bit inputs.
  const std::vector<RefLayer> layers = {MakeLayer(NumConfigs() - 8, kK, kV, rng),
                                        MakeLayer(11, kK, kV, rng)};
  std::string error;
  ModelPtr model = BuildModel(layers, &error);
  INFO(error);
  REQUIRE(model);
  EnginePtr engine = MakeEngine(model.get(), 2, &error);
  REQUIRE(engine);
  SessionPtr tentative = MakeSession(engine.get(), &error), plain = MakeSession(engine.get(), &error);
  const int32_t n = 6, m = 4;
  std::vector<TokenData> tokens;
  for (int32_t l = 0; l < 2; ++l) {
    tokens.push_back(RandomTokens(layers[l], n, rng));
    std::vector<float> outputs;
    REQUIRE_OK(StepTentatively(tentative.get(), l, layers[l], tokens[l], 0, n, &outputs,
                               LUMEN_DTYPE_BFLOAT16));
  }
  REQUIRE_OK(lumen_session_commit(tentative.get(), m));
  for (int32_t l = 0; l < 2; ++l) {
    StepPlainly(plain.get(), l, layers[l], tokens[l], 0, m, LUMEN_DTYPE_BFLOAT16);
    CHECK(BitwiseEqual(Read(tentative.get(), layers[l], l), Read(plain.get(), layers[l], l)));
    CHECK(Tokens(tentative.get(), l) == m);
  }
}

TEST_CASE("misuse of tentative tokens returns a status and changes nothing", "[tentative]") {
  const uint32_t seed = SeedFor({31});
  std::mt19937 rng(seed);
  // gated_delta_net with a convolution: held writes and windows both.
  Fixture f(MakeLayer(NumConfigs() - 8, kK, kV, rng), 2);
  INFO(f.layer.Describe() << " seed=" << seed);
  SessionPtr session = f.Session();
  const TokenData tokens = RandomTokens(f.layer, 20, rng);
  StepPlainly(session.get(), 0, f.layer, tokens, 0, 2);
  const StateValues before = Read(session.get(), f.layer);
  std::vector<float> outputs;

  // Bad counts.
  CHECK(StepTentatively(session.get(), 0, f.layer, tokens, 2, 0, &outputs) ==
        LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(StepTentatively(session.get(), 0, f.layer, tokens, 2, LUMEN_MAX_TENTATIVE_TOKENS + 1,
                        &outputs) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(lumen_session_commit(session.get(), 0) == LUMEN_ERROR_INVALID_ARGUMENT);  // none held

  REQUIRE_OK(StepTentatively(session.get(), 0, f.layer, tokens, 2, 4, &outputs));
  // Every call that reads or changes the state.
  CHECK(StepTentatively(session.get(), 0, f.layer, tokens, 2, 4, &outputs) ==
        LUMEN_ERROR_UNCOMMITTED_TOKENS);
  const EncodedTokens enc = EncodeTokens(tokens, LUMEN_DTYPE_FLOAT32);
  const lumen_layer_inputs in = InputsFor(f.layer, enc, 0, 1);
  OutputBuffer out;
  out.Reset(f.layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  lumen_layer_output o = out.Output(0, f.layer.VPerToken());
  CHECK(lumen_session_step(session.get(), 0, &in, &o) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  CHECK(std::string(lumen_last_error_message()).find("tentative") != std::string::npos);
  CHECK(lumen_session_prefill(session.get(), 0, 1, &in, &o) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  lumen_session* handle = session.get();
  CHECK(lumen_engine_step_batch(f.engine.get(), 0, &handle, 1, &in, &o) ==
        LUMEN_ERROR_UNCOMMITTED_TOKENS);
  CHECK(lumen_session_reset(session.get()) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  lumen_session* copy = nullptr;
  CHECK(lumen_session_fork(session.get(), &copy) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  CHECK(copy == nullptr);
  std::vector<float> matrix(f.layer.MatrixCount());
  CHECK(lumen_session_read_state(session.get(), 0, LUMEN_STATE_MATRIX, matrix.data(),
                                 f.layer.MatrixCount()) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  CHECK(lumen_session_write_state(session.get(), 0, LUMEN_STATE_MATRIX, before.matrix.data(),
                                  f.layer.MatrixCount()) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  int64_t size = 0;
  REQUIRE_OK(lumen_session_snapshot_size(session.get(), nullptr, &size));
  std::vector<uint8_t> bytes(size);
  CHECK(lumen_session_snapshot(session.get(), nullptr, bytes.data(), size, nullptr) ==
        LUMEN_ERROR_UNCOMMITTED_TOKENS);
  CHECK(lumen_session_restore(session.get(), bytes.data(), size) ==
        LUMEN_ERROR_UNCOMMITTED_TOKENS);
  TempDir dir;
  const std::string path = (dir.path() / "s.lumen").string();
  CHECK(lumen_session_save(session.get(), path.c_str(), nullptr) ==
        LUMEN_ERROR_UNCOMMITTED_TOKENS);
  CHECK(lumen_session_load(session.get(), path.c_str()) == LUMEN_ERROR_UNCOMMITTED_TOKENS);
  CHECK(Tokens(session.get()) == 2);

  // A commit beyond n, or below 0, changes nothing; the right one still works, once.
  CHECK(lumen_session_commit(session.get(), 5) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(lumen_session_commit(session.get(), -1) == LUMEN_ERROR_INVALID_ARGUMENT);
  int32_t held = 0;
  REQUIRE_OK(lumen_session_tentative_tokens(session.get(), &held));
  CHECK(held == 4);
  REQUIRE_OK(lumen_session_commit(session.get(), 0));
  CHECK(lumen_session_commit(session.get(), 0) == LUMEN_ERROR_INVALID_ARGUMENT);
  CHECK(BitwiseEqual(Read(session.get(), f.layer), before));
  CHECK(Tokens(session.get()) == 2);

  // A session destroyed with tentative tokens frees what it kept (the sanitized run checks).
  SessionPtr dropped = f.Session();
  REQUIRE_OK(StepTentatively(dropped.get(), 0, f.layer, tokens, 0, 3, &outputs));
  dropped.reset();
}

TEST_CASE("a session with tentative tokens may be evicted and still commits exactly",
          "[tentative][budget]") {
  const uint32_t seed = SeedFor({32});
  std::mt19937 rng(seed);
  const RefLayer layer = MakeLayer(NumConfigs() - 8, kK, kV, rng);
  INFO(layer.Describe() << " seed=" << seed);
  std::string error;
  ModelPtr model = BuildModel({layer}, &error);
  REQUIRE(model);
  int64_t state_bytes = 0;
  REQUIRE_OK(lumen_model_state_bytes(model.get(), -1, &state_bytes));
  TempDir dir;
  lumen_engine_options options;
  lumen_engine_options_init(&options);
  options.backend = LUMEN_BACKEND_CPU;
  options.num_threads = 2;
  options.memory_budget_bytes = state_bytes;  // one resident session
  const std::string spill = dir.path().string();
  options.spill_directory = spill.c_str();
  lumen_engine* raw = nullptr;
  REQUIRE_OK(lumen_engine_create(model.get(), &options, &raw));
  EnginePtr engine(raw);
  SessionPtr a = MakeSession(engine.get(), &error), b = MakeSession(engine.get(), &error);
  SessionPtr plain = MakeSession(engine.get(), &error);
  const TokenData tokens = RandomTokens(layer, 5, rng);
  std::vector<float> outputs;
  REQUIRE_OK(StepTentatively(a.get(), 0, layer, tokens, 0, 5, &outputs));
  StepPlainly(b.get(), 0, layer, tokens, 0, 1);  // b takes a's place
  int32_t resident = 1;
  REQUIRE_OK(lumen_session_resident(a.get(), &resident));
  CHECK(resident == 0);
  REQUIRE_OK(lumen_session_commit(a.get(), 3));
  StepPlainly(plain.get(), 0, layer, tokens, 0, 3);
  CHECK(BitwiseEqual(Read(a.get(), layer), Read(plain.get(), layer)));
}

}  // namespace
}  // namespace lumen_test
