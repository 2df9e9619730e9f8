// Failing calls change nothing: every session call and batched call that fails (counts,
// shapes, dtypes, memory kinds, layer indices, state access, sessions of other engines,
// cu_seqlens) returns the status the header documents with a message naming the problem,
// and leaves every session (state, conv windows, token counts) and the caller's output
// buffers as they were.

#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/api/api_test_util.h"
#include "tests/reference/layer_reference.h"

namespace lumen_test {
namespace {

// A three-layer model: a scalar-gated delta layer, a normalizing linear attention layer (so a
// normalizer exists), and kda with raw gates (parameters).
std::vector<RefLayer> FailureLayers() {
  // Layer 0, which most failing calls target, carries conv windows that must not change.
  RefLayer gdn = Layer(LUMEN_FAMILY_GATED_DELTA_NET, 2, 4, 8, 6);
  gdn.conv_size = 4;
  std::mt19937 rng(7);
  RandomParams(&gdn, rng);
  RefLayer la = Layer(LUMEN_FAMILY_LINEAR_ATTN, 1, 1, 5, 7);
  la.feature_map = LUMEN_FEATURE_MAP_ELU1;
  la.normalize = true;
  RefLayer kda = Layer(LUMEN_FAMILY_KDA, 1, 2, 4, 3);
  kda.gate_raw = true;
  kda.qk_l2norm = true;
  kda.a_log = {0.5f, 1.0f};
  kda.dt_bias = std::vector<float>(8, -3.0f);
  return {gdn, la, kda};
}

struct Snapshot {
  std::vector<std::vector<float>> parts;
  std::vector<int64_t> tokens;
  bool operator==(const Snapshot& o) const {
    if (tokens != o.tokens || parts.size() != o.parts.size()) return false;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (parts[i].size() != o.parts[i].size() ||
          (!parts[i].empty() &&
           std::memcmp(parts[i].data(), o.parts[i].data(), parts[i].size() * 4) != 0)) {
        return false;
      }
    }
    return true;
  }
};

Snapshot Take(const lumen_session* s, const std::vector<RefLayer>& layers) {
  Snapshot snap;
  for (int32_t i = 0; i < static_cast<int32_t>(layers.size()); ++i) {
    std::vector<float> m, z, conv[3];
    REQUIRE(ReadState(s, i, layers[i], &m, &z) == LUMEN_OK);
    REQUIRE(ReadConvState(s, i, layers[i], conv) == LUMEN_OK);
    snap.parts.push_back(m);
    snap.parts.push_back(z);
    for (const std::vector<float>& window : conv) snap.parts.push_back(window);
    int64_t t = -1;
    REQUIRE(lumen_session_tokens(s, i, &t) == LUMEN_OK);
    snap.tokens.push_back(t);
  }
  return snap;
}

struct World {
  std::vector<RefLayer> layers = FailureLayers();
  ModelPtr model;
  EnginePtr engine;
  std::vector<SessionPtr> sessions;  // three sessions with history
  std::mt19937 rng{TestSeed()};

