// Side by side, on the same machine and the same inputs: lumen's CPU backend through its
// public C API against ggml's CPU ops for the families ggml has an op for, at the shape of
// `lumen bench --cpu` (HV = H = 32, K = V = 128, fp32 state, 2 MiB per session).
//
//   gated_delta_net  ggml_gated_delta_net, scalar gate g [1, H, T, N]
//   kda              ggml_gated_delta_net, per-channel gate g [K, H, T, N]
//   ssd (Mamba-2)    ggml_ssm_scan with a scalar A per head
//   gla              ggml_gated_linear_attn
//   kda              ggml_rwkv_wkv7, which computes kda exactly when fed r = scale q,
//                    w = exp(g), k' = beta k, a = -exp(g) k, b = beta k (elementwise; that
//                    preparation, separate ops in a model's graph, is not timed)
//
// ggml's ops take their inputs prepared (unit-norm q and k, beta in [0, 1], log-gates; GLA's
// gate as exp(g); Mamba-2's raw dt with softplus inside the op), so lumen runs each layer
// with the options that make it compute the same function of the same buffers: no
// qk_l2norm, no beta_sigmoid; ssd with gate_raw, A_log = log(-A) and dt_bias = 0. Before
// timing, both start from the same random state and their outputs and final states are
// compared (relative RMS; ggml's state layouts transposed where they differ).
//
// ggml's graphs are built once per case and computed repeatedly. The state is updated as
// llama.cpp's models do it: the op writes the new state into its result and a ggml_cpy in
// the same graph copies it back into the state tensor the op reads ("ggml"); decode also
// times the op alone, without the copy back ("ggml op"). lumen updates the state in place.
//
// Built and run by tools/ggml_compare/run_ggml_compare.sh; not part of the build or of ctest.

#include <lumen/lumen.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int64_t kHeads = 32;  // H = HV
constexpr int64_t kDim = 128;   // K = V
constexpr int64_t kStateFloats = kHeads * kDim * kDim;

using Clock = std::chrono::steady_clock;

void Fail(const char* what) {
  std::fprintf(stderr, "ggml_compare: %s\n", what);
  std::exit(1);
}

void Check(lumen_status status, const char* call) {
  if (status == LUMEN_OK) return;
  std::fprintf(stderr, "ggml_compare: %s failed: %s (%s)\n", call, lumen_status_string(status),
               lumen_last_error_message());
  std::exit(1);
}

// ---------------------------------------------------------------------------------------
// Timing

struct Timing {
  double best = 0;    // seconds per call
  double spread = 0;  // worst / best - 1 over the repeats
};

struct TimingOptions {
  int repeats = 20;
  double min_seconds = 0.02;
};

// One window of a measurement: returns seconds per call over at least min_seconds.
using Window = std::function<double(double min_seconds)>;

Window CallsOf(std::function<void()> call) {
  return [call](double min_seconds) {
    int64_t calls = 0;
    const Clock::time_point start = Clock::now();
    double elapsed = 0;
    do {
      call();
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < min_seconds);
    return elapsed / static_cast<double>(calls);
  };
}

