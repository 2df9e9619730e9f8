#include "src/cli/cpu_bench.h"

#include <lumen/lumen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "src/cli/bench_anchors.h"
#include "src/cli/lumen_handles.h"

namespace lumen::cli {
namespace {

// The shape: HV = 32 heads of K = V = 128, fp32 state (2 MiB per session).
constexpr int32_t kHeads = 32;
constexpr int32_t kKeyDim = 128;
constexpr int32_t kValueDim = 128;
constexpr int64_t kStateBytes = int64_t{kHeads} * kKeyDim * kValueDim * 4;
// Chunk length the prefill's nominal flop count assumes (lumen's kChunkSize on the CPU).
constexpr double kChunk = 32;
// Tokens of the token-by-token loop that prefill is compared with.
constexpr int32_t kTokenLoopTokens = 256;
// Bytes a misaligned buffer starts after a cache line, as malloc often gives.
constexpr int64_t kMisalignBytes = 16;

[[noreturn]] void Fail(const std::string& message) { FailAs("lumen bench", message); }
void Check(lumen_status status, const char* call) { CheckAs("lumen bench", status, call); }

// ---------------------------------------------------------------------------------------
// Options

struct Options {
  bool quick = false;
  bool bf16 = false;
  int32_t repeats = 5;
  double min_seconds = 0.05;  // per repeat
  std::vector<std::string> families;
  std::vector<int64_t> threads{1, 2};
  std::vector<int64_t> sessions{1, 8, 64};
  std::vector<int64_t> tokens{1024, 2048, 4096, 8192, 16384};
  std::vector<int64_t> misalign{0, kMisalignBytes};
  bool decode = true;
  bool prefill = true;
};

// Whether --families names this family (no --families: every family).
bool Selected(const Options& options, const char* family) {
  return options.families.empty() ||
         std::find(options.families.begin(), options.families.end(), family) !=
             options.families.end();
}

void PrintUsage(std::FILE* to) {
  std::fprintf(
      to,
      "usage: lumen bench --cpu [--quick] [--bf16] [--families a,b] [--threads 1,2]\n"
      "                   [--sessions 1,8,64] [--tokens 1024,...] [--aligned-only]\n"
      "                   [--decode-only | --prefill-only] [--repeats R]\n"
      "\n"
      "Decode (lumen_engine_step_batch over N sessions) and prefill (lumen_session_prefill of\n"
      "T tokens) of every family at HV = 32, K = V = 128, fp32 state, with the caller's\n"
      "buffers on a cache line and 16 bytes off one. Beside them, measured in the same run:\n"
      "memcpy and an in-place read-modify-write pass (RMW) over the same bytes of state, a\n"
      "read pass then the RMW pass over each head's state (2-pass: the traffic of a delta\n"
      "rule that reads a head before it writes it; lumen's holds its write back instead),\n"
      "the fp32 matrix-product peak of a register-blocked sgemm (again in turn with each\n"
      "prefill cell's repeats, its ratios' anchor), and lumen_session_step token by token.\n"
      "Times are the best of R repeats (default 5), with the spread worst/best - 1.\n"
      "Inputs and output are fp32; --bf16 gives them in bf16 (the state stays fp32).\n"
      "--quick runs a few small cases once (a smoke test; its numbers mean nothing).\n");
}

std::vector<int64_t> ParseList(const std::string& flag, const std::string& text) {
  std::vector<int64_t> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    char* end = nullptr;
    const long long value = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || value < 1 || value > (1 << 20)) {
      Fail("bad value '" + item + "' in " + flag);
    }
    values.push_back(value);
  }
  if (values.empty()) Fail("empty list for " + flag);
  return values;
}

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Fail("missing value for " + flag);
      return argv[++i];
    };
    if (flag == "--cpu") {
    } else if (flag == "--quick") {
      options.quick = true;
    } else if (flag == "--bf16") {
      options.bf16 = true;
    } else if (flag == "--aligned-only") {
      options.misalign = {0};
    } else if (flag == "--decode-only") {
      options.prefill = false;
    } else if (flag == "--prefill-only") {
      options.decode = false;
    } else if (flag == "--families") {
      std::stringstream stream(value());
      std::string name;
      while (std::getline(stream, name, ',')) options.families.push_back(name);
    } else if (flag == "--threads") {
      options.threads = ParseList(flag, value());
    } else if (flag == "--sessions") {
      options.sessions = ParseList(flag, value());
    } else if (flag == "--tokens") {
      options.tokens = ParseList(flag, value());
    } else if (flag == "--repeats") {
      options.repeats = static_cast<int32_t>(ParseList(flag, value())[0]);
    } else if (flag == "--help" || flag == "-h") {
      PrintUsage(stdout);
      std::exit(0);
    } else {
      PrintUsage(stderr);
      Fail("unknown option '" + flag + "'");
    }
  }
  if (options.quick) {
    options.repeats = 1;
    options.min_seconds = 0;
    options.sessions = {1, 2};
    options.tokens = {80};
  }
  return options;
}

