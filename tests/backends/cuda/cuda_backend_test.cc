// The CUDA backend through the public C API, on a GPU, against the CPU backend on random
// inputs at realistic sizes (short convolutions and Mamba-2 included): batched steps over
// device buffers, odd and large dims, varlen and long prefills, bf16 state, the pool's other
// slots, host and device buffers, snapshots across backends, and AUTO picking CUDA. Graphs
// are in cuda_graphs_test.cc, failing calls and running out of memory in cuda_errors_test.cc.
//
// Every case carries the hidden tag [.cuda]: CI (no GPU) skips them; the `gpu` ctest label
// runs them on a machine with one.

#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/backends/cuda/cuda_test_util.h"
#include "tests/reference/layer_reference.h"

namespace lumen_test {
namespace {

TEST_CASE("CUDA batched steps over device buffers match the CPU: every family, HV=32, "
          "K=V=128, 64 sessions", "[.cuda]") {
  std::mt19937 rng(TestSeed());
  INFO("seed " << TestSeed());
  for (const RefLayer& layer : EveryFamily(16, 32, 128, 128, rng)) {
    CompareBatchedSteps(layer, 64, 3, LUMEN_DTYPE_BFLOAT16, rng);
  }
}

// A session's step does not depend on the batch around it: stepped among N sessions at the
// first, a middle or the last position, its output and state are bit for bit those of the
// same session stepped alone. Every decode kernel: the block kernel (fp32 state), the
// pipelined one (bf16 state), the convolution passes of the layers that have them.
TEST_CASE("a CUDA step is bitwise the same alone and at any position of any batch", "[.cuda]") {
  std::mt19937 rng(TestSeed());
  INFO("seed " << TestSeed());
  std::vector<RefLayer> layers = EveryFamily(1, 2, 128, 128, rng);
  RefLayer bf16_state = layers[8];  // gated_delta_net with Qwen3-Next's options
  bf16_state.state_dtype = LUMEN_DTYPE_BFLOAT16;
  layers.push_back(bf16_state);
  for (const RefLayer& layer : layers) {
    INFO(layer.Describe());
    for (const int32_t n : {1, 7, 64, 1000}) {
      INFO("n = " << n);
      const LayerEngines engines(layer, n, rng);
      Sessions batch = engines.SessionsOn(engines.gpu);
      Sessions alone = engines.SessionsOn(engines.gpu);
      const EncodedTokens tokens =
          EncodeTokens(RandomTokens(layer, n, rng), LUMEN_DTYPE_BFLOAT16);
      const int64_t per_token = layer.VPerToken();
      OutputBuffer batch_out;
      batch_out.Reset(n * per_token, LUMEN_DTYPE_FLOAT32);
      lumen_layer_inputs in = InputsFor(layer, tokens, 0, n);
      lumen_layer_output out = batch_out.Output(0, n * per_token);
      REQUIRE_OK(
          lumen_engine_step_batch(engines.gpu.get(), 0, batch.handles.data(), n, &in, &out));
      std::vector<int32_t> positions = {0};
      if (n / 2 > 0) positions.push_back(n / 2);
      if (n - 1 > n / 2) positions.push_back(n - 1);
      for (const int32_t position : positions) {
        INFO("position " << position);
        OutputBuffer alone_out;
        alone_out.Reset(per_token, LUMEN_DTYPE_FLOAT32);
        lumen_layer_inputs one = InputsFor(layer, tokens, position, 1);
        lumen_layer_output one_out = alone_out.Output(0, per_token);
        lumen_session* session = alone.handles[position];
        REQUIRE_OK(lumen_session_step(session, 0, &one, &one_out));
        CHECK(std::memcmp(alone_out.bytes.data(),
                          batch_out.bytes.data() + position * per_token * 4,
                          per_token * 4) == 0);
        std::vector<float> a, za, b, zb;
        REQUIRE_OK(ReadState(batch.handles[position], 0, layer, &a, &za));
        REQUIRE_OK(ReadState(session, 0, layer, &b, &zb));
        CHECK(a == b);
        CHECK(za == zb);
      }
    }
  }
}

TEST_CASE("CUDA steps match the CPU at odd and large dims", "[.cuda]") {
  std::mt19937 rng(TestSeed());
  INFO("seed " << TestSeed());
  const std::vector<std::vector<int32_t>> dims = {
      // H, HV, K, V: register tiles of each size, a tail in V, V not a multiple of 4, and K
      // past the register path (the chunked path).
      {1, 1, 1, 1}, {2, 4, 19, 130}, {1, 2, 64, 64}, {2, 2, 256, 256}, {1, 3, 63, 65},
      {1, 1, 300, 36}, {1, 1, 1000, 19}, {1, 1, 5000, 8}};
  for (const auto& d : dims) {
    for (const RefLayer& layer : EveryFamily(d[0], d[1], d[2], d[3], rng)) {
      CompareBatchedSteps(layer, 5, 2, LUMEN_DTYPE_FLOAT32, rng);
    }
  }
}

TEST_CASE("CUDA varlen prefill matches the CPU, with empty sequences", "[.cuda]") {
  std::mt19937 rng(TestSeed());
  INFO("seed " << TestSeed());
  for (const RefLayer& layer : EveryFamily(4, 8, 128, 128, rng)) {
    CompareVarlenPrefill(layer, {0, 1, 700, 0, 64, 2000, 63}, rng);
  }
}

TEST_CASE("CUDA prefill of 65536 tokens matches the CPU", "[.cuda][long]") {
  std::mt19937 rng(TestSeed());
  INFO("seed " << TestSeed());
  const int64_t T = 65536;
  for (const RefLayer& layer : EveryFamily(1, 2, 128, 128, rng)) {
    INFO(layer.Describe());
    std::string error;
    ModelPtr model = BuildModel({layer}, &error);
    REQUIRE(model);
    EnginePtr cpu = MakeEngineOn(model.get(), LUMEN_BACKEND_CPU);
    EnginePtr gpu = MakeEngineOn(model.get(), LUMEN_BACKEND_CUDA);
    SessionPtr a = MakeSession(cpu.get(), &error), b = MakeSession(gpu.get(), &error);
    const EncodedTokens tokens = EncodeTokens(RandomTokens(layer, T, rng), LUMEN_DTYPE_BFLOAT16);
    lumen_layer_inputs in = InputsFor(layer, tokens, 0, T);
    OutputBuffer cpu_out, gpu_out;
    cpu_out.Reset(T * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
    gpu_out.Reset(T * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
    lumen_layer_output out_cpu = cpu_out.Output(0, T * layer.VPerToken());
    lumen_layer_output out_gpu = gpu_out.Output(0, T * layer.VPerToken());
    REQUIRE_OK(lumen_session_prefill(a.get(), 0, static_cast<int32_t>(T), &in, &out_cpu));
    REQUIRE_OK(lumen_session_prefill(b.get(), 0, static_cast<int32_t>(T), &in, &out_gpu));
    const ErrorReport eo = Measure(gpu_out.Values(), ToDouble(cpu_out.Values()));
    INFO("o: " << eo.Describe());
    CHECK(eo.Passes(kPrefillBound));
    CheckStatesClose(layer, b.get(), a.get(), kPrefillBound);
  }
}

TEST_CASE("CUDA bf16 state stays within 5e-3 of the CPU's", "[.cuda]") {
  std::mt19937 rng(TestSeed());
  INFO("seed " << TestSeed());
  for (RefLayer layer : EveryFamily(2, 4, 128, 64, rng)) {
    layer.state_dtype = LUMEN_DTYPE_BFLOAT16;
    CompareBatchedSteps(layer, 8, 4, LUMEN_DTYPE_FLOAT32, rng);
  }
}

TEST_CASE("a CUDA call leaves the pool's other slots unchanged bit for bit", "[.cuda]") {
  std::mt19937 rng(TestSeed());
  RefLayer layer = Layer(LUMEN_FAMILY_KDA, 2, 4, 64, 64);
  const int32_t n = 12;
  const LayerEngines engines(layer, n, rng);
  Sessions all = engines.SessionsOn(engines.gpu);
  const std::vector<int32_t> named = {7, 2, 10};  // scattered through the pool, out of order
  std::vector<lumen_session*> batch;
  for (int32_t i : named) batch.push_back(all.handles[i]);
  const int32_t b = static_cast<int32_t>(batch.size());
  const EncodedTokens tokens = EncodeTokens(RandomTokens(layer, b, rng), LUMEN_DTYPE_FLOAT32);
  lumen_layer_inputs in = InputsFor(layer, tokens, 0, b);
  OutputBuffer out;
  out.Reset(b * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  lumen_layer_output o = out.Output(0, b * layer.VPerToken());
  REQUIRE_OK(lumen_engine_step_batch(engines.gpu.get(), 0, batch.data(), b, &in, &o));
  for (int32_t i = 0; i < n; ++i) {
    std::vector<float> m, z;
    REQUIRE_OK(ReadState(all.handles[i], 0, layer, &m, &z));
    const bool is_named = std::find(named.begin(), named.end(), i) != named.end();
    INFO("session " << i << (is_named ? " (named)" : ""));
    CHECK((std::memcmp(m.data(), engines.matrices[i].data(), m.size() * 4) == 0) == !is_named);
  }
}

// Host buffers go through the engine's pinned staging; either side may be host memory alone.
TEST_CASE("CUDA host-buffer and device-buffer calls agree bit for bit", "[.cuda]") {
  std::mt19937 rng(TestSeed());
  for (const RefLayer& layer : EveryFamily(2, 4, 128, 128, rng)) {
    INFO(layer.Describe());
    const int32_t n = 3;
    const LayerEngines engines(layer, n, rng);
    Sessions host = engines.SessionsOn(engines.gpu);
    Sessions device = engines.SessionsOn(engines.gpu);
    Sessions host_in_only = engines.SessionsOn(engines.gpu);
    Sessions host_out_only = engines.SessionsOn(engines.gpu);
    for (int32_t in_dtype : {LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_BFLOAT16, LUMEN_DTYPE_FLOAT16}) {
      const EncodedTokens tokens = EncodeTokens(RandomTokens(layer, n, rng), in_dtype);
      const int64_t o_count = n * layer.VPerToken();
      OutputBuffer host_out;
      host_out.Reset(o_count, in_dtype);
      lumen_layer_inputs host_in = InputsFor(layer, tokens, 0, n);
      lumen_layer_output ho = host_out.Output(0, o_count);
      REQUIRE_OK(
          lumen_engine_step_batch(engines.gpu.get(), 0, host.handles.data(), n, &host_in, &ho));
      const DeviceTokens dev(tokens);
      DeviceBuffer o(o_count * DTypeBytes(in_dtype));
      lumen_layer_inputs din = dev.Inputs(layer, n, nullptr);
      lumen_layer_output dout;
      lumen_layer_output_init(&dout);
      dout.dtype = in_dtype;
      dout.memory = LUMEN_MEMORY_DEVICE;
      dout.o = o.get();
      dout.o_count = o_count;
      REQUIRE_OK(
          lumen_engine_step_batch(engines.gpu.get(), 0, device.handles.data(), n, &din, &dout));
      REQUIRE_CUDA(cudaDeviceSynchronize());
      CHECK(o.Read() == host_out.bytes);

      DeviceBuffer o_mixed(o_count * DTypeBytes(in_dtype));
      lumen_layer_output mixed_out = dout;
      mixed_out.o = o_mixed.get();
      REQUIRE_OK(lumen_engine_step_batch(engines.gpu.get(), 0, host_in_only.handles.data(), n,
                                         &host_in, &mixed_out));
      CHECK(o_mixed.Read() == host_out.bytes);
      OutputBuffer mixed_host;
      mixed_host.Reset(o_count, in_dtype);
      lumen_layer_output mho = mixed_host.Output(0, o_count);
      REQUIRE_OK(lumen_engine_step_batch(engines.gpu.get(), 0, host_out_only.handles.data(), n,
                                         &din, &mho));
      CHECK(mixed_host.bytes == host_out.bytes);
    }
    for (int32_t i = 0; i < n; ++i) {
      std::vector<float> a, za, b, zb;
      REQUIRE_OK(ReadState(host.handles[i], 0, layer, &a, &za));
      for (const Sessions* other : {&device, &host_in_only, &host_out_only}) {
        REQUIRE_OK(ReadState(other->handles[i], 0, layer, &b, &zb));
        CHECK(a == b);
        CHECK(za == zb);
      }
    }
  }
}

TEST_CASE("snapshots move between the CPU and CUDA backends bit for bit", "[.cuda]") {
  std::mt19937 rng(TestSeed());
  for (const RefLayer& layer : EveryFamily(2, 4, 32, 48, rng)) {
    INFO(layer.Describe());
    const LayerEngines engines(layer, 1, rng, LayerEngines::Cpu::kYes);
    Sessions a = engines.SessionsOn(engines.cpu);
    std::string error;
    OutputBuffer out;
    const EncodedTokens tokens = EncodeTokens(RandomTokens(layer, 5, rng), LUMEN_DTYPE_FLOAT32);
    REQUIRE_OK(RunSession(a.handles[0], 0, layer, tokens, Path::kStep, {}, LUMEN_DTYPE_FLOAT32,
                          &out, &error));
    int64_t size = 0;
    REQUIRE_OK(lumen_session_snapshot_size(a.handles[0], nullptr, &size));
    std::vector<uint8_t> from_cpu(size), from_gpu(size), back(size);
    REQUIRE_OK(lumen_session_snapshot(a.handles[0], nullptr, from_cpu.data(), size, nullptr));
    SessionPtr b = MakeSession(engines.gpu.get(), &error);
    REQUIRE_OK(lumen_session_restore(b.get(), from_cpu.data(), size));
    REQUIRE_OK(lumen_session_snapshot(b.get(), nullptr, from_gpu.data(), size, nullptr));
    CHECK(from_gpu == from_cpu);
    SessionPtr c = MakeSession(engines.cpu.get(), &error);
    REQUIRE_OK(lumen_session_restore(c.get(), from_gpu.data(), size));
    std::vector<float> ma, za, mb, zb;
    REQUIRE_OK(ReadState(a.handles[0], 0, layer, &ma, &za));
    REQUIRE_OK(ReadState(b.get(), 0, layer, &mb, &zb));
    CHECK(std::memcmp(ma.data(), mb.data(), ma.size() * 4) == 0);
    CHECK(za == zb);
    int64_t count = 0;
    REQUIRE_OK(lumen_session_tokens(b.get(), 0, &count));
    CHECK(count == 5);
  }
}

TEST_CASE("AUTO picks CUDA where a GPU is present", "[.cuda]") {
  std::string error;
  ModelPtr model = BuildModel({Layer(LUMEN_FAMILY_SSD, 1, 1, 4, 4)}, &error);
  EnginePtr engine = MakeEngineOn(model.get(), LUMEN_BACKEND_AUTO);
  int32_t backend = LUMEN_BACKEND_AUTO;
  REQUIRE_OK(lumen_engine_backend(engine.get(), &backend));
  CHECK(backend == LUMEN_BACKEND_CUDA);
}

}  // namespace
}  // namespace lumen_test
