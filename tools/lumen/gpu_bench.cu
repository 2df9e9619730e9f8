// GPU decode and prefill through the public C API, timed with CUDA events.
//
// Decode: one lumen_engine_step_batch of N sessions (bf16 inputs and output in device
// memory, fp32 and then bf16 state, HV = 32, H = 16, K = V = 128) captured in a CUDA graph;
// the time per step is the mean over graph replays. The state is read and written once per
// step, so the effective bandwidth is 2 * N * HV * K * V * (4 or 2) bytes / t, set beside a
// device-to-device copy (bytes read + written) of a buffer far larger than L2. Token runs:
// 2, 4 and 8 tokens per session in one varlen prefill, beside one token's step; tentative
// tokens (verify and commit) beside a plain step.
// Prefill: lumen_engine_prefill_varlen over B sequences of T tokens, device buffers.

#include "tools/lumen/gpu_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tools/lumen/lumen_handles.h"

namespace lumen::cuda {
namespace {

constexpr int32_t kHeads = 16, kValueHeads = 32, kKeyDim = 128, kValueDim = 128;

constexpr char kProgram[] = "lumen bench";

void Check(lumen_status status, const char* call) { cli::CheckAs(kProgram, status, call); }

void CheckCuda(cudaError_t error, const char* call) {
  if (error != cudaSuccess) {
    cli::FailAs(kProgram, std::string(call) + " failed: " + cudaGetErrorString(error));
  }
}

struct Options {
  bool quick = false;
  bool decode_only = false;
  std::vector<std::string> families;  // empty: every family
  std::vector<int32_t> sessions{1, 8, 64, 256, 1024};
};

bool Selected(const Options& options, const char* family) {
  return options.families.empty() ||
         std::find(options.families.begin(), options.families.end(), family) !=
             options.families.end();
}

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto list = [&] {
      if (i + 1 >= argc) cli::FailAs(kProgram, "missing value for " + flag);
      std::vector<std::string> items;
      std::stringstream stream(argv[++i]);
      for (std::string item; std::getline(stream, item, ',');) items.push_back(item);
      return items;
    };
    if (flag == "--gpu") {
    } else if (flag == "--quick") {
      options.quick = true;
    } else if (flag == "--decode") {
      options.decode_only = true;
    } else if (flag == "--families") {
      options.families = list();
    } else if (flag == "--sessions") {
      options.sessions.clear();
      for (const std::string& item : list()) {
        char* end = nullptr;
        const long value = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || value < 1 || value > 65536) {
          cli::FailAs(kProgram, "bad session count '" + item + "'");
        }
        options.sessions.push_back(static_cast<int32_t>(value));
      }
    } else {
      std::fprintf(stderr,
                   "usage: lumen bench --gpu [--quick] [--decode] [--families a,b] "
                   "[--sessions 1,1024]\n");
      std::exit(2);
    }
  }
  return options;
}

