// Batched calls through the public C API: lumen_engine_step_batch equals a step per session,
// and lumen_engine_prefill_varlen equals a prefill per session, for every family.

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

TEST_CASE("lumen_engine_step_batch equals per-session steps", "[session][batch]") {
  const int config = GENERATE(range(0, NumConfigs()));
  const int32_t n = GENERATE(1, 3, 7);
  const uint32_t seed = SeedFor({3, config, n});
  std::mt19937 rng(seed);
  Fixture f(MakeLayer(config, 33, 19, rng));
  INFO(f.layer.Describe() << " n=" << n << " seed=" << seed);
  const int64_t steps = 5;

  // n sessions with different random states; each gets its own token stream.
  std::vector<SessionPtr> batch, single;
  std::vector<lumen_session*> handles;
  std::vector<RefState> refs;
  std::vector<TokenData> streams;
  std::vector<std::vector<double>> ref_o(n);
  for (int32_t i = 0; i < n; ++i) {
    const StateValues initial = RandomValues(f.layer, rng);
    batch.push_back(f.Session());
    single.push_back(f.Session());
    Write(batch.back().get(), f.layer, initial);
    Write(single.back().get(), f.layer, initial);
    handles.push_back(batch.back().get());
    refs.push_back(ToRef(initial));
    streams.push_back(RandomTokens(f.layer, steps, rng));
    RunReference(f.layer, steps, ToRefInputs(streams.back(), LUMEN_DTYPE_FLOAT32), &refs.back(),
                 &ref_o[i]);
  }

  const int64_t per_o = f.layer.VPerToken();
  std::vector<std::vector<float>> batch_o(n), single_o(n);
  for (int64_t t = 0; t < steps; ++t) {
    // Stack token t of every session: q [n, H, K], ...
    TokenData stacked;
    for (int32_t i = 0; i < n; ++i) Append(&stacked, Slice(f.layer, streams[i], t, 1));
    const EncodedTokens enc = EncodeTokens(stacked, LUMEN_DTYPE_FLOAT32);
    const lumen_layer_inputs in = InputsFor(f.layer, enc, 0, n);
    OutputBuffer out;
    out.Reset(n * per_o, LUMEN_DTYPE_FLOAT32);
    lumen_layer_output o = out.Output(0, n * per_o);
    const lumen_status st = lumen_engine_step_batch(f.engine.get(), 0, handles.data(), n, &in, &o);
    INFO("step_batch at t=" << t << ": " << LastError(st));
    REQUIRE(st == LUMEN_OK);
    const std::vector<float> values = out.Values();
    for (int32_t i = 0; i < n; ++i) {
      batch_o[i].insert(batch_o[i].end(), values.begin() + i * per_o,
                        values.begin() + (i + 1) * per_o);
      // The same token through lumen_session_step.
      const EncodedTokens one = EncodeTokens(Slice(f.layer, streams[i], t, 1),
                                             LUMEN_DTYPE_FLOAT32);
      const lumen_layer_inputs in1 = InputsFor(f.layer, one, 0, 1);
      OutputBuffer out1;
      out1.Reset(per_o, LUMEN_DTYPE_FLOAT32);
      lumen_layer_output o1 = out1.Output(0, per_o);
      REQUIRE(lumen_session_step(single[i].get(), 0, &in1, &o1) == LUMEN_OK);
      const std::vector<float> v1 = out1.Values();
      single_o[i].insert(single_o[i].end(), v1.begin(), v1.end());
    }
  }
  for (int32_t i = 0; i < n; ++i) {
    INFO("session " << i);
    Expect("batched o vs reference", batch_o[i], ref_o[i], kStepBound);
    Expect("batched o vs single steps", batch_o[i], AsDouble(single_o[i]), kStepBound);
    const StateValues bs = Read(batch[i].get(), f.layer);
    const StateValues ss = Read(single[i].get(), f.layer);
    ExpectState("batched", bs, refs[i], kStepBound);
    Expect("batched state vs single steps", bs.matrix, AsDouble(ss.matrix), kStepBound);
    CHECK(Tokens(batch[i].get()) == steps);
  }
}

