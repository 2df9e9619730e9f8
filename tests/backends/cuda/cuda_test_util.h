#pragma once
// What the CUDA backend's tests (lumen_cuda_tests) share: engines on a given backend, device
// buffers, inputs and outputs in device memory, streams, captured graphs, scratch
// reservations, every family at given dims, sessions made alike on two engines, and the
// comparison of batched steps and states between the CUDA and CPU backends.

#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/reference/layer_reference.h"
#include "tests/reference/require_ok.h"

namespace lumen_test {


#define REQUIRE_CUDA(call) REQUIRE((call) == cudaSuccess)

inline EnginePtr MakeEngineOn(const lumen_model* model, int32_t backend) {
  lumen_engine_options options;
  lumen_engine_options_init(&options);
  options.backend = backend;
  lumen_engine* engine = nullptr;
  REQUIRE_OK(lumen_engine_create(model, &options, &engine));
  return EnginePtr(engine);
}

// Device memory holding a copy of `bytes`, freed on destruction. Every fill and copy has
// finished when its call returns: the calls under test run on non-blocking streams, which do
// not wait for the legacy default stream, so nothing may be left in flight there.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(int64_t size) : size_(size) {
    if (size_ > 0) REQUIRE_CUDA(cudaMalloc(&data_, size_));
  }
  explicit DeviceBuffer(const std::vector<uint8_t>& bytes) : DeviceBuffer(bytes.size()) {
    if (size_ > 0) {
      // A copy from pageable memory may return before its DMA has landed: wait for it.
      REQUIRE_CUDA(cudaMemcpyAsync(data_, bytes.data(), size_, cudaMemcpyHostToDevice,
                                   cudaStreamLegacy));
      REQUIRE_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
    }
  }
  // Sets every byte to `value` on `stream`, the stream of the call that will write the buffer,
  // and waits for it (0xff: NaN in every float).
  void Fill(uint8_t value, cudaStream_t stream) {
    if (size_ == 0) return;
    REQUIRE_CUDA(cudaMemsetAsync(data_, value, size_, stream));
    REQUIRE_CUDA(cudaStreamSynchronize(stream));
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return data_; }
  // The bytes, once the stream of the call that wrote them has been synchronized.
  std::vector<uint8_t> Read() const {
    std::vector<uint8_t> bytes(size_);
    if (size_ > 0) REQUIRE(cudaMemcpy(bytes.data(), data_, size_, cudaMemcpyDeviceToHost) == cudaSuccess);
    return bytes;
  }

 private:
  void* data_ = nullptr;
  int64_t size_ = 0;
};

// Token inputs copied to the device.
struct DeviceTokens {
  explicit DeviceTokens(const EncodedTokens& t)
      : dtype(t.dtype), q(t.q), k(t.k), v(t.v), g(t.g), beta(t.beta) {}
  lumen_layer_inputs Inputs(const RefLayer& layer, int64_t n, cudaStream_t stream) const {
    lumen_layer_inputs in;
    lumen_layer_inputs_init(&in);
    in.dtype = dtype;
    in.memory = LUMEN_MEMORY_DEVICE;
    in.stream = stream;
    in.q = q.get();
    in.q_count = n * layer.QPerToken();
    in.k = k.get();
    in.k_count = n * layer.QPerToken();
    in.v = v.get();
    in.v_count = n * layer.VPerToken();
    in.g = layer.HasG() ? g.get() : nullptr;
    in.g_count = n * layer.GPerToken();
    in.beta = layer.HasBeta() ? beta.get() : nullptr;
    in.beta_count = n * layer.BetaPerToken();
    return in;
  }
  int32_t dtype;
  DeviceBuffer q, k, v, g, beta;
};

