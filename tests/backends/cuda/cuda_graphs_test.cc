// The CUDA backend in CUDA graphs, on a GPU: a batched step and a varlen prefill captured in
// a graph replay like direct calls; an engine reserved for its largest call captures
// without a first run; a call beyond the reservation grows outside capture and fails
// inside it.
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

TEST_CASE("a batched CUDA step captured in a graph replays like direct calls", "[.cuda]") {
  std::mt19937 rng(TestSeed());
  RefLayer layer = Layer(LUMEN_FAMILY_GATED_DELTA_NET, 16, 32, 128, 128);
  layer.qk_l2norm = layer.beta_sigmoid = layer.gate_raw = true;
  RandomParams(&layer, rng);
  // More sessions than one launch takes; one session (the latency case).
  for (const int32_t n : {300, 1}) {
    INFO("n = " << n);
    const LayerEngines engines(layer, n, rng);
    Sessions direct = engines.SessionsOn(engines.gpu);
    Sessions replayed = engines.SessionsOn(engines.gpu);
    const EncodedTokens tokens = EncodeTokens(RandomTokens(layer, n, rng), LUMEN_DTYPE_BFLOAT16);
    const DeviceTokens dev(tokens);
    const int64_t o_count = n * layer.VPerToken();
    DeviceBuffer o_direct(o_count * 2), o_graph(o_count * 2);
    const Stream stream;
    lumen_layer_inputs in = dev.Inputs(layer, n, stream.get());
    lumen_layer_output graph_out = DeviceOutput(o_graph, o_count, LUMEN_DTYPE_BFLOAT16);
    const CapturedGraph graph(stream.get(), [&] {
      return lumen_engine_step_batch(engines.gpu.get(), 0, replayed.handles.data(), n, &in,
                                     &graph_out);
    });
    REQUIRE_OK(graph.status());
    // Capturing ran nothing: the states are still the initial ones.
    {
      std::vector<float> m, z;
      REQUIRE_OK(ReadState(replayed.handles[0], 0, layer, &m, &z));
      CHECK(m == engines.matrices[0]);
    }
    lumen_layer_output direct_out = DeviceOutput(o_direct, o_count, LUMEN_DTYPE_BFLOAT16);
    for (int replay = 0; replay < 3; ++replay) {
      graph.Launch(stream.get());
      REQUIRE_OK(lumen_engine_step_batch(engines.gpu.get(), 0, direct.handles.data(), n, &in,
                                         &direct_out));
    }
    REQUIRE_CUDA(cudaStreamSynchronize(stream.get()));
    CHECK(o_graph.Read() == o_direct.Read());
    for (int32_t i = 0; i < n; i += 37) {
      std::vector<float> a, za, b, zb;
      REQUIRE_OK(ReadState(direct.handles[i], 0, layer, &a, &za));
      REQUIRE_OK(ReadState(replayed.handles[i], 0, layer, &b, &zb));
      INFO("session " << i);
      CHECK(a == b);
      CHECK(a != engines.matrices[i]);
    }
  }
}

// A call with host buffers waits for its output, so it cannot be captured: it is refused
// before it enqueues anything, and the capture around it stays valid.
TEST_CASE("a CUDA call with host buffers on a captured stream is UNSUPPORTED and harmless",
          "[.cuda]") {
  std::mt19937 rng(TestSeed());
  RefLayer layer = Layer(LUMEN_FAMILY_GATED_DELTA_NET, 2, 4, 32, 32);
  const int32_t n = 2;
  const LayerEngines engines(layer, n, rng);
  Sessions sessions = engines.SessionsOn(engines.gpu);
  const EncodedTokens tokens = EncodeTokens(RandomTokens(layer, n, rng), LUMEN_DTYPE_FLOAT32);
  const int64_t o_count = n * layer.VPerToken();
  OutputBuffer host_out;
  host_out.Reset(o_count, LUMEN_DTYPE_FLOAT32);
  const Stream stream;
  lumen_layer_inputs in = InputsFor(layer, tokens, 0, n);
  in.stream = stream.get();
  lumen_layer_output out = host_out.Output(0, o_count);
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal));
  const lumen_status status =
      lumen_engine_step_batch(engines.gpu.get(), 0, sessions.handles.data(), n, &in, &out);
  const std::string message = lumen_last_error_message();
  CHECK(cudaStreamEndCapture(stream.get(), &graph) == cudaSuccess);
  if (graph != nullptr) cudaGraphDestroy(graph);
  CHECK(status == LUMEN_ERROR_UNSUPPORTED);
  CHECK(message.find("LUMEN_MEMORY_HOST") != std::string::npos);
  for (int32_t i = 0; i < n; ++i) {
    std::vector<float> m, z;
    REQUIRE_OK(ReadState(sessions.handles[i], 0, layer, &m, &z));
    CHECK(m == engines.matrices[i]);
  }
}