TEST_CASE("lumen_engine_prefill_varlen equals per-session prefills", "[session][varlen]") {
  const int config = GENERATE(range(0, NumConfigs()));
  const uint32_t seed = SeedFor({4, config});
  std::mt19937 rng(seed);
  Fixture f(MakeLayer(config, 19, 33, rng));
  INFO(f.layer.Describe() << " seed=" << seed);
  const std::vector<int64_t> lengths = {0, 1, 63, 65, 130, 0, 19};
  const int32_t n = static_cast<int32_t>(lengths.size());

  std::vector<SessionPtr> varlen, single;
  std::vector<lumen_session*> handles;
  std::vector<StateValues> initials;
  std::vector<TokenData> streams;
  TokenData all;
  std::vector<int32_t> cu_seqlens = {0};
  for (int32_t i = 0; i < n; ++i) {
    const StateValues initial = RandomValues(f.layer, rng);
    initials.push_back(initial);
    varlen.push_back(f.Session());
    single.push_back(f.Session());
    Write(varlen.back().get(), f.layer, initial);
    Write(single.back().get(), f.layer, initial);
    handles.push_back(varlen.back().get());
    streams.push_back(RandomTokens(f.layer, lengths[i], rng));
    Append(&all, streams.back());
    cu_seqlens.push_back(cu_seqlens.back() + static_cast<int32_t>(lengths[i]));
  }
  const int64_t total = all.num_tokens;
  const int64_t per_o = f.layer.VPerToken();
  const EncodedTokens enc = EncodeTokens(all, LUMEN_DTYPE_FLOAT32);
  const lumen_layer_inputs in = InputsFor(f.layer, enc, 0, total);
  OutputBuffer out;
  out.Reset(total * per_o, LUMEN_DTYPE_FLOAT32);
  lumen_layer_output o = out.Output(0, total * per_o);
  const lumen_status st = lumen_engine_prefill_varlen(f.engine.get(), 0, handles.data(), n,
                                                      cu_seqlens.data(), &in, &o);
  INFO(LastError(st));
  REQUIRE(st == LUMEN_OK);
  const std::vector<float> values = out.Values();

  for (int32_t i = 0; i < n; ++i) {
    INFO("session " << i << " of " << lengths[i] << " tokens");
    const std::vector<float> vo(values.begin() + cu_seqlens[i] * per_o,
                                values.begin() + cu_seqlens[i + 1] * per_o);
    RefState ref = ToRef(initials[i]);
    std::vector<double> ref_o;
    RunReference(f.layer, lengths[i], ToRefInputs(streams[i], LUMEN_DTYPE_FLOAT32), &ref,
                 &ref_o);
    const StateValues vs = Read(varlen[i].get(), f.layer);
    CHECK(Tokens(varlen[i].get()) == lengths[i]);
    if (lengths[i] == 0) {
      // A session that gets no tokens is untouched, bit for bit.
      CHECK(BitwiseEqual(vs, initials[i]));
      continue;
    }
    Expect("varlen o vs reference", vo, ref_o, kPrefillBound);
    ExpectState("varlen", vs, ref, kPrefillBound);

    const EncodedTokens one = EncodeTokens(streams[i], LUMEN_DTYPE_FLOAT32);
    OutputBuffer out1;
    std::string error;
    REQUIRE(RunSession(single[i].get(), 0, f.layer, one, Path::kPrefill, {},
                       LUMEN_DTYPE_FLOAT32, &out1, &error) == LUMEN_OK);
    Expect("varlen o vs single prefill", vo, AsDouble(out1.Values()), kPrefillBound);
    Expect("varlen state vs single prefill", vs.matrix,
           AsDouble(Read(single[i].get(), f.layer).matrix), kPrefillBound);
  }
}

}  // namespace
}  // namespace lumen_test