// Best of `repeats` windows of each measurement, taken in turn (A B C A B C ...), so that
// the machine's changes of speed fall on all of them alike. One warm-up window each first.
// Idle workers of one library (OpenMP's, lumen's pool) spin a while after a call, so each
// window starts after a short sleep.
std::vector<Timing> TimeInTurn(const std::vector<Window>& windows, const TimingOptions& options) {
  std::vector<std::vector<double>> seconds(windows.size());
  for (int r = -1; r < options.repeats; ++r) {
    for (size_t i = 0; i < windows.size(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const double s = windows[i](r < 0 ? 0.0 : options.min_seconds);
      if (r >= 0) seconds[i].push_back(s);
    }
  }
  std::vector<Timing> timings;
  for (const std::vector<double>& s : seconds) {
    const auto [lo, hi] = std::minmax_element(s.begin(), s.end());
    timings.push_back(Timing{*lo, *hi / *lo - 1.0});
  }
  return timings;
}

// ---------------------------------------------------------------------------------------
// The anchor: an in-place read-modify-write pass over the same state bytes on the same
// number of threads (a small copy of what `lumen bench --cpu` measures).

class ThreadTeam {
 public:
  explicit ThreadTeam(int threads) : threads_(threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { Work(i); });
  }
  ~ThreadTeam() {
    stop_.store(true);
    generation_.fetch_add(1);
    for (std::thread& t : workers_) t.join();
  }
  void Run(const std::function<void(int index, int count)>& fn) {
    fn_ = &fn;
    done_.store(0);
    generation_.fetch_add(1, std::memory_order_release);
    fn(0, threads_);
    while (done_.load(std::memory_order_acquire) != threads_ - 1) {
    }
  }

 private:
  void Work(int index) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t now;
      while ((now = generation_.load(std::memory_order_acquire)) == seen) {
      }
      seen = now;
      if (stop_.load()) return;
      (*fn_)(index, threads_);
      done_.fetch_add(1, std::memory_order_release);
    }
  }
  int threads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int, int)>* fn_ = nullptr;
};

// [begin, end) of part `index` of `count` over `floats` floats, cut on cache lines.
void Slice(int64_t floats, int index, int count, int64_t* begin, int64_t* end) {
  const int64_t lines = (floats + 15) / 16;
  *begin = std::min(floats, lines * index / count * 16);
  *end = std::min(floats, lines * (index + 1) / count * 16);
}

// Windows of an in-place read-modify-write pass (s = a s + b), the least work that reads
// and writes every element of a state once, over `sessions` states on `threads` threads.
// Each window makes its own team, whose workers spin only while it lasts.
class StateAnchor {
 public:
  StateAnchor(int64_t sessions, int threads)
      : floats_(sessions * kStateFloats), threads_(threads), a_(floats_, 0.5f) {}

  Window ReadModifyWrite() {
    return [this](double min_seconds) {
      return Run(min_seconds, [this](int64_t begin, int64_t end) {
        float* s = a_.data();
        for (int64_t i = begin; i < end; ++i) s[i] = 0.999f * s[i] + 1e-6f;
      });
    };
  }

 private:
  double Run(double min_seconds, const std::function<void(int64_t, int64_t)>& part) {
    ThreadTeam team(threads_);
    const std::function<void(int, int)> pass = [&](int index, int count) {
      int64_t begin, end;
      Slice(floats_, index, count, &begin, &end);
      part(begin, end);
    };
    team.Run(pass);  // the team's threads start and touch their slices
    return CallsOf([&] { team.Run(pass); })(min_seconds);
  }

  int64_t floats_;
  int threads_;
  std::vector<float> a_;
};

// ---------------------------------------------------------------------------------------
// Families and their inputs

enum class Family { kGatedDeltaNet, kKda, kSsd, kGla, kKdaAsRwkv7 };

struct FamilyInfo {
  Family family;
  const char* name;
  const char* ggml_op;
};

constexpr FamilyInfo kFamilies[] = {
    {Family::kGatedDeltaNet, "gated_delta_net", "GATED_DELTA_NET (scalar g)"},
    {Family::kKda, "kda", "GATED_DELTA_NET (vector g)"},
    {Family::kSsd, "ssd", "SSM_SCAN (Mamba-2)"},
    {Family::kGla, "gla", "GATED_LINEAR_ATTN"},
    {Family::kKdaAsRwkv7, "kda", "RWKV_WKV7 (kda's inputs mapped onto it)"},
};

bool IsDelta(Family f) {
  return f == Family::kGatedDeltaNet || f == Family::kKda || f == Family::kKdaAsRwkv7;
}
bool VectorGate(Family f) {
  return f == Family::kKda || f == Family::kGla || f == Family::kKdaAsRwkv7;
}

