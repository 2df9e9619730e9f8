// RunRecurrent and RunChunkwise against a float64 recurrence, one value head at a time.

#include "backends/cpu/head_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "backends/cpu/kernel_table.h"

namespace lumen::cpu {
namespace {

constexpr double kRecurrentBound = 1e-5;  // docs/spec.md §4, fp32 inputs
constexpr double kChunkwiseBound = 1e-4;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// How strongly the gate decays: fla-like log(uniform(0.9, 1)); uniform(-5, 0) per token
// plus one token of -100 (in half the channels for a vector gate); realistic with one token
// in ten at uniform(-8, -3); or extreme, down to -40 per token: by channel (a vector gate)
// or by token (a scalar gate), runs of 8 tokens at uniform(-40, -10) then 8 mild ones (so
// mild decays follow a cumulative log-decay of hundreds, where a difference of cumulative
// sums would lose precision), steady uniform(-40, -20), mild, and uniform(-40, 0).
enum class Decay { kRealistic, kStrong, kMixed, kExtreme };

struct Config {
  std::string name;
  HeadRule rule;
  Decay decay = Decay::kRealistic;
};

std::vector<Config> AllConfigs() {
  std::vector<Config> configs;
  for (GateKind gate : {GateKind::kNone, GateKind::kScalar, GateKind::kPerChannel}) {
    for (bool delta : {false, true}) {
      const char* gate_name = gate == GateKind::kNone     ? "none"
                              : gate == GateKind::kScalar ? "scalar"
                                                          : "vector";
      const std::string base = std::string(gate_name) + (delta ? "/delta" : "/additive");
      HeadRule rule;
      rule.gate = gate;
      rule.delta = delta;
      if (gate == GateKind::kNone) {
        configs.push_back({base, rule, Decay::kRealistic});
      } else {
        configs.push_back({base + "/realistic", rule, Decay::kRealistic});
        configs.push_back({base + "/strong", rule, Decay::kStrong});
        configs.push_back({base + "/mixed", rule, Decay::kMixed});
      }
    }
  }
  HeadRule linear_attn;
  linear_attn.normalize = true;
  configs.push_back({"none/additive/normalize", linear_attn, Decay::kRealistic});
  return configs;
}

int32_t GateWidth(GateKind gate, int32_t key_dim) {
  return gate == GateKind::kNone ? 0 : gate == GateKind::kScalar ? 1 : key_dim;
}

// Dense inputs of one head.
struct Problem {
  HeadRule rule;
  int32_t num_tokens = 0, key_dim = 0, value_dim = 0;
  std::vector<float> q, k, v, g, beta;  // [T, K], [T, K], [T, V], [T, G], [T]
  std::vector<float> state;             // [K, V]
  std::vector<float> normalizer;        // [K] with normalize
};

Problem MakeProblem(const Config& config, int32_t t_count, int32_t key_dim, int32_t value_dim,
                    std::mt19937_64& rng) {
  Problem p;
  p.rule = config.rule;
  p.num_tokens = t_count;
  p.key_dim = key_dim;
  p.value_dim = value_dim;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(key_dim));
  const bool positive = config.rule.normalize;  // like elu1 features: q . z stays > 0
  auto draw = [&](float mul) { return positive ? mul * unit(rng) : mul * normal(rng); };

  p.q.resize(static_cast<size_t>(t_count) * key_dim);
  p.k.resize(p.q.size());
  for (float& x : p.q) x = draw(scale);
  for (float& x : p.k) x = draw(1.0f);
  if (config.rule.delta) {  // the delta rule expects unit-norm keys
    for (int32_t t = 0; t < t_count; ++t) {
      float* k = p.k.data() + t * key_dim;
      double norm = 0.0;
      for (int32_t i = 0; i < key_dim; ++i) norm += double(k[i]) * k[i];
      const float inv = static_cast<float>(1.0 / std::sqrt(norm));
      for (int32_t i = 0; i < key_dim; ++i) k[i] *= inv;
    }
  }
  p.v.resize(static_cast<size_t>(t_count) * value_dim);
  for (float& x : p.v) x = normal(rng);

