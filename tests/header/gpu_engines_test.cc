// lumen.h's opening comment, "GPU engines": what a machine without a usable GPU can check
// (asking for one), and which tests of the CUDA suite (tests/backends/cuda, label `gpu`)
// prove the rest.

#include <catch2/catch.hpp>

#include <string>

#include "lumen/lumen.h"
#include "tests/header/header_claims.h"
#include "tests/reference/layer_reference.h"
#include "tests/reference/session_fixture.h"

namespace lumen_fixture {
namespace {

LUMEN_CLAIM_UNPROVEN(
    "GPU engines",
    "The output and the new state are ready when the work enqueued on that stream before the "
    "call returned has finished; the caller's buffers must stay valid and unchanged until "
    "then.",
    "a duty of the caller's, not a promise of the library's; that results are ready once the "
    "stream's work has run is what every device-buffer test of the CUDA suite reads");

// The input-value tests run again on CUDA engines (ctest lumen_input_values_on_cuda runs
// lumen_capi_tests' [input_values] with the CUDA backend): host buffers there.
LUMEN_CLAIM_PROVEN_ELSEWHERE(
    "GPU engines",
    "A call with any LUMEN_MEMORY_HOST buffer returns the error itself, with the CPU backend's "
    "message, and changes no session and no output.",
    "tests/api/input_values_test.cc",
    "out-of-domain inputs fail naming tensor, token and head, and change nothing");

LUMEN_CLAIM_PROVEN_ELSEWHERE(
    "GPU engines",
    "From the failing call until the report, every layer call of the engine (the failing one, "
    "and any enqueued after it, graph replays included) leaves state and outputs unchanged.",
    "tests/backends/cuda/cuda_errors_test.cc",
    "input errors of device-buffer calls reach the next waiting call and change nothing");

LUMEN_CLAIM_PROVEN_ELSEWHERE(
    "GPU engines",
    "It cannot be captured: on a stream being captured it is LUMEN_ERROR_UNSUPPORTED and "
    "enqueues nothing.",
    "tests/backends/cuda/cuda_graphs_test.cc",
    "a CUDA call with host buffers on a captured stream is UNSUPPORTED and harmless");

LUMEN_CLAIM_PROVEN_ELSEWHERE(
    "GPU engines",
    "One that needs more grows the scratch first: outside capture it waits for the engine's "
    "earlier asynchronous calls that use the scratch, frees it and allocates the larger size "
    "(cudaMalloc), so that call is not asynchronous; while the stream is captured it fails "
    "with LUMEN_ERROR_UNSUPPORTED, changing nothing (reserve first).",
    "tests/backends/cuda/cuda_graphs_test.cc",
    "a CUDA call larger than the reservation grows outside capture, fails inside");

LUMEN_CLAIM_PROVEN_ELSEWHERE(
    "GPU engines",
    "These calls, engine creation and lumen_engine_reserve wait for the engine's own work "
    "only, on a non-blocking stream of the engine's: never for the legacy default stream or "
    "the whole device, so they do not wait for your other kernels.",
    "tests/backends/cuda/cuda_concurrency_test.cc",
    "session calls return while a kernel of the caller's runs on another stream");

LUMEN_CLAIM_UNPROVEN(
    "GPU engines",
    "A launch that fails is reported by the call that launched it (LUMEN_ERROR_BACKEND).",
    "a launch cannot be made to fail on demand through the public API (it takes a broken "
    "driver or an exhausted device); the code path is the launch-error check of every CUDA "
    "layer call");

LUMEN_CLAIM_UNPROVEN(
    "GPU engines",
    "A kernel that faults while running is reported by the next call that waits for the "
    "device (any of the calls above, or cudaStreamSynchronize); CUDA errors of that kind are "
    "sticky, and the engine then answers LUMEN_ERROR_BACKEND with CUDA's message.",
    "lumen's kernels do not fault on valid input, and a faulting kernel of the caller's "
    "poisons the CUDA context of the whole test process");

LUMEN_CLAIM_PROVEN_ELSEWHERE(
    "GPU engines",
    "An asynchronous call cannot: it returns LUMEN_OK, and the error is recorded in the engine "
    "and reported, as LUMEN_ERROR_INVALID_ARGUMENT whose message quotes the CPU's, by the next "
    "call of the engine that waits for the device: any call listed above (create, fork, reset, "
    "read_state, ...) or a layer call with a host buffer.",
    "tests/backends/cuda/cuda_errors_test.cc",
    "input errors of device-buffer calls reach the next waiting call and change nothing");

LUMEN_CLAIM_UNPROVEN(
    "GPU engines",
    "A graph replay never changes a count (the capture counted its tokens once): when the "
    "failing call is a replay, the engine cannot tell which of its direct calls ran before "
    "it, and takes back nothing (reset or restore the sessions involved).",
    "not yet tested: the CUDA suite checks token counts after failing direct calls "
    "(cuda_errors_test.cc) and after replays of valid graphs, not after the replay of a "
    "graph whose inputs fail their check");

// A backend this machine may lack: either it runs (the claim says nothing then) or the answer
// is UNSUPPORTED with a message, never another status.
void CheckGpuBackend(int32_t backend) {
  const Stack stack({SmallLayer(LUMEN_FAMILY_GLA)});
  lumen_engine_options options;
  lumen_engine_options_init(&options);
  options.backend = backend;
  lumen_engine* engine = nullptr;
  const lumen_status status = lumen_engine_create(stack.model.get(), &options, &engine);
  INFO(lumen_backend_string(backend) << ": " << Describe(status));
  lumen_engine_destroy(engine);
  CHECK((status == LUMEN_OK || status == LUMEN_ERROR_UNSUPPORTED));
  if (status == LUMEN_ERROR_UNSUPPORTED) {
    CHECK(engine == nullptr);
    CHECK(std::string(lumen_last_error_message()) != "");
  }
}

TEST_CASE("a GPU backend without a usable GPU is UNSUPPORTED with a message", "[header]") {
  LUMEN_CLAIM("GPU engines",
              "LUMEN_BACKEND_CUDA without a usable CUDA device (none, no driver, or a library "
              "built without CUDA) is LUMEN_ERROR_UNSUPPORTED with a message; so is "
              "LUMEN_BACKEND_ROCM without a usable AMD GPU (none, no HIP 5 runtime "
              "libamdhip64.so.5, a GPU of a target the library was not built for, or a library "
              "built without ROCm).");
  CheckGpuBackend(LUMEN_BACKEND_CUDA);
  CheckGpuBackend(LUMEN_BACKEND_ROCM);
}

}  // namespace
}  // namespace lumen_fixture