// Prepared inputs for `tokens` rows ([tokens, H, K] and so on), the same buffers for both
// libraries; a decode of N sessions reads the first N rows as [N, H, K].
struct Inputs {
  std::vector<float> q, k, v;  // [T, H, K], [T, H, K], [T, HV, V]
  std::vector<float> g;        // lumen's g: [T, HV] or [T, HV, K]; ssd: the raw dt
  std::vector<float> ggml_g;   // what ggml's op takes: gla exp(g), others the same as g
  std::vector<float> beta;     // [T, HV]
  std::vector<float> a_log;    // [HV], ssd: A = -exp(A_log)
  std::vector<float> ssm_a;    // [HV], ssd: A for ggml
  // RWKV-7's inputs for kda, [T, HV, K] each: r = scale q, w = exp(g), k' = beta k,
  // a = -exp(g) k, b = beta k.
  std::vector<float> rwkv_r, rwkv_w, rwkv_k, rwkv_a, rwkv_b;

  Inputs(Family family, int64_t tokens, uint64_t seed) {
    std::mt19937_64 rng(seed);
    auto fill = [&](std::vector<float>& x, int64_t n, float lo, float hi) {
      std::uniform_real_distribution<float> u(lo, hi);
      x.resize(n);
      for (float& e : x) e = u(rng);
    };
    const int64_t rows = tokens * kHeads;
    fill(q, rows * kDim, -1.0f, 1.0f);
    fill(k, rows * kDim, -1.0f, 1.0f);
    fill(v, rows * kDim, -1.0f, 1.0f);
    if (IsDelta(family)) {  // the delta rule expects unit-norm keys; llama.cpp normalises q too
      for (std::vector<float>* x : {&q, &k}) {
        for (int64_t r = 0; r < rows; ++r) {
          float* row = x->data() + r * kDim;
          double sum = 0;
          for (int64_t i = 0; i < kDim; ++i) sum += double{row[i]} * row[i];
          const float inv = static_cast<float>(1.0 / std::sqrt(sum + 1e-6));
          for (int64_t i = 0; i < kDim; ++i) row[i] *= inv;
        }
      }
      fill(beta, rows, 0.0f, 1.0f);
    }
    if (family == Family::kSsd) {
      // dt = softplus(raw) in about [1e-3, 1e-1], as Mamba-2 initialises it; A ~ -U(1, 16).
      fill(g, rows, -6.9f, -2.3f);
      a_log.resize(kHeads);
      ssm_a.resize(kHeads);
      for (int64_t h = 0; h < kHeads; ++h) {
        a_log[h] = std::log(1.0f + 15.0f * (h + 0.5f) / kHeads);
        ssm_a[h] = -std::exp(a_log[h]);
      }
    } else {
      fill(g, VectorGate(family) ? rows * kDim : rows, -0.08f, -0.005f);
    }
    ggml_g = g;
    if (family == Family::kGla) {
      for (float& e : ggml_g) e = std::exp(e);
    }
    if (family == Family::kKdaAsRwkv7) {
      const float scale = 1.0f / std::sqrt(static_cast<float>(kDim));
      const int64_t n = rows * kDim;
      rwkv_r.resize(n);
      rwkv_w.resize(n);
      rwkv_k.resize(n);
      rwkv_a.resize(n);
      rwkv_b.resize(n);
      for (int64_t i = 0; i < n; ++i) {
        const float b = beta[i / kDim] * k[i];
        rwkv_r[i] = scale * q[i];
        rwkv_w[i] = std::exp(g[i]);
        rwkv_k[i] = b;
        rwkv_a[i] = -rwkv_w[i] * k[i];
        rwkv_b[i] = b;
      }
    }
  }
};

// ---------------------------------------------------------------------------------------
// lumen through its public API

struct LumenLayer {
  lumen_model* model = nullptr;
  lumen_engine* engine = nullptr;
  std::vector<lumen_session*> sessions;

