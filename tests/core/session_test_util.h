#pragma once
// What the session tests (lumen_session_tests) share: every family with every option it
// takes, a layer of each at K x V, a seed per check, a model and engine around one layer,
// a layer's whole state (conv windows included) read, written and compared, and the
// comparison with the float64 reference.

#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/reference/layer_reference.h"

namespace lumen_test {

constexpr int32_t kH = 2;
constexpr int32_t kHV = 4;  // HV = 2H: grouped value heads

// Every family, with every option it takes.
struct Config {
  const char* name;
  std::function<void(RefLayer*)> apply;
};

inline std::vector<Config> Configs() {
  return {
      {"linear_attn", [](RefLayer* l) { l->family = LUMEN_FAMILY_LINEAR_ATTN; }},
      {"linear_attn elu1",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_LINEAR_ATTN;
         l->feature_map = LUMEN_FEATURE_MAP_ELU1;
       }},
      {"linear_attn relu scale=0.5",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_LINEAR_ATTN;
         l->feature_map = LUMEN_FEATURE_MAP_RELU;
         l->scale = 0.5f;
       }},
      // normalize only with positive feature maps: with identity, q.z + eps can be ~0.
      {"linear_attn elu1 normalize",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_LINEAR_ATTN;
         l->feature_map = LUMEN_FEATURE_MAP_ELU1;
         l->normalize = true;
       }},
      {"linear_attn relu normalize eps=1e-3",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_LINEAR_ATTN;
         l->feature_map = LUMEN_FEATURE_MAP_RELU;
         l->normalize = true;
         l->normalize_eps = 1e-3f;
       }},
      {"retention", [](RefLayer* l) { l->family = LUMEN_FAMILY_RETENTION; }},
      {"retention given decays",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_RETENTION;
         l->decay = {0.9f, 0.95f, 0.99f, 0.5f};
       }},
      {"retention qk_l2norm",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_RETENTION;
         l->qk_l2norm = true;
       }},
      {"ssd", [](RefLayer* l) { l->family = LUMEN_FAMILY_SSD; }},
      {"ssd scale=1",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_SSD;
         l->scale = 1.0f;
       }},
      {"gla", [](RefLayer* l) { l->family = LUMEN_FAMILY_GLA; }},
      {"delta_net", [](RefLayer* l) { l->family = LUMEN_FAMILY_DELTA_NET; }},
      {"delta_net qk_l2norm beta_sigmoid",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_DELTA_NET;
         l->qk_l2norm = true;
         l->beta_sigmoid = true;
       }},
      {"gated_delta_net", [](RefLayer* l) { l->family = LUMEN_FAMILY_GATED_DELTA_NET; }},
      {"gated_delta_net qk_l2norm",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_GATED_DELTA_NET;
         l->qk_l2norm = true;
       }},
      {"gated_delta_net qk_l2norm beta_sigmoid gate_raw",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_GATED_DELTA_NET;
         l->qk_l2norm = true;
         l->beta_sigmoid = true;
         l->gate_raw = true;
       }},
      {"kda", [](RefLayer* l) { l->family = LUMEN_FAMILY_KDA; }},
      {"kda beta_sigmoid", [](RefLayer* l) {
         l->family = LUMEN_FAMILY_KDA;
         l->beta_sigmoid = true;
       }},
      {"kda qk_l2norm beta_sigmoid gate_raw",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_KDA;
         l->qk_l2norm = true;
         l->beta_sigmoid = true;
         l->gate_raw = true;
       }},
      // docs/spec.md §6. The delta family L2-normalises q and k after the convolution, as the
      // models do (the delta rule needs unit keys).
      {"gated_delta_net conv4 as in Qwen3-Next",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_GATED_DELTA_NET;
         l->qk_l2norm = true;
         l->beta_sigmoid = true;
         l->gate_raw = true;
         l->conv_size = 4;
       }},
      {"kda conv4 as in Kimi Linear",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_KDA;
         l->qk_l2norm = true;
         l->beta_sigmoid = true;
         l->gate_raw = true;
         l->conv_size = 4;
       }},
      {"ssd gate_raw conv4 biases D as in Mamba-2",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_SSD;
         l->scale = 1.0f;
         l->gate_raw = true;
         l->conv_size = 4;
         for (auto& bias : l->conv_bias) bias = {0.0f};  // sized by RandomParams
         l->d_skip = {0.0f};
       }},
      {"ssd gate_raw without convolution or D",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_SSD;
         l->gate_raw = true;
       }},
      {"delta_net conv3 no activation",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_DELTA_NET;
         l->qk_l2norm = true;
         l->conv_size = 3;
         l->conv_activation = LUMEN_CONV_ACTIVATION_NONE;
       }},
      {"gla conv2 biases",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_GLA;
         l->conv_size = 2;
         for (auto& bias : l->conv_bias) bias = {0.0f};
       }},
      {"linear_attn elu1 normalize conv4",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_LINEAR_ATTN;
         l->feature_map = LUMEN_FEATURE_MAP_ELU1;
         l->normalize = true;
         l->conv_size = 4;
       }},
      {"retention conv1 (no window)",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_RETENTION;
         l->conv_size = 1;
       }},
      // fla's allow_neg_eigval: beta in [0, 2], given or as 2 * sigmoid(logit).
      {"delta_net allow_neg_eigval",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_DELTA_NET;
         l->allow_neg_eigval = true;
       }},
      {"gated_delta_net qk_l2norm beta_sigmoid allow_neg_eigval gate_raw",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_GATED_DELTA_NET;
         l->qk_l2norm = true;
         l->beta_sigmoid = true;
         l->allow_neg_eigval = true;
         l->gate_raw = true;
       }},
      {"kda qk_l2norm beta_sigmoid allow_neg_eigval gate_raw",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_KDA;
         l->qk_l2norm = true;
         l->beta_sigmoid = true;
         l->allow_neg_eigval = true;
         l->gate_raw = true;
       }},
      // fla's lower-bounded gate: bound * sigmoid(exp(A_log) (g + dt_bias)).
      {"gated_delta_net qk_l2norm beta_sigmoid gate_raw gate_lower_bound=-5",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_GATED_DELTA_NET;
         l->qk_l2norm = true;
         l->beta_sigmoid = true;
         l->gate_raw = true;
         l->gate_lower_bound = -5.0f;
       }},
      {"kda qk_l2norm beta_sigmoid gate_raw gate_lower_bound=-5 conv4",
       [](RefLayer* l) {
         l->family = LUMEN_FAMILY_KDA;
         l->qk_l2norm = true;
         l->beta_sigmoid = true;
         l->gate_raw = true;
         l->gate_lower_bound = -5.0f;
         l->conv_size = 4;
       }},
  };
}