  const int32_t width = GateWidth(config.rule.gate, key_dim);
  p.g.resize(static_cast<size_t>(t_count) * width);
  std::uniform_real_distribution<float> mild(0.9f, 1.0f);
  std::uniform_real_distribution<float> strong(-5.0f, 0.0f);
  std::uniform_real_distribution<float> spike(-8.0f, -3.0f);
  for (float& x : p.g) {
    switch (config.decay) {
      case Decay::kRealistic: x = std::log(mild(rng)); break;
      case Decay::kStrong: x = strong(rng); break;
      case Decay::kMixed: x = unit(rng) < 0.1f ? spike(rng) : std::log(mild(rng)); break;
      case Decay::kExtreme: break;
    }
  }
  if (config.decay == Decay::kExtreme) {
    std::uniform_real_distribution<float> runs(-40.0f, -10.0f), steady(-40.0f, -20.0f),
        any(-40.0f, 0.0f);
    for (int32_t t = 0; t < t_count; ++t) {
      for (int32_t i = 0; i < width; ++i) {
        const int32_t pattern = width == 1 ? (t / 32) % 4 : i % 4;
        float& x = p.g[t * width + i];
        switch (pattern) {
          case 0: x = (t / 8) % 2 == 0 ? runs(rng) : std::log(mild(rng)); break;
          case 1: x = steady(rng); break;
          case 2: x = std::log(mild(rng)); break;
          default: x = any(rng); break;
        }
      }
    }
  }
  if (config.decay == Decay::kStrong) {
    const int32_t t = t_count / 3;
    for (int32_t i = 0; i < width; i += (width > 1 ? 2 : 1)) p.g[t * width + i] = -100.0f;
  }
  if (config.rule.delta) {
    p.beta.resize(t_count);
    std::uniform_real_distribution<float> open(0.01f, 0.99f);
    for (float& x : p.beta) x = open(rng);
  }
  p.state.resize(static_cast<size_t>(key_dim) * value_dim);
  for (float& x : p.state) x = positive ? unit(rng) : 0.5f * normal(rng);
  if (config.rule.normalize) {
    p.normalizer.resize(key_dim);
    for (float& x : p.normalizer) x = 1.0f + unit(rng);
  }
  return p;
}

struct ReferenceResult {
  std::vector<double> o;           // [T, V]
  std::vector<double> state;       // [K, V]
  std::vector<double> normalizer;  // [K]
};

// docs/spec.md §2 in float64, one token at a time.
ReferenceResult Reference(const Problem& p) {
  const int32_t key_dim = p.key_dim, value_dim = p.value_dim;
  const int32_t width = GateWidth(p.rule.gate, key_dim);
  ReferenceResult r;
  r.o.assign(static_cast<size_t>(p.num_tokens) * value_dim, 0.0);
  r.state.assign(p.state.begin(), p.state.end());
  r.normalizer.assign(p.normalizer.begin(), p.normalizer.end());
  std::vector<double> kv(value_dim);
  for (int32_t t = 0; t < p.num_tokens; ++t) {
    const float* q = p.q.data() + t * key_dim;
    const float* k = p.k.data() + t * key_dim;
    const float* v = p.v.data() + t * value_dim;
    for (int32_t i = 0; i < key_dim; ++i) {
      const double a =
          width == 0 ? 1.0 : std::exp(double(p.g[t * width + (width == 1 ? 0 : i)]));
      for (int32_t j = 0; j < value_dim; ++j) r.state[i * value_dim + j] *= a;
    }
    std::vector<double> write(v, v + value_dim);
    if (p.rule.delta) {
      std::fill(kv.begin(), kv.end(), 0.0);
      for (int32_t i = 0; i < key_dim; ++i)
        for (int32_t j = 0; j < value_dim; ++j) kv[j] += k[i] * r.state[i * value_dim + j];
      for (int32_t j = 0; j < value_dim; ++j) write[j] = p.beta[t] * (v[j] - kv[j]);
    }
    for (int32_t i = 0; i < key_dim; ++i)
      for (int32_t j = 0; j < value_dim; ++j) r.state[i * value_dim + j] += k[i] * write[j];
    double* o = r.o.data() + t * value_dim;
    for (int32_t i = 0; i < key_dim; ++i)
      for (int32_t j = 0; j < value_dim; ++j) o[j] += q[i] * r.state[i * value_dim + j];
    if (p.rule.normalize) {
      double den = p.rule.normalize_eps;
      for (int32_t i = 0; i < key_dim; ++i) {
        r.normalizer[i] += k[i];
        den += q[i] * r.normalizer[i];
      }
      for (int32_t j = 0; j < value_dim; ++j) o[j] /= den;
    }
  }
  return r;
}

// The problem laid out with `pad` floats of NaN after every token's row, so a kernel that
// ignores a stride reads NaN; output rows are NaN-poisoned, padding included.
struct Layout {
  std::vector<float> q, k, v, g, beta, o;
  HeadSequence seq;
};

std::vector<float> Spread(const std::vector<float>& dense, int32_t rows, int32_t width,
                          int64_t stride) {
  std::vector<float> out(static_cast<size_t>(rows) * stride + 1, kNaN);
  for (int32_t t = 0; t < rows; ++t) {
    std::copy(dense.begin() + int64_t(t) * width, dense.begin() + int64_t(t + 1) * width,
              out.begin() + t * stride);
  }
  return out;
}

Layout MakeLayout(const Problem& p, int32_t pad) {
  Layout l;
  HeadSequence& s = l.seq;
  s.num_tokens = p.num_tokens;
  s.key_dim = p.key_dim;
  s.value_dim = p.value_dim;
  s.q_stride = p.key_dim + pad;
  s.k_stride = p.key_dim + 2 * pad;
  s.v_stride = p.value_dim + pad;
  s.o_stride = p.value_dim + 3 * pad;
  l.q = Spread(p.q, p.num_tokens, p.key_dim, s.q_stride);
  l.k = Spread(p.k, p.num_tokens, p.key_dim, s.k_stride);
  l.v = Spread(p.v, p.num_tokens, p.value_dim, s.v_stride);
  l.o.assign(static_cast<size_t>(p.num_tokens) * s.o_stride + 1, kNaN);
  s.q = l.q.data();
  s.k = l.k.data();
  s.v = l.v.data();
  s.o = l.o.data();
  const int32_t width = GateWidth(p.rule.gate, p.key_dim);
  if (width > 0) {
    s.g_stride = width + pad;
    l.g = Spread(p.g, p.num_tokens, width, s.g_stride);
    s.g = l.g.data();
  }
  if (p.rule.delta) {
    s.beta_stride = 1 + pad;
    l.beta = Spread(p.beta, p.num_tokens, 1, s.beta_stride);
    s.beta = l.beta.data();
  }
  return l;
}

// The tokens [begin, begin + count) of a sequence.
HeadSequence Slice(const HeadSequence& s, int32_t begin, int32_t count) {
  HeadSequence out = s;
  out.num_tokens = count;
  out.q += begin * s.q_stride;
  out.k += begin * s.k_stride;
  out.v += begin * s.v_stride;
  out.o += begin * s.o_stride;
  if (out.g) out.g += begin * s.g_stride;
  if (out.beta) out.beta += begin * s.beta_stride;
  return out;
}

// Dense [T, V] outputs; fails the test if a kernel wrote into the padding between rows.
std::vector<float> Gather(const Layout& l) {
  const HeadSequence& s = l.seq;
  std::vector<float> dense(static_cast<size_t>(s.num_tokens) * s.value_dim);
  bool padding_untouched = true;
  for (int32_t t = 0; t < s.num_tokens; ++t) {
    const float* row = l.o.data() + t * s.o_stride;
    std::copy(row, row + s.value_dim, dense.begin() + int64_t(t) * s.value_dim);
    for (int64_t j = s.value_dim; j < s.o_stride; ++j) padding_untouched &= std::isnan(row[j]);
  }
  CHECK(padding_untouched);
  return dense;
}

// ||out - ref|| / ||ref||; infinity when out holds a NaN or an infinity.
double RelativeRms(const std::vector<float>& out, const std::vector<double>& ref) {
  REQUIRE(out.size() == ref.size());
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
    err += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  if (norm == 0.0) return err == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(err / norm);
}

double MaxAbs(const std::vector<float>& out, const std::vector<double>& ref) {
  double worst = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(out[i] - ref[i]));
  }
  return worst;
}

