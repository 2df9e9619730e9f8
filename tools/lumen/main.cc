// lumen: the command-line program. Its default run is the project's main job: stream a long
// sequence through one session of a stack of Qwen3-Next's Gated DeltaNet layers (the preset,
// short convolution included, so the session holds the whole per-conversation state of those
// layers) and show that the cost per token and the memory per session stay flat while a
// softmax KV cache would grow.
//
// Uses only the public C API (lumen/lumen.h), as any application would. `lumen bench --cpu`
// runs the CPU benchmark (cpu_bench.cc), `lumen bench --gpu` the GPU benchmark of a CUDA
// build; plain `lumen bench` runs the GPU one where CUDA is built in, else the CPU one.

#include <lumen/lumen.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tools/lumen/cpu_bench.h"
#include "tools/lumen/lumen_handles.h"

#ifdef LUMEN_WITH_CUDA
#include "tools/lumen/gpu_bench.h"
#endif

namespace {

using lumen::cli::Owned;

// The stack: Qwen3-Next's linear-attention layers, as lumen_layer_options_init_qwen3_next_
// gated_delta_net describes them (BuildModel checks that these match the preset).
constexpr int32_t kLayers = 4;
constexpr int32_t kHeads = 16;       // H, query/key heads
constexpr int32_t kValueHeads = 32;  // HV, value heads
constexpr int32_t kKeyDim = 128;     // K
constexpr int32_t kValueDim = 128;   // V
constexpr int32_t kConvSize = 4;     // W of the q/k/v convolutions

// Inputs come from a pool of pre-generated random tokens so that generating them stays out
// of the timing. A prefill chunk is a run of consecutive pool tokens, so it must fit.
constexpr int32_t kPoolTokens = 1024;
constexpr int32_t kPrefillChunk = 512;
static_assert(kPrefillChunk <= kPoolTokens, "a prefill chunk is a run of pool tokens");

constexpr int64_t kDefaultTokens = 100000;
constexpr int64_t kFirstCheckpoint = 1000;
constexpr int64_t kSoftmaxKvBytesPerElement = 2;  // bf16
// Tokens the resumed process and the uninterrupted session step after the snapshot.
constexpr int64_t kResumeTokens = 32;

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------
// Errors and handles

[[noreturn]] void Fail(const std::string& message) { lumen::cli::FailAs("lumen", message); }
void Check(lumen_status status, const char* call) { lumen::cli::CheckAs("lumen", status, call); }

// ---------------------------------------------------------------------------------------
// Command line

struct Args {
  int64_t tokens = kDefaultTokens;
  int64_t prefill = 0;
  int32_t threads = 0;
  std::string snapshot_dir;  // where the main job saves its snapshot; empty = the temp dir
  // Set in the second process of the snapshot demonstration: load `resume`, step
  // kResumeTokens tokens from token `resume_at` and write the outputs to `resume_output`.
  std::string resume;
  int64_t resume_at = 0;
  std::string resume_output;
};

void PrintUsage(std::FILE* to) {
  std::fprintf(to,
               "usage: lumen [--tokens N] [--prefill N] [--threads N] [--help]\n"
               "       lumen bench --cpu [--quick] [--help]  (CPU decode and prefill timings)\n"
               "       lumen bench --gpu [--quick] [--decode] [--families a,b] [--sessions 1,1024]\n"
               "                                      (GPU decode and prefill timings; CUDA builds;\n"
               "                                      --decode: the decode tables alone)\n"
               "\n"
               "Streams N tokens (default %lld), one lumen_session_step per layer per token,\n"
               "through one session of %d Qwen3-Next Gated DeltaNet layers (H=%d, HV=%d,\n"
               "K=V=%d, q/k/v convolutions of width %d) and prints latency and memory as the\n"
               "context grows, next to the KV cache a softmax-attention stack of the same\n"
               "width would need.\n"
               "\n"
               "  --tokens N   tokens to step through the session (default %lld; 0 = none)\n"
               "  --prefill N  first prefill N tokens with lumen_session_prefill in chunks of\n"
               "               %d and report prefill throughput (default 0)\n"
               "  --threads N  worker threads of the engine, caller included (default 0 = all\n"
               "               cores)\n"
               "  --snapshot-dir D  where the run saves its session snapshot (default: $TMPDIR\n"
               "               or /tmp)\n"
               "  --help       show this text\n"
               "\n"
               "After the stream the session is saved to a file; a second lumen process loads it\n"
               "and steps %lld more tokens (lumen --resume FILE --resume-at T --resume-output\n"
               "OUT), and its outputs are compared with the uninterrupted session's.\n",
               static_cast<long long>(kDefaultTokens), kLayers, kHeads, kValueHeads, kKeyDim,
               kConvSize, static_cast<long long>(kDefaultTokens), kPrefillChunk,
               static_cast<long long>(kResumeTokens));
}

int64_t ParseCount(const char* flag, const char* text, int64_t max) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 0 || value > max) {
    Fail(std::string("bad value for ") + flag + ": '" + text + "' (want 0.." +
         std::to_string(max) + ")");
  }
  return value;
}