  LumenLayer(const FamilyInfo& info, const Inputs& in, int threads, int64_t num_sessions) {
    lumen_model_builder* builder = nullptr;
    Check(lumen_model_builder_create(&builder), "lumen_model_builder_create");
    lumen_layer_options options;
    lumen_layer_options_init(&options);
    options.num_heads = kHeads;
    options.num_value_heads = kHeads;
    options.key_dim = kDim;
    options.value_dim = kDim;
    switch (info.family) {
      case Family::kGatedDeltaNet: options.family = LUMEN_FAMILY_GATED_DELTA_NET; break;
      case Family::kKda:
      case Family::kKdaAsRwkv7: options.family = LUMEN_FAMILY_KDA; break;
      case Family::kGla: options.family = LUMEN_FAMILY_GLA; break;
      case Family::kSsd:
        options.family = LUMEN_FAMILY_SSD;
        options.gate_raw = 1;
        options.scale = 1.0f;
        break;
    }
    int32_t layer = 0;
    Check(lumen_model_builder_add_layer(builder, &options, &layer), "add_layer");
    if (info.family == Family::kSsd) {
      const std::vector<float> dt_bias(kHeads, 0.0f);
      Check(lumen_model_builder_set_param(builder, layer, LUMEN_PARAM_A_LOG, in.a_log.data(),
                                          kHeads),
            "set_param(A_log)");
      Check(lumen_model_builder_set_param(builder, layer, LUMEN_PARAM_DT_BIAS, dt_bias.data(),
                                          kHeads),
            "set_param(dt_bias)");
    }
    Check(lumen_model_builder_build(builder, &model), "lumen_model_builder_build");
    lumen_model_builder_destroy(builder);
    lumen_engine_options engine_options;
    lumen_engine_options_init(&engine_options);
    engine_options.backend = LUMEN_BACKEND_CPU;
    engine_options.num_threads = threads;
    Check(lumen_engine_create(model, &engine_options, &engine), "lumen_engine_create");
    sessions.resize(num_sessions);
    for (lumen_session*& s : sessions) Check(lumen_session_create(engine, &s), "session_create");
  }
  ~LumenLayer() {
    for (lumen_session* s : sessions) lumen_session_destroy(s);
    lumen_engine_destroy(engine);
    lumen_model_destroy(model);
  }
  LumenLayer(const LumenLayer&) = delete;
  LumenLayer& operator=(const LumenLayer&) = delete;

  // Inputs for `tokens` rows, from row 0.
  static lumen_layer_inputs MakeInputs(Family family, const Inputs& in, int64_t tokens) {
    lumen_layer_inputs inputs;
    lumen_layer_inputs_init(&inputs);
    const int64_t rows = tokens * kHeads;
    inputs.q = in.q.data();
    inputs.q_count = rows * kDim;
    inputs.k = in.k.data();
    inputs.k_count = rows * kDim;
    inputs.v = in.v.data();
    inputs.v_count = rows * kDim;
    inputs.g = in.g.data();
    inputs.g_count = VectorGate(family) ? rows * kDim : rows;
    if (IsDelta(family)) {
      inputs.beta = in.beta.data();
      inputs.beta_count = rows;
    }
    return inputs;
  }

  // One token for each session: rows 0..N-1 are session i's token.
  void Step(Family family, const Inputs& in, float* o) {
    const int64_t n = static_cast<int64_t>(sessions.size());
    lumen_layer_inputs inputs = MakeInputs(family, in, n);
    lumen_layer_output output;
    lumen_layer_output_init(&output);
    output.o = o;
    output.o_count = n * kHeads * kDim;
    Check(lumen_engine_step_batch(engine, 0, sessions.data(), static_cast<int32_t>(n), &inputs,
                                  &output),
          "lumen_engine_step_batch");
  }

  // `tokens` tokens into session 0.
  void Prefill(Family family, const Inputs& in, int64_t tokens, float* o) {
    lumen_layer_inputs inputs = MakeInputs(family, in, tokens);
    lumen_layer_output output;
    lumen_layer_output_init(&output);
    output.o = o;
    output.o_count = tokens * kHeads * kDim;
    Check(lumen_session_prefill(sessions[0], 0, static_cast<int32_t>(tokens), &inputs, &output),
          "lumen_session_prefill");
  }
};