  World() {
    std::string error;
    model = BuildModel(layers, &error);
    INFO(error);
    REQUIRE(model);
    engine = MakeEngine(model.get(), 2, &error);
    REQUIRE(engine);
    for (int j = 0; j < 3; ++j) {
      sessions.push_back(MakeSession(engine.get(), &error));
      REQUIRE(sessions.back());
      for (int32_t i = 0; i < 3; ++i) {
        std::vector<float> m, z, conv[3];
        RandomState(layers[i], rng, &m, &z);
        RandomConvState(layers[i], rng, conv);
        REQUIRE(WriteState(sessions.back().get(), i, layers[i], m, z) == LUMEN_OK);
        REQUIRE(WriteConvState(sessions.back().get(), i, layers[i], conv) == LUMEN_OK);
        OutputBuffer out;
        REQUIRE(RunSession(sessions.back().get(), i, layers[i],
                           EncodeTokens(RandomTokens(layers[i], 2 + j + i, rng),
                                        LUMEN_DTYPE_FLOAT32),
                           Path::kStep, {}, LUMEN_DTYPE_FLOAT32, &out, &error) == LUMEN_OK);
      }
    }
  }
};

// Runs `call`, expecting `expected` and a message naming the problem, and checks that no
// session and no output element changed.
void ExpectRejected(World& w, const char* name, lumen_status expected,
                    const std::vector<std::string>& words, std::vector<uint8_t>* output,
                    const std::function<lumen_status()>& call) {
  INFO(name);
  std::vector<Snapshot> before;
  for (const auto& s : w.sessions) before.push_back(Take(s.get(), w.layers));
  const std::vector<uint8_t> output_before = output ? *output : std::vector<uint8_t>();
  CheckFailure(call(), expected, words);
  for (size_t j = 0; j < w.sessions.size(); ++j) {
    INFO("session " << j << " changed by a failing call");
    CHECK(Take(w.sessions[j].get(), w.layers) == before[j]);
  }
  if (output) {
    INFO("output written by a failing call");
    CHECK(*output == output_before);
  }
}

TEST_CASE("failing session calls leave sessions and outputs unchanged", "[capi]") {
  World w;
  lumen_session* s = w.sessions[0].get();
  const RefLayer& L0 = w.layers[0];
  const TokenData data = RandomTokens(L0, 4, w.rng);
  const EncodedTokens tokens = EncodeTokens(data, LUMEN_DTYPE_FLOAT32);
  OutputBuffer out;
  out.Reset(4 * L0.VPerToken(), LUMEN_DTYPE_FLOAT32);
  auto inputs = [&](int64_t n) { return InputsFor(L0, tokens, 0, n); };
  auto step_with = [&](const std::function<void(lumen_layer_inputs*, lumen_layer_output*)>& m,
                       int32_t layer = 0) {
    return [&, m, layer] {
      lumen_layer_inputs in = inputs(1);
      lumen_layer_output o = out.Output(0, L0.VPerToken());
      m(&in, &o);
      return lumen_session_step(s, layer, &in, &o);
    };
  };
  auto prefill_with = [&](const std::function<void(lumen_layer_inputs*, lumen_layer_output*)>& m,
                          int32_t n = 4) {
    return [&, m, n] {
      lumen_layer_inputs in = inputs(4);
      lumen_layer_output o = out.Output(0, 4 * L0.VPerToken());
      m(&in, &o);
      return lumen_session_prefill(s, 0, n, &in, &o);
    };
  };
  using M = std::function<void(lumen_layer_inputs*, lumen_layer_output*)>;
  const M none = [](lumen_layer_inputs*, lumen_layer_output*) {};
  const lumen_status kInvalid = LUMEN_ERROR_INVALID_ARGUMENT;

  SECTION("step") {
    ExpectRejected(w, "q_count + 1", kInvalid, {"q_count", "q"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->q_count++; }));
    ExpectRejected(w, "k_count - 1", kInvalid, {"k_count", "k"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->k_count--; }));
    ExpectRejected(w, "v_count of 2 tokens", kInvalid, {"v_count", "v"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->v_count *= 2; }));
    ExpectRejected(w, "g_count per key (gated_delta_net has a scalar gate)", kInvalid,
                   {"g_count", "g"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->g_count *= 8; }));
    ExpectRejected(w, "beta_count - 1", kInvalid, {"beta_count", "beta"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->beta_count--; }));
    ExpectRejected(w, "o_count - 1", kInvalid, {"o_count", "o", "output"}, &out.bytes,
                   step_with([](lumen_layer_inputs*, lumen_layer_output* o) { o->o_count--; }));
    ExpectRejected(w, "missing g", kInvalid, {"g"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) {
                     i->g = nullptr;
                     i->g_count = 0;
                   }));
    ExpectRejected(w, "missing beta", kInvalid, {"beta"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) {
                     i->beta = nullptr;
                     i->beta_count = 0;
                   }));
    ExpectRejected(w, "NULL q with a count", kInvalid, {"q"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->q = nullptr; }));
    ExpectRejected(w, "NULL o with a count", kInvalid, {"o", "output"}, &out.bytes,
                   step_with([](lumen_layer_inputs*, lumen_layer_output* o) { o->o = nullptr; }));
    ExpectRejected(w, "input dtype 7", kInvalid, {"dtype"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->dtype = 7; }));
    ExpectRejected(w, "output dtype -1", kInvalid, {"dtype"}, &out.bytes,
                   step_with([](lumen_layer_inputs*, lumen_layer_output* o) { o->dtype = -1; }));
    ExpectRejected(w, "input memory 5", kInvalid, {"memory"}, &out.bytes,
                   step_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->memory = 5; }));
    ExpectRejected(w, "layer 3 of 3", LUMEN_ERROR_OUT_OF_RANGE, {"layer"}, &out.bytes,
                   step_with(none, 3));
    ExpectRejected(w, "layer -1", LUMEN_ERROR_OUT_OF_RANGE, {"layer"}, &out.bytes,
                   step_with(none, -1));
    ExpectRejected(w, "layer 1 given layer 0's shapes", kInvalid, {}, &out.bytes,
                   step_with(none, 1));
  }

  SECTION("step: device memory on the CPU backend") {
    // The header: memory the backend does not read is LUMEN_ERROR_UNSUPPORTED.
    for (int which = 0; which < 2; ++which) {
      INFO((which == 0 ? "inputs.memory = DEVICE" : "output.memory = DEVICE"));
      const Snapshot before = Take(s, w.layers);
      const std::vector<uint8_t> out_before = out.bytes;
      lumen_layer_inputs in = inputs(1);
      lumen_layer_output o = out.Output(0, L0.VPerToken());
      (which == 0 ? in.memory : o.memory) = LUMEN_MEMORY_DEVICE;
      const lumen_status st = lumen_session_step(s, 0, &in, &o);
      INFO(LastError(st));
      CHECK(st == LUMEN_ERROR_UNSUPPORTED);
      CHECK(std::strlen(lumen_last_error_message()) > 0);
      CHECK(Mentions(lumen_last_error_message(), {"memory", "device", "host"}));
      CHECK(Take(s, w.layers) == before);
      CHECK(out.bytes == out_before);
    }
  }

  SECTION("prefill") {
    ExpectRejected(w, "num_tokens 0", kInvalid, {"num_tokens", "tokens"}, &out.bytes,
                   prefill_with(none, 0));
    ExpectRejected(w, "num_tokens -1", kInvalid, {"num_tokens", "tokens"}, &out.bytes,
                   prefill_with(none, -1));
    ExpectRejected(w, "num_tokens 3 with buffers of 4", kInvalid, {}, &out.bytes,
                   prefill_with(none, 3));
    ExpectRejected(w, "num_tokens 5 with buffers of 4", kInvalid, {}, &out.bytes,
                   prefill_with(none, 5));
    ExpectRejected(w, "q_count - 1", kInvalid, {"q_count", "q"}, &out.bytes,
                   prefill_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->q_count--; }));
    ExpectRejected(w, "g_count - 1", kInvalid, {"g_count", "g"}, &out.bytes,
                   prefill_with([](lumen_layer_inputs* i, lumen_layer_output*) { i->g_count--; }));
    ExpectRejected(w, "o_count + 1", kInvalid, {"o_count", "o", "output"}, &out.bytes,
                   prefill_with([](lumen_layer_inputs*, lumen_layer_output* o) { o->o_count++; }));
    ExpectRejected(w, "missing beta", kInvalid, {"beta"}, &out.bytes,
                   prefill_with([](lumen_layer_inputs* i, lumen_layer_output*) {
                     i->beta = nullptr;
                     i->beta_count = 0;
                   }));
    ExpectRejected(w, "layer 3", LUMEN_ERROR_OUT_OF_RANGE, {"layer"}, &out.bytes, [&] {
      lumen_layer_inputs in = inputs(4);
      lumen_layer_output o = out.Output(0, 4 * L0.VPerToken());
      return lumen_session_prefill(s, 3, 4, &in, &o);
    });
  }

  SECTION("inputs a family does not take") {
    // linear_attn takes neither g nor beta; the header says "pass NULL and 0 otherwise".
    const RefLayer& L1 = w.layers[1];
    const EncodedTokens t1 = EncodeTokens(RandomTokens(L1, 1, w.rng), LUMEN_DTYPE_FLOAT32);
    OutputBuffer o1;
    o1.Reset(L1.VPerToken(), LUMEN_DTYPE_FLOAT32);
    const std::vector<float> extra(64, -0.1f);
    ExpectRejected(w, "g given to linear_attn", kInvalid, {"g"}, &o1.bytes, [&] {
      lumen_layer_inputs in = InputsFor(L1, t1, 0, 1);
      in.g = extra.data();
      in.g_count = L1.num_value_heads;
      lumen_layer_output o = o1.Output(0, L1.VPerToken());
      return lumen_session_step(s, 1, &in, &o);
    });
    ExpectRejected(w, "beta given to linear_attn", kInvalid, {"beta"}, &o1.bytes, [&] {
      lumen_layer_inputs in = InputsFor(L1, t1, 0, 1);
      in.beta = extra.data();
      in.beta_count = L1.num_value_heads;
      lumen_layer_output o = o1.Output(0, L1.VPerToken());
      return lumen_session_step(s, 1, &in, &o);
    });
  }

  SECTION("state access") {
    const int64_t mc = L0.MatrixCount();
    std::vector<float> values(mc, 0.25f);
    std::vector<float> read(mc + 8, 3.0f);
    ExpectRejected(w, "write_state count - 1", kInvalid, {"count"}, nullptr, [&] {
      return lumen_session_write_state(s, 0, LUMEN_STATE_MATRIX, values.data(), mc - 1);
    });
    ExpectRejected(w, "write_state count + 1", kInvalid, {"count"}, nullptr, [&] {
      std::vector<float> more(mc + 1, 0.25f);
      return lumen_session_write_state(s, 0, LUMEN_STATE_MATRIX, more.data(), mc + 1);
    });
    for (float bad : {kNaN, kInf, -kInf}) {
      INFO("value " << bad);
      std::vector<float> v = values;
      v[mc / 2] = bad;
      ExpectRejected(w, "write_state with a non-finite value", kInvalid, {"finite", "nan", "inf"},
                     nullptr, [&] {
                       return lumen_session_write_state(s, 0, LUMEN_STATE_MATRIX, v.data(), mc);
                     });
    }
    ExpectRejected(w, "write_state normalizer of a layer without one", kInvalid, {}, nullptr, [&] {
      return lumen_session_write_state(s, 0, LUMEN_STATE_NORMALIZER, values.data(),
                                       int64_t{L0.num_value_heads} * L0.key_dim);
    });
    ExpectRejected(w, "write_state part 9", kInvalid, {"part"}, nullptr, [&] {
      return lumen_session_write_state(s, 0, 9, values.data(), mc);
    });
    ExpectRejected(w, "write_state layer 3", LUMEN_ERROR_OUT_OF_RANGE, {"layer"}, nullptr, [&] {
      return lumen_session_write_state(s, 3, LUMEN_STATE_MATRIX, values.data(), mc);
    });
    ExpectRejected(w, "write_state normalizer with a NaN", kInvalid, {"finite", "nan"}, nullptr,
                   [&] {
                     const RefLayer& L1 = w.layers[1];
                     std::vector<float> z(L1.NormalizerCount(), 1.0f);
                     z[0] = kNaN;
                     return lumen_session_write_state(s, 1, LUMEN_STATE_NORMALIZER, z.data(),
                                                      L1.NormalizerCount());
                   });
    const std::vector<float> read_before = read;
    ExpectRejected(w, "read_state count - 1", kInvalid, {"count"}, nullptr, [&] {
      return lumen_session_read_state(s, 0, LUMEN_STATE_MATRIX, read.data(), mc - 1);
    });
    ExpectRejected(w, "read_state count + 8", kInvalid, {"count"}, nullptr, [&] {
      return lumen_session_read_state(s, 0, LUMEN_STATE_MATRIX, read.data(), mc + 8);
    });
    ExpectRejected(w, "read_state layer -1", LUMEN_ERROR_OUT_OF_RANGE, {"layer"}, nullptr, [&] {
      return lumen_session_read_state(s, -1, LUMEN_STATE_MATRIX, read.data(), mc);
    });
    CHECK(read == read_before);  // out written only on success
    int64_t t = 99;
    ExpectRejected(w, "tokens layer 3", LUMEN_ERROR_OUT_OF_RANGE, {"layer"}, nullptr,
                   [&] { return lumen_session_tokens(s, 3, &t); });
    CHECK(t == 99);
  }
}

