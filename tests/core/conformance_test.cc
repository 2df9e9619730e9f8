// Every case of the conformance vectors (tests/data/vectors, a copy of ../shared/vectors, and
// tests/data/vectors-layers for docs/spec.md §6: convolutions, Mamba-2) through lumen's C API
// (step path, one prefill, split prefills, batched steps, variable-length prefill, bf16/fp16
// inputs), and the float64 reference against the same cases.
//
// Missing or unreadable vectors fail the tests: they are never skipped.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/reference/layer_reference.h"

#ifndef LUMEN_VECTORS_DIR
#error "LUMEN_VECTORS_DIR must be defined by the build"
#endif
#ifndef LUMEN_LAYER_VECTORS_DIR
#error "LUMEN_LAYER_VECTORS_DIR must be defined by the build"
#endif

namespace lumen_test {
namespace {

struct VectorCase {
  std::string name;
  RefLayer layer;
  int64_t num_tokens = 0;
  TokenData tokens;                            // float32 inputs
  std::vector<float> initial_state;            // [HV, K, V]; zeros if absent
  std::vector<float> initial_normalizer;       // [HV, K]; zeros if absent
  std::vector<double> o, final_state, final_normalizer;  // float64 outputs
  bool has_final_normalizer = false;
  std::vector<float> initial_conv[3];   // [C, W-1] per part; zeros if absent
  std::vector<double> final_conv[3];    // [C, W-1] per part (with a convolution)
};

struct Manifest {
  std::vector<VectorCase> cases;
  std::string error;  // non-empty: the vectors could not be loaded
};

int32_t FamilyFromName(const std::string& name) {
  static const std::map<std::string, int32_t> kFamilies = {
      {"linear_attn", LUMEN_FAMILY_LINEAR_ATTN},
      {"retention", LUMEN_FAMILY_RETENTION},
      {"ssd", LUMEN_FAMILY_SSD},
      {"gla", LUMEN_FAMILY_GLA},
      {"delta_net", LUMEN_FAMILY_DELTA_NET},
      {"gated_delta_net", LUMEN_FAMILY_GATED_DELTA_NET},
      {"kda", LUMEN_FAMILY_KDA}};
  const auto it = kFamilies.find(name);
  if (it == kFamilies.end()) throw std::runtime_error("unknown family '" + name + "'");
  return it->second;
}

int32_t FeatureMapFromName(const std::string& name) {
  if (name == "identity") return LUMEN_FEATURE_MAP_IDENTITY;
  if (name == "elu1") return LUMEN_FEATURE_MAP_ELU1;
  if (name == "relu") return LUMEN_FEATURE_MAP_RELU;
  throw std::runtime_error("unknown feature_map '" + name + "'");
}

std::vector<double> ReadArray(const std::vector<char>& file, const nlohmann::json& array) {
  int64_t count = 1;
  for (const auto& d : array.at("shape")) count *= d.get<int64_t>();
  const std::string dtype = array.at("dtype").get<std::string>();
  const int64_t offset = array.at("offset").get<int64_t>();
  const int64_t esize = dtype == "float32" ? 4 : dtype == "float64" ? 8 : 0;
  if (esize == 0) throw std::runtime_error("unknown dtype '" + dtype + "'");
  if (offset < 0 || offset + count * esize > static_cast<int64_t>(file.size())) {
    throw std::runtime_error("array '" + array.at("name").get<std::string>() +
                             "' lies outside its file");
  }
  std::vector<double> values(count);
  for (int64_t i = 0; i < count; ++i) {
    const char* p = file.data() + offset + i * esize;
    if (esize == 4) {
      float f;
      std::memcpy(&f, p, 4);
      values[i] = f;
    } else {
      std::memcpy(&values[i], p, 8);
    }
  }
  return values;
}

std::vector<float> ToFloat(const std::vector<double>& x) {
  return std::vector<float>(x.begin(), x.end());  // exact: the inputs are float32
}

VectorCase LoadCase(const std::string& dir, const nlohmann::json& c) {
  VectorCase vc;
  vc.name = c.at("name").get<std::string>();
  RefLayer& L = vc.layer;
  L.family = FamilyFromName(c.at("family").get<std::string>());
  vc.num_tokens = c.at("T").get<int64_t>();
  L.num_heads = c.at("H").get<int32_t>();
  L.num_value_heads = c.at("HV").get<int32_t>();
  L.key_dim = c.at("K").get<int32_t>();
  L.value_dim = c.at("V").get<int32_t>();
  for (const auto& [key, value] : c.at("options").items()) {
    if (key == "scale") {
      L.scale = value.get<float>();
    } else if (key == "feature_map") {
      L.feature_map = FeatureMapFromName(value.get<std::string>());
    } else if (key == "normalize") {
      L.normalize = value.get<bool>();
    } else if (key == "normalize_eps") {
      L.normalize_eps = value.get<float>();
    } else if (key == "qk_l2norm") {
      L.qk_l2norm = value.get<bool>();
    } else if (key == "beta_sigmoid") {
      L.beta_sigmoid = value.get<bool>();
    } else if (key == "gate_raw") {
      L.gate_raw = value.get<bool>();
    } else if (key == "conv_size") {
      L.conv_size = value.get<int32_t>();
    } else if (key == "conv_activation") {
      const std::string name = value.get<std::string>();
      if (name != "silu" && name != "none") {
        throw std::runtime_error("case " + vc.name + ": unknown conv_activation '" + name + "'");
      }
      L.conv_activation =
          name == "silu" ? LUMEN_CONV_ACTIVATION_SILU : LUMEN_CONV_ACTIVATION_NONE;
    } else {
      // A new option must not pass silently untested.
      throw std::runtime_error("case " + vc.name + ": unknown option '" + key + "'");
    }
  }

  const std::string path = dir + "/" + c.at("file").get<std::string>();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  const std::vector<char> file((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());

  std::map<std::string, std::vector<double>> arrays;
  for (const auto& a : c.at("arrays")) {
    arrays[a.at("name").get<std::string>()] = ReadArray(file, a);
  }
  auto take = [&](const char* name, int64_t expected, bool required) -> std::vector<double> {
    const auto it = arrays.find(name);
    if (it == arrays.end()) {
      if (required) throw std::runtime_error("case " + vc.name + " lacks '" + name + "'");
      return {};
    }
    if (static_cast<int64_t>(it->second.size()) != expected) {
      throw std::runtime_error("case " + vc.name + ": '" + name + "' has " +
                               std::to_string(it->second.size()) + " elements, expected " +
                               std::to_string(expected));
    }
    std::vector<double> values = std::move(it->second);
    arrays.erase(it);
    return values;
  };
  const int64_t T = vc.num_tokens;
  vc.tokens.num_tokens = T;
  vc.tokens.q = ToFloat(take("q", T * L.QPerToken(), true));
  vc.tokens.k = ToFloat(take("k", T * L.QPerToken(), true));
  vc.tokens.v = ToFloat(take("v", T * L.VPerToken(), true));
  vc.tokens.g = ToFloat(take("g", T * L.GPerToken(), L.HasG()));
  vc.tokens.beta = ToFloat(take("beta", T * L.BetaPerToken(), L.HasBeta()));
  const int64_t HV = L.num_value_heads;
  if (L.gate_raw) {
    L.a_log = ToFloat(take("A_log", HV, true));
    L.dt_bias = ToFloat(
        take("dt_bias", L.family == LUMEN_FAMILY_KDA ? HV * L.key_dim : HV, true));
  }
  if (arrays.count("decay")) L.decay = ToFloat(take("decay", HV, true));
  if (arrays.count("D")) L.d_skip = ToFloat(take("D", HV, true));
  static const char* const kParts[3] = {"q", "k", "v"};
  for (int part = 0; part < 3 && L.conv_size > 0; ++part) {
    const std::string p = kParts[part];
    const int64_t C = L.ConvChannels(part);
    L.conv_weight[part] = ToFloat(take(("conv_" + p + "_weight").c_str(), C * L.conv_size, true));
    L.conv_bias[part] = ToFloat(take(("conv_" + p + "_bias").c_str(), C, false));
    vc.initial_conv[part] = ToFloat(take(("initial_conv_" + p).c_str(), L.ConvCount(part), false));
    if (vc.initial_conv[part].empty()) vc.initial_conv[part].assign(L.ConvCount(part), 0.0f);
    vc.final_conv[part] = take(("final_conv_" + p).c_str(), L.ConvCount(part), true);
  }
  vc.initial_state = ToFloat(take("initial_state", L.MatrixCount(), false));
  if (vc.initial_state.empty()) vc.initial_state.assign(L.MatrixCount(), 0.0f);
  vc.initial_normalizer = ToFloat(take("initial_normalizer", L.NormalizerCount(), false));
  if (vc.initial_normalizer.empty()) vc.initial_normalizer.assign(L.NormalizerCount(), 0.0f);
  vc.o = take("o", T * L.VPerToken(), true);
  vc.final_state = take("final_state", L.MatrixCount(), true);
  vc.has_final_normalizer = arrays.count("final_normalizer") != 0;
  vc.final_normalizer = take("final_normalizer", L.NormalizerCount(), false);
  if (L.HasNormalizer() && !vc.has_final_normalizer) {
    // Allowed by docs/spec.md §5 ("[final_normalizer]"), but then z goes unchecked; say so.
    WARN("case " << vc.name << " normalizes but has no final_normalizer");
  }
  if (!arrays.empty()) {
    throw std::runtime_error("case " + vc.name + ": unknown array '" + arrays.begin()->first +
                             "'");
  }
  return vc;
}

// Appends the cases of dir/manifest.json, or fills m->error.
void LoadManifest(const std::string& dir, Manifest* m) {
  try {
    std::ifstream in(dir + "/manifest.json");
    if (!in) throw std::runtime_error("cannot open " + dir + "/manifest.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    if (j.value("byte_order", std::string("little")) != "little") {
      throw std::runtime_error("byte_order is not little");
    }
    const size_t before = m->cases.size();
    for (const auto& c : j.at("cases")) m->cases.push_back(LoadCase(dir, c));
    if (m->cases.size() == before) throw std::runtime_error("manifest.json lists no cases");
  } catch (const std::exception& e) {
    m->error += std::string("conformance vectors in ") + dir + ": " + e.what() + "\n";
  }
}

const Manifest& GetManifest() {
  static const Manifest manifest = [] {
    Manifest m;
    LoadManifest(LUMEN_VECTORS_DIR, &m);
    LoadManifest(LUMEN_LAYER_VECTORS_DIR, &m);
    if (!m.error.empty()) m.cases.clear();
    return m;
  }();
  return manifest;
}

// Loads the manifest or fails the test (never skips).
const Manifest& RequireManifest() {
  const Manifest& m = GetManifest();
  INFO(m.error);
  REQUIRE(m.error.empty());
  REQUIRE(!m.cases.empty());
  return m;
}

int NumCases() {
  // Catch's range() needs a non-empty range; RequireManifest() has failed the test already
  // when there are no cases, so 1 only keeps GENERATE well-formed.
  const int n = static_cast<int>(GetManifest().cases.size());
  return n > 0 ? n : 1;
}

// Splits that cross and stay inside chunks (chunks are typically 64 tokens).
std::vector<std::vector<int64_t>> SplitsFor(int64_t T) {
  std::vector<std::vector<int64_t>> splits;
  if (T >= 65) splits.push_back({1, 63, T - 64});
  if (T >= 46) splits.push_back({5, 40, T - 45});
  if (T >= 2 && T < 46) splits.push_back({T / 2, T - T / 2});
  if (T >= 3 && T < 46) splits.push_back({1, 1, T - 2});
  // Inside a convolution's first W-1 tokens (W <= 4 in the vectors), then the rest.
  if (T >= 4) splits.push_back({2, 1, T - 3});
  return splits;
}

std::string SplitName(const std::vector<int64_t>& s) {
  std::ostringstream out;
  for (size_t i = 0; i < s.size(); ++i) out << (i ? "+" : "") << s[i];
  return out.str();
}

struct RunResult {
  std::vector<float> o, state, normalizer;
  std::vector<float> conv[3];
};

// A session of the case's layer holding the case's initial state and windows.
struct CaseSession {
  ModelPtr model;
  EnginePtr engine;
  std::vector<SessionPtr> sessions;
};

CaseSession OpenCase(const VectorCase& vc, int32_t num_sessions) {
  CaseSession cs;
  std::string error;
  cs.model = BuildModel({vc.layer}, &error);
  INFO(error);
  REQUIRE(cs.model);
  cs.engine = MakeEngine(cs.model.get(), 0, &error);
  REQUIRE(cs.engine);
  for (int32_t i = 0; i < num_sessions; ++i) {
    cs.sessions.push_back(MakeSession(cs.engine.get(), &error));
    REQUIRE(cs.sessions.back());
    lumen_session* s = cs.sessions.back().get();
    lumen_status st = WriteState(s, 0, vc.layer, vc.initial_state, vc.initial_normalizer);
    if (st == LUMEN_OK) st = WriteConvState(s, 0, vc.layer, vc.initial_conv);
    INFO("write_state: " << (st == LUMEN_OK ? std::string() : LastError(st)));
    REQUIRE(st == LUMEN_OK);
  }
  return cs;
}

// Reads everything a session holds after a case, and checks its token count.
RunResult ReadResult(const VectorCase& vc, const lumen_session* session,
                     std::vector<float> o) {
  RunResult r;
  r.o = std::move(o);
  lumen_status st = ReadState(session, 0, vc.layer, &r.state, &r.normalizer);
  if (st == LUMEN_OK) st = ReadConvState(session, 0, vc.layer, r.conv);
  INFO("read_state: " << (st == LUMEN_OK ? std::string() : LastError(st)));
  REQUIRE(st == LUMEN_OK);
  int64_t count = -1;
  REQUIRE(lumen_session_tokens(session, 0, &count) == LUMEN_OK);
  CHECK(count == vc.num_tokens);
  return r;
}

// Runs a case through a fresh session: loads the initial state (normalizer, conv windows),
// feeds the case's tokens in `dtype` along `path`, and reads everything back.
RunResult RunCase(const VectorCase& vc, const TokenData& tokens, int32_t in_dtype,
                  int32_t out_dtype, Path path, const std::vector<int64_t>& splits) {
  CaseSession cs = OpenCase(vc, 1);
  const EncodedTokens encoded = EncodeTokens(tokens, in_dtype);
  OutputBuffer out;
  std::string error;
  const lumen_status st = RunSession(cs.sessions[0].get(), 0, vc.layer, encoded, path, splits,
                                     out_dtype, &out, &error);
  INFO(error);
  REQUIRE(st == LUMEN_OK);
  return ReadResult(vc, cs.sessions[0].get(), out.Values());
}

void CheckAgainst(const VectorCase& vc, const RunResult& r, const std::vector<double>& o,
                  const std::vector<double>& state, const std::vector<double>& normalizer,
                  bool check_normalizer, double bound) {
  const ErrorReport eo = Measure(r.o, o);
  INFO("o: " << eo.Describe() << " bound " << bound);
  CHECK(eo.Passes(bound));
  const ErrorReport es = Measure(r.state, state);
  INFO("final_state: " << es.Describe() << " bound " << bound);
  CHECK(es.Passes(bound));
  if (check_normalizer) {
    const ErrorReport ez = Measure(r.normalizer, normalizer);
    INFO("final_normalizer: " << ez.Describe() << " bound " << bound);
    CHECK(ez.Passes(bound));
  }
  for (int part = 0; part < 3 && vc.layer.conv_size > 0; ++part) {
    const ErrorReport ec = Measure(r.conv[part], vc.final_conv[part]);
    INFO("final_conv part " << part << ": " << ec.Describe() << " bound " << bound);
    CHECK(ec.Passes(bound));
  }
}

void CheckAgainst(const VectorCase& vc, const RunResult& r, double bound) {
  CheckAgainst(vc, r, vc.o, vc.final_state, vc.final_normalizer, vc.has_final_normalizer,
               bound);
}

TEST_CASE("conformance vectors are present and readable", "[conformance]") {
  const Manifest& m = RequireManifest();
  // Every family appears at least once.
  std::map<int32_t, int> per_family;
  for (const VectorCase& c : m.cases) ++per_family[c.layer.family];
  for (int32_t f = LUMEN_FAMILY_LINEAR_ATTN; f <= LUMEN_FAMILY_KDA; ++f) {
    INFO("family " << f);
    CHECK(per_family[f] > 0);
  }
  // docs/spec.md §6: convolutions with and without activation and bias, and Mamba-2's skip.
  int conv = 0, conv_bias = 0, conv_none = 0, mamba2 = 0;
  for (const VectorCase& c : m.cases) {
    conv += c.layer.conv_size > 0;
    conv_bias += !c.layer.conv_bias[0].empty();
    conv_none += c.layer.conv_size > 0 && c.layer.conv_activation == LUMEN_CONV_ACTIVATION_NONE;
    mamba2 += c.layer.family == LUMEN_FAMILY_SSD && c.layer.gate_raw && !c.layer.d_skip.empty();
  }
  CHECK(conv > 0);
  CHECK(conv_bias > 0);
  CHECK(conv_none > 0);
  CHECK(mamba2 > 0);
}

TEST_CASE("float64 reference reproduces the conformance vectors", "[conformance][reference]") {
  const Manifest& m = RequireManifest();
  const VectorCase& vc = m.cases.at(GENERATE(range(0, NumCases())));
  INFO("case " << vc.name << ": " << vc.layer.Describe() << " T=" << vc.num_tokens);
  RefState state;
  state.matrix = ToDouble(vc.initial_state);
  state.normalizer = ToDouble(vc.initial_normalizer);
  for (int part = 0; part < 3; ++part) state.conv[part] = ToDouble(vc.initial_conv[part]);
  std::vector<double> o;
  RunReference(vc.layer, vc.num_tokens, ToRefInputs(vc.tokens, LUMEN_DTYPE_FLOAT32), &state,
               &o);
  // Two float64 implementations of the same recurrence: far tighter than docs/spec.md §4.
  constexpr double kBound = 1e-10;
  auto rel = [](const std::vector<double>& a, const std::vector<double>& b) {
    REQUIRE(a.size() == b.size());
    double d2 = 0.0, r2 = 0.0, max_abs = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      d2 += (a[i] - b[i]) * (a[i] - b[i]);
      r2 += b[i] * b[i];
      max_abs = std::max(max_abs, std::fabs(a[i] - b[i]));
      if (!std::isfinite(a[i])) return 1.0;
    }
    return max_abs <= 1e-12 ? 0.0 : std::sqrt(d2 / r2);
  };
  CHECK(rel(o, vc.o) <= kBound);
  CHECK(rel(state.matrix, vc.final_state) <= kBound);
  if (vc.has_final_normalizer) CHECK(rel(state.normalizer, vc.final_normalizer) <= kBound);
  for (int part = 0; part < 3 && vc.layer.conv_size > 0; ++part) {
    CHECK(rel(state.conv[part], vc.final_conv[part]) <= kBound);
  }
}

TEST_CASE("the reference's bf16 and fp16 rounding is round-to-nearest-even", "[reference]") {
  CHECK(FloatToHalf(1.0f) == 0x3c00);
  CHECK(FloatToHalf(-2.0f) == 0xc000);
  CHECK(FloatToHalf(65504.0f) == 0x7bff);
  CHECK(FloatToHalf(65519.0f) == 0x7bff);
  CHECK(FloatToHalf(65520.0f) == 0x7c00);                 // ties to even: infinity
  CHECK(FloatToHalf(std::ldexp(1.0f, -24)) == 0x0001);    // smallest subnormal
  CHECK(FloatToHalf(std::ldexp(1.0f, -25)) == 0x0000);    // tie to even: zero
  CHECK(FloatToHalf(std::ldexp(3.0f, -25)) == 0x0002);    // tie to even: 2
  CHECK(FloatToHalf(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);       // tie, even stays
  CHECK(FloatToHalf(1.0f + std::ldexp(3.0f, -11)) == 0x3c02);       // tie, odd rounds up
  CHECK(FloatToHalf(std::ldexp(1.0f, -14) * (1.0f - std::ldexp(1.0f, -12))) == 0x0400);
  CHECK(HalfToFloat(0x3555) == Approx(0.333251953125).epsilon(0));
  CHECK(HalfToFloat(0x0001) == std::ldexp(1.0f, -24));
  CHECK(FloatToBf16(1.0f) == 0x3f80);
  CHECK(FloatToBf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);        // tie, even stays
  CHECK(FloatToBf16(1.0f + std::ldexp(3.0f, -8)) == 0x3f82);        // tie, odd rounds up
  CHECK(FloatToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3f81);
  CHECK(Bf16ToFloat(0xc040) == -3.0f);
  for (float x : {0.1f, -1.7f, 123.456f, 3e-5f, -6e4f}) {
    INFO(x);
    CHECK(RoundTo(x, LUMEN_DTYPE_FLOAT16) == Approx(x).epsilon(1.0 / 2048 + 1e-7).margin(3e-8));
    CHECK(RoundTo(x, LUMEN_DTYPE_BFLOAT16) == Approx(x).epsilon(1.0 / 256 + 1e-7));
  }
}

TEST_CASE("conformance vectors: step path", "[conformance]") {
  const Manifest& m = RequireManifest();
  const VectorCase& vc = m.cases.at(GENERATE(range(0, NumCases())));
  INFO("case " << vc.name << ": " << vc.layer.Describe() << " T=" << vc.num_tokens
               << " path=step");
  const RunResult r =
      RunCase(vc, vc.tokens, LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_FLOAT32, Path::kStep, {});
  CheckAgainst(vc, r, kStepBound);
}

TEST_CASE("conformance vectors: one prefill", "[conformance]") {
  const Manifest& m = RequireManifest();
  const VectorCase& vc = m.cases.at(GENERATE(range(0, NumCases())));
  INFO("case " << vc.name << ": " << vc.layer.Describe() << " T=" << vc.num_tokens
               << " path=prefill");
  const RunResult r =
      RunCase(vc, vc.tokens, LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_FLOAT32, Path::kPrefill, {});
  CheckAgainst(vc, r, kPrefillBound);
}

TEST_CASE("conformance vectors: split prefills", "[conformance]") {
  const Manifest& m = RequireManifest();
  const VectorCase& vc = m.cases.at(GENERATE(range(0, NumCases())));
  const auto splits = SplitsFor(vc.num_tokens);
  if (splits.empty()) {
    SUCCEED("T = " << vc.num_tokens << " has no split");
    return;
  }
  for (const auto& split : splits) {
    INFO("case " << vc.name << ": " << vc.layer.Describe() << " T=" << vc.num_tokens
                 << " path=prefill " << SplitName(split));
    const RunResult r =
        RunCase(vc, vc.tokens, LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_FLOAT32, Path::kPrefill, split);
    CheckAgainst(vc, r, kPrefillBound);
  }
}

// bf16 and fp16 inputs: the case's inputs rounded, against the float64 reference run on the
// same rounded inputs (the vectors' outputs are for the float32 inputs).
TEST_CASE("conformance vectors: bf16 and fp16 inputs", "[conformance][half]") {
  const Manifest& m = RequireManifest();
  const VectorCase& vc = m.cases.at(GENERATE(range(0, NumCases())));
  const int32_t dtype = GENERATE(as<int32_t>{}, LUMEN_DTYPE_BFLOAT16, LUMEN_DTYPE_FLOAT16);
  // fp32 output, and output dtype = input dtype.
  const bool same_out = GENERATE(false, true);
  const int32_t out_dtype = same_out ? dtype : LUMEN_DTYPE_FLOAT32;

  RefState ref;
  ref.matrix = ToDouble(vc.initial_state);  // state stays fp32 (state_dtype FLOAT32)
  ref.normalizer = ToDouble(vc.initial_normalizer);
  for (int part = 0; part < 3; ++part) ref.conv[part] = ToDouble(vc.initial_conv[part]);
  std::vector<double> ref_o;
  RunReference(vc.layer, vc.num_tokens, ToRefInputs(vc.tokens, dtype), &ref, &ref_o);
  // The windows hold the rounded raw inputs: the reference's are the expected ones here.
  VectorCase rounded = vc;
  for (int part = 0; part < 3; ++part) rounded.final_conv[part] = ref.conv[part];

  for (Path path : {Path::kStep, Path::kPrefill}) {
    INFO("case " << vc.name << ": " << vc.layer.Describe() << " T=" << vc.num_tokens
                 << " inputs=" << (dtype == LUMEN_DTYPE_BFLOAT16 ? "bf16" : "fp16")
                 << " output=" << (same_out ? "same" : "fp32")
                 << " path=" << (path == Path::kStep ? "step" : "prefill"));
    const RunResult r = RunCase(vc, vc.tokens, dtype, out_dtype, path, {});
    CheckAgainst(rounded, r, ref_o, ref.matrix, ref.normalizer, vc.layer.HasNormalizer(),
                 kHalfBound);
  }
}

// Three sessions of the case in one engine, each at its own point of the sequence (session i
// first takes i tokens in a prefill), then batched steps over the sessions that still have
// tokens: every window and state must stay with its own session.
TEST_CASE("conformance vectors: batched steps", "[conformance][batch]") {
  const Manifest& m = RequireManifest();
  const VectorCase& vc = m.cases.at(GENERATE(range(0, NumCases())));
  INFO("case " << vc.name << ": " << vc.layer.Describe() << " T=" << vc.num_tokens
               << " path=step_batch");
  const int32_t n = 3;
  CaseSession cs = OpenCase(vc, n);
  const int64_t T = vc.num_tokens;
  const int64_t per_o = vc.layer.VPerToken();
  std::vector<OutputBuffer> outs(n);
  std::vector<int64_t> next(n, 0);  // the next token of each session
  std::string error;
  for (int32_t i = 0; i < n; ++i) {
    outs[i].Reset(T * per_o, LUMEN_DTYPE_FLOAT32);
    next[i] = std::min<int64_t>(i, T);
    if (next[i] == 0) continue;
    const EncodedTokens head = EncodeTokens(Slice(vc.layer, vc.tokens, 0, next[i]),
                                            LUMEN_DTYPE_FLOAT32);
    const lumen_layer_inputs in = InputsFor(vc.layer, head, 0, next[i]);
    lumen_layer_output o = outs[i].Output(0, next[i] * per_o);
    const lumen_status st = lumen_session_prefill(cs.sessions[i].get(), 0,
                                                  static_cast<int32_t>(next[i]), &in, &o);
    INFO(LastError(st));
    REQUIRE(st == LUMEN_OK);
  }
  for (;;) {
    std::vector<lumen_session*> batch;
    std::vector<int32_t> members;
    TokenData stacked;
    for (int32_t i = 0; i < n; ++i) {
      if (next[i] == T) continue;
      batch.push_back(cs.sessions[i].get());
      members.push_back(i);
      Append(&stacked, Slice(vc.layer, vc.tokens, next[i], 1));
    }
    if (batch.empty()) break;
    const int32_t count = static_cast<int32_t>(batch.size());
    const EncodedTokens enc = EncodeTokens(stacked, LUMEN_DTYPE_FLOAT32);
    const lumen_layer_inputs in = InputsFor(vc.layer, enc, 0, count);
    OutputBuffer out;
    out.Reset(count * per_o, LUMEN_DTYPE_FLOAT32);
    lumen_layer_output o = out.Output(0, count * per_o);
    const lumen_status st =
        lumen_engine_step_batch(cs.engine.get(), 0, batch.data(), count, &in, &o);
    INFO(LastError(st));
    REQUIRE(st == LUMEN_OK);
    const std::vector<uint8_t>& bytes = out.bytes;
    for (int32_t b = 0; b < count; ++b) {
      const int32_t i = members[b];
      std::memcpy(outs[i].bytes.data() + next[i] * per_o * 4, bytes.data() + b * per_o * 4,
                  per_o * 4);
      ++next[i];
    }
  }
  for (int32_t i = 0; i < n; ++i) {
    INFO("session " << i << " (first " << std::min<int64_t>(i, T) << " tokens in a prefill)");
    CheckAgainst(vc, ReadResult(vc, cs.sessions[i].get(), outs[i].Values()),
                 i == 0 ? kStepBound : kPrefillBound);
  }
}

// Three sessions through two variable-length prefills, each session split at its own point
// (inside the first W-1 tokens, and later), one of them getting no tokens in a call.
TEST_CASE("conformance vectors: variable-length prefills", "[conformance][varlen]") {
  const Manifest& m = RequireManifest();
  const VectorCase& vc = m.cases.at(GENERATE(range(0, NumCases())));
  const int64_t T = vc.num_tokens;
  const std::vector<int64_t> first = {std::min<int64_t>(1, T), T, T / 2};
  INFO("case " << vc.name << ": " << vc.layer.Describe() << " T=" << T << " path=varlen "
               << first[0] << "/" << first[1] << "/" << first[2] << " then the rest");
  const int32_t n = static_cast<int32_t>(first.size());
  CaseSession cs = OpenCase(vc, n);
  std::vector<lumen_session*> handles;
  for (const SessionPtr& s : cs.sessions) handles.push_back(s.get());
  const int64_t per_o = vc.layer.VPerToken();
  std::vector<OutputBuffer> outs(n);
  for (OutputBuffer& out : outs) out.Reset(T * per_o, LUMEN_DTYPE_FLOAT32);
  for (int call = 0; call < 2; ++call) {
    TokenData all;
    std::vector<int32_t> cu_seqlens = {0};
    std::vector<int64_t> starts(n);
    for (int32_t i = 0; i < n; ++i) {
      starts[i] = call == 0 ? 0 : first[i];
      const int64_t length = call == 0 ? first[i] : T - first[i];
      Append(&all, Slice(vc.layer, vc.tokens, starts[i], length));
      cu_seqlens.push_back(cu_seqlens.back() + static_cast<int32_t>(length));
    }
    const int64_t total = all.num_tokens;
    const EncodedTokens enc = EncodeTokens(all, LUMEN_DTYPE_FLOAT32);
    const lumen_layer_inputs in = InputsFor(vc.layer, enc, 0, total);
    OutputBuffer out;
    out.Reset(total * per_o, LUMEN_DTYPE_FLOAT32);
    lumen_layer_output o = out.Output(0, total * per_o);
    const lumen_status st = lumen_engine_prefill_varlen(cs.engine.get(), 0, handles.data(), n,
                                                        cu_seqlens.data(), &in, &o);
    INFO("call " << call << ": " << LastError(st));
    REQUIRE(st == LUMEN_OK);
    for (int32_t i = 0; i < n; ++i) {
      const int64_t length = cu_seqlens[i + 1] - cu_seqlens[i];
      std::memcpy(outs[i].bytes.data() + starts[i] * per_o * 4,
                  out.bytes.data() + cu_seqlens[i] * per_o * 4, length * per_o * 4);
    }
  }
  for (int32_t i = 0; i < n; ++i) {
    INFO("session " << i);
    CheckAgainst(vc, ReadResult(vc, cs.sessions[i].get(), outs[i].Values()), kPrefillBound);
  }
}

}  // namespace
}  // namespace lumen_test
