#include "tools/lumen/cpu_bench.h"

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

#include "tools/lumen/bench_anchors.h"
#include "tools/lumen/bench_cases.h"
#include "tools/lumen/build_compare.h"
#include "tools/lumen/lumen_handles.h"

namespace lumen::cli {
namespace {

// Tokens of the token-by-token loop that prefill is compared with.
constexpr int32_t kTokenLoopTokens = 256;

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
  bool speculative = true;
  std::vector<std::string> builds;  // --builds: compare these library files instead
  int32_t rounds = 10;
  bool same_bits = false;  // --same-bits: fail where a build's results differ from the first's
};

void PrintUsage(std::FILE* to) {
  std::fprintf(
      to,
      "usage: lumen bench --cpu [--quick] [--bf16] [--families a,b] [--threads 1,2]\n"
      "                   [--sessions 1,8,64] [--tokens 1024,...] [--aligned-only]\n"
      "                   [--decode-only | --prefill-only | --speculative-only]\n"
      "                   [--repeats R]\n"
      "       lumen bench --cpu --builds A.so,B.so[,...] [--rounds R] [--same-bits]\n"
      "                   [the options above]\n"
      "\n"
      "Decode (lumen_engine_step_batch over N sessions) and prefill (lumen_session_prefill of\n"
      "T tokens) of every family at HV = 32, K = V = 128, fp32 state, with the caller's\n"
      "buffers on a cache line and 16 bytes off one. Beside them, measured in the same run:\n"
      "memcpy and an in-place read-modify-write pass (RMW) over the same bytes of state, a\n"
      "read pass then the RMW pass over each head's state (2-pass: the traffic of a delta\n"
      "rule that reads a head before it writes it; lumen's holds its write back instead),\n"
      "the fp32 matrix-product peak of a register-blocked sgemm, and lumen_session_step\n"
      "token by token. Each decode and prefill cell times its anchors again in turn with\n"
      "its repeats, and its ratios are of those bests.\n"
      "Speculative decoding: lumen_engine_step_tentative_batch of n = 2, 4, 8 tokens into\n"
      "each of N sessions then lumen_engine_commit_batch of all n (or of none), beside one\n"
      "plain lumen_engine_step_batch of the same sessions timed in turn with it.\n"
      "Times are the best of R repeats (default 5), with the spread worst/best - 1.\n"
      "Inputs and output are fp32; --bf16 gives them in bf16 (the state stays fp32).\n"
      "--quick runs a few small cases once (a smoke test; its numbers mean nothing).\n"
      "\n"
      "--builds times the same cases (caller buffers on a cache line) through two or more\n"
      "builds of lumen, each loaded from its shared library file into this process, called\n"
      "in turn R rounds (default 10) so that they share the host's phases; it prints each\n"
      "build's best and median against the first build's, and whether its outputs and\n"
      "states match the first build's bit for bit (--same-bits: exit status 1 where they\n"
      "do not). No anchors: the first build is one.\n");
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

std::vector<std::string> ParseNames(const std::string& text) {
  std::vector<std::string> names;
  std::stringstream stream(text);
  std::string name;
  while (std::getline(stream, name, ',')) names.push_back(name);
  return names;
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
      options.speculative = false;
    } else if (flag == "--prefill-only") {
      options.decode = false;
      options.speculative = false;
    } else if (flag == "--speculative-only") {
      options.decode = false;
      options.prefill = false;
    } else if (flag == "--families") {
      options.families = ParseNames(value());
    } else if (flag == "--builds") {
      options.builds = ParseNames(value());
    } else if (flag == "--same-bits") {
      options.same_bits = true;
    } else if (flag == "--rounds") {
      options.rounds = static_cast<int32_t>(ParseList(flag, value())[0]);
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

Owned<lumen_model> BuildModel(const FamilySetup& family) {
  return Owned<lumen_model>(BuildBenchModel("lumen bench", LinkedApi(), family));
}

Owned<lumen_engine> CreateEngine(const lumen_model* model, int32_t threads) {
  return CreateEngineAs("lumen bench", model, LUMEN_BACKEND_CPU, threads);
}

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

// memcpy, the RMW pass and the two-pass anchor over `sessions` states on the team's threads.
MemoryAnchors TimeMemoryAnchors(SpinTeam& team, int64_t sessions, int32_t repeats,
                                double min_seconds) {
  const int64_t bytes = sessions * kBenchStateBytes;
  MemoryAnchors m;
  m.memcpy_time = TimeMemcpy(team, bytes, repeats, min_seconds);
  m.rmw = TimeReadModifyWrite(team, bytes, repeats, min_seconds);
  m.two_pass = TimeReadThenReadModifyWrite(team, bytes, kBenchStateBytes / kBenchHeads,
                                           repeats, min_seconds);
  return m;
}

// Prints the anchors of every cell size up front (the memory ones where decode runs): the
// decode and prefill cells time their own again in turn with their repeats.
void MeasureAnchors(const Options& options) {
  std::map<int64_t, double> peak_gflops;  // by threads
  std::string sgemm_kernel;
  std::printf("\n== Anchors (best of %d; spread = worst / best - 1)\n", options.repeats);
  if (options.decode) {
    std::printf("%-9s %-8s %14s %14s %17s\n", "threads", "sessions", "memcpy us",
                "RMW pass us", "read+RMW/head us");
  }
  for (int64_t threads : options.threads) {
    SpinTeam team(static_cast<int32_t>(threads));
    for (int64_t sessions : options.decode ? options.sessions : std::vector<int64_t>{}) {
      const MemoryAnchors m =
          TimeMemoryAnchors(team, sessions, options.repeats, options.min_seconds);
      std::printf("%-9lld %-8lld %8s (%3s) %8s (%3s) %11s (%3s)\n",
                  static_cast<long long>(threads), static_cast<long long>(sessions),
                  Us(m.memcpy_time.best_seconds).c_str(), Percent(m.memcpy_time.spread).c_str(),
                  Us(m.rmw.best_seconds).c_str(), Percent(m.rmw.spread).c_str(),
                  Us(m.two_pass.best_seconds).c_str(), Percent(m.two_pass.spread).c_str());
    }
    peak_gflops[threads] =
        MeasureSgemmPeak(team, options.repeats, options.min_seconds, &sgemm_kernel);
  }
  for (const auto& [threads, gflops] : peak_gflops) {
    std::printf("sgemm peak, %lld thread(s): %.1f GFLOP/s (%s micro-kernel, panels in cache)\n",
                static_cast<long long>(threads), gflops, sgemm_kernel.c_str());
  }
  std::fflush(stdout);
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

void RunDecode(const Options& options, const BenchInputs& buffers) {
  std::printf(
      "\n== Decode: lumen_engine_step_batch, one token for each of N sessions (ratios: to the\n"
      "   anchors of the table above for the same N and threads, timed again in turn with\n"
      "   the cell's repeats, best of those)\n");
  std::printf("%-16s %4s %3s %-5s %18s %8s %8s %8s %8s\n", "family", "N", "thr", "align",
              "us/step (spread)", "/RMW", "/memcpy", "/2-pass", "2t gain");
  for (const FamilySetup& family : kBenchFamilies) {
    if (!Selected(options.families, family)) continue;
    Owned<lumen_model> model = BuildModel(family);
    for (int64_t n : options.sessions) {
      for (int64_t misalign : options.misalign) {
        double one_thread = 0;
        for (int64_t threads : options.threads) {
          Owned<lumen_engine> engine = CreateEngine(model.get(), static_cast<int32_t>(threads));
          std::vector<Owned<lumen_session>> owned;
          std::vector<lumen_session*> sessions = CreateSessions(engine.get(), n, &owned);
          lumen_layer_inputs in;
          lumen_layer_output out;
          buffers.Describe(LinkedApi(), family, 0, n, misalign, &in, &out);
          const auto step = [&] {
            Check(lumen_engine_step_batch(engine.get(), 0, sessions.data(),
                                          static_cast<int32_t>(n), &in, &out),
                  "lumen_engine_step_batch");
          };
          // The host's speed drifts within a run (an anchor moved by 1.8x between runs), so
          // each repeat times the anchors and the step in turn, as a prefill cell does its
          // peak: the ratios of the bests compare them in the same phases of the host.
          MemoryAnchors m;
          m.memcpy_time.best_seconds = m.rmw.best_seconds = m.two_pass.best_seconds =
              std::numeric_limits<double>::infinity();
          std::vector<double> seconds;
          step();  // warm-up
          for (int32_t r = 0; r < options.repeats; ++r) {
            MemoryAnchors now;
            {
              SpinTeam team(static_cast<int32_t>(threads));  // gone before lumen's threads run
              now = TimeMemoryAnchors(team, n, 1, options.min_seconds);
            }
            m.memcpy_time.best_seconds =
                std::min(m.memcpy_time.best_seconds, now.memcpy_time.best_seconds);
            m.rmw.best_seconds = std::min(m.rmw.best_seconds, now.rmw.best_seconds);
            m.two_pass.best_seconds =
                std::min(m.two_pass.best_seconds, now.two_pass.best_seconds);
            seconds.push_back(SecondsPerCall(step, options.min_seconds));
          }
          const Timing t = BestAndSpread(seconds);
          if (threads == 1) one_thread = t.best_seconds;
          char gain[16] = "";
          if (threads != 1 && one_thread > 0) {
            std::snprintf(gain, sizeof(gain), "%.2fx", one_thread / t.best_seconds);
          }
          std::printf("%-16s %4lld %3lld %-5s %11s (%3s) %7.2fx %7.2fx %7.2fx %8s\n",
                      FamilyName(family), static_cast<long long>(n), static_cast<long long>(threads),
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

void RunPrefill(const Options& options, const BenchInputs& buffers) {
  std::printf(
      "\n== Prefill: lumen_session_prefill of T tokens into one session (GFLOP/s: nominal\n"
      "   chunkwise flops at C = %.0f; peak: the sgemm peak, best of its measures taken in\n"
      "   turn with the cell's repeats on the same threads; token loop: lumen_session_step\n"
      "   over %d tokens, scaled to T)\n",
      kBenchChunk, kTokenLoopTokens);
  std::printf("%-16s %6s %3s %-5s %18s %8s %6s %6s %12s %8s\n", "family", "T", "thr",
              "align", "ms (spread)", "GFLOP/s", "peak", "/peak", "token loop", "speedup");
  for (const FamilySetup& family : kBenchFamilies) {
    if (!Selected(options.families, family)) continue;
    Owned<lumen_model> model = BuildModel(family);
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
            buffers.Describe(LinkedApi(), family, t, 1, misalign, &in, &out);
            Check(lumen_session_step(session.get(), 0, &in, &out), "lumen_session_step");
          }
        };
        token_loop();  // warm-up
        for (int64_t tokens : options.tokens) {
          lumen_layer_inputs in;
          lumen_layer_output out;
          buffers.Describe(LinkedApi(), family, 0, tokens, misalign, &in, &out);
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
                      FamilyName(family), static_cast<long long>(tokens),
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

// Tokens of a draft that the speculative cells verify.
constexpr int64_t kDraftTokens[] = {2, 4, 8};

void RunSpeculative(const Options& options, const BenchInputs& buffers) {
  std::printf(
      "\n== Speculative decoding: N sessions, lumen_engine_step_tentative_batch of n tokens each\n"
      "   then lumen_engine_commit_batch of all n (verify+commit) or none (verify+reject),\n"
      "   beside one plain lumen_engine_step_batch of the sessions (step), each timed in turn\n"
      "   with the others (N = 1: the calls of one session)\n");
  std::printf("%-16s %4s %3s %2s %16s %20s %20s %9s\n", "family", "N", "thr", "n",
              "step us (spread)", "verify+commit us", "verify+reject us", "/step");
  for (const FamilySetup& family : kBenchFamilies) {
    if (!Selected(options.families, family)) continue;
    Owned<lumen_model> model = BuildModel(family);
    for (int64_t sessions_count : options.sessions) {
      for (int64_t threads : options.threads) {
        Owned<lumen_engine> engine = CreateEngine(model.get(), static_cast<int32_t>(threads));
        std::vector<Owned<lumen_session>> owned;
        std::vector<lumen_session*> sessions = CreateSessions(engine.get(), sessions_count, &owned);
        const int32_t count = static_cast<int32_t>(sessions_count);
        lumen_layer_inputs one_in;
        lumen_layer_output one_out;
        buffers.Describe(LinkedApi(), family, 0, sessions_count, 0, &one_in, &one_out);
        const auto step = [&] {
          Check(lumen_engine_step_batch(engine.get(), 0, sessions.data(), count, &one_in,
                                        &one_out),
                "lumen_engine_step_batch");
        };
        for (int64_t n : kDraftTokens) {
          lumen_layer_inputs in;
          lumen_layer_output out;
          buffers.Describe(LinkedApi(), family, 0, n * sessions_count, 0, &in, &out);
          std::vector<int32_t> cu_seqlens(sessions_count + 1);
          for (int64_t i = 0; i <= sessions_count; ++i) {
            cu_seqlens[i] = static_cast<int32_t>(i * n);
          }
          const auto verify_then = [&](int32_t accepted) {
            Check(lumen_engine_step_tentative_batch(engine.get(), 0, sessions.data(), count,
                                                    cu_seqlens.data(), &in, &out),
                  "lumen_engine_step_tentative_batch");
            const std::vector<int32_t> accepts(sessions_count, accepted);
            Check(lumen_engine_commit_batch(engine.get(), sessions.data(), count,
                                            accepts.data()),
                  "lumen_engine_commit_batch");
          };
          const auto commit_all = [&] { verify_then(static_cast<int32_t>(n)); };
          const auto reject_all = [&] { verify_then(0); };
          step();
          commit_all();
          std::vector<double> steps, commits, rejects;
          for (int32_t r = 0; r < options.repeats; ++r) {
            steps.push_back(SecondsPerCall(step, options.min_seconds));
            commits.push_back(SecondsPerCall(commit_all, options.min_seconds));
            rejects.push_back(SecondsPerCall(reject_all, options.min_seconds));
          }
          const Timing t_step = BestAndSpread(steps);
          const Timing t_commit = BestAndSpread(commits);
          const Timing t_reject = BestAndSpread(rejects);
          std::printf("%-16s %4lld %3lld %2lld %9s (%3s) %13s (%3s) %13s (%3s) %8.2fx\n",
                      FamilyName(family), static_cast<long long>(sessions_count),
                      static_cast<long long>(threads), static_cast<long long>(n),
                      Us(t_step.best_seconds).c_str(), Percent(t_step.spread).c_str(),
                      Us(t_commit.best_seconds).c_str(), Percent(t_commit.spread).c_str(),
                      Us(t_reject.best_seconds).c_str(), Percent(t_reject.spread).c_str(),
                      t_commit.best_seconds / t_step.best_seconds);
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
    if (FindFamily(name) == nullptr) Fail("unknown family '" + name + "'");
  }
  if (!options.builds.empty()) {
    BuildCompareOptions compare;
    compare.builds = options.builds;
    compare.families = options.families;
    compare.threads = options.threads;
    compare.sessions = options.sessions;
    compare.tokens = options.tokens;
    compare.rounds = options.quick ? 1 : options.rounds;
    compare.min_seconds = options.min_seconds;
    compare.bf16 = options.bf16;
    compare.decode = options.decode;
    compare.prefill = options.prefill;
    compare.require_same_bits = options.same_bits;
    return RunBuildCompare(compare);
  }
  std::printf("lumen %s CPU benchmark: HV = %d, K = V = %d, fp32 state (%.0f KiB per session), "
              "%s inputs and output\n",
              lumen_version_string(), kBenchHeads, kBenchKeyDim, kBenchStateBytes / 1024.0,
              options.bf16 ? "bf16" : "fp32");
  std::printf("kernels: %s\n", KernelSimdLevel().c_str());
  if (options.quick) std::printf("--quick: a smoke test; the numbers mean nothing\n");
  MeasureAnchors(options);

  int64_t max_tokens = 0;
  if (options.decode) {
    max_tokens = *std::max_element(options.sessions.begin(), options.sessions.end());
  }
  if (options.speculative) {
    max_tokens = std::max(max_tokens,
                          8 * *std::max_element(options.sessions.begin(), options.sessions.end()));
  }
  if (options.prefill) {
    max_tokens = std::max({max_tokens, int64_t{kTokenLoopTokens},
                           *std::max_element(options.tokens.begin(), options.tokens.end())});
  }
  const BenchInputs buffers(max_tokens,
                             options.bf16 ? LUMEN_DTYPE_BFLOAT16 : LUMEN_DTYPE_FLOAT32);
  MeasureCallOverhead(options);
  if (options.decode) RunDecode(options, buffers);
  if (options.prefill) RunPrefill(options, buffers);
  if (options.speculative) RunSpeculative(options, buffers);
  return 0;
}

}  // namespace lumen::cli