Args ParseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      PrintUsage(stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) {
      PrintUsage(stderr);
      Fail("unknown or incomplete option '" + flag + "'");
    }
    const char* value = argv[++i];
    if (flag == "--tokens") {
      args.tokens = ParseCount("--tokens", value, INT64_C(1) << 40);
    } else if (flag == "--prefill") {
      args.prefill = ParseCount("--prefill", value, INT64_C(1) << 40);
    } else if (flag == "--threads") {
      args.threads = static_cast<int32_t>(ParseCount("--threads", value, 4096));
    } else if (flag == "--snapshot-dir") {
      args.snapshot_dir = value;
    } else if (flag == "--resume") {
      args.resume = value;
    } else if (flag == "--resume-at") {
      args.resume_at = ParseCount("--resume-at", value, INT64_C(1) << 40);
    } else if (flag == "--resume-output") {
      args.resume_output = value;
    } else {
      PrintUsage(stderr);
      Fail("unknown option '" + flag + "'");
    }
  }
  return args;
}

// ---------------------------------------------------------------------------------------
// Model, engine, session

// Plausible gate parameters, initialised as Qwen3-Next / fla do: A ~ U(1, 16), A_log = log A;
// dt ~ logU(1e-3, 1e-1) and dt_bias = softplus^-1(dt).
void SetGateParams(lumen_model_builder* builder, int32_t layer, std::mt19937& rng) {
  std::uniform_real_distribution<float> a(1.0f, 16.0f);
  std::uniform_real_distribution<float> log_dt(std::log(1e-3f), std::log(1e-1f));
  std::vector<float> a_log(kValueHeads), dt_bias(kValueHeads);
  for (int32_t h = 0; h < kValueHeads; ++h) {
    a_log[h] = std::log(a(rng));
    const float dt = std::exp(log_dt(rng));
    dt_bias[h] = dt + std::log(-std::expm1(-dt));
  }
  Check(lumen_model_builder_set_param(builder, layer, LUMEN_PARAM_A_LOG, a_log.data(),
                                      kValueHeads),
        "lumen_model_builder_set_param(A_log)");
  Check(lumen_model_builder_set_param(builder, layer, LUMEN_PARAM_DT_BIAS, dt_bias.data(),
                                      kValueHeads),
        "lumen_model_builder_set_param(dt_bias)");
}

// Convolution weights as PyTorch initialises Conv1d(C, C, W, groups=C, bias=False), which
// Qwen3-Next uses: U(-1/sqrt(W), 1/sqrt(W)).
void SetConvParams(lumen_model_builder* builder, int32_t layer, std::mt19937& rng) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(kConvSize));
  std::uniform_real_distribution<float> weight(-bound, bound);
  const struct {
    lumen_param param;
    int64_t channels;
  } parts[] = {{LUMEN_PARAM_CONV_Q_WEIGHT, int64_t{kHeads} * kKeyDim},
               {LUMEN_PARAM_CONV_K_WEIGHT, int64_t{kHeads} * kKeyDim},
               {LUMEN_PARAM_CONV_V_WEIGHT, int64_t{kValueHeads} * kValueDim}};
  for (const auto& part : parts) {
    std::vector<float> values(part.channels * kConvSize);
    for (float& value : values) value = weight(rng);
    Check(lumen_model_builder_set_param(builder, layer, part.param, values.data(),
                                        static_cast<int64_t>(values.size())),
          "lumen_model_builder_set_param(conv weight)");
  }
}

