// The device buffer check, on a GPU: a layer call whose LUMEN_MEMORY_DEVICE buffers are not
// what that promises (malloc'd host memory, a freed pointer, an allocation smaller than its
// count, memory or a stream of another GPU) is LUMEN_ERROR_INVALID_ARGUMENT naming the buffer,
// its memory and the sizes; nothing is enqueued, no session changes, and afterwards the same
// engine and a new one compute as the CPU does.
//
// Every case carries the hidden tag [.cuda]: CI (no GPU) skips them; the `gpu` ctest label
// runs them on a machine with one.

#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/backends/cuda/cuda_test_util.h"
#include "tests/reference/layer_reference.h"

namespace lumen_test {
namespace {

// gated_delta_net with H = HV = 2, K = V = 64: q and k hold 128 values per token, and the call
// reads every input buffer (g and beta too).
RefLayer CheckedLayer(std::mt19937& rng) {
  RefLayer layer = Layer(LUMEN_FAMILY_GATED_DELTA_NET, 2, 2, 64, 64);
  RandomParams(&layer, rng);
  return layer;
}

// Whether GPU 0 reads pageable host memory (HMM or ATS): then malloc'd memory is valid device
// memory to it, and the driver cannot tell a freed pointer from such memory.
bool ReadsPageableMemory() {
  int value = 0;
  REQUIRE_CUDA(cudaDeviceGetAttribute(&value, cudaDevAttrPageableMemoryAccess, 0));
  return value != 0;
}

// One session on a CUDA engine and its twin on a CPU engine, float32 device inputs for
// `tokens` tokens and a device output poisoned with NaN.
struct CheckedCall {
  CheckedCall(const RefLayer& layer_in, int64_t tokens_in, std::mt19937& rng)
      : layer(layer_in),
        tokens(tokens_in),
        engines(layer, 1, rng, LayerEngines::Cpu::kYes),
        on_gpu(engines.SessionsOn(engines.gpu)),
        on_cpu(engines.SessionsOn(engines.cpu)),
        encoded(EncodeTokens(RandomTokens(layer, tokens, rng), LUMEN_DTYPE_FLOAT32)),
        device(encoded),
        o(tokens * layer.VPerToken() * 4) {
    o.Fill(0xff, stream.get());
    poisoned = o.Read();
    state_before = AllState(session(), layer);
    tokens_before = Tokens(session());
  }
  lumen_session* session() const { return on_gpu.handles[0]; }
  lumen_layer_inputs Inputs() const { return device.Inputs(layer, tokens, stream.get()); }
  lumen_layer_output Output() const {
    return DeviceOutput(o, tokens * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  }
  lumen_status Run(const lumen_layer_inputs& in, lumen_layer_output& out) const {
    return tokens == 1 ? lumen_session_step(session(), 0, &in, &out)
                       : lumen_session_prefill(session(), 0, static_cast<int32_t>(tokens), &in,
                                               &out);
  }

  // The call over `in` and `out` is refused with a message holding every one of `parts`, and
  // leaves the session, its token count and the output as they were; nothing faulted.
  void ExpectRefused(const lumen_layer_inputs& in, lumen_layer_output out,
                     const std::vector<std::string>& parts) const {
    REQUIRE(Run(in, out) == LUMEN_ERROR_INVALID_ARGUMENT);
    const std::string message = lumen_last_error_message();
    INFO("message: " << message);
    for (const std::string& part : parts) CHECK(message.find(part) != std::string::npos);
    CHECK(message.find("Nothing was enqueued") != std::string::npos);
    REQUIRE_CUDA(cudaStreamSynchronize(stream.get()));
    REQUIRE_CUDA(cudaGetLastError());
    CHECK(o.Read() == poisoned);
    // No recorded error waits either: the next waiting call (read_state) succeeds.
    CHECK(AllState(session(), layer) == state_before);
    CHECK(Tokens(session()) == tokens_before);
  }

  // The same engine steps the session as the CPU steps its twin, over device buffers and then
  // host buffers; then a new pair of engines compares batched steps.
  void ExpectComputesAfterwards(std::mt19937& rng) const {
    const int64_t count = layer.VPerToken();
    for (const int32_t memory : {LUMEN_MEMORY_DEVICE, LUMEN_MEMORY_HOST}) {
      INFO("memory " << memory);
      const EncodedTokens step = EncodeTokens(RandomTokens(layer, 1, rng), LUMEN_DTYPE_FLOAT32);
      OutputBuffer cpu_out;
      cpu_out.Reset(count, LUMEN_DTYPE_FLOAT32);
      lumen_layer_inputs host_in = InputsFor(layer, step, 0, 1);
      lumen_layer_output host_out = cpu_out.Output(0, count);
      REQUIRE_OK(lumen_session_step(on_cpu.handles[0], 0, &host_in, &host_out));
      std::vector<float> gpu_o;
      if (memory == LUMEN_MEMORY_DEVICE) {
        const DeviceTokens on_device(step);
        DeviceBuffer out_buffer(count * 4);
        lumen_layer_inputs in = on_device.Inputs(layer, 1, stream.get());
        lumen_layer_output out = DeviceOutput(out_buffer, count, LUMEN_DTYPE_FLOAT32);
        REQUIRE_OK(lumen_session_step(session(), 0, &in, &out));
        REQUIRE_CUDA(cudaStreamSynchronize(stream.get()));
        const std::vector<uint8_t> bytes = out_buffer.Read();
        gpu_o = Decode(bytes.data(), count, LUMEN_DTYPE_FLOAT32);
      } else {
        OutputBuffer gpu_out;
        gpu_out.Reset(count, LUMEN_DTYPE_FLOAT32);
        lumen_layer_output out = gpu_out.Output(0, count);
        REQUIRE_OK(lumen_session_step(session(), 0, &host_in, &out));
        gpu_o = gpu_out.Values();
      }
      const ErrorReport error = Measure(gpu_o, ToDouble(cpu_out.Values()));
      INFO("o: " << error.Describe());
      CHECK(error.Passes(kStepBound));
      CheckStatesClose(layer, session(), on_cpu.handles[0], kStepBound);
    }
    CompareBatchedSteps(layer, 2, 2, LUMEN_DTYPE_FLOAT32, rng);
  }

  RefLayer layer;
  int64_t tokens;
  Stream stream;
  LayerEngines engines;
  Sessions on_gpu, on_cpu;
  EncodedTokens encoded;
  DeviceTokens device;
  DeviceBuffer o;
  std::vector<uint8_t> poisoned;
  std::vector<float> state_before;
  int64_t tokens_before = 0;
};

TEST_CASE("device buffer check: malloc'd host memory as LUMEN_MEMORY_DEVICE is refused",
          "[.cuda]") {
  std::mt19937 rng(TestSeed());
  const CheckedCall call(CheckedLayer(rng), 1, rng);
  std::vector<float> host_q(call.layer.QPerToken(), 0.5f);
  lumen_layer_inputs in = call.Inputs();
  in.q = host_q.data();
  if (ReadsPageableMemory()) {
    // The GPU reads it: the call is valid and runs.
    WARN("GPU 0 reads pageable memory: malloc'd memory is device memory to it, not refused");
    lumen_layer_output out = call.Output();
    REQUIRE_OK(call.Run(in, out));
    REQUIRE_CUDA(cudaStreamSynchronize(call.stream.get()));
    return;
  }
  call.ExpectRefused(in, call.Output(),
                     {"lumen_layer_inputs.q", "not memory the CUDA driver knows",
                      "q_count = 128 needs 512 bytes", "LUMEN_MEMORY_HOST"});
  // The output too.
  std::vector<float> host_o(call.layer.VPerToken());
  lumen_layer_output out = call.Output();
  out.o = host_o.data();
  call.ExpectRefused(call.Inputs(), out, {"lumen_layer_output.o", "not memory the CUDA driver"});
  call.ExpectComputesAfterwards(rng);
}

TEST_CASE("device buffer check: a freed pointer is refused, also one the engine has seen",
          "[.cuda]") {
  if (ReadsPageableMemory()) {
    WARN("skipped: GPU 0 reads pageable memory, where a freed pointer cannot be told from "
         "host memory and is not refused");
    return;
  }
  std::mt19937 rng(TestSeed());
  const CheckedCall call(CheckedLayer(rng), 1, rng);
  const int64_t bytes = call.layer.QPerToken() * 4;
  // Never seen by the engine.
  {
    void* freed = nullptr;
    REQUIRE_CUDA(cudaMalloc(&freed, bytes));
    REQUIRE_CUDA(cudaFree(freed));
    lumen_layer_inputs in = call.Inputs();
    in.k = freed;
    call.ExpectRefused(in, call.Output(),
                       {"lumen_layer_inputs.k", "not memory the CUDA driver knows",
                        "already freed"});
  }
  // Seen and remembered by a valid call, then freed: the remembered allocation is asked again.
  {
    void* q = nullptr;
    REQUIRE_CUDA(cudaMalloc(&q, bytes));
    REQUIRE_CUDA(cudaMemcpy(q, call.encoded.q.data(), bytes, cudaMemcpyHostToDevice));
    lumen_layer_inputs in = call.Inputs();
    in.q = q;
    lumen_layer_output out = call.Output();
    // The engine remembers q after a valid call over it, made on a session of its own so that
    // the refused calls below find the checked session as it was.
    std::string error;
    SessionPtr other(MakeSession(call.engines.gpu.get(), &error));
    INFO(error);
    REQUIRE(other);
    DeviceBuffer other_o(call.layer.VPerToken() * 4);
    lumen_layer_output other_out =
        DeviceOutput(other_o, call.layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
    REQUIRE_OK(lumen_session_step(other.get(), 0, &in, &other_out));
    REQUIRE_CUDA(cudaStreamSynchronize(call.stream.get()));
    REQUIRE_CUDA(cudaFree(q));
    call.ExpectRefused(in, out, {"lumen_layer_inputs.q", "not memory the CUDA driver knows"});
    // Freed and allocated again, smaller: whether or not the address comes back, the call that
    // needs more than the new allocation is refused.
    void* again = nullptr;
    REQUIRE_CUDA(cudaMalloc(&again, bytes / 2));
    INFO("the new allocation " << (again == q ? "reuses" : "does not reuse") << " the address");
    in.q = again;
    call.ExpectRefused(in, out, {"lumen_layer_inputs.q", "q_count = 128 needs 512 bytes",
                                 "of 256 bytes"});
    REQUIRE_CUDA(cudaFree(again));
  }
  call.ExpectComputesAfterwards(rng);
}

TEST_CASE("device buffer check: an allocation smaller than its count is refused, step and "
          "prefill",
          "[.cuda]") {
  std::mt19937 rng(TestSeed());
  const RefLayer layer = CheckedLayer(rng);
  SECTION("a step: 64 floats with q_count = 128") {
    const CheckedCall call(layer, 1, rng);
    DeviceBuffer small(64 * 4);
    lumen_layer_inputs in = call.Inputs();
    in.q = small.get();
    call.ExpectRefused(in, call.Output(),
                       {"lumen_layer_inputs.q", "q_count = 128 needs 512 bytes",
                        "device memory of GPU 0 of 256 bytes"});
    // A pointer inside an allocation, too near its end: the bytes from it are counted.
    DeviceBuffer v(call.layer.VPerToken() * 4);
    in = call.Inputs();
    in.v = static_cast<char*>(v.get()) + 4;
    call.ExpectRefused(in, call.Output(), {"lumen_layer_inputs.v", "offset 4"});
    call.ExpectComputesAfterwards(rng);
  }
  SECTION("a prefill: 128 floats with q_count = 2,097,152") {
    const int64_t tokens = 2097152 / layer.QPerToken();
    const CheckedCall call(layer, tokens, rng);
    DeviceBuffer small(128 * 4);
    lumen_layer_inputs in = call.Inputs();
    REQUIRE(in.q_count == 2097152);
    in.q = small.get();
    call.ExpectRefused(in, call.Output(),
                       {"lumen_layer_inputs.q", "q_count = 2097152 needs 8388608 bytes",
                        "of 512 bytes"});
    // The output too short.
    DeviceBuffer short_o(call.layer.VPerToken() * 4);
    lumen_layer_output out = call.Output();
    out.o = short_o.get();
    call.ExpectRefused(call.Inputs(), out, {"lumen_layer_output.o", "o_count = "});
    call.ExpectComputesAfterwards(rng);
  }
}

TEST_CASE("device buffer check: a refused call is not captured", "[.cuda]") {
  std::mt19937 rng(TestSeed());
  const CheckedCall call(CheckedLayer(rng), 1, rng);
  Reserve(call.engines.gpu.get(), 1, 1);
  DeviceBuffer small(64 * 4);
  lumen_layer_inputs in = call.Inputs();
  in.q = small.get();
  lumen_layer_output out = call.Output();
  {
    const CapturedGraph graph(call.stream.get(), [&] { return call.Run(in, out); });
    CHECK(graph.status() == LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(lumen_last_error_message()).find("q_count = 128 needs 512 bytes") !=
          std::string::npos);
  }
  // A valid call captures and replays, checked once at capture.
  const lumen_layer_inputs valid = call.Inputs();
  {
    const CapturedGraph graph(call.stream.get(), [&] { return call.Run(valid, out); });
    REQUIRE(graph.status() == LUMEN_OK);
    graph.Launch(call.stream.get());
    REQUIRE_CUDA(cudaStreamSynchronize(call.stream.get()));
    CHECK(call.o.Read() != call.poisoned);
  }
}

TEST_CASE("device buffer check: memory and streams of another GPU are refused", "[.cuda]") {
  int devices = 0;
  REQUIRE_CUDA(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    WARN("skipped: this machine has " << devices << " GPU; the case needs a second one");
    return;
  }
  std::mt19937 rng(TestSeed());
  const CheckedCall call(CheckedLayer(rng), 1, rng);  // on GPU 0
  // Device memory of GPU 1, without peer access from GPU 0.
  REQUIRE_CUDA(cudaSetDevice(0));
  if (cudaDeviceDisablePeerAccess(1) != cudaSuccess) cudaGetLastError();  // it was not enabled
  void* other_q = nullptr;
  REQUIRE_CUDA(cudaSetDevice(1));
  REQUIRE_CUDA(cudaMalloc(&other_q, call.layer.QPerToken() * 4));
  cudaStream_t other_stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&other_stream, cudaStreamNonBlocking));
  REQUIRE_CUDA(cudaSetDevice(0));
  lumen_layer_inputs in = call.Inputs();
  in.q = other_q;
  call.ExpectRefused(in, call.Output(),
                     {"lumen_layer_inputs.q", "device memory of GPU 1", "runs on GPU 0"});
#if CUDART_VERSION >= 12080
  in = call.Inputs();
  in.stream = other_stream;
  call.ExpectRefused(in, call.Output(), {"lumen_layer_inputs.stream", "a stream of GPU 1"});
#else
  WARN("this CUDA runtime is older than 12.8: a stream's device cannot be asked");
#endif
  REQUIRE_CUDA(cudaSetDevice(1));
  REQUIRE_CUDA(cudaStreamDestroy(other_stream));
  REQUIRE_CUDA(cudaFree(other_q));
  REQUIRE_CUDA(cudaSetDevice(0));
  call.ExpectComputesAfterwards(rng);
}

TEST_CASE("device buffer check: managed and page-locked host memory pass and compute alike",
          "[.cuda]") {
  std::mt19937 rng(TestSeed());
  const RefLayer layer = CheckedLayer(rng);
  std::string error;
  ModelPtr model = BuildModel({layer}, &error);
  INFO(error);
  REQUIRE(model);
  EnginePtr engine = MakeEngineOn(model.get(), LUMEN_BACKEND_CUDA);
  SessionPtr in_device(MakeSession(engine.get(), &error));
  SessionPtr elsewhere(MakeSession(engine.get(), &error));
  REQUIRE(in_device);
  REQUIRE(elsewhere);
  const Stream stream;
  const EncodedTokens tokens = EncodeTokens(RandomTokens(layer, 1, rng), LUMEN_DTYPE_FLOAT32);
  const DeviceTokens device(tokens);
  // q and v in managed memory, k and g in page-locked host memory, beta in device memory.
  void *managed_q = nullptr, *managed_v = nullptr, *pinned_k = nullptr, *pinned_g = nullptr;
  REQUIRE_CUDA(cudaMallocManaged(&managed_q, tokens.q.size()));
  REQUIRE_CUDA(cudaMallocManaged(&managed_v, tokens.v.size()));
  REQUIRE_CUDA(cudaMallocHost(&pinned_k, tokens.k.size()));
  REQUIRE_CUDA(cudaMallocHost(&pinned_g, tokens.g.size()));
  std::memcpy(managed_q, tokens.q.data(), tokens.q.size());
  std::memcpy(managed_v, tokens.v.data(), tokens.v.size());
  std::memcpy(pinned_k, tokens.k.data(), tokens.k.size());
  std::memcpy(pinned_g, tokens.g.data(), tokens.g.size());
  DeviceBuffer o_device(layer.VPerToken() * 4), o_elsewhere(layer.VPerToken() * 4);
  lumen_layer_inputs in = device.Inputs(layer, 1, stream.get());
  lumen_layer_output out = DeviceOutput(o_device, layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  REQUIRE_OK(lumen_session_step(in_device.get(), 0, &in, &out));
  in.q = managed_q;
  in.v = managed_v;
  in.k = pinned_k;
  in.g = pinned_g;
  out = DeviceOutput(o_elsewhere, layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  REQUIRE_OK(lumen_session_step(elsewhere.get(), 0, &in, &out));
  REQUIRE_CUDA(cudaStreamSynchronize(stream.get()));
  CHECK(o_device.Read() == o_elsewhere.Read());
  CHECK(AllState(in_device.get(), layer) == AllState(elsewhere.get(), layer));
  REQUIRE_CUDA(cudaFree(managed_q));
  REQUIRE_CUDA(cudaFree(managed_v));
  REQUIRE_CUDA(cudaFreeHost(pinned_k));
  REQUIRE_CUDA(cudaFreeHost(pinned_g));
}

TEST_CASE("device buffer check: an engine with the check off computes alike", "[.cuda]") {
  std::mt19937 rng(TestSeed());
  const RefLayer layer = CheckedLayer(rng);
  std::string error;
  ModelPtr model = BuildModel({layer}, &error);
  REQUIRE(model);
  lumen_engine_options options;
  lumen_engine_options_init(&options);
  options.backend = LUMEN_BACKEND_CUDA;
  CHECK(options.skip_device_buffer_check == 0);
  options.skip_device_buffer_check = 1;
  lumen_engine* unchecked_handle = nullptr;
  REQUIRE_OK(lumen_engine_create(model.get(), &options, &unchecked_handle));
  EnginePtr unchecked(unchecked_handle);
  EnginePtr checked = MakeEngineOn(model.get(), LUMEN_BACKEND_CUDA);
  SessionPtr a(MakeSession(checked.get(), &error)), b(MakeSession(unchecked.get(), &error));
  REQUIRE(a);
  REQUIRE(b);
  const Stream stream;
  for (int step = 0; step < 3; ++step) {
    const DeviceTokens tokens(EncodeTokens(RandomTokens(layer, 1, rng), LUMEN_DTYPE_FLOAT32));
    DeviceBuffer oa(layer.VPerToken() * 4), ob(layer.VPerToken() * 4);
    lumen_layer_inputs in = tokens.Inputs(layer, 1, stream.get());
    lumen_layer_output out_a = DeviceOutput(oa, layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
    lumen_layer_output out_b = DeviceOutput(ob, layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
    REQUIRE_OK(lumen_session_step(a.get(), 0, &in, &out_a));
    REQUIRE_OK(lumen_session_step(b.get(), 0, &in, &out_b));
    REQUIRE_CUDA(cudaStreamSynchronize(stream.get()));
    CHECK(oa.Read() == ob.Read());
  }
  CHECK(AllState(a.get(), layer) == AllState(b.get(), layer));
}

}  // namespace
}  // namespace lumen_test