// docs/spec.md §4: pass on relative RMS, or on max-abs <= 1e-6; NaN never passes.
bool Passes(const std::vector<float>& out, const std::vector<double>& ref, double bound) {
  return RelativeRms(out, ref) <= bound || MaxAbs(out, ref) <= 1e-6;
}

struct Result {
  std::vector<float> o, state, normalizer;
};

enum class Form { kRecurrent, kChunkwise };

// When the recurrent form's held write (the delta rule's) goes into the state: at the end
// only, or also where a run is split.
enum class Apply { kAtEnd, kAtSplit };

// Runs the problem through one form, as one call or split at `split` (0: one call): through
// the library's entry points, or straight through one level's kernels (`level`).
Result RunForm(Form form, const Problem& p, int32_t pad, int32_t split,
               ChunkWorkspace* workspace, Apply apply = Apply::kAtEnd,
               const KernelTable* level = nullptr) {
  Layout layout = MakeLayout(p, pad);
  Result r{{}, p.state, p.normalizer};
  float* normalizer = p.rule.normalize ? r.normalizer.data() : nullptr;
  std::vector<float> held_k(p.key_dim, kNaN), held_u(p.value_dim, kNaN);
  HeldWrite write{held_k.data(), held_u.data(), false};
  // The chunkwise form carries its state across a split as a prefill's slices do.
  ChunkState chunk_state{r.state.data(), false};
  auto run = [&](const HeadSequence& seq, int64_t tokens_after) {
    if (form == Form::kRecurrent) {
      if (level == nullptr) {
        RunRecurrent(p.rule, seq, r.state.data(), normalizer, &write);
      } else {
        level->run_recurrent(p.rule, seq, r.state.data(), normalizer, &write);
      }
    } else if (level == nullptr) {
      RunChunkwise(p.rule, seq, tokens_after, &chunk_state, normalizer, workspace);
    } else {
      ReserveChunkWorkspace(p.key_dim, p.value_dim, workspace);
      level->run_chunkwise(p.rule, seq, tokens_after, &chunk_state, normalizer, workspace);
    }
  };
  auto apply_held = [&] {
    if (level == nullptr) {
      ApplyHeldWrite(p.key_dim, p.value_dim, r.state.data(), &write);
    } else if (write.held) {
      level->apply_held_write(p.key_dim, p.value_dim, write, r.state.data());
      write.held = false;
    }
  };
  if (split <= 0 || split >= p.num_tokens) {
    run(layout.seq, 0);
  } else {
    run(Slice(layout.seq, 0, split), p.num_tokens - split);
    if (apply == Apply::kAtSplit) apply_held();
    run(Slice(layout.seq, split, p.num_tokens - split), 0);
  }
  CHECK_FALSE(chunk_state.in_panels);
  // Only the recurrent form of the delta rule holds a write, and only after a token.
  CHECK(write.held == (form == Form::kRecurrent && p.rule.delta && p.num_tokens > 0));
  apply_held();
  r.o = Gather(layout);
  return r;
}

