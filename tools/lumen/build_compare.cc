#include "tools/lumen/build_compare.h"

#include <lumen/lumen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tools/lumen/bench_anchors.h"
#include "tools/lumen/bench_cases.h"
#include "tools/lumen/lumen_api.h"

namespace lumen::cli {
namespace {

constexpr const char* kProgram = "lumen bench --builds";
// Steps each decode session takes from a zero state before its results are compared.
constexpr int32_t kCheckSteps = 4;

void Check(const LumenApi& api, lumen_status status, const char* call) {
  CheckCall(kProgram, api, status, call);
}

// One build's model, engine and sessions for one cell, destroyed through its own library.
class BuildCase {
 public:
  BuildCase(const LumenApi& api, const FamilySetup& family, int64_t threads, int64_t sessions)
      : api_(api) {
    model_ = BuildBenchModel(kProgram, api, family);
    lumen_engine_options options;
    api.lumen_engine_options_init(&options);
    options.backend = LUMEN_BACKEND_CPU;
    options.num_threads = static_cast<int32_t>(threads);
    Check(api, api.lumen_engine_create(model_, &options, &engine_), "lumen_engine_create");
    for (int64_t i = 0; i < sessions; ++i) {
      lumen_session* session = nullptr;
      Check(api, api.lumen_session_create(engine_, &session), "lumen_session_create");
      sessions_.push_back(session);
    }
  }
  ~BuildCase() {
    for (lumen_session* session : sessions_) api_.lumen_session_destroy(session);
    api_.lumen_engine_destroy(engine_);
    api_.lumen_model_destroy(model_);
  }
  BuildCase(const BuildCase&) = delete;
  BuildCase& operator=(const BuildCase&) = delete;

  const LumenApi& api() const { return api_; }
  lumen_engine* engine() const { return engine_; }
  const std::vector<lumen_session*>& sessions() const { return sessions_; }

  void Reset() const {
    for (lumen_session* session : sessions_) {
      Check(api_, api_.lumen_session_reset(session), "lumen_session_reset");
    }
  }
  // Every session's state matrix, one after another, fp32 [N, HV, K, V].
  std::vector<float> States() const {
    int64_t count = 0;
    Check(api_, api_.lumen_model_state_count(model_, 0, LUMEN_STATE_MATRIX, &count),
          "lumen_model_state_count");
    std::vector<float> states(static_cast<size_t>(count) * sessions_.size());
    for (size_t i = 0; i < sessions_.size(); ++i) {
      Check(api_,
            api_.lumen_session_read_state(sessions_[i], 0, LUMEN_STATE_MATRIX,
                                          states.data() + i * count, count),
            "lumen_session_read_state");
    }
    return states;
  }

 private:
  const LumenApi& api_;
  lumen_model* model_ = nullptr;
  lumen_engine* engine_ = nullptr;
  std::vector<lumen_session*> sessions_;
};

// A build's results for one cell: its output buffer's bytes and its states.
struct Results {
  std::vector<unsigned char> output;
  std::vector<float> states;
};

float ElementValue(const unsigned char* bytes, int64_t i, bool bf16) {
  float value;
  if (bf16) {
    uint16_t half;
    std::memcpy(&half, bytes + 2 * i, 2);
    const uint32_t bits = uint32_t{half} << 16;
    std::memcpy(&value, &bits, 4);
  } else {
    std::memcpy(&value, bytes + 4 * i, 4);
  }
  return value;
}

// max |x - ref| / max |ref|: 0 where they agree.
double RelativeMaxDifference(const std::vector<float>& x, const std::vector<float>& ref) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::fabs(double{x[i]} - ref[i]));
    scale = std::max(scale, std::fabs(double{ref[i]}));
  }
  return scale > 0 ? diff / scale : diff;
}

std::vector<float> OutputValues(const Results& results, bool bf16) {
  const int64_t count = static_cast<int64_t>(results.output.size()) / (bf16 ? 2 : 4);
  std::vector<float> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[i] = ElementValue(results.output.data(), i, bf16);
  return values;
}

bool SameBits(const Results& x, const Results& ref) {
  return x.output == ref.output &&
         std::memcmp(x.states.data(), ref.states.data(), x.states.size() * sizeof(float)) == 0;
}

