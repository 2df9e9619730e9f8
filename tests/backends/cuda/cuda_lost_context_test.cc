// A kernel fault on a GPU, in a process of its own (lumen_cuda_lost_context_tests): the fault
// leaves the process's CUDA context unusable, so it cannot share a process with other tests.
// With the device buffer check off, a step over malloc'd host memory passed as
// LUMEN_MEMORY_DEVICE faults; the next call that waits reports it, and every later call, a new
// engine's creation included, says that the GPU context of the process is lost and that only a
// new process recovers.
//
// The case carries the hidden tag [.cuda]: CI (no GPU) skips it; the `gpu` ctest label runs it
// on a machine with one.

#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/backends/cuda/cuda_test_util.h"
#include "tests/reference/layer_reference.h"

namespace lumen_test {
namespace {

// The status is BACKEND and the message says the context is lost.
void CheckLost(lumen_status status, const char* call) {
  INFO(call << ": " << LastError(status));
  CHECK(status == LUMEN_ERROR_BACKEND);
  const std::string message = lumen_last_error_message();
  CHECK(message.find("context of this process is lost") != std::string::npos);
  CHECK(message.find("only a new process recovers") != std::string::npos);
}

TEST_CASE("after a kernel faults, every call says the GPU context of the process is lost",
          "[.cuda]") {
  int pageable = 0;
  REQUIRE_CUDA(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, 0));
  if (pageable != 0) {
    WARN("skipped: GPU 0 reads pageable memory, so malloc'd memory does not fault there");
    return;
  }
  std::mt19937 rng(TestSeed());
  RefLayer layer = Layer(LUMEN_FAMILY_GATED_DELTA_NET, 2, 2, 64, 64);
  RandomParams(&layer, rng);
  std::string error;
  ModelPtr model = BuildModel({layer}, &error);
  INFO(error);
  REQUIRE(model);
  lumen_engine_options options;
  lumen_engine_options_init(&options);
  options.backend = LUMEN_BACKEND_CUDA;
  options.skip_device_buffer_check = 1;  // the check would refuse the buffer below
  lumen_engine* engine_handle = nullptr;
  REQUIRE_OK(lumen_engine_create(model.get(), &options, &engine_handle));
  EnginePtr engine(engine_handle);
  SessionPtr session(MakeSession(engine.get(), &error));
  REQUIRE(session);

  const Stream stream;
  const DeviceTokens tokens(EncodeTokens(RandomTokens(layer, 1, rng), LUMEN_DTYPE_FLOAT32));
  DeviceBuffer o(layer.VPerToken() * 4);
  lumen_layer_inputs in = tokens.Inputs(layer, 1, stream.get());
  // Far more than a page, so that the kernel's reads leave any mapping the GPU might have.
  std::vector<float> host_q(layer.QPerToken() << 12, 0.5f);
  in.q = host_q.data();
  lumen_layer_output out = DeviceOutput(o, layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  // Launched and returned before it ran: the fault comes later.
  REQUIRE_OK(lumen_session_step(session.get(), 0, &in, &out));

  std::vector<float> matrix, normalizer;
  CheckLost(ReadState(session.get(), 0, layer, &matrix, &normalizer), "read_state (waits)");
  CheckLost(ReadState(session.get(), 0, layer, &matrix, &normalizer), "read_state again");
  lumen_session* another = nullptr;
  CheckLost(lumen_session_create(engine.get(), &another), "session_create");
  const lumen_layer_inputs valid = tokens.Inputs(layer, 1, stream.get());
  CheckLost(lumen_session_step(session.get(), 0, &valid, &out), "session_step");
  lumen_engine* fresh = nullptr;
  options.skip_device_buffer_check = 0;
  CheckLost(lumen_engine_create(model.get(), &options, &fresh), "engine_create");
  CHECK(fresh == nullptr);
}

}  // namespace
}  // namespace lumen_test
