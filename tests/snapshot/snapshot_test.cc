// Snapshots through the public C API only, on a model that mixes families
// (gated_delta_net with gate_raw, parameters and a width-4 convolution, linear_attn with a
// normalizer, gla, retention) after random tokens:
//
//   - snapshot -> restore is bit exact (state of every layer and part, token counts, the
//     snapshot bytes themselves), and the restored session continues exactly like one that
//     was never saved (step and prefill);
//   - the size is O(state): identical after 10 and after 100,000 tokens;
//   - every truncation and every single-bit flip is rejected with CORRUPT_SNAPSHOT and leaves
//     the session bitwise unchanged; so do well-sealed snapshots with bad fields;
//   - another model gives MODEL_MISMATCH naming what differs; a newer format version gives
//     SNAPSHOT_VERSION; BUFFER_TOO_SMALL writes nothing;
//   - bf16 snapshots: half the payload, relative error <= 2^-8 per element; fp32 <-> bf16
//     state sessions restore across;
//   - files: round trip, missing file / directory, replace, no temporary left, oversize;
//   - NULL arguments; fork, then restore the parent's snapshot into the fork;
//   - conv windows and Mamba-2 layers round-trip and continue exactly; a format-1 snapshot
//     written by lumen 0.1.0 (tests/snapshot/format1_two_layers.snap) still restores.
//
// Where a test edits snapshot bytes it uses the layout of docs/snapshot_format.md (header 32
// bytes, 56-byte layer records, payloads, XXH3-64 of everything before the last 8 bytes
// stored little-endian in them). The offsets are named below.

#include <catch2/catch.hpp>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/reference/layer_reference.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace {

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

void PutU32(Bytes& b, size_t at, uint32_t value) {
  for (int i = 0; i < 4; ++i) b.at(at + i) = static_cast<unsigned char>(value >> (8 * i));
}
void PutU64(Bytes& b, size_t at, uint64_t value) {
  for (int i = 0; i < 8; ++i) b.at(at + i) = static_cast<unsigned char>(value >> (8 * i));
}
uint32_t GetU32(const Bytes& b, size_t at) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= uint32_t{b.at(at + i)} << (8 * i);
  return value;
}

