#pragma once
// What the snapshot tests (lumen_snapshot_tests) share, public C API only: the snapshot
// layout of docs/snapshot_format.md (header 32 bytes, 56-byte layer records, payloads, XXH3-64
// of everything before the last 8 bytes stored little-endian in them) with its offsets named,
// and the reseal of edited bytes; a model that mixes families (gated_delta_net with gate_raw,
// parameters and a width-4 convolution, linear_attn with a normalizer, gla, retention) and
// Mamba-2; random tokens and history; a session's whole state, compared bit for bit; taking
// and restoring snapshots; temporary directories and files.

#include <catch2/catch.hpp>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "lumen/lumen.h"
#include "tests/reference/layer_reference.h"
#include "tests/reference/require_ok.h"
#include "tests/reference/temp_dir.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace lumen_snapshot_test {

namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

// ---------------------------------------------------------------------------------------------
// Snapshot layout (src/snapshot.h; docs/snapshot_format.md)
// ---------------------------------------------------------------------------------------------

constexpr size_t kVersionOffset = 8;      // u32 format version
constexpr size_t kNumLayersOffset = 24;   // u32
constexpr size_t kHeaderBytes = 32;
constexpr size_t kRecordBytes = 56;       // format 2
constexpr uint32_t kFormatVersion = 2;
constexpr size_t kRecordDType = 20;       // u32 lumen_dtype of the payload
constexpr size_t kRecordLayout = 24;      // u32, 1 = canonical
constexpr size_t kRecordTokens = 32;      // u64 (int64 >= 0)
constexpr size_t kRecordPayloadBytes = 40;  // u64
constexpr size_t kChecksumBytes = 8;

inline void PutU32(Bytes& b, size_t at, uint32_t value) {
  for (int i = 0; i < 4; ++i) b.at(at + i) = static_cast<unsigned char>(value >> (8 * i));
}
inline void PutU64(Bytes& b, size_t at, uint64_t value) {
  for (int i = 0; i < 8; ++i) b.at(at + i) = static_cast<unsigned char>(value >> (8 * i));
}
inline uint32_t GetU32(const Bytes& b, size_t at) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= uint32_t{b.at(at + i)} << (8 * i);
  return value;
}

// Recomputes the trailing checksum so that edited bytes pass it.
inline void Reseal(Bytes& b) {
  REQUIRE(b.size() >= kChecksumBytes);
  PutU64(b, b.size() - kChecksumBytes, XXH3_64bits(b.data(), b.size() - kChecksumBytes));
}

// ---------------------------------------------------------------------------------------------
// Handles
// ---------------------------------------------------------------------------------------------

using lumen_test::BuilderPtr;
using lumen_test::EnginePtr;
using lumen_test::ModelPtr;
using lumen_test::SessionPtr;

// The status's name and the thread's message; call right after the call that failed.
inline std::string Describe(lumen_status status) {
  return std::string(lumen_status_string(status)) + ": " + lumen_last_error_message();
}


// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

struct Dims {
  int32_t h, hv, k, v;
};

struct LayerDesc {
  lumen_layer_options options;
  std::vector<float> a_log, dt_bias, decay;  // set when not empty
  std::vector<float> conv_weight[3], conv_bias[3], d_skip;
};

// Deterministic conv weights (and biases when `bias`) for the layer's conv_size.
inline void SetConv(LayerDesc& l, int32_t conv_size, bool bias) {
  const lumen_layer_options& o = l.options;
  const int32_t hv = o.num_value_heads == 0 ? o.num_heads : o.num_value_heads;
  l.options.conv_size = conv_size;
  for (int part = 0; part < 3; ++part) {
    const int64_t channels = part == 2 ? int64_t{hv} * o.value_dim : int64_t{o.num_heads} * o.key_dim;
    l.conv_weight[part].resize(channels * conv_size);
    for (size_t i = 0; i < l.conv_weight[part].size(); ++i) {
      l.conv_weight[part][i] = 0.3f * std::sin(0.7f * static_cast<float>(i) + part);
    }
    l.conv_bias[part].clear();
    if (bias) l.conv_bias[part].assign(channels, 0.05f * (part + 1));
  }
}

inline LayerDesc Layer(int32_t family, Dims d) {
  LayerDesc l;
  lumen_layer_options_init(&l.options);
  l.options.family = family;
  l.options.num_heads = d.h;
  l.options.num_value_heads = d.hv;
  l.options.key_dim = d.k;
  l.options.value_dim = d.v;
  return l;
}