struct Worst {
  double o = 0.0, state = 0.0, normalizer = 0.0;
  void Update(const Result& r, const ReferenceResult& ref) {
    o = std::max(o, RelativeRms(r.o, ref.o));
    state = std::max(state, RelativeRms(r.state, ref.state));
    if (!ref.normalizer.empty()) {
      normalizer = std::max(normalizer, RelativeRms(r.normalizer, ref.normalizer));
    }
  }
};

void CheckAgainst(const Result& r, const ReferenceResult& ref, double bound) {
  CHECK(Passes(r.o, ref.o, bound));
  CHECK(Passes(r.state, ref.state, bound));
  if (!ref.normalizer.empty()) CHECK(Passes(r.normalizer, ref.normalizer, bound));
}

// Around one chunk's end, then several chunks with a partial last one.
const int32_t kTokenCounts[] = {1, 19, kChunkSize - 1, kChunkSize, kChunkSize + 1, 130, 200};
const std::pair<int32_t, int32_t> kHeadDims[] = {  // {K, V}
    {1, 1}, {8, 19}, {19, 8}, {64, 64}, {19, 128}, {128, 19}, {128, 128}};

TEST_CASE("Both forms match the float64 recurrence", "[kernels][cpu]") {
  std::mt19937_64 rng(0x5eed0001);
  ChunkWorkspace workspace;
  for (const Config& config : AllConfigs()) {
    Worst recurrent, chunkwise;
    int case_index = 0;
    for (int32_t t_count : kTokenCounts) {
      for (auto [key_dim, value_dim] : kHeadDims) {
        const Problem p = MakeProblem(config, t_count, key_dim, value_dim, rng);
        const ReferenceResult ref = Reference(p);
        const int32_t pad = (case_index++ % 2) ? 5 : 0;  // every other case strided
        INFO(config.name << " T=" << t_count << " K=" << key_dim << " V=" << value_dim
                         << " pad=" << pad);
        const Result rec = RunForm(Form::kRecurrent, p, pad, 0, &workspace);
        const Result chunk = RunForm(Form::kChunkwise, p, pad, 0, &workspace);
        {
          INFO("recurrent");
          CheckAgainst(rec, ref, kRecurrentBound);
        }
        {
          INFO("chunkwise");
          CheckAgainst(chunk, ref, kChunkwiseBound);
        }
        recurrent.Update(rec, ref);
        chunkwise.Update(chunk, ref);
      }
    }
    std::printf("%-26s worst rel RMS: recurrent o %.1e S %.1e | chunkwise o %.1e S %.1e",
                config.name.c_str(), recurrent.o, recurrent.state, chunkwise.o,
                chunkwise.state);
    if (config.rule.normalize) {
      std::printf(" | z %.1e %.1e", recurrent.normalizer, chunkwise.normalizer);
    }
    std::printf("\n");
  }
}