// ---------------------------------------------------------------------------------------
// ggml: one graph per case, N sequences of T tokens each

struct GgmlGraph {
  Family family;
  int64_t seqs, tokens;
  ggml_context* ctx = nullptr;
  ggml_backend_buffer_t buffer = nullptr;
  ggml_cgraph* graph = nullptr;
  ggml_tensor *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
  ggml_tensor *a = nullptr, *ids = nullptr;
  ggml_tensor *rwkv_a = nullptr, *rwkv_b = nullptr;  // RWKV-7's a and b (q is r, g is w)
  ggml_tensor* state = nullptr;  // the state the op reads (and the copy back writes)
  ggml_tensor* result = nullptr;  // output rows, then the new state

  GgmlGraph(Family f, int64_t num_seqs, int64_t num_tokens, bool copy_back,
            ggml_backend_t backend)
      : family(f), seqs(num_seqs), tokens(num_tokens) {
    ggml_init_params params = {ggml_tensor_overhead() * 16 + ggml_graph_overhead(), nullptr,
                               /*no_alloc=*/true};
    ctx = ggml_init(params);
    if (ctx == nullptr) Fail("ggml_init");
    const int64_t D = kDim, H = kHeads, T = tokens, N = seqs;
    switch (family) {
      case Family::kGatedDeltaNet:
      case Family::kKda:
        q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, H, T, N);
        k = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, H, T, N);
        v = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, H, T, N);
        g = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, family == Family::kKda ? D : 1, H, T, N);
        beta = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 1, H, T, N);
        state = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, D, H, N);
        result = ggml_gated_delta_net(ctx, q, k, v, g, beta, state, 1);
        break;
      case Family::kSsd:
        state = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, D, H, N);  // {d_state, head_dim}
        v = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, H, T, N);      // x
        g = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, H, T, N);         // dt
        a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 1, H);
        k = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, H, T, N);      // B, groups = H
        q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, H, T, N);      // C
        ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, N);
        result = ggml_ssm_scan(ctx, state, v, g, a, k, q, ids, 1);
        break;
      case Family::kGla:
        k = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, H, T * N);
        v = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, H, T * N);
        q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, H, T * N);
        g = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, H, T * N);
        state = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, D * D * H, N);
        result = ggml_gated_linear_attn(ctx, k, v, q, g, state, 1.0f / std::sqrt(float(D)));
        break;
      case Family::kKdaAsRwkv7:
        q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, H, T * N);
        g = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, H, T * N);
        k = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, H, T * N);
        v = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, H, T * N);
        rwkv_a = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, H, T * N);
        rwkv_b = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, H, T * N);
        state = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, D * D * H, N);
        result = ggml_rwkv_wkv7(ctx, q, g, k, v, rwkv_a, rwkv_b, state);
        break;
    }
    graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, result);
    if (copy_back) {
      ggml_tensor* new_state = ggml_view_1d(ctx, result, N * kStateFloats,
                                            OutputFloats() * sizeof(float));
      ggml_build_forward_expand(graph, ggml_cpy(ctx, new_state, state));
    }
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend);
    if (buffer == nullptr) Fail("ggml_backend_alloc_ctx_tensors");
    if (ids != nullptr) {
      int32_t* id = static_cast<int32_t*>(ids->data);
      for (int64_t i = 0; i < N; ++i) id[i] = static_cast<int32_t>(i);
    }
  }
  ~GgmlGraph() {
    ggml_backend_buffer_free(buffer);
    ggml_free(ctx);
  }
  GgmlGraph(const GgmlGraph&) = delete;
  GgmlGraph& operator=(const GgmlGraph&) = delete;

  int64_t OutputFloats() const { return seqs * tokens * kHeads * kDim; }

  // Rows 0..N*T-1 of the inputs: sequence s, token t is row s * T + t.
  void SetInputs(const Inputs& in) {
    auto put = [](ggml_tensor* t, const std::vector<float>& src) {
      if (src.size() * sizeof(float) < ggml_nbytes(t)) Fail("inputs too short");
      std::memcpy(t->data, src.data(), ggml_nbytes(t));
    };
    put(v, in.v);
    if (family == Family::kKdaAsRwkv7) {
      put(q, in.rwkv_r);
      put(g, in.rwkv_w);
      put(k, in.rwkv_k);
      put(rwkv_a, in.rwkv_a);
      put(rwkv_b, in.rwkv_b);
      return;
    }
    put(q, in.q);
    put(k, in.k);
    put(g, in.ggml_g);
    if (beta != nullptr) put(beta, in.beta);
    if (a != nullptr) put(a, in.ssm_a);
  }

  // State of sequence s from/to lumen's canonical [HV, K, V]; ggml keeps [HV, V, K] but for
  // GLA.
  bool Transposed() const { return family != Family::kGla; }
  void SetState(int64_t s, const float* canonical) {
    float* dst = static_cast<float*>(state->data) + s * kStateFloats;
    CopyState(canonical, dst, Transposed());
  }
  void GetNewState(int64_t s, float* canonical) const {
    const float* src = static_cast<const float*>(result->data) + OutputFloats() + s * kStateFloats;
    CopyState(src, canonical, Transposed());
  }
  const float* Output() const { return static_cast<const float*>(result->data); }

  static void CopyState(const float* from, float* to, bool transpose) {
    if (!transpose) {
      std::memcpy(to, from, kStateFloats * sizeof(float));
      return;
    }
    for (int64_t h = 0; h < kHeads; ++h) {
      const float* f = from + h * kDim * kDim;
      float* t = to + h * kDim * kDim;
      for (int64_t i = 0; i < kDim; ++i) {
        for (int64_t j = 0; j < kDim; ++j) t[j * kDim + i] = f[i * kDim + j];
      }
    }
  }

  void Compute(ggml_backend_t backend) {
    if (ggml_backend_graph_compute(backend, graph) != GGML_STATUS_SUCCESS) {
      Fail("ggml_backend_graph_compute");
    }
  }
};