Owned<lumen_model> BuildModel(std::mt19937& rng) {
  lumen_model_builder* raw_builder = nullptr;
  Check(lumen_model_builder_create(&raw_builder), "lumen_model_builder_create");
  Owned<lumen_model_builder> builder(raw_builder);

  lumen_layer_options options;
  lumen_layer_options_init_qwen3_next_gated_delta_net(&options);
  if (options.num_heads != kHeads || options.num_value_heads != kValueHeads ||
      options.key_dim != kKeyDim || options.value_dim != kValueDim ||
      options.conv_size != kConvSize) {
    Fail("the Qwen3-Next preset no longer has the dims this program was written for");
  }
  for (int32_t i = 0; i < kLayers; ++i) {
    int32_t layer = -1;
    Check(lumen_model_builder_add_layer(builder.get(), &options, &layer),
          "lumen_model_builder_add_layer");
    SetGateParams(builder.get(), layer, rng);
    SetConvParams(builder.get(), layer, rng);
  }

  return lumen::cli::BuildModelAs("lumen", builder.get());
}

Owned<lumen_engine> CreateEngine(const lumen_model* model, int32_t threads) {
  return lumen::cli::CreateEngineAs("lumen", model, LUMEN_BACKEND_AUTO, threads);
}

Owned<lumen_session> CreateSession(lumen_engine* engine) {
  lumen_session* session = nullptr;
  Check(lumen_session_create(engine, &session), "lumen_session_create");
  return Owned<lumen_session>(session);
}

// ---------------------------------------------------------------------------------------
// Inputs