// The baseline's results as the reference another level's are held to.
ReferenceResult AsReference(const Result& r) {
  return {std::vector<double>(r.o.begin(), r.o.end()),
          std::vector<double>(r.state.begin(), r.state.end()),
          std::vector<double>(r.normalizer.begin(), r.normalizer.end())};
}

TEST_CASE("Every SIMD level the CPU runs matches the baseline and the float64 recurrence",
          "[kernels][cpu][levels]") {
  const KernelTable* baseline = KernelsAt(KernelLevel::kBaseline);
  REQUIRE(baseline != nullptr);
  std::vector<std::pair<const char*, const KernelTable*>> levels;
  if (CpuKernelLevel() >= KernelLevel::kAvx2) {
    levels.push_back({"avx2", KernelsAt(KernelLevel::kAvx2)});
  }
  if (CpuKernelLevel() >= KernelLevel::kAvx512) {
    levels.push_back({"avx512", KernelsAt(KernelLevel::kAvx512)});
  }
  std::printf("levels compared with the baseline:");
  for (const auto& level : levels) std::printf(" %s", level.first);
  std::printf("%s\n", levels.empty() ? " none (the CPU or LUMEN_CPU_MAX_LEVEL has no other)" : "");
  std::mt19937_64 rng(0x5eed0005);
  ChunkWorkspace workspace;
  const int32_t token_counts[] = {1, kChunkSize + 1, 130};
  const std::pair<int32_t, int32_t> head_dims[] = {{8, 19}, {64, 64}, {128, 128}};
  for (const Config& config : AllConfigs()) {
    for (int32_t t_count : token_counts) {
      for (auto [key_dim, value_dim] : head_dims) {
        const Problem p = MakeProblem(config, t_count, key_dim, value_dim, rng);
        const ReferenceResult ref = Reference(p);
        const int32_t pad = t_count % 2 ? 3 : 0;
        const ReferenceResult base_rec = AsReference(
            RunForm(Form::kRecurrent, p, pad, 0, &workspace, Apply::kAtEnd, baseline));
        const ReferenceResult base_chunk = AsReference(
            RunForm(Form::kChunkwise, p, pad, 0, &workspace, Apply::kAtEnd, baseline));
        for (const auto& [name, table] : levels) {
          REQUIRE(table != nullptr);
          INFO(name << " " << config.name << " T=" << t_count << " K=" << key_dim
                    << " V=" << value_dim);
          const Result rec =
              RunForm(Form::kRecurrent, p, pad, 0, &workspace, Apply::kAtEnd, table);
          const Result chunk =
              RunForm(Form::kChunkwise, p, pad, 0, &workspace, Apply::kAtEnd, table);
          CheckAgainst(rec, base_rec, kRecurrentBound);
          CheckAgainst(rec, ref, kRecurrentBound);
          CheckAgainst(chunk, base_chunk, kChunkwiseBound);
          CheckAgainst(chunk, ref, kChunkwiseBound);
        }
      }
    }
  }
}

TEST_CASE("Log-decays down to -40 per token keep whole chunks and precision",
          "[kernels][cpu]") {
  std::mt19937_64 rng(0x5eed0005);
  for (GateKind gate : {GateKind::kScalar, GateKind::kPerChannel}) {
    for (bool delta : {false, true}) {
      Config config;
      config.rule.gate = gate;
      config.rule.delta = delta;
      config.decay = Decay::kExtreme;
      for (int32_t t_count : {2 * kChunkSize, 200}) {
        for (auto [key_dim, value_dim] : {std::pair<int32_t, int32_t>{19, 8}, {128, 32}}) {
          const Problem p = MakeProblem(config, t_count, key_dim, value_dim, rng);
          INFO((gate == GateKind::kScalar ? "scalar" : "vector")
               << (delta ? "/delta" : "/additive") << " T=" << t_count << " K=" << key_dim);
          ChunkWorkspace workspace;
          const Result chunk = RunForm(Form::kChunkwise, p, 1, 0, &workspace);
          CheckAgainst(chunk, Reference(p), kChunkwiseBound);
          CHECK(workspace.chunks_run == (t_count + kChunkSize - 1) / kChunkSize);
        }
      }
    }
  }
}