inline int NumConfigs() { return static_cast<int>(Configs().size()); }

// A layer of config `index` at K x V, with random parameters where it needs them.
inline RefLayer MakeLayer(int index, int32_t K, int32_t V, std::mt19937& rng) {
  RefLayer l;
  l.num_heads = kH;
  l.num_value_heads = kHV;
  l.key_dim = K;
  l.value_dim = V;
  Configs().at(index).apply(&l);
  RandomParams(&l, rng);
  return l;
}

// A seed per check: the run's seed mixed with what identifies the check.
inline uint32_t SeedFor(std::initializer_list<int64_t> parts) {
  uint64_t h = TestSeed() * 0x9E3779B97F4A7C15ull;
  for (int64_t p : parts) h = (h ^ static_cast<uint64_t>(p)) * 0x100000001B3ull;
  return static_cast<uint32_t>(h ^ (h >> 32));
}

// Everything one test needs around one layer: model, engine, and a fresh session on demand.
struct Fixture {
  RefLayer layer;
  ModelPtr model;
  EnginePtr engine;

  Fixture(const RefLayer& l, int32_t num_threads = 0) : layer(l) {
    std::string error;
    model = BuildModel({layer}, &error);
    INFO(error);
    REQUIRE(model);
    engine = MakeEngine(model.get(), num_threads, &error);
    REQUIRE(engine);
  }
  SessionPtr Session() {
    std::string error;
    SessionPtr s = MakeSession(engine.get(), &error);
    INFO(error);
    REQUIRE(s);
    return s;
  }
};