// ---------------------------------------------------------------------------------------
// Agreement

double RelativeRms(const float* got, const float* want, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double{got[i]} - want[i];
    diff += d * d;
    norm += double{want[i]} * want[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

struct Agreement {
  double output = 0;
  double state = 0;
};

// From the same random states, N sessions of T tokens each through both libraries (lumen:
// a batched step for T = 1, a prefill for N = 1); relative RMS of lumen's o and final states
// against ggml's.
Agreement CheckAgreement(const FamilyInfo& info, const Inputs& in, int64_t seqs, int64_t tokens,
                         ggml_backend_t backend) {
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> initial(seqs * kStateFloats);
  for (float& e : initial) e = u(rng);

  GgmlGraph graph(info.family, seqs, tokens, /*copy_back=*/false, backend);
  graph.SetInputs(in);
  for (int64_t s = 0; s < seqs; ++s) graph.SetState(s, initial.data() + s * kStateFloats);
  graph.Compute(backend);

  LumenLayer layer(info, in, 1, seqs);
  for (int64_t s = 0; s < seqs; ++s) {
    Check(lumen_session_write_state(layer.sessions[s], 0, LUMEN_STATE_MATRIX,
                                    initial.data() + s * kStateFloats, kStateFloats),
          "lumen_session_write_state");
  }
  std::vector<float> o(seqs * tokens * kHeads * kDim);
  if (tokens == 1) {
    layer.Step(info.family, in, o.data());
  } else {
    layer.Prefill(info.family, in, tokens, o.data());
  }
  Agreement agreement;
  agreement.output = RelativeRms(o.data(), graph.Output(), static_cast<int64_t>(o.size()));
  std::vector<float> lumen_state(kStateFloats), ggml_state(kStateFloats);
  double worst = 0;
  for (int64_t s = 0; s < seqs; ++s) {
    Check(lumen_session_read_state(layer.sessions[s], 0, LUMEN_STATE_MATRIX, lumen_state.data(),
                                   kStateFloats),
          "lumen_session_read_state");
    graph.GetNewState(s, ggml_state.data());
    worst = std::max(worst, RelativeRms(lumen_state.data(), ggml_state.data(), kStateFloats));
  }
  agreement.state = worst;
  return agreement;
}

// ---------------------------------------------------------------------------------------
// Report

std::string Us(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), seconds < 1e-2 ? "%.1f us" : "%.2f ms",
                seconds < 1e-2 ? seconds * 1e6 : seconds * 1e3);
  return buf;
}