// ---------------------------------------------------------------------------------------
// Families

struct FamilySetup {
  const char* name;
  lumen_family family;
  bool scalar_gate;  // g [T, HV]
  bool vector_gate;  // g [T, HV, K]
  bool gate_raw;     // g raw, with A_log and dt_bias (as the models run it)
  bool delta;        // beta, qk_l2norm and beta_sigmoid
};

// Options as the published models run them: Mamba-2 (ssd), Qwen3-Next (gated_delta_net) and
// Kimi Linear (kda) take raw gates; the delta family normalises q and k and takes beta as a
// logit. No short convolution: the timings are of the state update.
constexpr FamilySetup kFamilies[] = {
    {"linear_attn", LUMEN_FAMILY_LINEAR_ATTN, false, false, false, false},
    {"retention", LUMEN_FAMILY_RETENTION, false, false, false, false},
    {"ssd", LUMEN_FAMILY_SSD, true, false, true, false},
    {"gla", LUMEN_FAMILY_GLA, false, true, false, false},
    {"delta_net", LUMEN_FAMILY_DELTA_NET, false, false, false, true},
    {"gated_delta_net", LUMEN_FAMILY_GATED_DELTA_NET, true, false, true, true},
    {"kda", LUMEN_FAMILY_KDA, false, true, true, true},
};

// Nominal flops per token and head of the chunkwise form at chunk length C (matrix products
// only): additive, Q S, K^T V, Q K^T and P V: 4 K V + 2 C (K + V); delta rule, with fla's WY
// form: K K^T, W = T K, U = T V, W S, Q S, Q K^T, P V', K^T V': 6 K V + 2 C (3 K + 2 V) and
// the triangular inverse, C^2 / 3.
double PrefillFlopsPerToken(const FamilySetup& family) {
  const double k = kKeyDim, v = kValueDim;
  const double per_head = family.delta ? 6 * k * v + 2 * kChunk * (3 * k + 2 * v) +
                                             kChunk * kChunk / 3
                                       : 4 * k * v + 2 * kChunk * (k + v);
  return per_head * kHeads;
}

Owned<lumen_model> BuildModel(const FamilySetup& family, bool bf16_state) {
  lumen_model_builder* raw = nullptr;
  Check(lumen_model_builder_create(&raw), "lumen_model_builder_create");
  Owned<lumen_model_builder> builder(raw);
  lumen_layer_options options;
  lumen_layer_options_init(&options);
  options.family = family.family;
  options.num_heads = kHeads;
  options.num_value_heads = kHeads;
  options.key_dim = kKeyDim;
  options.value_dim = kValueDim;
  options.gate_raw = family.gate_raw;
  options.qk_l2norm = family.delta;
  options.beta_sigmoid = family.delta;
  options.state_dtype = bf16_state ? LUMEN_DTYPE_BFLOAT16 : LUMEN_DTYPE_FLOAT32;
  int32_t layer = 0;
  Check(lumen_model_builder_add_layer(builder.get(), &options, &layer),
        "lumen_model_builder_add_layer");
  if (family.gate_raw) {
    // As fla and the models initialise them: A ~ U(1, 16); dt ~ logU(1e-3, 1e-1) through
    // dt_bias = softplus^-1(dt).
    const int64_t bias_count = family.vector_gate ? int64_t{kHeads} * kKeyDim : kHeads;
    std::vector<float> a_log(kHeads), dt_bias(bias_count);
    for (int32_t h = 0; h < kHeads; ++h) a_log[h] = std::log(1.0f + 15.0f * (h + 0.5f) / kHeads);
    for (int64_t i = 0; i < bias_count; ++i) {
      const float dt = std::exp(std::log(1e-3f) + std::log(100.0f) * (i % 97) / 96.0f);
      dt_bias[i] = dt + std::log(-std::expm1(-dt));
    }
    Check(lumen_model_builder_set_param(builder.get(), layer, LUMEN_PARAM_A_LOG, a_log.data(),
                                        kHeads),
          "lumen_model_builder_set_param(A_log)");
    Check(lumen_model_builder_set_param(builder.get(), layer, LUMEN_PARAM_DT_BIAS,
                                        dt_bias.data(), bias_count),
          "lumen_model_builder_set_param(dt_bias)");
  }
  return BuildModelAs("lumen bench", builder.get());
}

