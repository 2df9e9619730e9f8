// What checking the input values costs (src/input_domain.h: finite q, k, v, g, beta; g <= 0;
// beta in [0, 1]), in one run: every call is timed with the check on (the library's only
// mode through the C API) and with it off (the anchor: the same call, the check skipped
// through the engine's internal switch), alternating so that both see the same machine.
//
//   decode        lumen's step of one session, one token (T = 1)
//   prefill       one session, T tokens (default 512) in one prefill
//   batch         a batched step of B sessions (default 16)
//
// Layer: gated_delta_net, H=16, HV=32, K=V=128 (Qwen3-Next sized), 2 MiB of fp32 state per
// session; inputs fp32 and bf16 (decays and write strengths keep the state bounded over any
// number of repetitions). The table shows the median time per call of each mode and
// the check's cost as a ratio to the anchor.
//
//   lumen_input_check_benchmark [--reps N] [--threads T] [--tokens T] [--batch B]
//
// Not a test: it asserts nothing beyond every call succeeding.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "src/dtype_convert.h"
#include "src/engine.h"
#include "src/layer_spec.h"
#include "src/model.h"
#include "src/session.h"

namespace {

using Clock = std::chrono::steady_clock;

void Check(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, std::string(status.message()).c_str());
    std::exit(1);
  }
}

struct Settings {
  int reps = 200;
  int threads = 1;
  int tokens = 512;
  int batch = 16;
};

Settings Parse(int argc, char** argv) {
  Settings settings;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--reps") settings.reps = value;
    else if (flag == "--threads") settings.threads = value;
    else if (flag == "--tokens") settings.tokens = value;
    else if (flag == "--batch") settings.batch = value;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  return settings;
}

// Realistic inputs for `tokens` tokens, encoded in `dtype`: q, k, v ~ N(0, 1), g = log of a
// decay in (0.8, 1), beta in (0.05, 0.95).
struct Inputs {
  std::vector<uint16_t> half[5];
  std::vector<float> full[5];
  lumen_layer_inputs c{};

  Inputs(const lumen::LayerSpec& spec, int64_t tokens, lumen::DType dtype, std::mt19937& rng) {
    const int64_t counts[5] = {tokens * spec.num_heads * spec.key_dim,
                               tokens * spec.num_heads * spec.key_dim,
                               tokens * spec.num_value_heads * spec.value_dim,
                               tokens * spec.num_value_heads, tokens * spec.num_value_heads};
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> unit(0.05f, 0.95f), decay(0.8f, 1.0f);
    for (int i = 0; i < 5; ++i) {
      full[i].resize(counts[i]);
      for (float& x : full[i]) x = i < 3 ? normal(rng) : i == 3 ? std::log(decay(rng)) : unit(rng);
      if (dtype != lumen::DType::kFloat32) {
        half[i].resize(counts[i]);
        lumen::StoreFromFloat(full[i].data(), dtype, half[i].data(), counts[i]);
      }
    }
    lumen_layer_inputs_init(&c);
    c.dtype = static_cast<int32_t>(dtype);
    auto data = [&](int i) -> const void* {
      return dtype == lumen::DType::kFloat32 ? static_cast<const void*>(full[i].data())
                                             : static_cast<const void*>(half[i].data());
    };
    c.q = data(0), c.q_count = counts[0];
    c.k = data(1), c.k_count = counts[1];
    c.v = data(2), c.v_count = counts[2];
    c.g = data(3), c.g_count = counts[3];
    c.beta = data(4), c.beta_count = counts[4];
  }
};

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Times `call` `reps` times with the check on and off, alternating; prints one row.
template <typename Call>
void Row(const char* name, lumen::Engine& engine, int reps, Call&& call) {
  std::vector<double> on, off;
  for (int warm = 0; warm < 5; ++warm) call();
  for (int rep = 0; rep < reps; ++rep) {
    // Which mode goes first alternates, so that neither gains from following the other.
    const bool on_first = rep % 2 == 0;
    for (bool check : {on_first, !on_first}) {
      engine.set_check_input_values(check);
      const Clock::time_point start = Clock::now();
      call();
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      (check ? on : off).push_back(us);
    }
  }
  engine.set_check_input_values(true);
  const double checked = Median(on), anchor = Median(off);
  std::printf("%-22s %12.1f %12.1f %9.3f %+8.1f%%\n", name, checked, anchor, checked / anchor,
              100.0 * (checked / anchor - 1.0));
}

}  // namespace

int main(int argc, char** argv) {
  const Settings settings = Parse(argc, argv);
  lumen_layer_options options;
  lumen_layer_options_init(&options);
  options.family = LUMEN_FAMILY_GATED_DELTA_NET;
  options.num_heads = 16;
  options.num_value_heads = 32;
  options.key_dim = 128;
  options.value_dim = 128;
  lumen::LayerSpec spec;
  Check(lumen::LayerSpecFromOptions(options, &spec), "layer");
  absl::StatusOr<lumen::Model> model = lumen::Model::Create({spec});
  Check(model.status(), "model");
  lumen_engine_options engine_options;
  lumen_engine_options_init(&engine_options);
  engine_options.num_threads = settings.threads;
  absl::StatusOr<std::shared_ptr<lumen::Engine>> engine = lumen::Engine::Create(
      std::make_shared<const lumen::Model>(*std::move(model)), engine_options);
  Check(engine.status(), "engine");
  lumen::Engine& e = **engine;

  std::vector<std::unique_ptr<lumen::Session>> sessions;
  std::vector<lumen::Session*> batch;
  for (int i = 0; i < std::max(1, settings.batch); ++i) {
    absl::StatusOr<std::unique_ptr<lumen::Session>> session = e.CreateSession();
    Check(session.status(), "session");
    sessions.push_back(*std::move(session));
    batch.push_back(sessions.back().get());
  }
  lumen::Session* one[] = {batch[0]};

  std::printf("input check cost: gated_delta_net H=16 HV=32 K=V=128, %d thread(s), %d reps\n",
              settings.threads, settings.reps);
  std::printf("%-22s %12s %12s %9s %9s\n", "call", "checked us", "anchor us", "ratio", "cost");
  std::mt19937 rng(1);
  for (lumen::DType dtype : {lumen::DType::kFloat32, lumen::DType::kBFloat16}) {
    const std::string suffix = dtype == lumen::DType::kFloat32 ? " fp32" : " bf16";
    const auto run = [&](const char* name, int64_t tokens, bool batched, int reps) {
      Inputs inputs(spec, tokens, dtype, rng);
      std::vector<float> o(tokens * spec.num_value_heads * spec.value_dim);
      lumen_layer_output output;
      lumen_layer_output_init(&output);
      output.o = o.data();
      output.o_count = static_cast<int64_t>(o.size());
      const std::vector<int32_t> cu_seqlens = {0, static_cast<int32_t>(tokens)};
      Row((name + suffix).c_str(), e, reps, [&] {
        if (batched) {
          Check(e.Step(0, batch, inputs.c, output), name);
        } else if (tokens == 1) {
          Check(e.Step(0, one, inputs.c, output), name);
        } else {
          Check(e.Prefill(0, one, cu_seqlens, inputs.c, output), name);
        }
      });
    };
    run("decode", 1, false, settings.reps);
    run("prefill", settings.tokens, false, std::max(5, settings.reps / 20));
    run("batch", settings.batch, true, settings.reps);
  }
  return 0;
}