// gated_delta_net as in Qwen3-Next: raw gates through A_log and dt_bias, L2-normalised q/k,
// beta as a logit.
inline LayerDesc GatedDeltaNet(Dims d, float a_log_shift = 0.0f) {
  LayerDesc l = Layer(LUMEN_FAMILY_GATED_DELTA_NET, d);
  l.options.gate_raw = 1;
  l.options.qk_l2norm = 1;
  l.options.beta_sigmoid = 1;
  for (int32_t h = 0; h < d.hv; ++h) {
    l.a_log.push_back(std::log(1.0f + 3.0f * h) * 0.5f + a_log_shift);
    l.dt_bias.push_back(-0.5f + 0.25f * h);
  }
  SetConv(l, 4, /*bias=*/false);
  return l;
}

// A Mamba-2 layer: ssd with gate_raw (g is the raw dt), a biased width-4 convolution, D.
inline LayerDesc Mamba2(Dims d) {
  LayerDesc l = Layer(LUMEN_FAMILY_SSD, d);
  l.options.gate_raw = 1;
  l.options.scale = 1.0f;
  for (int32_t h = 0; h < d.hv; ++h) {
    l.a_log.push_back(0.3f * h);
    l.dt_bias.push_back(-2.0f + 0.5f * h);
    l.d_skip.push_back(1.0f - 0.1f * h);
  }
  SetConv(l, 4, /*bias=*/true);
  return l;
}

inline LayerDesc LinearAttn(Dims d) {
  LayerDesc l = Layer(LUMEN_FAMILY_LINEAR_ATTN, d);
  l.options.feature_map = LUMEN_FEATURE_MAP_ELU1;  // positive, so q.z + eps stays away from 0
  l.options.normalize = 1;
  return l;
}

inline LayerDesc Gla(Dims d) { return Layer(LUMEN_FAMILY_GLA, d); }
inline LayerDesc Retention(Dims d) { return Layer(LUMEN_FAMILY_RETENTION, d); }

inline std::vector<LayerDesc> MixedLayers(Dims d, int32_t state_dtype = LUMEN_DTYPE_FLOAT32) {
  std::vector<LayerDesc> layers = {GatedDeltaNet(d), LinearAttn(d), Gla(d), Retention(d)};
  for (LayerDesc& l : layers) l.options.state_dtype = state_dtype;
  return layers;
}

constexpr Dims kDims{2, 4, 16, 12};   // the main tests
constexpr Dims kSmall{2, 4, 8, 6};    // bit flips: a snapshot of a few KB

inline ModelPtr BuildModel(const std::vector<LayerDesc>& layers) {
  lumen_model_builder* raw = nullptr;
  REQUIRE_OK(lumen_model_builder_create(&raw));
  BuilderPtr builder(raw);
  for (const LayerDesc& l : layers) {
    int32_t index = -1;
    REQUIRE_OK(lumen_model_builder_add_layer(builder.get(), &l.options, &index));
    const std::pair<lumen_param, const std::vector<float>*> params[] = {
        {LUMEN_PARAM_A_LOG, &l.a_log},
        {LUMEN_PARAM_DT_BIAS, &l.dt_bias},
        {LUMEN_PARAM_DECAY, &l.decay},
        {LUMEN_PARAM_CONV_Q_WEIGHT, &l.conv_weight[0]},
        {LUMEN_PARAM_CONV_K_WEIGHT, &l.conv_weight[1]},
        {LUMEN_PARAM_CONV_V_WEIGHT, &l.conv_weight[2]},
        {LUMEN_PARAM_CONV_Q_BIAS, &l.conv_bias[0]},
        {LUMEN_PARAM_CONV_K_BIAS, &l.conv_bias[1]},
        {LUMEN_PARAM_CONV_V_BIAS, &l.conv_bias[2]},
        {LUMEN_PARAM_D, &l.d_skip}};
    for (const auto& [param, values] : params) {
      if (values->empty()) continue;
      REQUIRE_OK(lumen_model_builder_set_param(builder.get(), index, param, values->data(),
                                               static_cast<int64_t>(values->size())));
    }
  }
  lumen_model* model = nullptr;
  REQUIRE_OK(lumen_model_builder_build(builder.get(), &model));
  return ModelPtr(model);
}

// A model, its engine, and fresh sessions on demand.
struct Stack {
  std::vector<LayerDesc> layers;
  ModelPtr model;
  EnginePtr engine;

  explicit Stack(std::vector<LayerDesc> l, int32_t num_threads = 1) : layers(std::move(l)) {
    model = BuildModel(layers);
    lumen_engine_options options;
    lumen_engine_options_init(&options);
    options.backend = LUMEN_BACKEND_CPU;
    options.num_threads = num_threads;
    lumen_engine* engine_raw = nullptr;
    REQUIRE_OK(lumen_engine_create(model.get(), &options, &engine_raw));
    engine.reset(engine_raw);
  }
  SessionPtr NewSession() const {
    lumen_session* s = nullptr;
    REQUIRE_OK(lumen_session_create(engine.get(), &s));
    return SessionPtr(s);
  }
  int32_t num_layers() const { return static_cast<int32_t>(layers.size()); }
};