Owned<lumen_engine> CreateEngine(const lumen_model* model, int32_t threads) {
  return CreateEngineAs("lumen bench", model, LUMEN_BACKEND_CPU, threads);
}

// ---------------------------------------------------------------------------------------
// Inputs: one buffer per tensor for the most tokens any case needs, filled with values that
// every family accepts (g in [-0.08, -0.005]: a log-decay and a raw gate alike; beta in
// [0, 1]: a probability and a logit alike), plus a cache line of slack so that a view 16
// bytes off the line still has valid values.

class Buffer {
 public:
  Buffer(int64_t count, int32_t dtype) : dtype_(dtype), count_(count) {
    const int64_t bytes = (count * ElementBytes() + 128 + 63) / 64 * 64;
    data_.reset(std::aligned_alloc(64, static_cast<size_t>(bytes)));
    if (data_ == nullptr) Fail("out of memory for the benchmark's buffers");
  }
  int64_t ElementBytes() const { return dtype_ == LUMEN_DTYPE_FLOAT32 ? 4 : 2; }
  // Fills every element (slack included) with lo + (hi - lo) * u, u uniform in [0, 1).
  void Fill(float lo, float hi, uint64_t seed) {
    const int64_t total = count_ + 128 / ElementBytes();
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < total; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      const float value = lo + (hi - lo) * static_cast<float>(x >> 40) * 0x1p-24f;
      if (dtype_ == LUMEN_DTYPE_FLOAT32) {
        static_cast<float*>(data_.get())[i] = value;
      } else {
        uint32_t bits;
        std::memcpy(&bits, &value, 4);
        static_cast<uint16_t*>(data_.get())[i] = static_cast<uint16_t>(bits >> 16);
      }
    }
  }
  // The buffer `misalign` bytes after its cache-line start, plus `first` elements.
  char* View(int64_t misalign, int64_t first) const {
    return static_cast<char*>(data_.get()) + misalign + first * ElementBytes();
  }

 private:
  int32_t dtype_;
  int64_t count_;
  Owned<void> data_;
};

struct InputBuffers {
  int32_t dtype;
  Buffer q, k, v, g_scalar, g_vector, beta, o;
  explicit InputBuffers(int64_t tokens, int32_t input_dtype)
      : dtype(input_dtype),
        q(tokens * kHeads * kKeyDim, dtype),
        k(tokens * kHeads * kKeyDim, dtype),
        v(tokens * kHeads * kValueDim, dtype),
        g_scalar(tokens * kHeads, dtype),
        g_vector(tokens * kHeads * kKeyDim, dtype),
        beta(tokens * kHeads, dtype),
        o(tokens * kHeads * kValueDim, dtype) {
    q.Fill(-1.0f, 1.0f, 1);
    k.Fill(-1.0f, 1.0f, 2);
    v.Fill(-1.0f, 1.0f, 3);
    g_scalar.Fill(-0.08f, -0.005f, 4);
    g_vector.Fill(-0.08f, -0.005f, 5);
    beta.Fill(0.0f, 1.0f, 6);
  }

  // The inputs and output of `tokens` tokens starting at token `first`.
  void Describe(const FamilySetup& family, int64_t first, int64_t tokens, int64_t misalign,
                lumen_layer_inputs* in, lumen_layer_output* out) const {
    const int64_t qk = int64_t{kHeads} * kKeyDim, vo = int64_t{kHeads} * kValueDim;
    lumen_layer_inputs_init(in);
    in->dtype = dtype;
    in->q = q.View(misalign, first * qk);
    in->q_count = tokens * qk;
    in->k = k.View(misalign, first * qk);
    in->k_count = tokens * qk;
    in->v = v.View(misalign, first * vo);
    in->v_count = tokens * vo;
    if (family.scalar_gate) {
      in->g = g_scalar.View(misalign, first * kHeads);
      in->g_count = tokens * kHeads;
    } else if (family.vector_gate) {
      in->g = g_vector.View(misalign, first * qk);
      in->g_count = tokens * qk;
    }
    if (family.delta) {
      in->beta = beta.View(misalign, first * kHeads);
      in->beta_count = tokens * kHeads;
    }
    lumen_layer_output_init(out);
    out->dtype = dtype;
    out->o = o.View(misalign, first * vo);
    out->o_count = tokens * vo;
  }
};