uint16_t ToBFloat16(float x) {  // round to nearest even; inputs are finite
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

std::vector<uint16_t> RandomBFloat16(int64_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> values(count);
  for (auto& value : values) value = ToBFloat16(normal(rng));
  return values;
}

// kPoolTokens random tokens of bf16 inputs, each tensor contiguous over tokens so that any
// run of consecutive tokens is a valid [T, ...] buffer. q and k are raw (qk_l2norm is on),
// g is the raw gate (gate_raw) and beta a logit (beta_sigmoid).
struct InputPool {
  std::vector<uint16_t> q, k;  // [P, H, K]
  std::vector<uint16_t> v;     // [P, HV, V]
  std::vector<uint16_t> g;     // [P, HV]
  std::vector<uint16_t> beta;  // [P, HV]
};

InputPool MakeInputPool(std::mt19937& rng) {
  InputPool pool;
  pool.q = RandomBFloat16(int64_t{kPoolTokens} * kHeads * kKeyDim, rng);
  pool.k = RandomBFloat16(int64_t{kPoolTokens} * kHeads * kKeyDim, rng);
  pool.v = RandomBFloat16(int64_t{kPoolTokens} * kValueHeads * kValueDim, rng);
  pool.g = RandomBFloat16(int64_t{kPoolTokens} * kValueHeads, rng);
  pool.beta = RandomBFloat16(int64_t{kPoolTokens} * kValueHeads, rng);
  return pool;
}

// The inputs of pool tokens first .. first + count.
lumen_layer_inputs PoolInputs(const InputPool& pool, int32_t first, int32_t count) {
  const int64_t qk = int64_t{kHeads} * kKeyDim, v = int64_t{kValueHeads} * kValueDim;
  lumen_layer_inputs inputs;
  lumen_layer_inputs_init(&inputs);
  inputs.dtype = LUMEN_DTYPE_BFLOAT16;
  inputs.q = pool.q.data() + first * qk;          inputs.q_count = count * qk;
  inputs.k = pool.k.data() + first * qk;          inputs.k_count = count * qk;
  inputs.v = pool.v.data() + first * v;           inputs.v_count = count * v;
  inputs.g = pool.g.data() + first * kValueHeads; inputs.g_count = count * kValueHeads;
  inputs.beta = pool.beta.data() + first * kValueHeads;
  inputs.beta_count = count * kValueHeads;
  return inputs;
}

// Each layer reads its own pool token: layers are not chained (layer i's output is not
// layer i+1's input), so every layer sees fresh random q/k/v/g/beta.
int32_t StepSlot(int64_t token, int32_t layer) {
  return static_cast<int32_t>((token * kLayers + layer) % kPoolTokens);
}

// A prefill chunk starts at a pool offset that differs per layer and per chunk.
int32_t ChunkSlot(int64_t chunk, int32_t layer) {
  constexpr int32_t kStride = (kPoolTokens - kPrefillChunk) / kLayers + 1;
  return static_cast<int32_t>(((chunk * kLayers + layer) * kStride) %
                              (kPoolTokens - kPrefillChunk + 1));
}

// ---------------------------------------------------------------------------------------
// Running the stack

// Output buffer [T, HV, V] fp32, reused by every call.
struct Output {
  std::vector<float> o;
  explicit Output(int32_t tokens) : o(int64_t{tokens} * kValueHeads * kValueDim) {}
  lumen_layer_output Describe(int32_t tokens) {
    lumen_layer_output out;
    lumen_layer_output_init(&out);
    out.o = o.data();
    out.o_count = int64_t{tokens} * kValueHeads * kValueDim;
    return out;
  }
};

// One token through every layer of the stack.
void StepToken(lumen_session* session, const InputPool& pool, int64_t token, Output& output) {
  for (int32_t layer = 0; layer < kLayers; ++layer) {
    const lumen_layer_inputs inputs = PoolInputs(pool, StepSlot(token, layer), 1);
    lumen_layer_output out = output.Describe(1);
    Check(lumen_session_step(session, layer, &inputs, &out), "lumen_session_step");
  }
}

// `count` tokens (at most kPrefillChunk) through every layer, chunk-major as a model runs.
void PrefillChunk(lumen_session* session, const InputPool& pool, int64_t chunk, int32_t count,
                  Output& output) {
  for (int32_t layer = 0; layer < kLayers; ++layer) {
    const lumen_layer_inputs inputs = PoolInputs(pool, ChunkSlot(chunk, layer), count);
    lumen_layer_output out = output.Describe(count);
    Check(lumen_session_prefill(session, layer, count, &inputs, &out),
          "lumen_session_prefill");
  }
}

void CheckFinite(const Output& output, int64_t values) {
  for (int64_t i = 0; i < values; ++i) {
    if (!std::isfinite(output.o[i])) Fail("the layer output is not finite");
  }
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ---------------------------------------------------------------------------------------
// Reporting

std::string FormatBytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f %s", bytes, kUnits[unit]);
  return text;
}

// Bytes of the K and V caches of a softmax-attention stack as wide as ours after `tokens`
// tokens: every layer keeps K and V for every value head and every token, in bf16.
double SoftmaxKvBytes(int64_t tokens) {
  return static_cast<double>(kLayers) * tokens * kValueHeads * (kKeyDim + kValueDim) *
         kSoftmaxKvBytesPerElement;
}

// 1k, 2k, 5k, 10k, 20k, 50k, ... below `tokens`, then `tokens` itself.
std::vector<int64_t> Checkpoints(int64_t tokens) {
  std::vector<int64_t> points;
  for (int64_t decade = kFirstCheckpoint; decade < tokens; decade *= 10) {
    for (int64_t step : {1, 2, 5}) {
      if (decade * step < tokens) points.push_back(decade * step);
    }
  }
  if (tokens > 0) points.push_back(tokens);
  return points;
}

void PrintHeader(const lumen_model* model, lumen_engine* engine, int64_t state_bytes) {
  int32_t backend = LUMEN_BACKEND_AUTO;
  Check(lumen_engine_backend(engine, &backend), "lumen_engine_backend");
  int32_t threads = 0;
  Check(lumen_engine_num_threads(engine, &threads), "lumen_engine_num_threads");
  std::printf("lumen %s: main job\n", lumen_version_string());
  std::printf("model:   %d x Qwen3-Next Gated DeltaNet (lumen_layer_options_init_qwen3_next_\n"
              "         gated_delta_net): H=%d HV=%d K=%d V=%d, q/k/v convolutions of width %d\n"
              "         with SiLU, qk_l2norm, beta_sigmoid, gate_raw; random A_log, dt_bias and\n"
              "         conv weights; fp32 state\n",
              kLayers, kHeads, kValueHeads, kKeyDim, kValueDim, kConvSize);
  std::printf("inputs:  random bf16 from a pool of %d pre-generated tokens, cycled; each layer\n"
              "         gets its own random q/k/v/g/beta (layers are not chained)\n",
              kPoolTokens);
  std::printf("engine:  backend %s (asked for AUTO), %d thread%s\n",
              lumen_backend_string(backend), threads, threads == 1 ? "" : "s");
  int64_t matrix = 0, windows = 0;
  for (int32_t part = LUMEN_STATE_MATRIX; part <= LUMEN_STATE_CONV_V; ++part) {
    int64_t count = 0;
    Check(lumen_model_state_count(model, 0, part, &count), "lumen_model_state_count");
    (part == LUMEN_STATE_MATRIX ? matrix : windows) += count;
  }
  std::printf("session: %s of state for all %d layers, whatever the context length: per\n"
              "         layer the matrices (%s) and the conv windows of the last %d inputs (%s)\n",
              FormatBytes(static_cast<double>(state_bytes)).c_str(), kLayers,
              FormatBytes(4.0 * matrix).c_str(), kConvSize - 1,
              FormatBytes(4.0 * windows).c_str());
  std::printf("softmax: the KV cache compared is %d layers x %d heads x (%d + %d) dims x bf16\n"
              "         per token\n\n",
              kLayers, kValueHeads, kKeyDim, kValueDim);
}

void RunPrefill(lumen_session* session, const InputPool& pool, int64_t tokens) {
  Output output(kPrefillChunk);
  const Clock::time_point start = Clock::now();
  int64_t done = 0;
  for (int64_t chunk = 0; done < tokens; ++chunk) {
    const int32_t count =
        static_cast<int32_t>(std::min<int64_t>(kPrefillChunk, tokens - done));
    PrefillChunk(session, pool, chunk, count, output);
    done += count;
  }
  const double seconds = Seconds(Clock::now() - start);
  CheckFinite(output, int64_t{kValueHeads} * kValueDim);
  std::printf("prefill: %lld tokens x %d layers in chunks of %d (lumen_session_prefill): "
              "%.2f s, %.0f tokens/s\n\n",
              static_cast<long long>(tokens), kLayers, kPrefillChunk, seconds,
              tokens / seconds);
}

struct StreamResult {
  double first_window_us = 0;  // µs per token of the first window
  double last_window_us = 0;   // µs per token of the last window
  double min_window_us = 0;    // fastest and slowest windows
  double max_window_us = 0;
  double seconds = 0;
};

// Steps `tokens` tokens after `context` already in the session, printing one row per
// checkpoint with the latency of the window since the previous one.
StreamResult RunStream(lumen_session* session, const InputPool& pool, int64_t context,
                       int64_t tokens, int64_t state_bytes) {
  // "µs" is two bytes but one column wide, hence 15 for a 14-wide column.
  std::printf("%12s %15s %12s %12s %18s\n", "context", "µs/token", "tokens/s", "state",
              "softmax KV cache");
  Output output(1);
  StreamResult result;
  int64_t token = 0;
  const Clock::time_point start = Clock::now();
  for (int64_t checkpoint : Checkpoints(tokens)) {
    const int64_t window = checkpoint - token;
    const Clock::time_point window_start = Clock::now();
    for (; token < checkpoint; ++token) StepToken(session, pool, context + token, output);
    const double us = Seconds(Clock::now() - window_start) * 1e6 / window;
    CheckFinite(output, int64_t{kValueHeads} * kValueDim);
    if (result.first_window_us == 0) {
      result.first_window_us = result.min_window_us = result.max_window_us = us;
    }
    result.last_window_us = us;
    result.min_window_us = std::min(result.min_window_us, us);
    result.max_window_us = std::max(result.max_window_us, us);
    std::printf("%12lld %14.1f %12.1f %12s %18s\n", static_cast<long long>(context + token),
                us, 1e6 / us, FormatBytes(static_cast<double>(state_bytes)).c_str(),
                FormatBytes(SoftmaxKvBytes(context + token)).c_str());
    std::fflush(stdout);
  }
  result.seconds = Seconds(Clock::now() - start);
  return result;
}

// The session's own count of consumed tokens must match what we fed it.
void CheckTokenCounts(const lumen_session* session, int64_t expected) {
  for (int32_t layer = 0; layer < kLayers; ++layer) {
    int64_t tokens = -1;
    Check(lumen_session_tokens(session, layer, &tokens), "lumen_session_tokens");
    if (tokens != expected) {
      Fail("layer " + std::to_string(layer) + " consumed " + std::to_string(tokens) +
           " tokens, expected " + std::to_string(expected));
    }
  }
}

// The anchor for the step latency: a step must read and write every layer's state at least
// once, so copying the state's bytes once (memcpy between two buffers of that size, best of
// a few) is a floor no implementation can beat on this machine.
double MeasureStateCopyUs(int64_t state_bytes) {
  std::vector<char> from(state_bytes, 1), to(state_bytes);
  double best = 1e30;
  for (int rep = 0; rep < 20; ++rep) {
    const Clock::time_point start = Clock::now();
    std::memcpy(to.data(), from.data(), from.size());
    best = std::min(best, Seconds(Clock::now() - start) * 1e6);
    from[rep] = to[state_bytes - 1 - rep];  // keep the copies observable
  }
  return best;
}

void PrintSummary(const StreamResult& stream, int64_t context, int64_t state_bytes) {
  const double kv = SoftmaxKvBytes(context);
  std::printf("\nsummary: %.2f s of stepping; latency last window / first window = %.2fx "
              "(%.1f -> %.1f µs/token, every window within %.1f..%.1f); at %lld tokens the "
              "session holds %s of state, a softmax KV cache %s (%.3gx the state)\n",
              stream.seconds, stream.last_window_us / stream.first_window_us,
              stream.first_window_us, stream.last_window_us, stream.min_window_us,
              stream.max_window_us, static_cast<long long>(context),
              FormatBytes(static_cast<double>(state_bytes)).c_str(), FormatBytes(kv).c_str(),
              kv / static_cast<double>(state_bytes));
  const double copy_us = MeasureStateCopyUs(state_bytes);
  std::printf("anchor:  one memcpy of the session's %s of state takes %.1f µs here (%.1f GB/s);"
              "\n         a step of the stack takes %.1f µs, %.2fx that floor\n",
              FormatBytes(static_cast<double>(state_bytes)).c_str(), copy_us,
              state_bytes / copy_us * 1e-3, stream.min_window_us,
              stream.min_window_us / copy_us);
}

// ---------------------------------------------------------------------------------------
// Save, load in a new process, continue

// The outputs of the last layer for kResumeTokens steps after `context` tokens.
std::vector<float> StepAndCollect(lumen_session* session, const InputPool& pool,
                                  int64_t context) {
  Output output(1);
  std::vector<float> collected;
  for (int64_t t = 0; t < kResumeTokens; ++t) {
    StepToken(session, pool, context + t, output);
    collected.insert(collected.end(), output.o.begin(), output.o.end());
  }
  return collected;
}

// The second process: load the snapshot into a fresh session of the same model, continue,
// and write the outputs for the first process to compare.
int RunResumed(const Args& args, lumen_engine* engine, const InputPool& pool) {
  Owned<lumen_session> session = CreateSession(engine);
  Check(lumen_session_load(session.get(), args.resume.c_str()), "lumen_session_load");
  CheckTokenCounts(session.get(), args.resume_at);
  const std::vector<float> outputs = StepAndCollect(session.get(), pool, args.resume_at);
  std::ofstream file(args.resume_output, std::ios::binary);
  file.write(reinterpret_cast<const char*>(outputs.data()),
             static_cast<std::streamsize>(outputs.size() * sizeof(float)));
  if (!file) Fail("cannot write '" + args.resume_output + "'");
  return 0;
}

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), {});
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