// ---------------------------------------------------------------------------------------------
// Tokens
// ---------------------------------------------------------------------------------------------

// The inputs of T tokens for one layer: q, k [T, H, K], v [T, HV, V], g [T, HV] or
// [T, HV, K], beta [T, HV] (empty where the family takes none).
struct Tokens {
  int32_t count = 0;
  std::vector<float> q, k, v, g, beta;
};

inline Tokens RandomTokens(const LayerDesc& l, int32_t count, std::mt19937& rng) {
  const lumen_layer_options& o = l.options;
  const int64_t hv = o.num_value_heads == 0 ? o.num_heads : o.num_value_heads;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> decay(-0.3f, -0.005f);
  Tokens t;
  t.count = count;
  t.q.resize(int64_t{count} * o.num_heads * o.key_dim);
  t.k.resize(t.q.size());
  t.v.resize(int64_t{count} * hv * o.value_dim);
  for (float& x : t.q) x = normal(rng);
  for (float& x : t.k) x = normal(rng);
  for (float& x : t.v) x = normal(rng);
  switch (o.family) {
    case LUMEN_FAMILY_GATED_DELTA_NET:
      t.g.resize(int64_t{count} * hv);
      t.beta.resize(int64_t{count} * hv);
      for (float& x : t.g) x = o.gate_raw ? normal(rng) : decay(rng);
      for (float& x : t.beta) {
        x = o.beta_sigmoid ? normal(rng) : 0.5f + 0.4f * std::tanh(normal(rng));
      }
      break;
    case LUMEN_FAMILY_SSD:
      t.g.resize(int64_t{count} * hv);
      for (float& x : t.g) x = decay(rng);
      break;
    case LUMEN_FAMILY_GLA:
      t.g.resize(int64_t{count} * hv * o.key_dim);
      for (float& x : t.g) x = decay(rng);
      break;
    case LUMEN_FAMILY_KDA:
      t.g.resize(int64_t{count} * hv * o.key_dim);
      for (float& x : t.g) x = decay(rng);
      [[fallthrough]];
    case LUMEN_FAMILY_DELTA_NET:
      t.beta.resize(int64_t{count} * hv);
      for (float& x : t.beta) x = 0.5f + 0.4f * std::tanh(normal(rng));
      break;
    default:
      break;
  }
  return t;
}

enum class Path { kStep, kPrefill };

// Runs the tokens through layer `layer` (one prefill call, or one step per token) and returns
// the outputs o [T, HV, V].
inline std::vector<float> Run(lumen_session* s, int32_t layer, const Tokens& t, Path path) {
  const int64_t q_per = static_cast<int64_t>(t.q.size()) / t.count;
  const int64_t v_per = static_cast<int64_t>(t.v.size()) / t.count;
  const int64_t g_per = static_cast<int64_t>(t.g.size()) / t.count;
  const int64_t b_per = static_cast<int64_t>(t.beta.size()) / t.count;
  std::vector<float> o(t.v.size(), std::nanf(""));
  const int32_t calls = path == Path::kStep ? t.count : 1;
  const int32_t per_call = path == Path::kStep ? 1 : t.count;
  for (int32_t c = 0; c < calls; ++c) {
    const int64_t first = int64_t{c} * per_call;
    lumen_layer_inputs in;
    lumen_layer_inputs_init(&in);
    in.q = t.q.data() + first * q_per;
    in.q_count = q_per * per_call;
    in.k = t.k.data() + first * q_per;
    in.k_count = q_per * per_call;
    in.v = t.v.data() + first * v_per;
    in.v_count = v_per * per_call;
    if (g_per > 0) {
      in.g = t.g.data() + first * g_per;
      in.g_count = g_per * per_call;
    }
    if (b_per > 0) {
      in.beta = t.beta.data() + first * b_per;
      in.beta_count = b_per * per_call;
    }
    lumen_layer_output out;
    lumen_layer_output_init(&out);
    out.o = o.data() + first * v_per;
    out.o_count = v_per * per_call;
    if (path == Path::kStep) {
      REQUIRE_OK(lumen_session_step(s, layer, &in, &out));
    } else {
      REQUIRE_OK(lumen_session_prefill(s, layer, per_call, &in, &out));
    }
  }
  return o;
}

