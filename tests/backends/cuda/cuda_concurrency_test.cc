// The CUDA backend beside other work on the device: a graph captured in global mode by one
// thread while another creates, resets, forks, reads and writes sessions of the same engine;
// and session calls made while a kernel of the caller's runs on another stream, which must
// not wait for it. Both fail when the engine's own fills and copies use the legacy default
// stream or a whole-device wait.
//
// Every case carries the hidden tag [.cuda]: CI (no GPU) skips them; the `gpu` ctest label
// runs them on a machine with one.

#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lumen/lumen.h"
#include "tests/backends/cuda/cuda_test_util.h"
#include "tests/backends/cuda/spin_kernel.h"
#include "tests/reference/layer_reference.h"

namespace lumen_test {
namespace {

using Clock = std::chrono::steady_clock;

// One round of the session work a serving thread does beside the layer calls: create a
// session, write its state, fork it, reset the fork, read both back, destroy both. Returns
// an empty string, or what failed.
std::string SessionRound(lumen_engine* engine, const RefLayer& layer,
                         const std::vector<float>& matrix, const std::vector<float>& normalizer) {
  std::string error;
  SessionPtr session = MakeSession(engine, &error);
  if (!session) return "create: " + error;
  if (WriteState(session.get(), 0, layer, matrix, normalizer) != LUMEN_OK) {
    return std::string("write_state: ") + lumen_last_error_message();
  }
  lumen_session* raw_fork = nullptr;
  if (lumen_session_fork(session.get(), &raw_fork) != LUMEN_OK) {
    return std::string("fork: ") + lumen_last_error_message();
  }
  SessionPtr fork(raw_fork);
  if (lumen_session_reset(fork.get()) != LUMEN_OK) {
    return std::string("reset: ") + lumen_last_error_message();
  }
  std::vector<float> read, read_z, zeros, zeros_z;
  if (ReadState(session.get(), 0, layer, &read, &read_z) != LUMEN_OK ||
      ReadState(fork.get(), 0, layer, &zeros, &zeros_z) != LUMEN_OK) {
    return std::string("read_state: ") + lumen_last_error_message();
  }
  if (read != matrix) return "read_state gave back another state than was written";
  for (float value : zeros) {
    if (value != 0.0f) return "a reset fork is not zero";
  }
  return "";
}

TEST_CASE("a graph captured in global mode while another thread works on sessions replays "
          "like direct calls", "[.cuda]") {
  std::mt19937 rng(TestSeed());
  RefLayer layer = Layer(LUMEN_FAMILY_GATED_DELTA_NET, 2, 4, 64, 64);
  layer.qk_l2norm = layer.beta_sigmoid = layer.gate_raw = true;
  RandomParams(&layer, rng);
  const int32_t n = 8;
  const LayerEngines engines(layer, n, rng);
  Reserve(engines.gpu.get(), n, n);
  Sessions direct = engines.SessionsOn(engines.gpu);
  Sessions replayed = engines.SessionsOn(engines.gpu);
  const DeviceTokens dev(EncodeTokens(RandomTokens(layer, n, rng), LUMEN_DTYPE_BFLOAT16));
  const int64_t o_count = n * layer.VPerToken();
  DeviceBuffer o_direct(o_count * 2), o_graph(o_count * 2);
  const Stream stream;
  lumen_layer_inputs in = dev.Inputs(layer, n, stream.get());
  lumen_layer_output graph_out = DeviceOutput(o_graph, o_count, LUMEN_DTYPE_BFLOAT16);

  // The other thread: rounds of session work on the same engine until told to stop. It
  // writes `failure` before it sets `failed`, and nothing reads it until it has ended.
  std::atomic<bool> stop{false}, failed{false};
  std::atomic<int64_t> rounds{0};
  std::string failure;
  std::thread worker([&] {
    while (!stop.load()) {
      failure =
          SessionRound(engines.gpu.get(), layer, engines.matrices[0], engines.normalizers[0]);
      if (!failure.empty()) {
        failed = true;
        return;
      }
      rounds.fetch_add(1);
    }
  });
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(30);
  while (rounds.load() == 0 && !failed.load() && Clock::now() < deadline) {
    std::this_thread::yield();
  }

  // The capture stays open until the other thread has done 20 rounds inside it. Nothing here
  // may throw before the other thread has been joined.
  cudaGraph_t graph = nullptr;
  const cudaError_t begun = cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal);
  lumen_status captured = LUMEN_ERROR_INTERNAL;
  int64_t rounds_in_capture = 0;
  cudaError_t ended = cudaErrorUnknown;
  if (begun == cudaSuccess) {
    captured = lumen_engine_step_batch(engines.gpu.get(), 0, replayed.handles.data(), n, &in,
                                       &graph_out);
    const int64_t first = rounds.load();
    while (rounds.load() < first + 20 && !failed.load() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    rounds_in_capture = rounds.load() - first;
    ended = cudaStreamEndCapture(stream.get(), &graph);
  }
  stop = true;
  worker.join();
  INFO("the other thread's failure: " << failure);
  CHECK(failure.empty());
  CHECK(rounds_in_capture >= 20);
  REQUIRE_CUDA(begun);
  REQUIRE_CUDA(ended);  // no call of the other thread invalidated the capture
  REQUIRE_OK(captured);
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  lumen_layer_output direct_out = DeviceOutput(o_direct, o_count, LUMEN_DTYPE_BFLOAT16);
  for (int replay = 0; replay < 3; ++replay) {
    REQUIRE_CUDA(cudaGraphLaunch(exec, stream.get()));
    REQUIRE_OK(lumen_engine_step_batch(engines.gpu.get(), 0, direct.handles.data(), n, &in,
                                       &direct_out));
  }
  REQUIRE_CUDA(cudaStreamSynchronize(stream.get()));
  CHECK(o_graph.Read() == o_direct.Read());
  for (int32_t i = 0; i < n; ++i) {
    INFO("session " << i);
    CHECK(AllState(replayed.handles[i], layer) == AllState(direct.handles[i], layer));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_CASE("session calls return while a kernel of the caller's runs on another stream",
          "[.cuda]") {
  std::mt19937 rng(TestSeed());
  RefLayer layer = Layer(LUMEN_FAMILY_GATED_DELTA_NET, 2, 4, 64, 64);
  const LayerEngines engines(layer, 1, rng);
  int* flag = nullptr;
  REQUIRE_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int), cudaHostAllocMapped));
  *flag = 0;
  const Stream other;
  // Ten seconds at most, should the session calls wait for it.
  REQUIRE_CUDA(LaunchSpinUntilFlag(flag, uint64_t{10} * 1000 * 1000 * 1000, other.get()));

  // The engine's first session grows its state pool (an allocation and a fill), then the
  // rest of a session's life.
  const std::string error =
      SessionRound(engines.gpu.get(), layer, engines.matrices[0], engines.normalizers[0]);
  const cudaError_t running = cudaStreamQuery(other.get());
  *static_cast<volatile int*>(flag) = 1;
  REQUIRE_CUDA(cudaStreamSynchronize(other.get()));
  REQUIRE_CUDA(cudaFreeHost(flag));
  INFO("session work: " << error);
  CHECK(error.empty());
  // Still running when the session calls had returned: they did not wait for it.
  CHECK(running == cudaErrorNotReady);
}

}  // namespace
}  // namespace lumen_test