struct StateValues {
  std::vector<float> matrix, normalizer;
  std::vector<float> conv[3];  // the windows of q, k, v; empty without a convolution
};

inline StateValues RandomValues(const RefLayer& layer, std::mt19937& rng) {
  StateValues v;
  RandomState(layer, rng, &v.matrix, &v.normalizer);
  RandomConvState(layer, rng, v.conv);
  return v;
}

inline StateValues Read(lumen_session* s, const RefLayer& layer, int32_t index = 0) {
  StateValues v;
  lumen_status st = ReadState(s, index, layer, &v.matrix, &v.normalizer);
  if (st == LUMEN_OK) st = ReadConvState(s, index, layer, v.conv);
  INFO(LastError(st));
  REQUIRE(st == LUMEN_OK);
  return v;
}

inline void Write(lumen_session* s, const RefLayer& layer, const StateValues& v,
                  int32_t index = 0) {
  lumen_status st = WriteState(s, index, layer, v.matrix, v.normalizer);
  if (st == LUMEN_OK) st = WriteConvState(s, index, layer, v.conv);
  INFO(LastError(st));
  REQUIRE(st == LUMEN_OK);
}

inline int64_t Tokens(lumen_session* s, int32_t index = 0) {
  int64_t n = -1;
  REQUIRE(lumen_session_tokens(s, index, &n) == LUMEN_OK);
  return n;
}

inline RefState ToRef(const StateValues& v, int32_t state_dtype = LUMEN_DTYPE_FLOAT32) {
  RefState r;
  r.matrix = ToDouble(RoundAll(v.matrix, state_dtype));
  r.normalizer = ToDouble(RoundAll(v.normalizer, state_dtype));
  for (int part = 0; part < 3; ++part) r.conv[part] = ToDouble(RoundAll(v.conv[part], state_dtype));
  return r;
}

inline void Expect(const std::string& what, const std::vector<float>& out,
            const std::vector<double>& ref, double bound) {
  const ErrorReport e = Measure(out, ref);
  INFO(what << ": " << e.Describe() << " bound " << bound);
  CHECK(e.Passes(bound));
}

inline void ExpectState(const std::string& what, const StateValues& got, const RefState& ref,
                 double bound) {
  Expect(what + " state", got.matrix, ref.matrix, bound);
  if (!ref.normalizer.empty()) Expect(what + " normalizer", got.normalizer, ref.normalizer, bound);
  for (int part = 0; part < 3; ++part) {
    if (!ref.conv[part].empty()) {
      Expect(what + " conv window " + std::to_string(part), got.conv[part], ref.conv[part], bound);
    }
  }
}

inline std::vector<double> AsDouble(const std::vector<float>& x) { return ToDouble(x); }

inline bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

inline bool BitwiseEqual(const StateValues& a, const StateValues& b) {
  for (int part = 0; part < 3; ++part) {
    if (!BitwiseEqual(a.conv[part], b.conv[part])) return false;
  }
  return BitwiseEqual(a.matrix, b.matrix) && BitwiseEqual(a.normalizer, b.normalizer);
}

inline std::string Splits(const std::vector<int64_t>& s) {
  std::ostringstream out;
  for (size_t i = 0; i < s.size(); ++i) out << (i ? "+" : "") << s[i];
  return out.str();
}

}  // namespace lumen_test