// ---------------------------------------------------------------------------------------
// Timing lumen

std::string Us(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", seconds * 1e6);
  return text;
}

std::string Percent(double fraction) {
  char text[16];
  std::snprintf(text, sizeof(text), "%.0f%%", fraction * 100);
  return text;
}

struct MemoryAnchors {
  Timing memcpy_time, rmw;
  Timing two_pass;  // a read pass, then the RMW pass, over each head's state
};

struct Anchors {
  std::map<std::pair<int64_t, int64_t>, MemoryAnchors> memory;  // (sessions, threads)
  std::map<int64_t, double> peak_gflops;                         // threads
  std::string sgemm_kernel;
};

Anchors MeasureAnchors(const Options& options) {
  Anchors anchors;
  std::printf("\n== Anchors (best of %d; spread = worst / best - 1)\n", options.repeats);
  std::printf("%-9s %-8s %14s %14s %17s\n", "threads", "sessions", "memcpy us",
              "RMW pass us", "read+RMW/head us");
  for (int64_t threads : options.threads) {
    SpinTeam team(static_cast<int32_t>(threads));
    for (int64_t sessions : options.sessions) {
      const int64_t bytes = sessions * kStateBytes;
      MemoryAnchors m;
      m.memcpy_time = TimeMemcpy(team, bytes, options.repeats, options.min_seconds);
      m.rmw = TimeReadModifyWrite(team, bytes, options.repeats, options.min_seconds);
      m.two_pass = TimeReadThenReadModifyWrite(team, bytes, kStateBytes / kHeads,
                                               options.repeats, options.min_seconds);
      anchors.memory[{sessions, threads}] = m;
      std::printf("%-9lld %-8lld %8s (%3s) %8s (%3s) %11s (%3s)\n",
                  static_cast<long long>(threads), static_cast<long long>(sessions),
                  Us(m.memcpy_time.best_seconds).c_str(), Percent(m.memcpy_time.spread).c_str(),
                  Us(m.rmw.best_seconds).c_str(), Percent(m.rmw.spread).c_str(),
                  Us(m.two_pass.best_seconds).c_str(), Percent(m.two_pass.spread).c_str());
    }
    anchors.peak_gflops[threads] =
        MeasureSgemmPeak(team, options.repeats, options.min_seconds, &anchors.sgemm_kernel);
  }
  for (const auto& [threads, gflops] : anchors.peak_gflops) {
    std::printf("sgemm peak, %lld thread(s): %.1f GFLOP/s (%s micro-kernel, panels in cache)\n",
                static_cast<long long>(threads), gflops, anchors.sgemm_kernel.c_str());
  }
  std::fflush(stdout);
  return anchors;
}

// What a layer call costs beyond its work: a step of a tiny linear_attn layer (2 heads of
// 4 x 4, so one head per thread at 2 threads) at each thread count. The difference between
// thread counts is the pool's wake-up and join.
void MeasureCallOverhead(const Options& options) {
  lumen_model_builder* raw = nullptr;
  Check(lumen_model_builder_create(&raw), "lumen_model_builder_create");
  Owned<lumen_model_builder> builder(raw);
  lumen_layer_options layer;
  lumen_layer_options_init(&layer);
  layer.family = LUMEN_FAMILY_LINEAR_ATTN;
  layer.num_heads = 2;
  layer.key_dim = 4;
  layer.value_dim = 4;
  Check(lumen_model_builder_add_layer(builder.get(), &layer, nullptr),
        "lumen_model_builder_add_layer");
  const Owned<lumen_model> model = BuildModelAs("lumen bench", builder.get());
  float q[8] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f}, o[8];
  lumen_layer_inputs in;
  lumen_layer_inputs_init(&in);
  in.q = in.k = in.v = q;
  in.q_count = in.k_count = in.v_count = 8;
  lumen_layer_output out;
  lumen_layer_output_init(&out);
  out.o = o;
  out.o_count = 8;
  std::printf("call overhead (a step of 2 heads of 4 x 4):");
  for (int64_t threads : options.threads) {
    Owned<lumen_engine> engine = CreateEngine(model.get(), static_cast<int32_t>(threads));
    lumen_session* session_raw = nullptr;
    Check(lumen_session_create(engine.get(), &session_raw), "lumen_session_create");
    Owned<lumen_session> session(session_raw);
    const Timing t = TimeCalls(
        [&] { Check(lumen_session_step(session.get(), 0, &in, &out), "lumen_session_step"); },
        options.repeats, options.min_seconds);
    std::printf("  %lld thread(s) %s us (%s)", static_cast<long long>(threads),
                Us(t.best_seconds).c_str(), Percent(t.spread).c_str());
  }
  std::printf("\n");
}