// "same bits" or the relative max differences of the output and the states.
std::string CompareResults(const Results& x, const Results& ref, bool bf16) {
  if (SameBits(x, ref)) return "same bits";
  char text[96];
  std::snprintf(text, sizeof(text), "differs: o %.1e, S %.1e (max rel)",
                RelativeMaxDifference(OutputValues(x, bf16), OutputValues(ref, bf16)),
                RelativeMaxDifference(x.states, ref.states));
  return text;
}

// Times call(b) for every build b in turn, `rounds` times, forwards in even rounds and
// backwards in odd ones: seconds[b][round].
std::vector<std::vector<double>> TimeInTurn(size_t builds, const BuildCompareOptions& options,
                                            const std::function<void(size_t)>& call) {
  for (size_t b = 0; b < builds; ++b) call(b);  // warm-up
  std::vector<std::vector<double>> seconds(builds);
  for (int32_t round = 0; round < options.rounds; ++round) {
    for (size_t i = 0; i < builds; ++i) {
      const size_t b = round % 2 == 0 ? i : builds - 1 - i;
      seconds[b].push_back(SecondsPerCall([&] { call(b); }, options.min_seconds));
    }
  }
  return seconds;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

char BuildLetter(size_t b) { return static_cast<char>('A' + b); }

void PrintHeader(const char* unit) {
  std::printf("%-16s %6s %3s %5s %10s %10s %8s %9s %7s  %s\n", "family", "size", "thr", "build",
              unit, "median", "/A best", "/A round", "faster", "results vs A");
}

// One line per build: best and median time, and against A: the ratio of the bests, the
// median of the per-round ratios, in how many rounds it was faster, and its results.
// Returns whether every build's results match A's bit for bit.
bool PrintCell(const char* family, int64_t size, int64_t threads, double unit_scale,
               const std::vector<std::vector<double>>& seconds,
               const std::vector<Results>& results, bool bf16) {
  const std::vector<double>& anchor = seconds[0];
  const double anchor_best = *std::min_element(anchor.begin(), anchor.end());
  bool same = true;
  for (size_t b = 0; b < seconds.size(); ++b) {
    const double best = *std::min_element(seconds[b].begin(), seconds[b].end());
    std::printf("%-16s %6lld %3lld %5c %10.3f %10.3f", b == 0 ? family : "",
                static_cast<long long>(size), static_cast<long long>(threads), BuildLetter(b),
                best * unit_scale, Median(seconds[b]) * unit_scale);
    if (b == 0) {
      std::printf("\n");
      continue;
    }
    std::vector<double> ratios;
    int32_t faster = 0;
    for (size_t r = 0; r < anchor.size(); ++r) {
      ratios.push_back(seconds[b][r] / anchor[r]);
      faster += seconds[b][r] < anchor[r];
    }
    std::printf(" %7.3fx %8.3fx %3d/%-3zu  %s\n", best / anchor_best, Median(ratios), faster,
                anchor.size(), CompareResults(results[b], results[0], bf16).c_str());
    same = same && SameBits(results[b], results[0]);
  }
  std::fflush(stdout);
  return same;
}

std::vector<unsigned char> OutputBytes(const BenchInputs& inputs, int64_t elements) {
  const char* first = inputs.o.View(0, 0);
  return std::vector<unsigned char>(first, first + elements * inputs.o.ElementBytes());
}

// Returns whether every build's results matched A's.
bool ComparePrefill(const BuildCompareOptions& options, const std::vector<LumenApi>& apis,
                    const FamilySetup& family, const BenchInputs& inputs) {
  bool same = true;
  for (int64_t threads : options.threads) {
    std::vector<std::unique_ptr<BuildCase>> cases;
    for (const LumenApi& api : apis) {
      cases.push_back(std::make_unique<BuildCase>(api, family, threads, 1));
    }
    for (int64_t tokens : options.tokens) {
      const auto prefill = [&](size_t b) {
        const BuildCase& c = *cases[b];
        lumen_layer_inputs in;
        lumen_layer_output out;
        inputs.Describe(c.api(), family, 0, tokens, 0, &in, &out);
        Check(c.api(),
              c.api().lumen_session_prefill(c.sessions()[0], 0, static_cast<int32_t>(tokens),
                                            &in, &out),
              "lumen_session_prefill");
      };
      std::vector<Results> results;
      for (size_t b = 0; b < cases.size(); ++b) {
        cases[b]->Reset();
        prefill(b);
        results.push_back({OutputBytes(inputs, tokens * kBenchHeads * kBenchValueDim),
                           cases[b]->States()});
      }
      const auto seconds = TimeInTurn(cases.size(), options, prefill);
      same = PrintCell(FamilyName(family), tokens, threads, 1e3, seconds, results, options.bf16) &&
             same;
    }
  }
  return same;
}

// Returns whether every build's results matched A's.
bool CompareDecode(const BuildCompareOptions& options, const std::vector<LumenApi>& apis,
                   const FamilySetup& family, const BenchInputs& inputs) {
  bool same = true;
  for (int64_t threads : options.threads) {
    for (int64_t n : options.sessions) {
      std::vector<std::unique_ptr<BuildCase>> cases;
      for (const LumenApi& api : apis) {
        cases.push_back(std::make_unique<BuildCase>(api, family, threads, n));
      }
      const auto step = [&](size_t b) {
        const BuildCase& c = *cases[b];
        lumen_layer_inputs in;
        lumen_layer_output out;
        inputs.Describe(c.api(), family, 0, n, 0, &in, &out);
        Check(c.api(),
              c.api().lumen_engine_step_batch(c.engine(), 0, c.sessions().data(),
                                              static_cast<int32_t>(n), &in, &out),
              "lumen_engine_step_batch");
      };
      std::vector<Results> results;
      for (size_t b = 0; b < cases.size(); ++b) {
        for (int32_t s = 0; s < kCheckSteps; ++s) step(b);
        results.push_back(
            {OutputBytes(inputs, n * kBenchHeads * kBenchValueDim), cases[b]->States()});
      }
      const auto seconds = TimeInTurn(cases.size(), options, step);
      same = PrintCell(FamilyName(family), n, threads, 1e6, seconds, results, options.bf16) && same;
    }
  }
  return same;
}

}  // namespace