std::string WithSpread(const Timing& t) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%s (%.0f%%)", Us(t.best).c_str(), t.spread * 100);
  return buf;
}

struct Options {
  std::vector<int> threads = {1, 2};
  std::vector<int64_t> decode_sessions = {1, 8};
  std::vector<int64_t> prefill_tokens = {1024, 4096};
  std::vector<std::string> families;  // empty: all
  TimingOptions timing;
};

std::vector<int64_t> ParseList(const char* text) {
  std::vector<int64_t> values;
  for (const char* p = text; *p != '\0';) {
    char* end = nullptr;
    values.push_back(std::strtoll(p, &end, 10));
    if (end == p || values.back() <= 0) Fail("bad number list");
    p = *end == ',' ? end + 1 : end;
  }
  return values;
}

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (arg == "--help") {
      std::printf(
          "ggml_compare [--threads 1,2] [--sessions 1,8] [--tokens 1024,4096] [--repeats 20]\n"
          "             [--min-seconds 0.02] [--family NAME]... [--quick]\n"
          "Times lumen against ggml's CPU ops on the same inputs (HV = 32, K = V = 128).\n");
      std::exit(0);
    }
    if (arg == "--quick") {  // a smoke run: small prefills, one repeat
      options.prefill_tokens = {64};
      options.timing = {1, 0.001};
      continue;
    }
    if (value == nullptr) Fail("option needs a value (see --help)");
    ++i;
    if (arg == "--threads") {
      options.threads.clear();
      for (int64_t t : ParseList(value)) options.threads.push_back(static_cast<int>(t));
    } else if (arg == "--sessions") {
      options.decode_sessions = ParseList(value);
    } else if (arg == "--tokens") {
      options.prefill_tokens = ParseList(value);
    } else if (arg == "--repeats") {
      options.timing.repeats = std::max(1, std::atoi(value));
    } else if (arg == "--min-seconds") {
      options.timing.min_seconds = std::atof(value);
    } else if (arg == "--family") {
      options.families.push_back(value);
    } else {
      Fail("unknown option (see --help)");
    }
  }
  return options;
}