uint16_t ToBFloat16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// A device buffer of `count` random bf16 values drawn by `draw`. Long buffers repeat a block
// of 2^20 draws at shifting offsets: drawing hundreds of millions of values would take the
// host longer than the whole benchmark.
template <typename Draw>
void* DeviceBFloat16(int64_t count, Draw draw) {
  constexpr int64_t kBlock = int64_t{1} << 20;
  std::vector<uint16_t> block(std::min(count, kBlock) + 1);
  for (uint16_t& x : block) x = ToBFloat16(draw());
  std::vector<uint16_t> host(count);
  const int64_t period = static_cast<int64_t>(block.size());  // one more than a block
  for (int64_t at = 0, shift = 0; at < count; at += kBlock, shift = (shift + 1) % period) {
    // host[at + i] = block[(shift + i) % period] for i < n, as two straight copies.
    const int64_t n = std::min(kBlock, count - at);
    const int64_t first = std::min(n, period - shift);
    std::copy_n(block.begin() + shift, first, host.begin() + at);
    std::copy_n(block.begin(), n - first, host.begin() + at + first);
  }
  void* device = nullptr;
  CheckCuda(cudaMalloc(&device, count * 2), "cudaMalloc");
  CheckCuda(cudaMemcpy(device, host.data(), count * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  return device;
}

// Every family, in the order the tables print them (names: lumen_family_string).
const int32_t kFamilies[] = {LUMEN_FAMILY_LINEAR_ATTN, LUMEN_FAMILY_RETENTION,
                             LUMEN_FAMILY_SSD,         LUMEN_FAMILY_GLA,
                             LUMEN_FAMILY_DELTA_NET,   LUMEN_FAMILY_GATED_DELTA_NET,
                             LUMEN_FAMILY_KDA};

bool HasG(int32_t f) {
  return f == LUMEN_FAMILY_SSD || f == LUMEN_FAMILY_GLA || f == LUMEN_FAMILY_GATED_DELTA_NET ||
         f == LUMEN_FAMILY_KDA;
}
bool VectorGate(int32_t f) { return f == LUMEN_FAMILY_GLA || f == LUMEN_FAMILY_KDA; }
bool HasBeta(int32_t f) {
  return f == LUMEN_FAMILY_DELTA_NET || f == LUMEN_FAMILY_GATED_DELTA_NET ||
         f == LUMEN_FAMILY_KDA;
}

// One layer's model and a CUDA engine for it; the delta family takes raw gates, logits and
// in-layer L2 norms, as Qwen3-Next and Kimi Linear do.
struct Bench {
  lumen_model* model = nullptr;
  lumen_engine* engine = nullptr;
  int32_t family = 0;

  Bench(int32_t f, int32_t state_dtype) : family(f) {
    lumen_model_builder* builder = nullptr;
    Check(lumen_model_builder_create(&builder), "lumen_model_builder_create");
    lumen_layer_options options;
    lumen_layer_options_init(&options);
    options.family = f;
    options.num_heads = kHeads;
    options.num_value_heads = kValueHeads;
    options.key_dim = kKeyDim;
    options.value_dim = kValueDim;
    options.state_dtype = state_dtype;
    const bool real = f == LUMEN_FAMILY_GATED_DELTA_NET || f == LUMEN_FAMILY_KDA;
    if (HasBeta(f)) options.qk_l2norm = options.beta_sigmoid = 1;
    if (real) options.gate_raw = 1;
    Check(lumen_model_builder_add_layer(builder, &options, nullptr), "add_layer");
    if (real) {
      std::vector<float> a_log(kValueHeads, std::log(4.0f));
      std::vector<float> dt_bias(f == LUMEN_FAMILY_KDA ? kValueHeads * kKeyDim : kValueHeads,
                                 -4.0f);
      Check(lumen_model_builder_set_param(builder, 0, LUMEN_PARAM_A_LOG, a_log.data(),
                                          static_cast<int64_t>(a_log.size())),
            "set_param");
      Check(lumen_model_builder_set_param(builder, 0, LUMEN_PARAM_DT_BIAS, dt_bias.data(),
                                          static_cast<int64_t>(dt_bias.size())),
            "set_param");
    }
    Check(lumen_model_builder_build(builder, &model), "lumen_model_builder_build");
    lumen_model_builder_destroy(builder);
    lumen_engine_options engine_options;
    lumen_engine_options_init(&engine_options);
    engine_options.backend = LUMEN_BACKEND_CUDA;
    Check(lumen_engine_create(model, &engine_options, &engine), "lumen_engine_create");
  }
  ~Bench() {
    lumen_engine_destroy(engine);
    lumen_model_destroy(model);
  }
};

// Device inputs for `tokens` tokens of a family, bf16.
struct Inputs {
  void* q = nullptr;
  void* k = nullptr;
  void* v = nullptr;
  void* g = nullptr;
  void* beta = nullptr;
  void* o = nullptr;
  int64_t tokens = 0;
  int32_t family = 0;

  Inputs(int32_t f, int64_t t, std::mt19937& rng) : tokens(t), family(f) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> decay(0.8f, 1.0f);
    auto n = [&] { return normal(rng); };
    const int64_t qk = t * kHeads * kKeyDim, vo = t * kValueHeads * kValueDim;
    q = DeviceBFloat16(qk, n);
    // Unit-norm keys for the delta rule come from qk_l2norm; others get small keys.
    k = DeviceBFloat16(qk, [&] { return normal(rng) * (HasBeta(f) ? 1.0f : 0.1f); });
    v = DeviceBFloat16(vo, n);
    const bool raw = f == LUMEN_FAMILY_GATED_DELTA_NET || f == LUMEN_FAMILY_KDA;
    if (HasG(f)) {
      g = DeviceBFloat16(t * kValueHeads * (VectorGate(f) ? kKeyDim : 1),
                         [&] { return raw ? normal(rng) : std::log(decay(rng)); });
    }
    if (HasBeta(f)) beta = DeviceBFloat16(t * kValueHeads, n);
    CheckCuda(cudaMalloc(&o, vo * 2), "cudaMalloc");
  }
  ~Inputs() {
    for (void* p : {q, k, v, g, beta, o}) cudaFree(p);
  }
  lumen_layer_inputs Layer(cudaStream_t stream) const {
    lumen_layer_inputs in;
    lumen_layer_inputs_init(&in);
    in.dtype = LUMEN_DTYPE_BFLOAT16;
    in.memory = LUMEN_MEMORY_DEVICE;
    in.stream = stream;
    in.q = q;
    in.q_count = tokens * kHeads * kKeyDim;
    in.k = k;
    in.k_count = in.q_count;
    in.v = v;
    in.v_count = tokens * kValueHeads * kValueDim;
    in.g = g;
    in.g_count = g ? tokens * kValueHeads * (VectorGate(family) ? kKeyDim : 1) : 0;
    in.beta = beta;
    in.beta_count = beta ? tokens * kValueHeads : 0;
    return in;
  }
  lumen_layer_output Output() const {
    lumen_layer_output out;
    lumen_layer_output_init(&out);
    out.dtype = LUMEN_DTYPE_BFLOAT16;
    out.memory = LUMEN_MEMORY_DEVICE;
    out.o = o;
    out.o_count = tokens * kValueHeads * kValueDim;
    return out;
  }
};

// Mean milliseconds of `body` over `reps` runs on `stream`, after `warmup` runs.
template <typename Body>
double TimeMs(cudaStream_t stream, int warmup, int reps, Body body) {
  for (int i = 0; i < warmup; ++i) body();
  cudaEvent_t start, stop;
  CheckCuda(cudaEventCreate(&start), "cudaEventCreate");
  CheckCuda(cudaEventCreate(&stop), "cudaEventCreate");
  CheckCuda(cudaEventRecord(start, stream), "cudaEventRecord");
  for (int i = 0; i < reps; ++i) body();
  CheckCuda(cudaEventRecord(stop, stream), "cudaEventRecord");
  CheckCuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0.0f;
  CheckCuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / reps;
}

// Device-to-device copy of 2 GiB: bytes read + written per second.
double CopyBandwidth(cudaStream_t stream, int reps) {
  const int64_t bytes = int64_t{2} << 30;
  void *a = nullptr, *b = nullptr;
  CheckCuda(cudaMalloc(&a, bytes), "cudaMalloc");
  CheckCuda(cudaMalloc(&b, bytes), "cudaMalloc");
  CheckCuda(cudaMemset(a, 1, bytes), "cudaMemset");
  const double ms = TimeMs(stream, 2, reps, [&] {
    CheckCuda(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
  });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (ms * 1e-3);
}

// Readies the engine's scratch for calls of `sessions` sessions and `tokens` tokens, as a
// server does before it captures or serves: no call timed here grows it.
void Reserve(const Bench& bench, int32_t sessions, int64_t tokens) {
  lumen_reservation reservation;
  lumen_reservation_init(&reservation);
  reservation.max_sessions = sessions;
  reservation.max_tokens = static_cast<int32_t>(tokens);
  Check(lumen_engine_reserve(bench.engine, &reservation), "lumen_engine_reserve");
}

// Mean time of one pass of `tokens` tokens for each of n sessions, from graph replays: a
// batched step for one token, a varlen prefill (a token run) for several.
double DecodeMs(const Bench& bench, int32_t n, int32_t tokens, cudaStream_t stream, int reps,
                std::mt19937& rng) {
  std::vector<lumen_session*> sessions(n);
  for (lumen_session*& s : sessions) Check(lumen_session_create(bench.engine, &s), "create");
  const Inputs inputs(bench.family, int64_t{n} * tokens, rng);
  const lumen_layer_inputs in = inputs.Layer(stream);
  lumen_layer_output out = inputs.Output();
  std::vector<int32_t> cu(n + 1);
  for (int32_t i = 0; i <= n; ++i) cu[i] = i * tokens;
  Reserve(bench, n, int64_t{n} * tokens);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CheckCuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "BeginCapture");
  const lumen_status status =
      tokens == 1
          ? lumen_engine_step_batch(bench.engine, 0, sessions.data(), n, &in, &out)
          : lumen_engine_prefill_varlen(bench.engine, 0, sessions.data(), n, cu.data(), &in, &out);
  CheckCuda(cudaStreamEndCapture(stream, &graph), "EndCapture");
  Check(status, tokens == 1 ? "lumen_engine_step_batch (captured)"
                            : "lumen_engine_prefill_varlen (captured)");
  CheckCuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  const double ms = TimeMs(stream, 3, reps, [&] {
    CheckCuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  });
  CheckCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  for (lumen_session* s : sessions) lumen_session_destroy(s);
  return ms;
}

double PrefillMs(const Bench& bench, int32_t b, int32_t t, cudaStream_t stream, int reps,
                 std::mt19937& rng) {
  std::vector<lumen_session*> sessions(b);
  for (lumen_session*& s : sessions) Check(lumen_session_create(bench.engine, &s), "create");
  const Inputs inputs(bench.family, int64_t{b} * t, rng);
  const lumen_layer_inputs in = inputs.Layer(stream);
  lumen_layer_output out = inputs.Output();
  std::vector<int32_t> cu(b + 1);
  for (int32_t i = 0; i <= b; ++i) cu[i] = i * t;
  Reserve(bench, b, int64_t{b} * t);
  const double ms = TimeMs(stream, 1, reps, [&] {
    // Each rep starts from zero states, as a fresh prompt does.
    for (lumen_session* s : sessions) Check(lumen_session_reset(s), "reset");
    Check(lumen_engine_prefill_varlen(bench.engine, 0, sessions.data(), b, cu.data(), &in, &out),
          "lumen_engine_prefill_varlen");
  });
  for (lumen_session* s : sessions) lumen_session_destroy(s);
  return ms;
}

// The decode table for one state dtype: time per step and bandwidth against `copy`.
void DecodeTable(const Options& options, int32_t state_dtype, double copy, cudaStream_t stream,
                 int reps, std::mt19937& rng) {
  const int state_bytes = state_dtype == LUMEN_DTYPE_BFLOAT16 ? 2 : 4;
  std::printf("decode, %s state: one batched step, graph replays (us per step; effective TB/s "
              "= 2*N*HV*K*V*%d/t; %% of copy)\n",
              state_bytes == 2 ? "bf16" : "fp32", state_bytes);
  std::printf("%-16s", "family");
  for (int32_t n : options.sessions) std::printf(" | N=%-4d us   TB/s   %%  ", n);
  std::printf("\n");
  for (const int32_t family : kFamilies) {
    if (!Selected(options, lumen_family_string(family))) continue;
    Bench bench(family, state_dtype);
    std::printf("%-16s", lumen_family_string(family));
    for (int32_t n : options.sessions) {
      const double ms = DecodeMs(bench, n, 1, stream, reps, rng);
      const double bytes = 2.0 * n * kValueHeads * kKeyDim * kValueDim * state_bytes;
      const double rate = bytes / (ms * 1e-3);
      std::printf(" | %8.1f %6.2f %4.0f", ms * 1e3, rate / 1e12, 100.0 * rate / copy);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
}

// Median wall-clock microseconds of `body` over `reps` calls, after `warmup` calls.
template <typename Body>
double MedianUs(int warmup, int reps, Body body) {
  for (int i = 0; i < warmup; ++i) body();
  std::vector<double> us(reps);
  for (double& t : us) {
    const auto start = std::chrono::steady_clock::now();
    body();
    t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count();
  }
  std::nth_element(us.begin(), us.begin() + reps / 2, us.end());
  return us[reps / 2];
}

// Several tokens per session in one pass (fp32 state, N = 256): the time of 2, 4 and 8 tokens
// per session beside one token's, measured in the same run.
void TokenRunTable(const Options& options, cudaStream_t stream, int reps, std::mt19937& rng) {
  constexpr int32_t kSessions = 256;
  std::printf("tokens per session in one pass, fp32 state, N=%d: us per pass (x one token's)\n",
              kSessions);
  std::printf("%-16s | 1 token  | 2 tokens        | 4 tokens        | 8 tokens\n", "family");
  for (const int32_t family : kFamilies) {
    if (!Selected(options, lumen_family_string(family))) continue;
    Bench bench(family, LUMEN_DTYPE_FLOAT32);
    const double one = DecodeMs(bench, kSessions, 1, stream, reps, rng);
    std::printf("%-16s | %8.1f", lumen_family_string(family), one * 1e3);
    for (const int32_t tokens : {2, 4, 8}) {
      const double ms = DecodeMs(bench, kSessions, tokens, stream, reps, rng);
      std::printf(" | %7.1f (%4.2fx)", ms * 1e3, ms / one);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
}

__global__ void EmptyKernel() {}

// Tentative tokens at N = 256 sessions (fp32 state, device buffers on the stream): the wall
// clock of a tentative call of n tokens per session and its commit (all n accepted, or none),
// each waited for, beside one plain batched step waited for, in the same run.
void SpeculativeTable(const Options& options, cudaStream_t stream, std::mt19937& rng) {
  constexpr int32_t kSessions = 256;
  constexpr int kReps = 5;
  std::printf("tentative tokens, fp32 state, N=%d, device buffers: median us per round, "
              "waited for (x one plain step)\n", kSessions);
  std::printf("%-16s | step     | n  | verify + reject  | verify + commit n\n", "family");
  for (const int32_t family : kFamilies) {
    if (!Selected(options, lumen_family_string(family))) continue;
    Bench bench(family, LUMEN_DTYPE_FLOAT32);
    std::vector<lumen_session*> sessions(kSessions);
    for (lumen_session*& s : sessions) Check(lumen_session_create(bench.engine, &s), "create");
    const Inputs one_token(bench.family, kSessions, rng);
    const lumen_layer_inputs step_in = one_token.Layer(stream);
    lumen_layer_output step_out = one_token.Output();
    const double step_us = MedianUs(2, kReps, [&] {
      Check(lumen_engine_step_batch(bench.engine, 0, sessions.data(), kSessions, &step_in,
                                    &step_out),
            "lumen_engine_step_batch");
      CheckCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    });
    for (const int32_t n : {2, 4, 8}) {
      const Inputs draft(bench.family, int64_t{kSessions} * n, rng);
      const lumen_layer_inputs in = draft.Layer(stream);
      lumen_layer_output out = draft.Output();
      std::vector<int32_t> cu(kSessions + 1);
      for (int32_t i = 0; i <= kSessions; ++i) cu[i] = i * n;
      double round_us[2];
      for (const int32_t accepted : {0, n}) {
        const std::vector<int32_t> counts(kSessions, accepted);
        round_us[accepted == 0 ? 0 : 1] = MedianUs(1, kReps, [&] {
          Check(lumen_engine_step_tentative_batch(bench.engine, 0, sessions.data(), kSessions,
                                                  cu.data(), &in, &out),
                "lumen_engine_step_tentative_batch");
          Check(lumen_engine_commit_batch(bench.engine, sessions.data(), kSessions,
                                          counts.data()),
                "lumen_engine_commit_batch");
          CheckCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        });
      }
      std::printf("%-16s | %8.1f | %2d | %8.1f (%4.2fx) | %8.1f (%4.2fx)\n",
                  lumen_family_string(family), step_us, n, round_us[0], round_us[0] / step_us,
                  round_us[1], round_us[1] / step_us);
      std::fflush(stdout);
    }
    for (lumen_session* s : sessions) lumen_session_destroy(s);
  }
}

// The Qwen3-Next preset layer (q/k/v convolutions of width 4, raw gates, beta logits) with one
// session, stepped with host buffers as the README's main job and a Java or C# caller do, and
// the same step over device buffers, beside what its parts cost alone: the copies from
// pageable memory a call makes today, one pinned copy each way, and an empty launch.
void HostStepTable(cudaStream_t stream, bool quick) {
  lumen_model_builder* builder = nullptr;
  Check(lumen_model_builder_create(&builder), "lumen_model_builder_create");
  lumen_layer_options options;
  lumen_layer_options_init_qwen3_next_gated_delta_net(&options);
  Check(lumen_model_builder_add_layer(builder, &options, nullptr), "add_layer");
  const int32_t hv = options.num_value_heads;
  const int64_t qk_count = int64_t{options.num_heads} * options.key_dim;
  const int64_t v_count = int64_t{hv} * options.value_dim;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> a_log(hv, std::log(4.0f)), dt_bias(hv, -4.0f);
  Check(lumen_model_builder_set_param(builder, 0, LUMEN_PARAM_A_LOG, a_log.data(), hv),
        "set_param");
  Check(lumen_model_builder_set_param(builder, 0, LUMEN_PARAM_DT_BIAS, dt_bias.data(), hv),
        "set_param");
  const struct {
    lumen_param param;
    int64_t channels;
  } convs[] = {{LUMEN_PARAM_CONV_Q_WEIGHT, qk_count},
               {LUMEN_PARAM_CONV_K_WEIGHT, qk_count},
               {LUMEN_PARAM_CONV_V_WEIGHT, v_count}};
  for (const auto& conv : convs) {
    std::vector<float> weights(conv.channels * options.conv_size);
    for (float& w : weights) w = 0.5f * normal(rng);
    Check(lumen_model_builder_set_param(builder, 0, conv.param, weights.data(),
                                        static_cast<int64_t>(weights.size())),
          "set_param");
  }
  lumen_model* model = nullptr;
  Check(lumen_model_builder_build(builder, &model), "lumen_model_builder_build");
  lumen_model_builder_destroy(builder);
  lumen_engine_options engine_options;
  lumen_engine_options_init(&engine_options);
  engine_options.backend = LUMEN_BACKEND_CUDA;
  lumen_engine* engine = nullptr;
  Check(lumen_engine_create(model, &engine_options, &engine), "lumen_engine_create");
  lumen_session* session = nullptr;
  Check(lumen_session_create(engine, &session), "lumen_session_create");

  // Host inputs (bf16) and output (fp32), and device copies of them.
  const int64_t counts[] = {qk_count, qk_count, v_count, hv, hv};  // q, k, v, g, beta
  std::vector<uint16_t> host_in[5];
  void* device_in[5] = {};
  int64_t input_bytes = 0;
  for (int i = 0; i < 5; ++i) {
    host_in[i].resize(counts[i]);
    for (uint16_t& x : host_in[i]) x = ToBFloat16(normal(rng));
    CheckCuda(cudaMalloc(&device_in[i], counts[i] * 2), "cudaMalloc");
    CheckCuda(cudaMemcpy(device_in[i], host_in[i].data(), counts[i] * 2, cudaMemcpyHostToDevice),
              "cudaMemcpy");
    input_bytes += counts[i] * 2;
  }
  std::vector<float> host_o(v_count);
  void* device_o = nullptr;
  CheckCuda(cudaMalloc(&device_o, v_count * 4), "cudaMalloc");
  auto describe = [&](lumen_memory memory, const void* const* in, void* o,
                      lumen_layer_inputs* inputs, lumen_layer_output* output) {
    lumen_layer_inputs_init(inputs);
    inputs->dtype = LUMEN_DTYPE_BFLOAT16;
    inputs->memory = memory;
    inputs->stream = stream;
    inputs->q = in[0], inputs->q_count = counts[0];
    inputs->k = in[1], inputs->k_count = counts[1];
    inputs->v = in[2], inputs->v_count = counts[2];
    inputs->g = in[3], inputs->g_count = counts[3];
    inputs->beta = in[4], inputs->beta_count = counts[4];
    lumen_layer_output_init(output);
    output->dtype = LUMEN_DTYPE_FLOAT32;
    output->memory = memory;
    output->o = o;
    output->o_count = v_count;
  };
  const void* host_ptrs[5] = {host_in[0].data(), host_in[1].data(), host_in[2].data(),
                              host_in[3].data(), host_in[4].data()};
  const void* device_ptrs[5] = {device_in[0], device_in[1], device_in[2], device_in[3],
                                device_in[4]};
  lumen_layer_inputs host_inputs, device_inputs;
  lumen_layer_output host_output, device_output;
  describe(LUMEN_MEMORY_HOST, host_ptrs, host_o.data(), &host_inputs, &host_output);
  describe(LUMEN_MEMORY_DEVICE, device_ptrs, device_o, &device_inputs, &device_output);

  const int warmup = 20, reps = quick ? 200 : 2000;
  const double host_us = MedianUs(warmup, reps, [&] {
    Check(lumen_session_step(session, 0, &host_inputs, &host_output), "lumen_session_step");
  });
  const double device_us = MedianUs(warmup, reps, [&] {
    Check(lumen_session_step(session, 0, &device_inputs, &device_output), "lumen_session_step");
    CheckCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  });
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CheckCuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "BeginCapture");
  const lumen_status captured = lumen_session_step(session, 0, &device_inputs, &device_output);
  CheckCuda(cudaStreamEndCapture(stream, &graph), "EndCapture");
  Check(captured, "lumen_session_step (captured)");
  CheckCuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  const double graph_us = 1e3 * TimeMs(stream, warmup, reps, [&] {
    CheckCuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  });
  const double graph_sync_us = MedianUs(warmup, reps, [&] {
    CheckCuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    CheckCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);

  // The parts alone: today's five pageable copies in and one out, then one pinned copy each
  // way of the same bytes, then an empty kernel; each followed by one synchronisation.
  const double pageable_us = MedianUs(warmup, reps, [&] {
    for (int i = 0; i < 5; ++i) {
      CheckCuda(cudaMemcpyAsync(device_in[i], host_ptrs[i], counts[i] * 2,
                                cudaMemcpyHostToDevice, stream),
                "cudaMemcpyAsync");
    }
    CheckCuda(cudaMemcpyAsync(host_o.data(), device_o, v_count * 4, cudaMemcpyDeviceToHost,
                              stream),
              "cudaMemcpyAsync");
    CheckCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  });
  void* pinned = nullptr;
  void* device_staging = nullptr;
  CheckCuda(cudaMallocHost(&pinned, input_bytes + v_count * 4), "cudaMallocHost");
  CheckCuda(cudaMalloc(&device_staging, input_bytes + v_count * 4), "cudaMalloc");
  const double pinned_us = MedianUs(warmup, reps, [&] {
    CheckCuda(cudaMemcpyAsync(device_staging, pinned, input_bytes, cudaMemcpyHostToDevice,
                              stream),
              "cudaMemcpyAsync");
    CheckCuda(cudaMemcpyAsync(static_cast<char*>(pinned) + input_bytes,
                              static_cast<char*>(device_staging) + input_bytes, v_count * 4,
                              cudaMemcpyDeviceToHost, stream),
              "cudaMemcpyAsync");
    CheckCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  });
  const double launch_us = MedianUs(warmup, reps, [&] {
    EmptyKernel<<<1, 32, 0, stream>>>();
    CheckCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  });
  cudaFreeHost(pinned);
  cudaFree(device_staging);

  std::printf("one session's step of the Qwen3-Next preset layer (convolutions, raw gates; bf16 "
              "inputs, fp32 output; median us per call, wall clock):\n");
  std::printf("  host buffers (lumen_session_step)               %8.1f\n", host_us);
  std::printf("  device buffers, then a stream synchronisation   %8.1f\n", device_us);
  std::printf("  the same step as a graph: replay + synchronise  %8.1f   (device time %.1f)\n",
              graph_sync_us, graph_us);
  std::printf("  anchors: 5 pageable copies in, 1 out, 1 sync    %8.1f\n", pageable_us);
  std::printf("           1 pinned copy in, 1 out, 1 sync        %8.1f   (%lld + %lld bytes)\n",
              pinned_us, static_cast<long long>(input_bytes),
              static_cast<long long>(v_count * 4));
  std::printf("           an empty kernel + 1 sync               %8.1f\n\n", launch_us);
  std::fflush(stdout);

  for (void* p : device_in) cudaFree(p);
  cudaFree(device_o);
  lumen_session_destroy(session);
  lumen_engine_destroy(engine);
  lumen_model_destroy(model);
}

}  // namespace

int RunGpuBench(int argc, char** argv) {
  const Options options = ParseOptions(argc, argv);
  const bool quick = options.quick;
  cudaStream_t stream = nullptr;
  CheckCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaDeviceProp properties;
  CheckCuda(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties");
  const int reps = quick ? 3 : 50;
  const double copy = CopyBandwidth(stream, quick ? 2 : 10);
  std::printf("lumen bench on %s: bf16 inputs and output, H=%d, HV=%d, K=V=%d\n",
              properties.name, kHeads, kValueHeads, kKeyDim);
  std::printf("anchor: device-to-device copy %.2f TB/s (bytes read + written)\n\n",
              copy / 1e12);
  std::mt19937 rng(7);

  if (options.decode_only) {
    DecodeTable(options, LUMEN_DTYPE_FLOAT32, copy, stream, reps, rng);
    DecodeTable(options, LUMEN_DTYPE_BFLOAT16, copy, stream, reps, rng);
    std::printf("\n");
    TokenRunTable(options, stream, reps, rng);
    std::printf("\n");
    SpeculativeTable(options, stream, rng);
    // After the decode tables, whose kernels profile_decode.sh takes as the first ones.
    std::printf("\n");
    HostStepTable(stream, quick);
    cudaStreamDestroy(stream);
    return 0;
  }
  {
    // Session pool: create and destroy 10,000 sessions of one layer.
    Bench bench(LUMEN_FAMILY_GATED_DELTA_NET, LUMEN_DTYPE_FLOAT32);
    const int32_t count = quick ? 1000 : 10000;
    std::vector<lumen_session*> sessions(count);
    const auto t0 = std::chrono::steady_clock::now();
    for (lumen_session*& s : sessions) Check(lumen_session_create(bench.engine, &s), "create");
    const auto t1 = std::chrono::steady_clock::now();
    for (lumen_session* s : sessions) lumen_session_destroy(s);
    const auto t2 = std::chrono::steady_clock::now();
    // Reuse: the freed slots come back zeroed in one batch.
    for (lumen_session*& s : sessions) Check(lumen_session_create(bench.engine, &s), "create");
    const auto t3 = std::chrono::steady_clock::now();
    for (lumen_session* s : sessions) lumen_session_destroy(s);
    auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    std::printf("sessions (%d, 2 MiB of state each): create %.1f ms, destroy %.1f ms, "
                "create again from freed slots %.1f ms\n\n",
                count, ms(t1 - t0), ms(t2 - t1), ms(t3 - t2));
  }

  DecodeTable(options, LUMEN_DTYPE_FLOAT32, copy, stream, reps, rng);
  std::printf("\n");
  DecodeTable(options, LUMEN_DTYPE_BFLOAT16, copy, stream, reps, rng);
  std::printf("\n");
  TokenRunTable(options, stream, reps, rng);
  std::printf("\n");
  SpeculativeTable(options, stream, rng);
  std::printf("\n");
  HostStepTable(stream, quick);
  std::printf("prefill: lumen_engine_prefill_varlen from zero states (ms)\n");
  std::printf("%-16s | B=4 x T=8192 | B=1 x T=65536\n", "family");
  for (const int32_t family : kFamilies) {
    if (!Selected(options, lumen_family_string(family))) continue;
    Bench bench(family, LUMEN_DTYPE_FLOAT32);
    const double a = PrefillMs(bench, 4, quick ? 1024 : 8192, stream, quick ? 1 : 3, rng);
    const double b = PrefillMs(bench, 1, quick ? 4096 : 65536, stream, quick ? 1 : 2, rng);
    std::printf("%-16s | %12.2f | %13.2f\n", lumen_family_string(family), a, b);
    std::fflush(stdout);
  }
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace lumen::cuda