std::vector<lumen_session*> CreateSessions(lumen_engine* engine, int64_t n,
                                           std::vector<Owned<lumen_session>>* owned) {
  std::vector<lumen_session*> sessions;
  for (int64_t i = 0; i < n; ++i) {
    lumen_session* session = nullptr;
    Check(lumen_session_create(engine, &session), "lumen_session_create");
    owned->emplace_back(session);
    sessions.push_back(session);
  }
  return sessions;
}

void RunDecode(const Options& options, const Anchors& anchors, const InputBuffers& buffers) {
  std::printf("\n== Decode: lumen_engine_step_batch, one token for each of N sessions\n");
  std::printf("%-16s %4s %3s %-5s %18s %8s %8s %8s %8s\n", "family", "N", "thr", "align",
              "us/step (spread)", "/RMW", "/memcpy", "/2-pass", "2t gain");
  for (const FamilySetup& family : kFamilies) {
    if (!Selected(options, family.name)) continue;
    Owned<lumen_model> model = BuildModel(family, false);
    for (int64_t n : options.sessions) {
      for (int64_t misalign : options.misalign) {
        double one_thread = 0;
        for (int64_t threads : options.threads) {
          Owned<lumen_engine> engine = CreateEngine(model.get(), static_cast<int32_t>(threads));
          std::vector<Owned<lumen_session>> owned;
          std::vector<lumen_session*> sessions = CreateSessions(engine.get(), n, &owned);
          lumen_layer_inputs in;
          lumen_layer_output out;
          buffers.Describe(family, 0, n, misalign, &in, &out);
          const Timing t = TimeCalls(
              [&] {
                Check(lumen_engine_step_batch(engine.get(), 0, sessions.data(),
                                              static_cast<int32_t>(n), &in, &out),
                      "lumen_engine_step_batch");
              },
              options.repeats, options.min_seconds);
          const MemoryAnchors& m = anchors.memory.at({n, threads});
          if (threads == 1) one_thread = t.best_seconds;
          char gain[16] = "";
          if (threads != 1 && one_thread > 0) {
            std::snprintf(gain, sizeof(gain), "%.2fx", one_thread / t.best_seconds);
          }
          std::printf("%-16s %4lld %3lld %-5s %11s (%3s) %7.2fx %7.2fx %7.2fx %8s\n",
                      family.name, static_cast<long long>(n), static_cast<long long>(threads),
                      misalign == 0 ? "line" : "+16B", Us(t.best_seconds).c_str(),
                      Percent(t.spread).c_str(), t.best_seconds / m.rmw.best_seconds,
                      t.best_seconds / m.memcpy_time.best_seconds,
                      t.best_seconds / m.two_pass.best_seconds, gain);
          std::fflush(stdout);
        }
      }
    }
  }
}