// Recomputes the trailing checksum so that edited bytes pass it.
void Reseal(Bytes& b) {
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
std::string Describe(lumen_status status) {
  return std::string(lumen_status_string(status)) + ": " + lumen_last_error_message();
}

#define REQUIRE_OK(call)                              \
  do {                                                \
    const lumen_status status_ = (call);              \
    const std::string message_ = Describe(status_);   \
    INFO(#call << " -> " << message_);                \
    REQUIRE(status_ == LUMEN_OK);                     \
  } while (0)

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
void SetConv(LayerDesc& l, int32_t conv_size, bool bias) {
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

LayerDesc Layer(int32_t family, Dims d) {
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
LayerDesc GatedDeltaNet(Dims d, float a_log_shift = 0.0f) {
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
LayerDesc Mamba2(Dims d) {
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

LayerDesc LinearAttn(Dims d) {
  LayerDesc l = Layer(LUMEN_FAMILY_LINEAR_ATTN, d);
  l.options.feature_map = LUMEN_FEATURE_MAP_ELU1;  // positive, so q.z + eps stays away from 0
  l.options.normalize = 1;
  return l;
}

LayerDesc Gla(Dims d) { return Layer(LUMEN_FAMILY_GLA, d); }
LayerDesc Retention(Dims d) { return Layer(LUMEN_FAMILY_RETENTION, d); }

std::vector<LayerDesc> MixedLayers(Dims d, int32_t state_dtype = LUMEN_DTYPE_FLOAT32) {
  std::vector<LayerDesc> layers = {GatedDeltaNet(d), LinearAttn(d), Gla(d), Retention(d)};
  for (LayerDesc& l : layers) l.options.state_dtype = state_dtype;
  return layers;
}

constexpr Dims kDims{2, 4, 16, 12};   // the main tests
constexpr Dims kSmall{2, 4, 8, 6};    // bit flips: a snapshot of a few KB

ModelPtr BuildModel(const std::vector<LayerDesc>& layers) {
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

Tokens RandomTokens(const LayerDesc& l, int32_t count, std::mt19937& rng) {
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
    default:
      break;
  }
  return t;
}

enum class Path { kStep, kPrefill };

// Runs the tokens through layer `layer` (one prefill call, or one step per token) and returns
// the outputs o [T, HV, V].
std::vector<float> Run(lumen_session* s, int32_t layer, const Tokens& t, Path path) {
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
void AddHistory(const Stack& stack, const std::vector<lumen_session*>& sessions,
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

SessionState Capture(const lumen_session* s, const lumen_model* m) {
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

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

bool SameBits(const SessionState& a, const SessionState& b) {
  if (a.tokens != b.tokens || a.parts.size() != b.parts.size()) return false;
  for (size_t i = 0; i < a.parts.size(); ++i) {
    if (!SameBits(a.parts[i], b.parts[i])) return false;
  }
  return true;
}

bool AnyNonZero(const SessionState& s) {
  for (const auto& part : s.parts) {
    for (float x : part) {
      if (x != 0.0f) return true;
    }
  }
  return false;
}

// fp32 -> bf16 -> fp32, round to nearest even (finite inputs).
float RoundToBFloat16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

SessionState RoundedToBFloat16(SessionState s) {
  for (auto& part : s.parts) {
    for (float& x : part) x = RoundToBFloat16(x);
  }
  return s;
}

Bytes TakeSnapshot(const lumen_session* s, int32_t dtype = LUMEN_DTYPE_FLOAT32) {
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

int64_t SnapshotSize(const lumen_session* s, int32_t dtype = LUMEN_DTYPE_FLOAT32) {
  lumen_snapshot_options options;
  lumen_snapshot_options_init(&options);
  options.state_dtype = dtype;
  int64_t size = -1;
  REQUIRE_OK(lumen_session_snapshot_size(s, &options, &size));
  return size;
}

lumen_status Restore(lumen_session* s, const Bytes& bytes) {
  return lumen_session_restore(s, bytes.data(), static_cast<int64_t>(bytes.size()));
}

// Expects `status` from restoring `bytes`, a message containing each of `words`, and the
// session exactly as before.
void ExpectRejected(lumen_session* s, const lumen_model* m, const Bytes& bytes,
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

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "lumen-snapshot-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }
  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(path_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  fs::path path_;
};

Bytes ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  REQUIRE(out);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out);
}

// ---------------------------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------------------------

TEST_CASE("snapshot then restore is bit exact and the session continues exactly",
          "[snapshot]") {
  // (state dtype of the layers, dtype of the snapshot): the combinations that lose nothing.
  const auto combo = GENERATE(std::make_pair(LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_FLOAT32),
                              std::make_pair(LUMEN_DTYPE_BFLOAT16, LUMEN_DTYPE_FLOAT32),
                              std::make_pair(LUMEN_DTYPE_BFLOAT16, LUMEN_DTYPE_BFLOAT16));
  INFO("state dtype " << combo.first << ", snapshot dtype " << combo.second);
  const Stack stack(MixedLayers(kDims, combo.first));
  std::mt19937 rng(1234);

  // Two sessions with the same history: `saved` is snapshotted, `never_saved` is not touched.
  SessionPtr saved = stack.NewSession(), never_saved = stack.NewSession();
  AddHistory(stack, {saved.get(), never_saved.get()}, rng);
  const SessionState original = Capture(saved.get(), stack.model.get());
  REQUIRE(AnyNonZero(original));
  REQUIRE(original.tokens == std::vector<int64_t>{41, 49, 57, 65});

  const Bytes snapshot = TakeSnapshot(saved.get(), combo.second);
  CHECK(std::memcmp(snapshot.data(), "LUMENSNP", 8) == 0);
  CHECK(GetU32(snapshot, kVersionOffset) == kFormatVersion);
  CHECK(GetU32(snapshot, kNumLayersOffset) == 4);
  // Taking a snapshot only reads the session, and twice gives the same bytes.
  CHECK(SameBits(original, Capture(saved.get(), stack.model.get())));
  CHECK(TakeSnapshot(saved.get(), combo.second) == snapshot);

  SessionPtr restored = stack.NewSession();
  REQUIRE_OK(Restore(restored.get(), snapshot));
  CHECK(SameBits(original, Capture(restored.get(), stack.model.get())));
  CHECK(TakeSnapshot(restored.get(), combo.second) == snapshot);
  CHECK(TakeSnapshot(restored.get(), LUMEN_DTYPE_FLOAT32) ==
        TakeSnapshot(saved.get(), LUMEN_DTYPE_FLOAT32));

  // A session of another engine (4 threads) on another build of the same model.
  const Stack twin(MixedLayers(kDims, combo.first), 4);
  SessionPtr elsewhere = twin.NewSession();
  REQUIRE_OK(Restore(elsewhere.get(), snapshot));
  CHECK(SameBits(original, Capture(elsewhere.get(), twin.model.get())));

  // Restoring twice changes nothing.
  REQUIRE_OK(Restore(restored.get(), snapshot));
  CHECK(SameBits(original, Capture(restored.get(), stack.model.get())));

  // The next tokens: steps, then prefills that cross chunk boundaries, per layer.
  for (int32_t i = 0; i < stack.num_layers(); ++i) {
    INFO("layer " << i);
    const Tokens steps = RandomTokens(stack.layers[i], 3, rng);
    CHECK(SameBits(Run(restored.get(), i, steps, Path::kStep),
                   Run(never_saved.get(), i, steps, Path::kStep)));
    const Tokens prefill = RandomTokens(stack.layers[i], 70, rng);
    const std::vector<float> o_restored = Run(restored.get(), i, prefill, Path::kPrefill);
    const std::vector<float> o_never = Run(never_saved.get(), i, prefill, Path::kPrefill);
    CHECK(SameBits(o_restored, o_never));
    CHECK(std::all_of(o_restored.begin(), o_restored.end(),
                      [](float x) { return std::isfinite(x); }));
  }
  CHECK(SameBits(Capture(restored.get(), stack.model.get()),
                 Capture(never_saved.get(), stack.model.get())));

  // Rewind: restoring into the session that advanced brings it back, and the same tokens give
  // the same outputs a second time.
  const Tokens again = RandomTokens(stack.layers[0], 33, rng);
  SessionPtr rewound = stack.NewSession();
  REQUIRE_OK(Restore(rewound.get(), snapshot));
  const std::vector<float> first = Run(rewound.get(), 0, again, Path::kPrefill);
  REQUIRE_OK(Restore(rewound.get(), snapshot));
  CHECK(SameBits(original, Capture(rewound.get(), stack.model.get())));
  CHECK(SameBits(first, Run(rewound.get(), 0, again, Path::kPrefill)));
}

TEST_CASE("restore replaces every layer's state and token count, including zeros",
          "[snapshot]") {
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(77);
  SessionPtr fresh = stack.NewSession();
  const Bytes zero = TakeSnapshot(fresh.get());
  SessionPtr busy = stack.NewSession();
  AddHistory(stack, {busy.get()}, rng);
  REQUIRE_OK(Restore(busy.get(), zero));
  CHECK(SameBits(Capture(fresh.get(), stack.model.get()), Capture(busy.get(), stack.model.get())));
  CHECK(TakeSnapshot(busy.get()) == zero);
}

TEST_CASE("snapshot size is the same after 10 and after 100,000 tokens", "[snapshot]") {
  Dims d{1, 2, 16, 16};
  const Stack stack({GatedDeltaNet(d)});
  std::mt19937 rng(5);
  SessionPtr s = stack.NewSession();
  const int64_t empty_size = SnapshotSize(s.get());
  const int64_t empty_bf16 = SnapshotSize(s.get(), LUMEN_DTYPE_BFLOAT16);

  Run(s.get(), 0, RandomTokens(stack.layers[0], 10, rng), Path::kPrefill);
  const Bytes at_10 = TakeSnapshot(s.get());
  CHECK(static_cast<int64_t>(at_10.size()) == empty_size);
  CHECK(SnapshotSize(s.get(), LUMEN_DTYPE_BFLOAT16) == empty_bf16);

  const auto start = std::chrono::steady_clock::now();
  const int32_t kChunk = 4000;
  const std::vector<Tokens> blocks = {RandomTokens(stack.layers[0], kChunk, rng),
                                      RandomTokens(stack.layers[0], kChunk, rng),
                                      RandomTokens(stack.layers[0], kChunk, rng)};
  std::vector<float> o;
  for (int32_t call = 0; call < 100000 / kChunk; ++call) {
    o = Run(s.get(), 0, blocks[call % blocks.size()], Path::kPrefill);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t tokens = 0;
  REQUIRE(lumen_session_tokens(s.get(), 0, &tokens) == LUMEN_OK);
  CHECK(tokens == 100010);
  CHECK(std::all_of(o.begin(), o.end(), [](float x) { return std::isfinite(x); }));

  const Bytes at_100k = TakeSnapshot(s.get());
  CHECK(at_100k.size() == at_10.size());
  CHECK(SnapshotSize(s.get(), LUMEN_DTYPE_BFLOAT16) == empty_bf16);
  CHECK(at_100k != at_10);
  // O(state): the state itself plus a small fixed overhead.
  int64_t state_bytes = 0;
  REQUIRE(lumen_model_state_bytes(stack.model.get(), -1, &state_bytes) == LUMEN_OK);
  CHECK(static_cast<int64_t>(at_100k.size()) - state_bytes <= 256);
  INFO("100,000 tokens took " << seconds << " s");
  CHECK(seconds < 30.0);

  // And it restores, token count included.
  SessionPtr back = stack.NewSession();
  REQUIRE_OK(Restore(back.get(), at_100k));
  CHECK(SameBits(Capture(s.get(), stack.model.get()), Capture(back.get(), stack.model.get())));
}

// ---------------------------------------------------------------------------------------------
// Damage
// ---------------------------------------------------------------------------------------------

// Restores damaged bytes from memory, or from a file (a separate, streamed reader).
enum class Source { kMemory, kFile };

lumen_status RestoreFrom(Source source, lumen_session* s, const Bytes& bytes,
                         const TempDir& dir) {
  if (source == Source::kMemory) {
    // An exact-size copy, so that reading past the end is caught by sanitizers.
    return lumen_session_restore(s, bytes.empty() ? nullptr : bytes.data(),
                                 static_cast<int64_t>(bytes.size()));
  }
  const fs::path path = dir.path() / "damaged.snap";
  WriteFile(path, bytes);
  return lumen_session_load(s, path.string().c_str());
}

TEST_CASE("every truncation is rejected and changes nothing", "[snapshot][corrupt]") {
  const int32_t dtype = GENERATE(LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_BFLOAT16);
  const Source from = GENERATE(Source::kMemory, Source::kFile);
  const TempDir dir;
  INFO((from == Source::kMemory ? "lumen_session_restore" : "lumen_session_load"));
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(11);
  SessionPtr source = stack.NewSession(), target = stack.NewSession();
  AddHistory(stack, {source.get()}, rng);
  AddHistory(stack, {target.get()}, rng, 25);  // its own, different state
  const Bytes snapshot = TakeSnapshot(source.get(), dtype);
  const SessionState before = Capture(target.get(), stack.model.get());

  int64_t wrong_status = 0, changed = 0, no_message = 0;
  for (size_t length = 0; length < snapshot.size(); ++length) {
    const Bytes truncated(snapshot.begin(), snapshot.begin() + length);
    // restore(NULL, 0) is an argument error; an empty snapshot is a non-NULL pointer.
    const lumen_status status =
        from == Source::kMemory && length == 0
            ? lumen_session_restore(target.get(), snapshot.data(), 0)
            : RestoreFrom(from, target.get(), truncated, dir);
    if (status != LUMEN_ERROR_CORRUPT_SNAPSHOT) {
      ++wrong_status;
      FAIL_CHECK("length " << length << " of " << snapshot.size() << ": " << Describe(status));
    }
    if (*lumen_last_error_message() == '\0') ++no_message;
    // Comparing the whole state every time is cheap at these sizes.
    if (!SameBits(before, Capture(target.get(), stack.model.get()))) {
      ++changed;
      FAIL_CHECK("length " << length << " changed the session");
    }
  }
  INFO(snapshot.size() << " truncations");
  CHECK(wrong_status == 0);
  CHECK(changed == 0);
  CHECK(no_message == 0);
  // The whole snapshot still restores.
  REQUIRE_OK(Restore(target.get(), snapshot));
  const SessionState expected = dtype == LUMEN_DTYPE_FLOAT32
                                    ? Capture(source.get(), stack.model.get())
                                    : RoundedToBFloat16(Capture(source.get(), stack.model.get()));
  CHECK(SameBits(expected, Capture(target.get(), stack.model.get())));
}

TEST_CASE("every single-bit flip is rejected and changes nothing", "[snapshot][corrupt]") {
  const int32_t dtype = GENERATE(LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_BFLOAT16);
  const Source from = GENERATE(Source::kMemory, Source::kFile);
  const TempDir dir;
  INFO((from == Source::kMemory ? "lumen_session_restore" : "lumen_session_load"));
  const Stack stack(MixedLayers(kSmall));
  std::mt19937 rng(12);
  SessionPtr source = stack.NewSession(), target = stack.NewSession();
  AddHistory(stack, {source.get()}, rng);
  AddHistory(stack, {target.get()}, rng, 25);
  const Bytes snapshot = TakeSnapshot(source.get(), dtype);
  REQUIRE(snapshot.size() < 8192);  // "a few KB": all bits are flipped, no stride
  const SessionState before = Capture(target.get(), stack.model.get());

  Bytes damaged = snapshot;
  int64_t wrong_status = 0, changed = 0;
  for (size_t bit = 0; bit < snapshot.size() * 8; ++bit) {
    damaged[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    const lumen_status status = RestoreFrom(from, target.get(), damaged, dir);
    damaged[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    if (status != LUMEN_ERROR_CORRUPT_SNAPSHOT) {
      ++wrong_status;
      FAIL_CHECK("bit " << bit << " (byte " << bit / 8 << "): " << Describe(status));
    }
    if (!SameBits(before, Capture(target.get(), stack.model.get()))) {
      ++changed;
      FAIL_CHECK("bit " << bit << " changed the session");
    }
  }
  std::cout << "[snapshot] bit flips (dtype " << dtype << "): all " << snapshot.size() * 8
            << " bits of a " << snapshot.size() << "-byte snapshot rejected\n";
  CHECK(wrong_status == 0);
  CHECK(changed == 0);
}

TEST_CASE("large snapshots, copied and checked on two threads, round-trip and reject damage",
          "[snapshot][corrupt]") {
  // Payloads of 1 MiB and more are copied and checksummed concurrently; smaller ones are not.
  const Stack stack({GatedDeltaNet({4, 32, 96, 96})});  // 32 x 96 x 96 fp32 = 1.1 MiB
  std::mt19937 rng(21);
  SessionPtr source = stack.NewSession(), target = stack.NewSession();
  AddHistory(stack, {source.get()}, rng, 70);
  AddHistory(stack, {target.get()}, rng, 30);
  const Bytes snapshot = TakeSnapshot(source.get());
  REQUIRE(snapshot.size() > (size_t{1} << 20));
  const SessionState before = Capture(target.get(), stack.model.get());

  // Damage at the start, in the middle and at the end of the payload, and truncations.
  Bytes damaged = snapshot;
  for (size_t at : {size_t{500}, snapshot.size() / 2, snapshot.size() - 9}) {
    damaged[at] ^= 0x10;
    CHECK(Restore(target.get(), damaged) == LUMEN_ERROR_CORRUPT_SNAPSHOT);
    damaged[at] ^= 0x10;
    CHECK(SameBits(before, Capture(target.get(), stack.model.get())));
  }
  for (size_t length : {snapshot.size() - 1, snapshot.size() / 2}) {
    const Bytes truncated(snapshot.begin(), snapshot.begin() + length);
    CHECK(Restore(target.get(), truncated) == LUMEN_ERROR_CORRUPT_SNAPSHOT);
    CHECK(SameBits(before, Capture(target.get(), stack.model.get())));
  }
  REQUIRE_OK(Restore(target.get(), snapshot));
  CHECK(SameBits(Capture(source.get(), stack.model.get()),
                 Capture(target.get(), stack.model.get())));
  CHECK(TakeSnapshot(target.get()) == snapshot);
}

TEST_CASE("sealed snapshots with bad fields are rejected and change nothing",
          "[snapshot][corrupt]") {
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(13);
  SessionPtr source = stack.NewSession(), target = stack.NewSession();
  AddHistory(stack, {source.get()}, rng);
  AddHistory(stack, {target.get()}, rng, 25);
  const Bytes snapshot = TakeSnapshot(source.get());
  const size_t record1 = kHeaderBytes + kRecordBytes;  // layer 1's record

  SECTION("another magic") {
    Bytes b = snapshot;
    b[0] = 'X';
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("format version 0") {
    Bytes b = snapshot;
    PutU32(b, kVersionOffset, 0);
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("an unknown payload dtype") {
    Bytes b = snapshot;
    PutU32(b, record1 + kRecordDType, LUMEN_DTYPE_FLOAT16);
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("bf16 declared on fp32 payload") {
    Bytes b = snapshot;
    PutU32(b, record1 + kRecordDType, LUMEN_DTYPE_BFLOAT16);
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("an unknown layout") {
    Bytes b = snapshot;
    PutU32(b, record1 + kRecordLayout, 2);
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("a negative token count") {
    Bytes b = snapshot;
    PutU64(b, record1 + kRecordTokens, static_cast<uint64_t>(int64_t{-1}));
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("a wrong payload size") {
    for (uint64_t size : {uint64_t{0}, uint64_t{4}, ~uint64_t{0}, uint64_t{1} << 62}) {
      Bytes b = snapshot;
      PutU64(b, record1 + kRecordPayloadBytes, size);
      Reseal(b);
      ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
    }
  }
  SECTION("extra bytes before the checksum") {
    Bytes b = snapshot;
    b.insert(b.end() - kChecksumBytes, 4, 0);
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("payload cut short, checksum resealed") {
    Bytes b = snapshot;
    b.erase(b.end() - kChecksumBytes - 4, b.end() - kChecksumBytes);
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("only a sealed header") {
    Bytes b(snapshot.begin(), snapshot.begin() + kHeaderBytes + kChecksumBytes);
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("not a snapshot at all") {
    ExpectRejected(target.get(), stack.model.get(), Bytes(snapshot.size(), 0),
                   LUMEN_ERROR_CORRUPT_SNAPSHOT);
    ExpectRejected(target.get(), stack.model.get(), Bytes(snapshot.size(), 0xff),
                   LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
}

TEST_CASE("a newer format version gives SNAPSHOT_VERSION and changes nothing",
          "[snapshot][version]") {
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(14);
  SessionPtr source = stack.NewSession(), target = stack.NewSession();
  AddHistory(stack, {source.get()}, rng);
  AddHistory(stack, {target.get()}, rng, 25);
  Bytes b = TakeSnapshot(source.get());
  const uint32_t version = GENERATE(kFormatVersion + 1, kFormatVersion + 2, 0xffffffffu);
  PutU32(b, kVersionOffset, version);
  Reseal(b);
  ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_SNAPSHOT_VERSION,
                 {std::to_string(version).c_str()});

  // Unsealed, the same edit is damage: the checksum is checked before the version.
  Bytes unsealed = TakeSnapshot(source.get());
  PutU32(unsealed, kVersionOffset, version);
  ExpectRejected(target.get(), stack.model.get(), unsealed, LUMEN_ERROR_CORRUPT_SNAPSHOT);
}

// ---------------------------------------------------------------------------------------------
// Other models
// ---------------------------------------------------------------------------------------------

TEST_CASE("a snapshot of another model gives MODEL_MISMATCH naming what differs",
          "[snapshot][mismatch]") {
  const Stack base(MixedLayers(kDims));
  std::mt19937 rng(21);
  SessionPtr source = base.NewSession();
  AddHistory(base, {source.get()}, rng);
  const Bytes snapshot = TakeSnapshot(source.get());
  const Bytes snapshot_bf16 = TakeSnapshot(source.get(), LUMEN_DTYPE_BFLOAT16);

  struct Variant {
    const char* name;
    std::vector<LayerDesc> layers;
    std::vector<const char*> words;  // the message must contain each
  };
  std::vector<Variant> variants;
  {
    Dims d = kDims;
    d.k = 8;
    variants.push_back({"other dims (K)", MixedLayers(d), {"layer 0", "K=16", "K=8"}});
  }
  {
    Dims d = kDims;
    d.hv = 2;
    variants.push_back({"other dims (HV)", MixedLayers(d), {"layer 0", "HV=4", "HV=2"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[2] = Layer(LUMEN_FAMILY_SSD, kDims);
    variants.push_back({"other family in layer 2", l, {"layer 2", "gla", "ssd"}});
  }
  {
    auto l = MixedLayers(kDims);
    l.pop_back();
    variants.push_back({"fewer layers", l, {"4 layers", "3"}});
  }
  {
    auto l = MixedLayers(kDims);
    l.push_back(Retention(kDims));
    variants.push_back({"more layers", l, {"4 layers", "5"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[0] = GatedDeltaNet(kDims, 0.25f);
    variants.push_back({"other A_log", l, {"options or parameters"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[0].dt_bias[1] += 1.0f;
    variants.push_back({"other dt_bias", l, {"options or parameters"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[3].decay = {0.9f, 0.8f, 0.7f, 0.6f};
    variants.push_back({"other retention decays", l, {"options or parameters"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[3].options.qk_l2norm = 1;
    variants.push_back({"other option (qk_l2norm)", l, {"options or parameters"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[2].options.scale = 0.5f;
    variants.push_back({"other option (scale)", l, {"options or parameters"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[1].options.normalize = 0;
    variants.push_back({"no normalizer", l, {"layer 1", "normalizer"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[0].conv_weight[2][5] += 0.125f;
    variants.push_back({"other conv weight", l, {"options or parameters"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[0].options.conv_activation = LUMEN_CONV_ACTIVATION_NONE;
    variants.push_back({"other conv activation", l, {"options or parameters"}});
  }
  {
    auto l = MixedLayers(kDims);
    SetConv(l[0], 0, false);
    variants.push_back({"no convolution", l, {"layer 0", "conv_size 4", "0"}});
  }
  {
    auto l = MixedLayers(kDims);
    SetConv(l[0], 3, false);
    variants.push_back({"other conv_size", l, {"layer 0", "conv_size 4", "3"}});
  }

  for (const Variant& v : variants) {
    INFO("variant: " << v.name);
    const Stack other(v.layers);
    SessionPtr target = other.NewSession();
    AddHistory(other, {target.get()}, rng, 20);
    for (const Bytes* bytes : {&snapshot, &snapshot_bf16}) {
      const SessionState before = Capture(target.get(), other.model.get());
      const lumen_status status = Restore(target.get(), *bytes);
      const std::string message = lumen_last_error_message();
      INFO("restore -> " << lumen_status_string(status) << ": " << message);
      CHECK(status == LUMEN_ERROR_MODEL_MISMATCH);
      for (const char* word : v.words) CHECK(message.find(word) != std::string::npos);
      CHECK(SameBits(before, Capture(target.get(), other.model.get())));
    }
    // And the other way round.
    const Bytes theirs = TakeSnapshot(target.get());
    SessionPtr mine = base.NewSession();
    AddHistory(base, {mine.get()}, rng, 20);
    ExpectRejected(mine.get(), base.model.get(), theirs, LUMEN_ERROR_MODEL_MISMATCH);
  }
}

TEST_CASE("the state dtype of the layers is not part of the model's identity",
          "[snapshot][bf16]") {
  // fp32 session <-> bf16-state session, both ways, both snapshot dtypes.
  const Stack fp32(MixedLayers(kDims, LUMEN_DTYPE_FLOAT32));
  const Stack bf16(MixedLayers(kDims, LUMEN_DTYPE_BFLOAT16));
  int64_t fp32_bytes = 0, bf16_bytes = 0;
  for (int32_t i = 0; i < fp32.num_layers(); ++i) {
    int64_t a = 0, b = 0;
    REQUIRE(lumen_model_state_bytes(fp32.model.get(), i, &a) == LUMEN_OK);
    REQUIRE(lumen_model_state_bytes(bf16.model.get(), i, &b) == LUMEN_OK);
    fp32_bytes += a;
    bf16_bytes += b;
  }
  CHECK(bf16_bytes * 2 == fp32_bytes);

  std::mt19937 rng(31);
  SessionPtr a = fp32.NewSession();
  AddHistory(fp32, {a.get()}, rng);
  const SessionState a_state = Capture(a.get(), fp32.model.get());

  SECTION("fp32 snapshot of an fp32 session into a bf16-state session rounds to nearest even") {
    SessionPtr b = bf16.NewSession();
    REQUIRE_OK(Restore(b.get(), TakeSnapshot(a.get())));
    const SessionState b_state = Capture(b.get(), bf16.model.get());
    CHECK(SameBits(RoundedToBFloat16(a_state), b_state));
    // ... and back: the fp32 session gets the bf16 values exactly.
    SessionPtr a2 = fp32.NewSession();
    REQUIRE_OK(Restore(a2.get(), TakeSnapshot(b.get())));
    CHECK(SameBits(b_state, Capture(a2.get(), fp32.model.get())));
    REQUIRE_OK(Restore(a2.get(), TakeSnapshot(b.get(), LUMEN_DTYPE_BFLOAT16)));
    CHECK(SameBits(b_state, Capture(a2.get(), fp32.model.get())));
    // Rounding once or twice gives the same bf16 snapshot bytes.
    CHECK(TakeSnapshot(b.get(), LUMEN_DTYPE_BFLOAT16) ==
          TakeSnapshot(a.get(), LUMEN_DTYPE_BFLOAT16));
  }
  SECTION("bf16 snapshot of an fp32 session into a bf16-state session") {
    SessionPtr b = bf16.NewSession();
    REQUIRE_OK(Restore(b.get(), TakeSnapshot(a.get(), LUMEN_DTYPE_BFLOAT16)));
    CHECK(SameBits(RoundedToBFloat16(a_state), Capture(b.get(), bf16.model.get())));
    // The bf16-state session runs on from there.
    const Tokens t = RandomTokens(bf16.layers[0], 20, rng);
    const std::vector<float> o = Run(b.get(), 0, t, Path::kPrefill);
    CHECK(std::all_of(o.begin(), o.end(), [](float x) { return std::isfinite(x); }));
  }
}

TEST_CASE("bf16 snapshots are half the payload and within 2^-8 per element",
          "[snapshot][bf16]") {
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(41);
  SessionPtr source = stack.NewSession();
  AddHistory(stack, {source.get()}, rng, 120);
  const SessionState exact = Capture(source.get(), stack.model.get());

  const Bytes fp32 = TakeSnapshot(source.get());
  const Bytes bf16 = TakeSnapshot(source.get(), LUMEN_DTYPE_BFLOAT16);
  int64_t state_bytes = 0;
  for (int32_t i = 0; i < stack.num_layers(); ++i) {
    int64_t b = 0;
    REQUIRE(lumen_model_state_bytes(stack.model.get(), i, &b) == LUMEN_OK);
    state_bytes += b;
  }
  // Same fixed overhead; the payload halves.
  CHECK(static_cast<int64_t>(fp32.size() - bf16.size()) * 2 == state_bytes);
  CHECK(bf16.size() < fp32.size() * 0.55);

  SessionPtr restored = stack.NewSession();
  REQUIRE_OK(Restore(restored.get(), bf16));
  const SessionState rounded = Capture(restored.get(), stack.model.get());
  CHECK(rounded.tokens == exact.tokens);
  CHECK(SameBits(RoundedToBFloat16(exact), rounded));

  double worst = 0.0, error_squares = 0.0, value_squares = 0.0;
  int64_t count = 0, over = 0, zero_mismatch = 0;
  for (size_t p = 0; p < exact.parts.size(); ++p) {
    for (size_t i = 0; i < exact.parts[p].size(); ++i) {
      const double a = exact.parts[p][i], b = rounded.parts[p][i];
      ++count;
      error_squares += (a - b) * (a - b);
      value_squares += a * a;
      if (a == 0.0) {
        if (b != 0.0) ++zero_mismatch;
        continue;
      }
      const double relative = std::abs(a - b) / std::abs(a);
      worst = std::max(worst, relative);
      if (relative > std::ldexp(1.0, -8)) ++over;
    }
  }
  const double relative_rms = std::sqrt(error_squares / value_squares);
  std::cout << "[snapshot] bf16: " << count << " elements, payload " << bf16.size()
            << " vs " << fp32.size() << " bytes; worst relative error " << worst << " (2^"
            << std::log2(worst) << "), relative RMS " << relative_rms << " (2^"
            << std::log2(relative_rms) << ")\n";
  CHECK(over == 0);
  CHECK(zero_mismatch == 0);
  CHECK(worst <= std::ldexp(1.0, -8));
  CHECK(relative_rms <= std::ldexp(1.0, -8));
  // Re-snapshotting the restored fp32 session as bf16 gives the same bytes.
  CHECK(TakeSnapshot(restored.get(), LUMEN_DTYPE_BFLOAT16) == bf16);
}

// ---------------------------------------------------------------------------------------------
// Buffers and arguments
// ---------------------------------------------------------------------------------------------

TEST_CASE("a buffer one byte short gives BUFFER_TOO_SMALL and is not written",
          "[snapshot][buffer]") {
  const int32_t dtype = GENERATE(LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_BFLOAT16);
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(51);
  SessionPtr s = stack.NewSession();
  AddHistory(stack, {s.get()}, rng);
  lumen_snapshot_options options;
  lumen_snapshot_options_init(&options);
  options.state_dtype = dtype;
  const int64_t size = SnapshotSize(s.get(), dtype);

  for (int64_t capacity : {size - 1, int64_t{1}, int64_t{0}, int64_t{-1}}) {
    INFO("capacity " << capacity);
    Bytes buffer(static_cast<size_t>(size + 16), 0xA5);
    int64_t out_size = -7;
    const lumen_status status =
        lumen_session_snapshot(s.get(), &options, buffer.data(), capacity, &out_size);
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_BUFFER_TOO_SMALL);
    CHECK(std::all_of(buffer.begin(), buffer.end(), [](unsigned char c) { return c == 0xA5; }));
    CHECK(out_size == -7);
  }
  // A larger buffer: exactly `size` bytes written, the rest untouched.
  Bytes buffer(static_cast<size_t>(size + 16), 0xA5);
  int64_t out_size = -7;
  REQUIRE_OK(lumen_session_snapshot(s.get(), &options, buffer.data(), size + 16, &out_size));
  CHECK(out_size == size);
  CHECK(std::all_of(buffer.begin() + size, buffer.end(),
                    [](unsigned char c) { return c == 0xA5; }));
  CHECK(Bytes(buffer.begin(), buffer.begin() + size) == TakeSnapshot(s.get(), dtype));
  // out_size may be NULL.
  REQUIRE_OK(lumen_session_snapshot(s.get(), &options, buffer.data(), size, nullptr));
}

TEST_CASE("NULL and bad arguments give INVALID_ARGUMENT with a message",
          "[snapshot][args]") {
  const Stack stack(MixedLayers(kSmall));
  SessionPtr s = stack.NewSession();
  std::mt19937 rng(61);
  AddHistory(stack, {s.get()}, rng);
  const Bytes snapshot = TakeSnapshot(s.get());
  const SessionState before = Capture(s.get(), stack.model.get());
  Bytes buffer(snapshot.size());
  int64_t size = 0;
  lumen_snapshot_options options;
  lumen_snapshot_options_init(&options);
  lumen_snapshot_options_init(nullptr);  // a no-op

  auto expect_invalid = [&](lumen_status status, const char* what) {
    const std::string message = lumen_last_error_message();
    INFO(what << " -> " << lumen_status_string(status) << ": " << message);
    CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(!message.empty());
  };
  expect_invalid(lumen_session_snapshot_size(nullptr, &options, &size), "size(NULL session)");
  expect_invalid(lumen_session_snapshot_size(s.get(), &options, nullptr), "size(NULL out)");
  expect_invalid(lumen_session_snapshot(nullptr, &options, buffer.data(), 1 << 20, &size),
                 "snapshot(NULL session)");
  expect_invalid(lumen_session_snapshot(s.get(), &options, nullptr, 1 << 20, &size),
                 "snapshot(NULL buffer)");
  expect_invalid(lumen_session_restore(nullptr, snapshot.data(), snapshot.size()),
                 "restore(NULL session)");
  expect_invalid(lumen_session_restore(s.get(), nullptr, snapshot.size()), "restore(NULL data)");
  expect_invalid(lumen_session_restore(s.get(), snapshot.data(), -1), "restore(size -1)");
  expect_invalid(lumen_session_save(nullptr, "x.snap", nullptr), "save(NULL session)");
  expect_invalid(lumen_session_save(s.get(), nullptr, nullptr), "save(NULL path)");
  expect_invalid(lumen_session_load(nullptr, "x.snap"), "load(NULL session)");
  expect_invalid(lumen_session_load(s.get(), nullptr), "load(NULL path)");

  lumen_snapshot_options bad = options;
  bad.struct_size = 0;
  expect_invalid(lumen_session_snapshot_size(s.get(), &bad, &size), "size(struct_size 0)");
  expect_invalid(lumen_session_snapshot(s.get(), &bad, buffer.data(), buffer.size(), &size),
                 "snapshot(struct_size 0)");
  bad = options;
  bad.state_dtype = LUMEN_DTYPE_FLOAT16;
  expect_invalid(lumen_session_snapshot_size(s.get(), &bad, &size), "size(FLOAT16)");
  expect_invalid(lumen_session_save(s.get(), "x.snap", &bad), "save(FLOAT16)");
  bad.state_dtype = 99;
  expect_invalid(lumen_session_snapshot(s.get(), &bad, buffer.data(), buffer.size(), &size),
                 "snapshot(dtype 99)");
  CHECK(SameBits(before, Capture(s.get(), stack.model.get())));

  // NULL options mean the defaults.
  int64_t default_size = 0;
  REQUIRE_OK(lumen_session_snapshot_size(s.get(), nullptr, &default_size));
  CHECK(default_size == static_cast<int64_t>(snapshot.size()));
  REQUIRE_OK(lumen_session_snapshot(s.get(), nullptr, buffer.data(), buffer.size(), nullptr));
  CHECK(buffer == snapshot);
  // A zero-length restore from a valid pointer is a truncated snapshot, not a bad argument.
  CHECK(lumen_session_restore(s.get(), snapshot.data(), 0) == LUMEN_ERROR_CORRUPT_SNAPSHOT);
  CHECK(SameBits(before, Capture(s.get(), stack.model.get())));
}

// ---------------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------------

TEST_CASE("save and load round-trip through a file", "[snapshot][file]") {
  const int32_t dtype = GENERATE(LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_BFLOAT16);
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(71);
  SessionPtr source = stack.NewSession();
  AddHistory(stack, {source.get()}, rng);
  lumen_snapshot_options options;
  lumen_snapshot_options_init(&options);
  options.state_dtype = dtype;

  TempDir dir;
  const fs::path path = dir.path() / "session.lumen";
  REQUIRE_OK(lumen_session_save(source.get(), path.c_str(), &options));
  CHECK(ReadFile(path) == TakeSnapshot(source.get(), dtype));
  CHECK(dir.Entries() == std::vector<std::string>{"session.lumen"});

  SessionPtr loaded = stack.NewSession();
  REQUIRE_OK(lumen_session_load(loaded.get(), path.c_str()));
  const SessionState expected = dtype == LUMEN_DTYPE_FLOAT32
                                    ? Capture(source.get(), stack.model.get())
                                    : RoundedToBFloat16(Capture(source.get(), stack.model.get()));
  CHECK(SameBits(expected, Capture(loaded.get(), stack.model.get())));

  // A relative path works too (the directory of "name" is ".").
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path());
  const lumen_status relative = lumen_session_save(source.get(), "relative.lumen", &options);
  const std::string relative_message = Describe(relative);
  fs::current_path(cwd);
  INFO(relative_message);
  CHECK(relative == LUMEN_OK);
  CHECK(dir.Entries() == std::vector<std::string>{"relative.lumen", "session.lumen"});
}

TEST_CASE("file errors: missing file, missing directory, replacing, oversize",
          "[snapshot][file]") {
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(72);
  SessionPtr source = stack.NewSession(), target = stack.NewSession();
  AddHistory(stack, {source.get()}, rng);
  AddHistory(stack, {target.get()}, rng, 25);
  const Bytes snapshot = TakeSnapshot(source.get());
  const SessionState before = Capture(target.get(), stack.model.get());
  TempDir dir;

  SECTION("loading a missing file gives IO") {
    const fs::path path = dir.path() / "missing.lumen";
    const lumen_status status = lumen_session_load(target.get(), path.c_str());
    const std::string message = lumen_last_error_message();
    INFO(lumen_status_string(status) << ": " << message);
    CHECK(status == LUMEN_ERROR_IO);
    CHECK(message.find("missing.lumen") != std::string::npos);
    CHECK(SameBits(before, Capture(target.get(), stack.model.get())));
  }
  SECTION("saving into a missing directory gives IO and leaves nothing behind") {
    const fs::path path = dir.path() / "no-such-dir" / "session.lumen";
    const lumen_status status = lumen_session_save(source.get(), path.c_str(), nullptr);
    const std::string message = lumen_last_error_message();
    INFO(lumen_status_string(status) << ": " << message);
    CHECK(status == LUMEN_ERROR_IO);
    CHECK(!message.empty());
    CHECK(dir.Entries().empty());
    CHECK(!fs::exists(dir.path() / "no-such-dir"));
  }
  SECTION("saving onto a directory gives IO and removes its temporary file") {
    fs::create_directory(dir.path() / "taken");
    const fs::path path = dir.path() / "taken";
    const lumen_status status = lumen_session_save(source.get(), path.c_str(), nullptr);
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_IO);
    CHECK(dir.Entries() == std::vector<std::string>{"taken"});
    CHECK(fs::is_empty(path));
  }
  SECTION("saving over an existing file replaces it and leaves no temporary file") {
    const fs::path path = dir.path() / "session.lumen";
    WriteFile(path, Bytes(100000, 'x'));  // an old, longer file
    REQUIRE_OK(lumen_session_save(source.get(), path.c_str(), nullptr));
    CHECK(ReadFile(path) == snapshot);
    // Again, over a valid snapshot of another session.
    REQUIRE_OK(lumen_session_save(target.get(), path.c_str(), nullptr));
    CHECK(ReadFile(path) == TakeSnapshot(target.get()));
    REQUIRE_OK(lumen_session_save(source.get(), path.c_str(), nullptr));
    CHECK(ReadFile(path) == snapshot);
    for (const std::string& name : dir.Entries()) {
      INFO(name);
      CHECK(name.find(".tmp-") == std::string::npos);
    }
    CHECK(dir.Entries() == std::vector<std::string>{"session.lumen"});
  }
  SECTION("loading a file larger than any snapshot gives CORRUPT") {
    const fs::path path = dir.path() / "big.lumen";
    Bytes bigger = snapshot;
    bigger.push_back(0);
    WriteFile(path, bigger);
    ExpectRejected(target.get(), stack.model.get(), bigger, LUMEN_ERROR_CORRUPT_SNAPSHOT);
    lumen_status status = lumen_session_load(target.get(), path.c_str());
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_CORRUPT_SNAPSHOT);
    WriteFile(path, Bytes(1 << 20, 0));  // 1 MiB of zeros
    status = lumen_session_load(target.get(), path.c_str());
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_CORRUPT_SNAPSHOT);
    CHECK(SameBits(before, Capture(target.get(), stack.model.get())));
  }
  SECTION("loading an empty file gives CORRUPT") {
    // Like restore(data, 0): a truncated snapshot, not a bad argument.
    const fs::path path = dir.path() / "empty.lumen";
    WriteFile(path, Bytes());
    const lumen_status status = lumen_session_load(target.get(), path.c_str());
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_CORRUPT_SNAPSHOT);
    CHECK(SameBits(before, Capture(target.get(), stack.model.get())));
  }
  SECTION("loading a truncated file gives CORRUPT") {
    const fs::path path = dir.path() / "short.lumen";
    for (size_t length : {size_t{1}, size_t{7}, snapshot.size() / 2, snapshot.size() - 1}) {
      WriteFile(path, Bytes(snapshot.begin(), snapshot.begin() + length));
      const lumen_status status = lumen_session_load(target.get(), path.c_str());
      INFO("length " << length << ": " << Describe(status));
      CHECK(status == LUMEN_ERROR_CORRUPT_SNAPSHOT);
    }
    CHECK(SameBits(before, Capture(target.get(), stack.model.get())));
  }
  SECTION("loading a snapshot file of another model gives MODEL_MISMATCH") {
    Dims d = kDims;
    d.v = 4;
    const Stack other(MixedLayers(d));
    SessionPtr s = other.NewSession();
    const fs::path path = dir.path() / "other.lumen";
    REQUIRE_OK(lumen_session_save(s.get(), path.c_str(), nullptr));
    const lumen_status status = lumen_session_load(target.get(), path.c_str());
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_MODEL_MISMATCH);
    CHECK(SameBits(before, Capture(target.get(), stack.model.get())));
  }
}

// ---------------------------------------------------------------------------------------------
// Fork
// ---------------------------------------------------------------------------------------------

TEST_CASE("fork, diverge, then restore the parent's snapshot into the fork", "[snapshot][fork]") {
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(81);
  SessionPtr parent = stack.NewSession();
  AddHistory(stack, {parent.get()}, rng);
  lumen_session* child_raw = nullptr;
  REQUIRE_OK(lumen_session_fork(parent.get(), &child_raw));
  SessionPtr child(child_raw);
  const Bytes parent_snapshot = TakeSnapshot(parent.get());
  CHECK(TakeSnapshot(child.get()) == parent_snapshot);  // a fork snapshots like its parent

  // The child goes its own way.
  AddHistory(stack, {child.get()}, rng, 30);
  const Bytes child_snapshot = TakeSnapshot(child.get());
  REQUIRE(child_snapshot != parent_snapshot);

  REQUIRE_OK(Restore(child.get(), parent_snapshot));
  CHECK(SameBits(Capture(parent.get(), stack.model.get()),
                 Capture(child.get(), stack.model.get())));
  CHECK(TakeSnapshot(child.get()) == parent_snapshot);
  for (int32_t i = 0; i < stack.num_layers(); ++i) {
    const Tokens t = RandomTokens(stack.layers[i], 9, rng);
    CHECK(SameBits(Run(parent.get(), i, t, Path::kPrefill),
                   Run(child.get(), i, t, Path::kPrefill)));
  }

  // The parent can take the child's diverged snapshot too; the fork of a restored session is
  // the same again.
  REQUIRE_OK(Restore(parent.get(), child_snapshot));
  CHECK(TakeSnapshot(parent.get()) == child_snapshot);
  lumen_session* grandchild_raw = nullptr;
  REQUIRE_OK(lumen_session_fork(parent.get(), &grandchild_raw));
  SessionPtr grandchild(grandchild_raw);
  CHECK(TakeSnapshot(grandchild.get()) == child_snapshot);
}

// ---------------------------------------------------------------------------------------------
// Convolution windows and older formats
// ---------------------------------------------------------------------------------------------

TEST_CASE("conv windows and Mamba-2 layers round-trip and the session continues exactly",
          "[snapshot][conv]") {
  const int32_t state_dtype = GENERATE(LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_BFLOAT16);
  std::vector<LayerDesc> layers = {GatedDeltaNet(kDims), Mamba2({1, 4, 16, 8})};
  for (LayerDesc& l : layers) l.options.state_dtype = state_dtype;
  const Stack stack(layers);
  std::mt19937 rng(61);
  SessionPtr saved = stack.NewSession(), never_saved = stack.NewSession();
  AddHistory(stack, {saved.get(), never_saved.get()}, rng);
  const SessionState original = Capture(saved.get(), stack.model.get());
  // Matrix and three windows per layer, all holding something.
  REQUIRE(original.parts.size() == 8);
  for (const auto& part : original.parts) {
    CHECK(std::any_of(part.begin(), part.end(), [](float x) { return x != 0.0f; }));
  }

  const Bytes snapshot = TakeSnapshot(saved.get());
  SessionPtr restored = stack.NewSession();
  REQUIRE_OK(Restore(restored.get(), snapshot));
  CHECK(SameBits(original, Capture(restored.get(), stack.model.get())));
  CHECK(TakeSnapshot(restored.get()) == snapshot);

  // Inside the first W-1 tokens after the restore the windows are what the outputs read.
  for (int32_t i = 0; i < stack.num_layers(); ++i) {
    INFO("layer " << i);
    for (int32_t n : {1, 2, 40}) {
      const Tokens t = RandomTokens(stack.layers[i], n, rng);
      const Path path = n == 1 ? Path::kStep : Path::kPrefill;
      CHECK(SameBits(Run(restored.get(), i, t, path), Run(never_saved.get(), i, t, path)));
    }
  }
  CHECK(SameBits(Capture(restored.get(), stack.model.get()),
                 Capture(never_saved.get(), stack.model.get())));

  // Through a file too.
  const TempDir dir;
  const std::string path = (dir.path() / "conv.snap").string();
  REQUIRE_OK(lumen_session_save(restored.get(), path.c_str(), nullptr));
  SessionPtr loaded = stack.NewSession();
  REQUIRE_OK(lumen_session_load(loaded.get(), path.c_str()));
  CHECK(SameBits(Capture(restored.get(), stack.model.get()),
                 Capture(loaded.get(), stack.model.get())));
}

// tests/snapshot/format1_two_layers.snap was written by lumen 0.1.0 (format 1, 48-byte
// records) through its public API: a gated_delta_net layer (H=1, HV=2, K=4, V=3, gate_raw,
// qk_l2norm, beta_sigmoid, A_log {0.5, 1.25}, dt_bias {-0.5, 0.25}) after a prefill of 3
// tokens and a linear_attn layer (H=HV=2, K=3, V=2, elu1, normalize) after 5 steps; then
// every state value was overwritten with Format1Value(layer, i) (normalizer: i + 1000), and
// the session saved with lumen_session_save.
float Format1Value(int layer, int64_t i) {
  return static_cast<float>((i % 97) - 48) / 64.0f * static_cast<float>(layer + 1);
}

std::vector<LayerDesc> Format1Layers() {
  LayerDesc gdn = Layer(LUMEN_FAMILY_GATED_DELTA_NET, {1, 2, 4, 3});
  gdn.options.gate_raw = 1;
  gdn.options.qk_l2norm = 1;
  gdn.options.beta_sigmoid = 1;
  gdn.a_log = {0.5f, 1.25f};
  gdn.dt_bias = {-0.5f, 0.25f};
  LayerDesc linear = Layer(LUMEN_FAMILY_LINEAR_ATTN, {2, 2, 3, 2});
  linear.options.feature_map = LUMEN_FEATURE_MAP_ELU1;
  linear.options.normalize = 1;
  return {gdn, linear};
}

TEST_CASE("a format-1 snapshot written by lumen 0.1.0 still restores", "[snapshot][version]") {
  const fs::path file = fs::path(LUMEN_SNAPSHOT_TEST_DATA) / "format1_two_layers.snap";
  const Bytes bytes = ReadFile(file);
  REQUIRE(GetU32(bytes, kVersionOffset) == 1);
  const Stack stack(Format1Layers());

  auto check = [&](lumen_session* s) {
    const SessionState state = Capture(s, stack.model.get());
    CHECK(state.tokens == std::vector<int64_t>{3, 5});
    // Parts: layer 0's matrix, layer 1's matrix and normalizer.
    REQUIRE(state.parts.size() == 3);
    const int layer_of[3] = {0, 1, 1};
    const int64_t first[3] = {0, 0, 1000};
    int64_t wrong = 0;
    for (int p = 0; p < 3; ++p) {
      for (size_t i = 0; i < state.parts[p].size(); ++i) {
        wrong += state.parts[p][i] != Format1Value(layer_of[p], first[p] + static_cast<int64_t>(i));
      }
    }
    CHECK(wrong == 0);
  };
  SessionPtr from_memory = stack.NewSession();
  REQUIRE_OK(Restore(from_memory.get(), bytes));
  check(from_memory.get());
  SessionPtr from_file = stack.NewSession();
  REQUIRE_OK(lumen_session_load(from_file.get(), file.string().c_str()));
  check(from_file.get());
  // Saved again, it is a format-2 snapshot of the same state.
  const Bytes again = TakeSnapshot(from_memory.get());
  CHECK(GetU32(again, kVersionOffset) == kFormatVersion);
  SessionPtr round_trip = stack.NewSession();
  REQUIRE_OK(Restore(round_trip.get(), again));
  check(round_trip.get());

  // A model whose first layer has a convolution is another model: format 1 had none.
  std::vector<LayerDesc> with_conv = Format1Layers();
  SetConv(with_conv[0], 4, false);
  const Stack conv_stack(with_conv);
  SessionPtr conv_session = conv_stack.NewSession();
  ExpectRejected(conv_session.get(), conv_stack.model.get(), bytes, LUMEN_ERROR_MODEL_MISMATCH,
                 {"layer 0", "conv_size"});
}

}  // namespace