// Runs this program again as `lumen --resume ...` and waits for it.
void SpawnResumed(const Args& args, const std::string& snapshot, int64_t context,
                  const std::string& output) {
  const std::string threads = std::to_string(args.threads);
  const std::string at = std::to_string(context);
  std::vector<std::string> argv_strings = {"lumen",        "--threads",       threads,
                                           "--resume",     snapshot,          "--resume-at",
                                           at,             "--resume-output", output};
  std::vector<char*> argv;
  for (std::string& arg : argv_strings) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) {
    Fail("cannot start a second lumen process");
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Fail("the resumed lumen process failed");
  }
}

// Saves the session, continues it here and in a new process that loads the file, and shows
// that both continue identically.
void DemonstrateSnapshot(const Args& args, lumen_session* session, const InputPool& pool,
                         int64_t context) {
  std::string dir = args.snapshot_dir;
  if (dir.empty()) dir = std::getenv("TMPDIR") != nullptr ? std::getenv("TMPDIR") : "/tmp";
  const std::string snapshot = dir + "/lumen-main-job-" + std::to_string(getpid()) + ".snap";
  const std::string resumed_output = snapshot + ".outputs";

  const Clock::time_point save_start = Clock::now();
  Check(lumen_session_save(session, snapshot.c_str(), nullptr), "lumen_session_save");
  const double save_ms = Seconds(Clock::now() - save_start) * 1e3;
  int64_t snapshot_bytes = 0;
  Check(lumen_session_snapshot_size(session, nullptr, &snapshot_bytes),
        "lumen_session_snapshot_size");

  const std::vector<float> uninterrupted = StepAndCollect(session, pool, context);
  SpawnResumed(args, snapshot, context, resumed_output);
  const std::vector<float> resumed = ReadFloats(resumed_output);
  std::remove(snapshot.c_str());
  std::remove(resumed_output.c_str());

  if (resumed.size() != uninterrupted.size()) Fail("the resumed process wrote no outputs");
  double max_diff = 0;
  for (size_t i = 0; i < resumed.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(double{resumed[i]} - uninterrupted[i]));
  }
  const bool identical =
      std::memcmp(resumed.data(), uninterrupted.data(), resumed.size() * sizeof(float)) == 0;
  std::printf("\nsnapshot: saved the session at %lld tokens to a file (%s, fsync'd, %.1f ms);\n"
              "          a new process loaded it and stepped %lld more tokens: its %zu outputs\n"
              "          %s the uninterrupted session's (max |diff| = %g)\n",
              static_cast<long long>(context),
              FormatBytes(static_cast<double>(snapshot_bytes)).c_str(), save_ms,
              static_cast<long long>(kResumeTokens), resumed.size(),
              identical ? "equal, bit for bit," : "DIFFER from", max_diff);
  if (!identical) Fail("the resumed session diverged from the uninterrupted one");
}