// A layer output of `count` elements of `dtype` in device memory.
inline lumen_layer_output DeviceOutput(const DeviceBuffer& o, int64_t count, int32_t dtype) {
  lumen_layer_output out;
  lumen_layer_output_init(&out);
  out.dtype = dtype;
  out.memory = LUMEN_MEMORY_DEVICE;
  out.o = o.get();
  out.o_count = count;
  return out;
}

// A non-blocking stream, destroyed with the object.
class Stream {
 public:
  Stream() { REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// The graph of the library calls `calls` makes on `stream` (captured in global mode, as
// PyTorch does), instantiated when every call succeeded. status() is the first failing
// call's status (lumen_last_error_message has its message), else LUMEN_OK.
class CapturedGraph {
 public:
  template <typename Calls>
  CapturedGraph(cudaStream_t stream, Calls&& calls) {
    REQUIRE_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    status_ = calls();
    REQUIRE_CUDA(cudaStreamEndCapture(stream, &graph_));
    if (status_ == LUMEN_OK) REQUIRE_CUDA(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  ~CapturedGraph() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  lumen_status status() const { return status_; }
  void Launch(cudaStream_t stream) const {
    REQUIRE(exec_ != nullptr);
    REQUIRE_CUDA(cudaGraphLaunch(exec_, stream));
  }

 private:
  lumen_status status_ = LUMEN_OK;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

inline int64_t ScratchBytes(lumen_engine* engine) {
  int64_t bytes = -1;
  REQUIRE_OK(lumen_engine_scratch_bytes(engine, &bytes));
  return bytes;
}

inline void Reserve(lumen_engine* engine, int32_t max_sessions, int32_t max_tokens) {
  lumen_reservation reservation;
  lumen_reservation_init(&reservation);
  reservation.max_sessions = max_sessions;
  reservation.max_tokens = max_tokens;
  REQUIRE_OK(lumen_engine_reserve(engine, &reservation));
}

inline int64_t Tokens(lumen_session* session) {
  int64_t count = -1;
  REQUIRE_OK(lumen_session_tokens(session, 0, &count));
  return count;
}

inline RefLayer Layer(int32_t family, int32_t H, int32_t HV, int32_t K, int32_t V) {
  RefLayer layer;
  layer.family = family;
  layer.num_heads = H;
  layer.num_value_heads = HV;
  layer.key_dim = K;
  layer.value_dim = V;
  return layer;
}

// Layers with fla's options: allow_neg_eigval (beta = 2 * sigmoid(logit) on gated_delta_net
// and kda, beta given in [0, 2] on delta_net), and the lower-bounded gate on gated_delta_net
// and kda.
inline void AppendFlaOptionLayers(int32_t H, int32_t HV, int32_t K, int32_t V,
                                  std::vector<RefLayer>* layers) {
  for (int32_t family : {LUMEN_FAMILY_GATED_DELTA_NET, LUMEN_FAMILY_KDA}) {
    RefLayer layer = Layer(family, H, HV, K, V);
    layer.qk_l2norm = layer.beta_sigmoid = layer.gate_raw = layer.allow_neg_eigval = true;
    layers->push_back(layer);
  }
  RefLayer given_beta = Layer(LUMEN_FAMILY_DELTA_NET, H, HV, K, V);
  given_beta.allow_neg_eigval = true;
  layers->push_back(given_beta);
  for (int32_t family : {LUMEN_FAMILY_GATED_DELTA_NET, LUMEN_FAMILY_KDA}) {
    RefLayer layer = Layer(family, H, HV, K, V);
    layer.qk_l2norm = layer.beta_sigmoid = layer.gate_raw = true;
    layer.gate_lower_bound = -5.0f;
    layers->push_back(layer);
  }
}

// Every family, with the options real models use switched on for some.
inline std::vector<RefLayer> EveryFamily(int32_t H, int32_t HV, int32_t K, int32_t V,
                                  std::mt19937& rng) {
  std::vector<RefLayer> layers;
  for (int32_t family = LUMEN_FAMILY_LINEAR_ATTN; family <= LUMEN_FAMILY_KDA; ++family) {
    layers.push_back(Layer(family, H, HV, K, V));
  }
  RefLayer normalized = Layer(LUMEN_FAMILY_LINEAR_ATTN, H, HV, K, V);
  normalized.feature_map = LUMEN_FEATURE_MAP_ELU1;
  normalized.normalize = true;
  layers.push_back(normalized);
  for (int32_t family : {LUMEN_FAMILY_GATED_DELTA_NET, LUMEN_FAMILY_KDA}) {
    RefLayer real = Layer(family, H, HV, K, V);
    real.qk_l2norm = real.beta_sigmoid = real.gate_raw = true;
    layers.push_back(real);
  }
  // Qwen3-Next's layer (a short convolution before gated_delta_net) and Mamba-2 (ssd with raw
  // gates, a convolution with biases, and D).
  RefLayer qwen = Layer(LUMEN_FAMILY_GATED_DELTA_NET, H, HV, K, V);
  qwen.qk_l2norm = qwen.beta_sigmoid = qwen.gate_raw = true;
  qwen.conv_size = 4;
  layers.push_back(qwen);
  // fla's options (the tests index the layers above, and take Mamba-2 as the last).
  AppendFlaOptionLayers(H, HV, K, V, &layers);
  RefLayer mamba2 = Layer(LUMEN_FAMILY_SSD, H, HV, K, V);
  mamba2.gate_raw = true;
  mamba2.conv_size = 4;
  for (int part = 0; part < 3; ++part) mamba2.conv_bias[part].assign(mamba2.ConvChannels(part), 0);
  mamba2.d_skip.assign(HV, 0.0f);
  layers.push_back(mamba2);
  for (RefLayer& layer : layers) RandomParams(&layer, rng);
  return layers;
}

struct Sessions {
  std::vector<SessionPtr> owned;
  std::vector<lumen_session*> handles;
};

// n sessions of `engine` holding the given states, and conv windows that depend only on the
// session's index (so that sessions made alike on two engines start alike).
inline Sessions MakeSessions(lumen_engine* engine, const RefLayer& layer, int32_t n,
                      const std::vector<std::vector<float>>& matrices,
                      const std::vector<std::vector<float>>& normalizers) {
  Sessions s;
  std::string error;
  for (int32_t i = 0; i < n; ++i) {
    s.owned.push_back(MakeSession(engine, &error));
    REQUIRE(s.owned.back());
    s.handles.push_back(s.owned.back().get());
    REQUIRE_OK(WriteState(s.handles.back(), 0, layer, matrices[i], normalizers[i]));
    std::mt19937 window_rng(1000 + i);
    std::vector<float> windows[3];
    RandomConvState(layer, window_rng, windows);
    REQUIRE_OK(WriteConvState(s.handles.back(), 0, layer, windows));
  }
  return s;
}

// Every state part of a session's layer 0, back to back: matrix, normalizer, conv windows.
inline std::vector<float> AllState(lumen_session* session, const RefLayer& layer) {
  std::vector<float> all, normalizer, windows[3];
  REQUIRE_OK(ReadState(session, 0, layer, &all, &normalizer));
  REQUIRE_OK(ReadConvState(session, 0, layer, windows));
  all.insert(all.end(), normalizer.begin(), normalizer.end());
  for (const std::vector<float>& window : windows) all.insert(all.end(), window.begin(), window.end());
  return all;
}

inline void RandomStates(const RefLayer& layer, int32_t n, std::mt19937& rng,
                  std::vector<std::vector<float>>* matrices,
                  std::vector<std::vector<float>>* normalizers) {
  matrices->resize(n);
  normalizers->resize(n);
  for (int32_t i = 0; i < n; ++i) RandomState(layer, rng, &(*matrices)[i], &(*normalizers)[i]);
}

// A model of one layer with a CUDA engine (and a CPU one where a case compares the two), and
// n random states to start sessions from: the set-up most cases share.
struct LayerEngines {
  enum class Cpu { kNo, kYes };
  LayerEngines(const RefLayer& layer_in, int32_t n_in, std::mt19937& rng, Cpu with_cpu = Cpu::kNo)
      : layer(layer_in), n(n_in) {
    std::string error;
    model = BuildModel({layer}, &error);
    INFO(error);
    REQUIRE(model);
    gpu = MakeEngineOn(model.get(), LUMEN_BACKEND_CUDA);
    if (with_cpu == Cpu::kYes) cpu = MakeEngineOn(model.get(), LUMEN_BACKEND_CPU);
    RandomStates(layer, n, rng, &matrices, &normalizers);
  }
  // n sessions on `engine`, session i holding random state i: called twice, identical twins.
  Sessions SessionsOn(const EnginePtr& engine) const {
    return MakeSessions(engine.get(), layer, n, matrices, normalizers);
  }

  RefLayer layer;
  int32_t n;
  ModelPtr model;  // outlives the engines
  EnginePtr gpu, cpu;
  std::vector<std::vector<float>> matrices, normalizers;
};

// Checks a CUDA session's state against a CPU session's, within `bound`.
inline void CheckStatesClose(const RefLayer& layer, lumen_session* cuda, lumen_session* cpu,
                      double bound) {
  std::vector<float> m_gpu, z_gpu, m_cpu, z_cpu;
  REQUIRE_OK(ReadState(cuda, 0, layer, &m_gpu, &z_gpu));
  REQUIRE_OK(ReadState(cpu, 0, layer, &m_cpu, &z_cpu));
  const ErrorReport em = Measure(m_gpu, ToDouble(m_cpu));
  INFO("state: " << em.Describe() << " bound " << bound);
  CHECK(em.Passes(bound));
  if (layer.HasNormalizer()) {
    const ErrorReport ez = Measure(z_gpu, ToDouble(z_cpu));
    INFO("normalizer: " << ez.Describe());
    CHECK(ez.Passes(bound));
  }
  // The windows hold raw inputs, rounded alike to the stored dtype: equal bit for bit.
  std::vector<float> w_gpu[3], w_cpu[3];
  REQUIRE_OK(ReadConvState(cuda, 0, layer, w_gpu));
  REQUIRE_OK(ReadConvState(cpu, 0, layer, w_cpu));
  for (int part = 0; part < 3; ++part) {
    INFO("conv window " << part);
    CHECK(w_gpu[part] == w_cpu[part]);
  }
}

// Runs `steps` batched steps of n sessions on the CPU (host buffers) and on CUDA (device
// buffers on a stream), from the same states and inputs, and compares outputs and states.
inline void CompareBatchedSteps(const RefLayer& layer, int32_t n, int32_t steps, int32_t in_dtype,
                         std::mt19937& rng) {
  INFO(layer.Describe() << " n=" << n << " dtype=" << in_dtype);
  const LayerEngines engines(layer, n, rng, LayerEngines::Cpu::kYes);
  Sessions on_cpu = engines.SessionsOn(engines.cpu);
  Sessions on_gpu = engines.SessionsOn(engines.gpu);
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int64_t o_count = n * layer.VPerToken();
  // A bf16 state is rounded after every token; the two backends may round a value that lies
  // within an ulp of a tie differently, so they are held to the bf16 bound of docs/spec.md §4.
  const double bound = layer.state_dtype == LUMEN_DTYPE_BFLOAT16 ? kHalfBound : kStepBound;
  for (int32_t step = 0; step < steps; ++step) {
    const EncodedTokens tokens = EncodeTokens(RandomTokens(layer, n, rng), in_dtype);
    OutputBuffer cpu_out;
    cpu_out.Reset(o_count, LUMEN_DTYPE_FLOAT32);
    lumen_layer_inputs host_in = InputsFor(layer, tokens, 0, n);
    lumen_layer_output host_out = cpu_out.Output(0, o_count);
    REQUIRE_OK(lumen_engine_step_batch(engines.cpu.get(), 0, on_cpu.handles.data(), n, &host_in,
                                       &host_out));

    const DeviceTokens device(tokens);
    DeviceBuffer o(o_count * 4);
    o.Fill(0xff, stream);  // NaN
    lumen_layer_inputs in = device.Inputs(layer, n, stream);
    lumen_layer_output out;
    lumen_layer_output_init(&out);
    out.memory = LUMEN_MEMORY_DEVICE;
    out.o = o.get();
    out.o_count = o_count;
    REQUIRE_OK(lumen_engine_step_batch(engines.gpu.get(), 0, on_gpu.handles.data(), n, &in, &out));
    REQUIRE_CUDA(cudaStreamSynchronize(stream));
    const std::vector<uint8_t> bytes = o.Read();
    const std::vector<float> gpu_o = Decode(bytes.data(), o_count, LUMEN_DTYPE_FLOAT32);
    const ErrorReport eo = Measure(gpu_o, ToDouble(cpu_out.Values()));
    INFO("step " << step << " o: " << eo.Describe());
    CHECK(eo.Passes(bound));
  }
  for (int32_t i = 0; i < n; ++i) {
    INFO("session " << i);
    CheckStatesClose(layer, on_gpu.handles[i], on_cpu.handles[i], bound);
  }
  cudaStreamDestroy(stream);
}

// Prefills sessions of the given lengths (varlen, host buffers, fp32 inputs) on the CPU and on
// CUDA from the same states and inputs, and compares outputs and states within kPrefillBound.
inline void CompareVarlenPrefill(const RefLayer& layer, const std::vector<int32_t>& lengths,
                                 std::mt19937& rng) {
  INFO(layer.Describe());
  const int32_t n = static_cast<int32_t>(lengths.size());
  std::vector<int32_t> cu = {0};
  for (const int32_t length : lengths) cu.push_back(cu.back() + length);
  const int64_t T = cu.back();
  const LayerEngines engines(layer, n, rng, LayerEngines::Cpu::kYes);
  Sessions on_cpu = engines.SessionsOn(engines.cpu);
  Sessions on_gpu = engines.SessionsOn(engines.gpu);
  const EncodedTokens tokens = EncodeTokens(RandomTokens(layer, T, rng), LUMEN_DTYPE_FLOAT32);
  lumen_layer_inputs in = InputsFor(layer, tokens, 0, T);
  const int64_t o_count = T * layer.VPerToken();
  OutputBuffer cpu_out, gpu_out;
  cpu_out.Reset(o_count, LUMEN_DTYPE_FLOAT32);
  gpu_out.Reset(o_count, LUMEN_DTYPE_FLOAT32);
  lumen_layer_output out_cpu = cpu_out.Output(0, o_count);
  lumen_layer_output out_gpu = gpu_out.Output(0, o_count);
  REQUIRE_OK(lumen_engine_prefill_varlen(engines.cpu.get(), 0, on_cpu.handles.data(), n,
                                         cu.data(), &in, &out_cpu));
  REQUIRE_OK(lumen_engine_prefill_varlen(engines.gpu.get(), 0, on_gpu.handles.data(), n,
                                         cu.data(), &in, &out_gpu));
  const ErrorReport eo = Measure(gpu_out.Values(), ToDouble(cpu_out.Values()));
  INFO("o: " << eo.Describe());
  CHECK(eo.Passes(kPrefillBound));
  for (int32_t i = 0; i < n; ++i) {
    INFO("session " << i << " of " << lengths[i] << " tokens");
    CheckStatesClose(layer, on_gpu.handles[i], on_cpu.handles[i], kPrefillBound);
  }
}

}  // namespace lumen_test