TEST_CASE("failing batched calls leave every session unchanged", "[capi]") {
  World w;
  const RefLayer& L0 = w.layers[0];
  std::vector<lumen_session*> three = {w.sessions[0].get(), w.sessions[1].get(),
                                       w.sessions[2].get()};
  const TokenData data = RandomTokens(L0, 3 * 40, w.rng);
  const EncodedTokens tokens = EncodeTokens(data, LUMEN_DTYPE_FLOAT32);
  OutputBuffer out;
  out.Reset(3 * 40 * L0.VPerToken(), LUMEN_DTYPE_FLOAT32);

  // A session of another engine of an equal model, and of another model.
  std::string error;
  ModelPtr same_model = BuildModel(w.layers, &error);
  REQUIRE(same_model);
  EnginePtr other_engine = MakeEngine(same_model.get(), 1, &error);
  REQUIRE(other_engine);
  SessionPtr foreign = MakeSession(other_engine.get(), &error);
  REQUIRE(foreign);
  EnginePtr same_model_engine = MakeEngine(w.model.get(), 1, &error);
  REQUIRE(same_model_engine);
  SessionPtr sibling = MakeSession(same_model_engine.get(), &error);
  REQUIRE(sibling);

  auto batch = [&](std::vector<lumen_session*> sessions, int64_t tokens_per_input,
                   int32_t layer = 0,
                   std::function<void(lumen_layer_inputs*, lumen_layer_output*)> m = {}) {
    return [&, sessions, tokens_per_input, layer, m] {
      lumen_layer_inputs in = InputsFor(L0, tokens, 0, tokens_per_input);
      lumen_layer_output o = out.Output(0, tokens_per_input * L0.VPerToken());
      if (m) m(&in, &o);
      return lumen_engine_step_batch(w.engine.get(), layer, sessions.data(),
                                     static_cast<int32_t>(sessions.size()), &in, &o);
    };
  };
  auto varlen = [&](std::vector<lumen_session*> sessions, std::vector<int32_t> cu,
                    int64_t total, int32_t layer = 0) {
    return [&, sessions, cu, total, layer] {
      lumen_layer_inputs in = InputsFor(L0, tokens, 0, total);
      lumen_layer_output o = out.Output(0, total * L0.VPerToken());
      return lumen_engine_prefill_varlen(w.engine.get(), layer, sessions.data(),
                                         static_cast<int32_t>(sessions.size()), cu.data(), &in,
                                         &o);
    };
  };
  const lumen_status kInvalid = LUMEN_ERROR_INVALID_ARGUMENT;

  SECTION("step_batch") {
    ExpectRejected(w, "a session of another engine (other model)", LUMEN_ERROR_MODEL_MISMATCH,
                   {"engine", "model"}, &out.bytes,
                   batch({three[0], foreign.get(), three[2]}, 3));
    ExpectRejected(w, "a session of another engine (same model)", LUMEN_ERROR_MODEL_MISMATCH,
                   {"engine", "model"}, &out.bytes, batch({three[0], three[1], sibling.get()}, 3));
    ExpectRejected(w, "a session twice", kInvalid, {"twice", "duplicate", "more than once", "same session"},
                   &out.bytes, batch({three[0], three[1], three[0]}, 3));
    ExpectRejected(w, "n = 3 with inputs of 2 tokens", kInvalid, {}, &out.bytes,
                   batch(three, 2));
    ExpectRejected(w, "n = 3 with inputs of 4 tokens", kInvalid, {}, &out.bytes,
                   batch(three, 4));
    ExpectRejected(w, "o_count of 2 sessions", kInvalid, {"o_count", "o", "output"}, &out.bytes,
                   batch(three, 3, 0, [&](lumen_layer_inputs*, lumen_layer_output* o) {
                     o->o_count = 2 * L0.VPerToken();
                   }));
    ExpectRejected(w, "missing g", kInvalid, {"g"}, &out.bytes,
                   batch(three, 3, 0, [](lumen_layer_inputs* i, lumen_layer_output*) {
                     i->g = nullptr;
                     i->g_count = 0;
                   }));
    ExpectRejected(w, "layer 3", LUMEN_ERROR_OUT_OF_RANGE, {"layer"}, &out.bytes,
                   batch(three, 3, 3));
    ExpectRejected(w, "n = -1", kInvalid, {}, &out.bytes, [&] {
      lumen_layer_inputs in = InputsFor(L0, tokens, 0, 1);
      lumen_layer_output o = out.Output(0, L0.VPerToken());
      return lumen_engine_step_batch(w.engine.get(), 0, three.data(), -1, &in, &o);
    });
  }

  SECTION("prefill_varlen") {
    ExpectRejected(w, "a session of another engine", LUMEN_ERROR_MODEL_MISMATCH,
                   {"engine", "model"}, &out.bytes,
                   varlen({three[0], three[1], foreign.get()}, {0, 5, 10, 20}, 20));
    ExpectRejected(w, "a session twice", kInvalid,
                   {"twice", "duplicate", "more than once", "same session"}, &out.bytes,
                   varlen({three[1], three[2], three[1]}, {0, 5, 10, 20}, 20));
    ExpectRejected(w, "cu_seqlens[0] != 0", kInvalid, {"cu_seqlens"}, &out.bytes,
                   varlen(three, {1, 5, 10, 20}, 19));
    ExpectRejected(w, "cu_seqlens decreasing", kInvalid, {"cu_seqlens"}, &out.bytes,
                   varlen(three, {0, 10, 5, 20}, 20));
    ExpectRejected(w, "cu_seqlens negative", kInvalid, {"cu_seqlens"}, &out.bytes,
                   varlen(three, {0, -5, 10, 20}, 20));
    ExpectRejected(w, "cu_seqlens[n] short of the inputs", kInvalid, {}, &out.bytes,
                   varlen(three, {0, 5, 10, 19}, 20));
    ExpectRejected(w, "cu_seqlens[n] past the inputs", kInvalid, {}, &out.bytes,
                   varlen(three, {0, 5, 10, 21}, 20));
    ExpectRejected(w, "layer 3", LUMEN_ERROR_OUT_OF_RANGE, {"layer"}, &out.bytes,
                   varlen(three, {0, 5, 10, 20}, 20, 3));
  }
}

}  // namespace
}  // namespace lumen_test