int RunBuildCompare(const BuildCompareOptions& options) {
  if (options.builds.size() < 2) FailAs(kProgram, "give at least two library files");
  std::vector<LumenApi> apis(options.builds.size());
  for (size_t b = 0; b < options.builds.size(); ++b) {
    std::string error;
    if (!LoadApi(options.builds[b], &apis[b], &error)) FailAs(kProgram, error);
  }
  std::printf("lumen builds side by side: HV = %d, K = V = %d, fp32 state, %s inputs and "
              "output; B / A below 1 is faster than A\n",
              kBenchHeads, kBenchKeyDim, options.bf16 ? "bf16" : "fp32");
  for (size_t b = 0; b < apis.size(); ++b) {
    std::printf("  %c: %s (lumen %s)\n", BuildLetter(b), apis[b].path.c_str(),
                apis[b].lumen_version_string());
  }
  std::printf("Each round calls every build in turn (A B ..., then ... B A), each for at least "
              "%.2f s; %d rounds.\n'/A best': the ratio of the bests; '/A round': the median of "
              "each round's ratio; 'faster': rounds in which it beat A. Results: a zero state "
              "run once by each build, outputs and states compared with A's.\n",
              options.min_seconds, options.rounds);
  int64_t max_tokens = 0;
  if (options.decode) {
    max_tokens = *std::max_element(options.sessions.begin(), options.sessions.end());
  }
  if (options.prefill) {
    max_tokens =
        std::max(max_tokens, *std::max_element(options.tokens.begin(), options.tokens.end()));
  }
  const BenchInputs inputs(max_tokens, options.bf16 ? LUMEN_DTYPE_BFLOAT16 : LUMEN_DTYPE_FLOAT32);
  std::vector<const FamilySetup*> families;
  for (const FamilySetup& family : kBenchFamilies) {
    if (Selected(options.families, family)) families.push_back(&family);
  }
  bool same = true;
  if (options.decode) {
    std::printf("\n== Decode: lumen_engine_step_batch, one token for each of N sessions\n");
    PrintHeader("best us");
    for (const FamilySetup* family : families) {
      same = CompareDecode(options, apis, *family, inputs) && same;
    }
  }
  if (options.prefill) {
    std::printf("\n== Prefill: lumen_session_prefill of T tokens into one session\n");
    PrintHeader("best ms");
    for (const FamilySetup* family : families) {
      same = ComparePrefill(options, apis, *family, inputs) && same;
    }
  }
  if (!same && options.require_same_bits) {
    std::fprintf(stderr, "%s: some build's results differ from A's (--same-bits)\n", kProgram);
    return 1;
  }
  return 0;
}

}  // namespace lumen::cli