void RunFamily(const FamilyInfo& info, const Options& options, ggml_backend_t backend) {
  const int64_t max_tokens =
      std::max(*std::max_element(options.decode_sessions.begin(), options.decode_sessions.end()),
               *std::max_element(options.prefill_tokens.begin(), options.prefill_tokens.end()));
  const Inputs in(info.family, max_tokens, 1234);

  std::printf("\n== %s: lumen %s against ggml %s\n", info.name, info.name, info.ggml_op);
  ggml_backend_cpu_set_n_threads(backend, 1);
  for (int64_t n : options.decode_sessions) {
    const Agreement a = CheckAgreement(info, in, n, 1, backend);
    std::printf("agreement, decode N = %lld: relative RMS of o %.1e, of the final state %.1e\n",
                static_cast<long long>(n), a.output, a.state);
  }
  for (int64_t t : options.prefill_tokens) {
    const Agreement a = CheckAgreement(info, in, 1, t, backend);
    std::printf("agreement, prefill T = %lld: relative RMS of o %.1e, of the final state %.1e\n",
                static_cast<long long>(t), a.output, a.state);
  }

  std::printf(
      "decode, one token for each of N sequences, best (spread); ggml: op + copy of the new\n"
      "state back (as llama.cpp's graphs), ggml op: the op alone; RMW over the same states:\n");
  std::printf("%3s %3s | %15s %15s %15s %15s | %9s %9s %9s %9s\n", "N", "thr", "ggml",
              "ggml op", "lumen", "RMW", "ggml/lum", "op/lum", "lum/RMW", "op/RMW");
  for (int64_t n : options.decode_sessions) {
    for (int threads : options.threads) {
      ggml_backend_cpu_set_n_threads(backend, threads);
      GgmlGraph with_copy(info.family, n, 1, /*copy_back=*/true, backend);
      GgmlGraph op_only(info.family, n, 1, /*copy_back=*/false, backend);
      const std::vector<float> zero(kStateFloats, 0.0f);
      for (GgmlGraph* g : {&with_copy, &op_only}) {
        g->SetInputs(in);
        for (int64_t s = 0; s < n; ++s) g->SetState(s, zero.data());
      }
      LumenLayer layer(info, in, threads, n);
      std::vector<float> o(n * kHeads * kDim);
      StateAnchor anchor(n, threads);
      const std::vector<Timing> t = TimeInTurn(
          {CallsOf([&] { with_copy.Compute(backend); }),
           CallsOf([&] { op_only.Compute(backend); }),
           CallsOf([&] { layer.Step(info.family, in, o.data()); }), anchor.ReadModifyWrite()},
          options.timing);
      std::printf("%3lld %3d | %15s %15s %15s %15s | %8.2fx %8.2fx %8.2fx %8.2fx\n",
                  static_cast<long long>(n), threads, WithSpread(t[0]).c_str(),
                  WithSpread(t[1]).c_str(), WithSpread(t[2]).c_str(), WithSpread(t[3]).c_str(),
                  t[0].best / t[2].best, t[1].best / t[2].best, t[2].best / t[3].best,
                  t[1].best / t[3].best);
    }
  }

  std::printf("prefill, T tokens of one sequence in one call, best (spread):\n");
  std::printf("%6s %3s | %15s %15s | %9s\n", "T", "thr", "ggml", "lumen", "ggml/lum");
  for (int64_t tokens : options.prefill_tokens) {
    for (int threads : options.threads) {
      ggml_backend_cpu_set_n_threads(backend, threads);
      GgmlGraph graph(info.family, 1, tokens, /*copy_back=*/true, backend);
      const std::vector<float> zero(kStateFloats, 0.0f);
      graph.SetInputs(in);
      graph.SetState(0, zero.data());
      LumenLayer layer(info, in, threads, 1);
      std::vector<float> o(tokens * kHeads * kDim);
      const std::vector<Timing> t =
          TimeInTurn({CallsOf([&] { graph.Compute(backend); }),
                      CallsOf([&] { layer.Prefill(info.family, in, tokens, o.data()); })},
                     options.timing);
      std::printf("%6lld %3d | %15s %15s | %8.2fx\n", static_cast<long long>(tokens), threads,
                  WithSpread(t[0]).c_str(), WithSpread(t[1]).c_str(), t[0].best / t[1].best);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress shows when piped to a file
  const Options options = ParseOptions(argc, argv);
  ggml_backend_t backend = ggml_backend_cpu_init();
  if (backend == nullptr) Fail("ggml_backend_cpu_init");

  std::printf("lumen %s against ggml %s (commit %s); HV = H = %lld, K = V = %lld, fp32 state\n",
              lumen_version_string(), ggml_version(), ggml_commit(),
              static_cast<long long>(kHeads), static_cast<long long>(kDim));
  std::printf(
      "timings: best of %d windows of at least %.3f s each, the measurements of a row taken in\n"
      "turn; spread = worst / best - 1\n",
              options.timing.repeats, options.timing.min_seconds);

  for (const FamilyInfo& info : kFamilies) {
    if (!options.families.empty() &&
        std::find(options.families.begin(), options.families.end(), info.name) ==
            options.families.end()) {
      continue;
    }
    RunFamily(info, options, backend);
  }
  ggml_backend_free(backend);
  return 0;
}