// A varlen prefill over device buffers, captured once the engine's scratch is large enough
// (a direct call of the same shape grows it), replays like direct calls: outputs and every
// state part bit for bit, conv windows included.
TEST_CASE("a varlen CUDA prefill captured in a graph replays like direct calls", "[.cuda]") {
  std::mt19937 rng(TestSeed());
  const std::vector<RefLayer> layers = EveryFamily(4, 8, 64, 64, rng);
  for (const RefLayer& layer : {layers[10], layers.back()}) {  // Qwen3-Next; Mamba-2
    INFO(layer.Describe());
    const std::vector<int32_t> cu = {0, 300, 300, 301, 1000};
    const int32_t n = static_cast<int32_t>(cu.size()) - 1;
    const LayerEngines engines(layer, n, rng);
    Sessions direct = engines.SessionsOn(engines.gpu);
    Sessions replayed = engines.SessionsOn(engines.gpu);
    const EncodedTokens tokens =
        EncodeTokens(RandomTokens(layer, cu.back(), rng), LUMEN_DTYPE_BFLOAT16);
    const DeviceTokens dev(tokens);
    const int64_t o_count = cu.back() * layer.VPerToken();
    DeviceBuffer o_direct(o_count * 2), o_graph(o_count * 2);
    const Stream stream;
    lumen_layer_inputs in = dev.Inputs(layer, cu.back(), stream.get());
    lumen_layer_output direct_out = DeviceOutput(o_direct, o_count, LUMEN_DTYPE_BFLOAT16);
    lumen_layer_output graph_out = DeviceOutput(o_graph, o_count, LUMEN_DTYPE_BFLOAT16);
    REQUIRE_OK(lumen_engine_prefill_varlen(engines.gpu.get(), 0, direct.handles.data(), n,
                                           cu.data(), &in, &direct_out));
    const CapturedGraph graph(stream.get(), [&] {
      return lumen_engine_prefill_varlen(engines.gpu.get(), 0, replayed.handles.data(), n,
                                         cu.data(), &in, &graph_out);
    });
    REQUIRE_OK(graph.status());
    for (int replay = 0; replay < 2; ++replay) {
      INFO("replay " << replay);
      graph.Launch(stream.get());
      REQUIRE_CUDA(cudaStreamSynchronize(stream.get()));
      CHECK(o_graph.Read() == o_direct.Read());
      for (int32_t i = 0; i < n; ++i) {
        INFO("session " << i);
        CHECK(AllState(replayed.handles[i], layer) == AllState(direct.handles[i], layer));
      }
      REQUIRE_OK(lumen_engine_prefill_varlen(engines.gpu.get(), 0, direct.handles.data(), n,
                                             cu.data(), &in, &direct_out));
    }
  }
}