// `lumen bench [--cpu | --gpu] [--quick] [--decode] ...`: the CPU benchmark (cpu_bench.cc) with --cpu
// or in a build without CUDA; otherwise the GPU benchmark (gpu_bench.cu).
int RunBench(int argc, char** argv) {
  bool cpu = false, gpu = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    cpu = cpu || flag == "--cpu";
    gpu = gpu || flag == "--gpu";
  }
#ifndef LUMEN_WITH_CUDA
  if (gpu) {
    std::fprintf(stderr, "lumen bench: this build of lumen has no CUDA backend\n");
    return 1;
  }
  cpu = true;
#endif
  if (cpu && gpu) {
    std::fprintf(stderr, "lumen bench: --cpu and --gpu exclude each other\n");
    return 2;
  }
  if (cpu) return lumen::cli::RunCpuBench(argc, argv);
#ifdef LUMEN_WITH_CUDA
  return lumen::cuda::RunGpuBench(argc, argv);
#else
  return 1;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "bench") return RunBench(argc - 1, argv + 1);
  const Args args = ParseArgs(argc, argv);
  std::mt19937 rng(20250101);

  Owned<lumen_model> model = BuildModel(rng);
  Owned<lumen_engine> engine = CreateEngine(model.get(), args.threads);
  Owned<lumen_session> session = CreateSession(engine.get());

  int64_t state_bytes = 0;
  Check(lumen_model_state_bytes(model.get(), -1, &state_bytes), "lumen_model_state_bytes");
  const InputPool pool = MakeInputPool(rng);

  if (!args.resume.empty()) return RunResumed(args, engine.get(), pool);

  PrintHeader(model.get(), engine.get(), state_bytes);
  if (args.prefill > 0) RunPrefill(session.get(), pool, args.prefill);
  if (args.tokens > 0) {
    const StreamResult stream =
        RunStream(session.get(), pool, args.prefill, args.tokens, state_bytes);
    PrintSummary(stream, args.prefill + args.tokens, state_bytes);
  }
  CheckTokenCounts(session.get(), args.prefill + args.tokens);
  DemonstrateSnapshot(args, session.get(), pool, args.prefill + args.tokens);
  return 0;
}