TEST_CASE("A split run equals one run", "[kernels][cpu]") {
  std::mt19937_64 rng(0x5eed0002);
  ChunkWorkspace workspace;
  // Long enough that the chunkwise state moves to the chunk layout in the first call (at
  // least kChunksToMoveState chunks follow its first chunk) and back in the second.
  const int32_t t_count = 200;
  for (const Config& config : AllConfigs()) {
    const Problem p = MakeProblem(config, t_count, 19, 40, rng);
    const ReferenceResult ref = Reference(p);
    const Result rec_whole = RunForm(Form::kRecurrent, p, 3, 0, &workspace);
    const Result chunk_whole = RunForm(Form::kChunkwise, p, 3, 0, &workspace);
    for (int32_t split :
         {1, 17, kChunkSize - 1, kChunkSize, kChunkSize + 1, 43, 100, 129, 190}) {
      INFO(config.name << " split=" << split);
      // The recurrent form does the same arithmetic however the tokens are split, and
      // whether or not the delta rule's held write goes into the state at the split.
      for (Apply apply : {Apply::kAtEnd, Apply::kAtSplit}) {
        INFO("applied at the split: " << (apply == Apply::kAtSplit));
        const Result rec = RunForm(Form::kRecurrent, p, 3, split, &workspace, apply);
        CHECK(rec.o == rec_whole.o);
        CHECK(rec.state == rec_whole.state);
        CHECK(rec.normalizer == rec_whole.normalizer);
      }
      // The chunkwise form's chunk boundaries move with the split; it must still agree.
      const Result chunk = RunForm(Form::kChunkwise, p, 3, split, &workspace);
      CheckAgainst(chunk, ref, kChunkwiseBound);
      const ReferenceResult whole{
          {chunk_whole.o.begin(), chunk_whole.o.end()},
          {chunk_whole.state.begin(), chunk_whole.state.end()},
          {chunk_whole.normalizer.begin(), chunk_whole.normalizer.end()}};
      CheckAgainst(chunk, whole, kChunkwiseBound);
    }
  }
}

TEST_CASE("Strides wider than a row are honoured", "[kernels][cpu]") {
  // q_stride = 2K and so on: another head's worth of NaN sits between consecutive tokens.
  std::mt19937_64 rng(0x5eed0003);
  ChunkWorkspace workspace;
  for (const Config& config : AllConfigs()) {
    const Problem p = MakeProblem(config, 70, 16, 16, rng);
    const ReferenceResult ref = Reference(p);
    INFO(config.name);
    CheckAgainst(RunForm(Form::kRecurrent, p, 16, 0, &workspace), ref, kRecurrentBound);
    CheckAgainst(RunForm(Form::kChunkwise, p, 16, 0, &workspace), ref, kChunkwiseBound);
  }
}

TEST_CASE("Heads wider than the recurrent form's factor block match the recurrence",
          "[kernels][cpu]") {
  // K = 600 rows exceed the 512 whose per-row decays the recurrent form keeps at once, so
  // it computes them block by block; V = 37 leaves a partial tile at every SIMD level.
  std::mt19937_64 rng(0x5eed0005);
  ChunkWorkspace workspace;
  for (const Config& config : AllConfigs()) {
    const Problem p = MakeProblem(config, 5, 600, 37, rng);
    const ReferenceResult ref = Reference(p);
    INFO(config.name);
    CheckAgainst(RunForm(Form::kRecurrent, p, 3, 0, &workspace), ref, kRecurrentBound);
  }
}

TEST_CASE("An empty sequence leaves the state alone", "[kernels][cpu]") {
  std::mt19937_64 rng(0x5eed0004);
  ChunkWorkspace workspace;
  Config config = AllConfigs().back();  // linear attention with the normalizer
  Problem p = MakeProblem(config, 1, 8, 8, rng);
  Layout layout = MakeLayout(p, 0);
  layout.seq.num_tokens = 0;
  std::vector<float> state = p.state, normalizer = p.normalizer;
  RunRecurrent(p.rule, layout.seq, state.data(), normalizer.data(), nullptr);
  ChunkState chunk_state{state.data(), false};
  RunChunkwise(p.rule, layout.seq, 0, &chunk_state, normalizer.data(), &workspace);
  CHECK(state == p.state);
  CHECK(normalizer == p.normalizer);
}

}  // namespace
}  // namespace lumen::cpu