void RunPrefill(const Options& options, const InputBuffers& buffers) {
  std::printf(
      "\n== Prefill: lumen_session_prefill of T tokens into one session (GFLOP/s: nominal\n"
      "   chunkwise flops at C = %.0f; peak: the sgemm peak, best of its measures taken in\n"
      "   turn with the cell's repeats on the same threads; token loop: lumen_session_step\n"
      "   over %d tokens, scaled to T)\n",
      kChunk, kTokenLoopTokens);
  std::printf("%-16s %6s %3s %-5s %18s %8s %6s %6s %12s %8s\n", "family", "T", "thr",
              "align", "ms (spread)", "GFLOP/s", "peak", "/peak", "token loop", "speedup");
  for (const FamilySetup& family : kFamilies) {
    if (!Selected(options, family.name)) continue;
    Owned<lumen_model> model = BuildModel(family, false);
    for (int64_t threads : options.threads) {
      Owned<lumen_engine> engine = CreateEngine(model.get(), static_cast<int32_t>(threads));
      lumen_session* raw = nullptr;
      Check(lumen_session_create(engine.get(), &raw), "lumen_session_create");
      Owned<lumen_session> session(raw);
      for (int64_t misalign : options.misalign) {
        // The token-by-token loop, from the same session.
        const int32_t loop_tokens =
            static_cast<int32_t>(std::min<int64_t>(kTokenLoopTokens, options.tokens.back()));
        const auto token_loop = [&] {
          for (int32_t t = 0; t < loop_tokens; ++t) {
            lumen_layer_inputs in;
            lumen_layer_output out;
            buffers.Describe(family, t, 1, misalign, &in, &out);
            Check(lumen_session_step(session.get(), 0, &in, &out), "lumen_session_step");
          }
        };
        token_loop();  // warm-up
        for (int64_t tokens : options.tokens) {
          lumen_layer_inputs in;
          lumen_layer_output out;
          buffers.Describe(family, 0, tokens, misalign, &in, &out);
          // Long prefills take long enough that three repeats give the spread.
          const int32_t repeats = tokens >= 8192 ? std::min(options.repeats, 3) : options.repeats;
          const auto prefill = [&] {
            Check(lumen_session_prefill(session.get(), 0, static_cast<int32_t>(tokens), &in,
                                        &out),
                  "lumen_session_prefill");
          };
          // The host's speed drifts within a run (its peak moved by up to 1.8x), so each
          // repeat measures the peak, the prefill and the token loop in turn: the ratios of
          // the bests compare them in the same phases of the host.
          prefill();  // warm-up
          double peak = 0.0;
          double loop_seconds = std::numeric_limits<double>::infinity();
          std::vector<double> seconds;
          for (int32_t r = 0; r < repeats; ++r) {
            {
              SpinTeam team(static_cast<int32_t>(threads));
              std::string kernel;
              peak = std::max(peak, MeasureSgemmPeak(team, 1, options.min_seconds, &kernel));
            }
            seconds.push_back(SecondsPerCall(prefill, options.min_seconds));
            loop_seconds = std::min(loop_seconds, SecondsPerCall(token_loop, options.min_seconds) /
                                                      loop_tokens * tokens);
          }
          const Timing t = BestAndSpread(seconds);
          const double gflops = PrefillFlopsPerToken(family) * tokens / t.best_seconds * 1e-9;
          std::printf("%-16s %6lld %3lld %-5s %11.2f (%3s) %8.1f %6.1f %6s %9.1f ms %7.2fx\n",
                      family.name, static_cast<long long>(tokens),
                      static_cast<long long>(threads), misalign == 0 ? "line" : "+16B",
                      t.best_seconds * 1e3, Percent(t.spread).c_str(), gflops, peak,
                      Percent(gflops / peak).c_str(), loop_seconds * 1e3,
                      loop_seconds / t.best_seconds);
          std::fflush(stdout);
        }
      }
    }
  }
}

}  // namespace

int RunCpuBench(int argc, char** argv) {
  const Options options = ParseOptions(argc, argv);
  for (const std::string& name : options.families) {
    bool known = false;
    for (const FamilySetup& family : kFamilies) known = known || name == family.name;
    if (!known) Fail("unknown family '" + name + "'");
  }
  std::printf("lumen %s CPU benchmark: HV = %d, K = V = %d, fp32 state (%.0f KiB per session), "
              "%s inputs and output\n",
              lumen_version_string(), kHeads, kKeyDim, kStateBytes / 1024.0,
              options.bf16 ? "bf16" : "fp32");
  std::printf("kernels: %s\n", KernelSimdLevel().c_str());
  if (options.quick) std::printf("--quick: a smoke test; the numbers mean nothing\n");
  const Anchors anchors = MeasureAnchors(options);

  int64_t max_tokens = 0;
  if (options.decode) {
    max_tokens = *std::max_element(options.sessions.begin(), options.sessions.end());
  }
  if (options.prefill) {
    max_tokens = std::max({max_tokens, int64_t{kTokenLoopTokens},
                           *std::max_element(options.tokens.begin(), options.tokens.end())});
  }
  const InputBuffers buffers(max_tokens,
                             options.bf16 ? LUMEN_DTYPE_BFLOAT16 : LUMEN_DTYPE_FLOAT32);
  MeasureCallOverhead(options);
  if (options.decode) RunDecode(options, anchors, buffers);
  if (options.prefill) RunPrefill(options, buffers);
  return 0;
}

}  // namespace lumen::cli