// An engine reserved for its largest call captures, with no call run before, a varlen prefill
// (spread over the sessions, and the worst case of one sequence holding every token) and a
// step of a layer with a convolution, in one graph: nothing grows, and the replays give
// what direct calls give, bit for bit.
TEST_CASE("a reserved CUDA engine captures prefills and conv steps without a first run",
          "[.cuda]") {
  std::mt19937 rng(TestSeed());
  const std::vector<RefLayer> layers = EveryFamily(4, 8, 64, 64, rng);
  for (const RefLayer& layer : {layers[10], layers.back()}) {  // Qwen3-Next; Mamba-2
    INFO(layer.Describe());
    const std::vector<int32_t> spread = {0, 300, 300, 301, 1000};
    const std::vector<int32_t> one_long = {0, 0, 1000, 1000, 1000};
    const int32_t n = static_cast<int32_t>(spread.size()) - 1;
    const LayerEngines engines(layer, n, rng);
    CHECK(ScratchBytes(engines.gpu.get()) == 0);
    Reserve(engines.gpu.get(), n, spread.back());
    const int64_t reserved = ScratchBytes(engines.gpu.get());
    CHECK(reserved > 0);
    // Reserving less changes nothing.
    Reserve(engines.gpu.get(), 1, 1);
    CHECK(ScratchBytes(engines.gpu.get()) == reserved);

    Sessions direct = engines.SessionsOn(engines.gpu);
    Sessions replayed = engines.SessionsOn(engines.gpu);
    const DeviceTokens prefill_tokens(
        EncodeTokens(RandomTokens(layer, spread.back(), rng), LUMEN_DTYPE_BFLOAT16));
    const DeviceTokens step_tokens(
        EncodeTokens(RandomTokens(layer, n, rng), LUMEN_DTYPE_BFLOAT16));
    const int64_t prefill_count = spread.back() * layer.VPerToken();
    const int64_t step_count = n * layer.VPerToken();
    DeviceBuffer o_direct(prefill_count * 2), o_graph(prefill_count * 2);
    DeviceBuffer step_direct(step_count * 2), step_graph(step_count * 2);
    const Stream stream;
    lumen_layer_inputs prefill_in = prefill_tokens.Inputs(layer, spread.back(), stream.get());
    lumen_layer_inputs step_in = step_tokens.Inputs(layer, n, stream.get());
    // The calls of one pass, on `sessions`, writing `o` and `step_o`.
    auto calls = [&](Sessions& sessions, const DeviceBuffer& o, const DeviceBuffer& step_o) {
      lumen_layer_output prefill_out = DeviceOutput(o, prefill_count, LUMEN_DTYPE_BFLOAT16);
      lumen_layer_output step_out = DeviceOutput(step_o, step_count, LUMEN_DTYPE_BFLOAT16);
      lumen_status status =
          lumen_engine_prefill_varlen(engines.gpu.get(), 0, sessions.handles.data(), n,
                                      spread.data(), &prefill_in, &prefill_out);
      if (status == LUMEN_OK) {
        status = lumen_engine_prefill_varlen(engines.gpu.get(), 0, sessions.handles.data(), n,
                                             one_long.data(), &prefill_in, &prefill_out);
      }
      if (status == LUMEN_OK) {
        status = lumen_engine_step_batch(engines.gpu.get(), 0, sessions.handles.data(), n, &step_in,
                                         &step_out);
      }
      return status;
    };
    const CapturedGraph graph(stream.get(), [&] { return calls(replayed, o_graph, step_graph); });
    REQUIRE_OK(graph.status());
    CHECK(ScratchBytes(engines.gpu.get()) == reserved);
    for (int replay = 0; replay < 2; ++replay) {
      INFO("replay " << replay);
      graph.Launch(stream.get());
      REQUIRE_OK(calls(direct, o_direct, step_direct));
      REQUIRE_CUDA(cudaStreamSynchronize(stream.get()));
      CHECK(o_graph.Read() == o_direct.Read());
      CHECK(step_graph.Read() == step_direct.Read());
      for (int32_t i = 0; i < n; ++i) {
        INFO("session " << i);
        CHECK(AllState(replayed.handles[i], layer) == AllState(direct.handles[i], layer));
      }
    }
    CHECK(ScratchBytes(engines.gpu.get()) == reserved);
  }
}

// A call that needs more scratch than the engine holds: during capture it fails, changing
// nothing and leaving the capture usable; outside capture it grows the scratch and runs.
TEST_CASE("a CUDA call larger than the reservation grows outside capture, fails inside",
          "[.cuda]") {
  std::mt19937 rng(TestSeed());
  const RefLayer layer = EveryFamily(4, 8, 64, 64, rng)[10];  // Qwen3-Next
  const LayerEngines engines(layer, 1, rng);
  Reserve(engines.gpu.get(), 1, 64);
  const int64_t reserved = ScratchBytes(engines.gpu.get());
  REQUIRE(reserved > 0);
  Sessions sessions = engines.SessionsOn(engines.gpu);
  const std::vector<float> before = AllState(sessions.handles[0], layer);
  const int32_t T = 5000;
  const DeviceTokens tokens(EncodeTokens(RandomTokens(layer, T, rng), LUMEN_DTYPE_BFLOAT16));
  DeviceBuffer o(T * layer.VPerToken() * 4);
  const Stream stream;
  lumen_layer_inputs in = tokens.Inputs(layer, T, stream.get());
  lumen_layer_output out = DeviceOutput(o, T * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  {
    const CapturedGraph graph(stream.get(), [&] {
      return lumen_session_prefill(sessions.handles[0], 0, T, &in, &out);
    });
    CHECK(graph.status() == LUMEN_ERROR_UNSUPPORTED);
    const std::string message = lumen_last_error_message();
    INFO(message);
    CHECK(message.find("lumen_engine_reserve") != std::string::npos);
  }
  CHECK(ScratchBytes(engines.gpu.get()) == reserved);
  CHECK(Tokens(sessions.handles[0]) == 0);
  CHECK(AllState(sessions.handles[0], layer) == before);
  // Outside capture the same call grows the scratch and runs.
  REQUIRE_OK(lumen_session_prefill(sessions.handles[0], 0, T, &in, &out));
  REQUIRE_CUDA(cudaStreamSynchronize(stream.get()));
  const int64_t grown = ScratchBytes(engines.gpu.get());
  CHECK(grown > reserved);
  CHECK(Tokens(sessions.handles[0]) == T);
  CHECK(AllState(sessions.handles[0], layer) != before);
  // Now it fits: the capture succeeds and grows nothing.
  const CapturedGraph graph(stream.get(), [&] {
    return lumen_session_prefill(sessions.handles[0], 0, T, &in, &out);
  });
  REQUIRE_OK(graph.status());
  CHECK(ScratchBytes(engines.gpu.get()) == grown);
}

}  // namespace
}  // namespace lumen_test