// Random history: each layer gets a prefill of its own length and a few steps, so the layers'
// token counts differ.
inline void AddHistory(const Stack& stack, const std::vector<lumen_session*>& sessions,
                std::mt19937& rng, int32_t base_tokens = 40) {
  for (int32_t i = 0; i < stack.num_layers(); ++i) {
    const Tokens prefill = RandomTokens(stack.layers[i], base_tokens + 7 * i, rng);
    const Tokens steps = RandomTokens(stack.layers[i], 1 + i, rng);
    for (lumen_session* s : sessions) {
      Run(s, i, prefill, Path::kPrefill);
      Run(s, i, steps, Path::kStep);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------

// Everything a session holds, as the public API shows it.
struct SessionState {
  std::vector<std::vector<float>> parts;  // per layer: matrix, normalizer, conv windows if any
  std::vector<int64_t> tokens;
};

inline SessionState Capture(const lumen_session* s, const lumen_model* m) {
  int32_t num_layers = 0;
  REQUIRE(lumen_model_num_layers(m, &num_layers) == LUMEN_OK);
  SessionState state;
  for (int32_t i = 0; i < num_layers; ++i) {
    for (lumen_state_part part : {LUMEN_STATE_MATRIX, LUMEN_STATE_NORMALIZER, LUMEN_STATE_CONV_Q,
                                  LUMEN_STATE_CONV_K, LUMEN_STATE_CONV_V}) {
      int64_t count = 0;
      REQUIRE(lumen_model_state_count(m, i, part, &count) == LUMEN_OK);
      if (count == 0) continue;
      std::vector<float> values(count);
      REQUIRE_OK(lumen_session_read_state(s, i, part, values.data(), count));
      state.parts.push_back(std::move(values));
    }
    int64_t tokens = -1;
    REQUIRE(lumen_session_tokens(s, i, &tokens) == LUMEN_OK);
    state.tokens.push_back(tokens);
  }
  return state;
}

inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

inline bool SameBits(const SessionState& a, const SessionState& b) {
  if (a.tokens != b.tokens || a.parts.size() != b.parts.size()) return false;
  for (size_t i = 0; i < a.parts.size(); ++i) {
    if (!SameBits(a.parts[i], b.parts[i])) return false;
  }
  return true;
}

inline bool AnyNonZero(const SessionState& s) {
  for (const auto& part : s.parts) {
    for (float x : part) {
      if (x != 0.0f) return true;
    }
  }
  return false;
}

// fp32 -> bf16 -> fp32, round to nearest even (finite inputs).
inline float RoundToBFloat16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

inline SessionState RoundedToBFloat16(SessionState s) {
  for (auto& part : s.parts) {
    for (float& x : part) x = RoundToBFloat16(x);
  }
  return s;
}

inline Bytes TakeSnapshot(const lumen_session* s, int32_t dtype = LUMEN_DTYPE_FLOAT32) {
  lumen_snapshot_options options;
  lumen_snapshot_options_init(&options);
  options.state_dtype = dtype;
  int64_t size = -1;
  REQUIRE_OK(lumen_session_snapshot_size(s, &options, &size));
  REQUIRE(size > 0);
  Bytes bytes(static_cast<size_t>(size));
  int64_t written = -1;
  REQUIRE_OK(lumen_session_snapshot(s, &options, bytes.data(), size, &written));
  REQUIRE(written == size);
  return bytes;
}

inline int64_t SnapshotSize(const lumen_session* s, int32_t dtype = LUMEN_DTYPE_FLOAT32) {
  lumen_snapshot_options options;
  lumen_snapshot_options_init(&options);
  options.state_dtype = dtype;
  int64_t size = -1;
  REQUIRE_OK(lumen_session_snapshot_size(s, &options, &size));
  return size;
}

inline lumen_status Restore(lumen_session* s, const Bytes& bytes) {
  return lumen_session_restore(s, bytes.data(), static_cast<int64_t>(bytes.size()));
}

// Expects `status` from restoring `bytes`, a message containing each of `words`, and the
// session exactly as before.
inline void ExpectRejected(lumen_session* s, const lumen_model* m, const Bytes& bytes,
                    lumen_status expected, std::initializer_list<const char*> words = {}) {
  const SessionState before = Capture(s, m);
  const lumen_status status = Restore(s, bytes);
  const std::string message = lumen_last_error_message();
  INFO("restore -> " << lumen_status_string(status) << ": " << message);
  CHECK(status == expected);
  CHECK(!message.empty());
  for (const char* word : words) CHECK(message.find(word) != std::string::npos);
  CHECK(SameBits(before, Capture(s, m)));
}

// ---------------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------------

using lumen_test::TempDir;

inline Bytes ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteFile(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  REQUIRE(out);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out);
}

}  // namespace lumen_snapshot_test
