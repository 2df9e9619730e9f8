// Failing CUDA calls, on a GPU: input errors of device-buffer calls reach the next waiting
// call and change nothing, one-session steps fail alike for every tensor, token counts after a failed call equal those before it, and
// running out of device memory is LUMEN_ERROR_OUT_OF_MEMORY.
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

// The CPU engine's status and message for `inputs` (host buffers), run as a batched step or,
// with cu_seqlens, a varlen prefill; the sessions are made from the same states and dropped.
std::string CpuInputError(const RefLayer& layer, lumen_model* model, int32_t n,
                          const std::vector<std::vector<float>>& matrices,
                          const std::vector<std::vector<float>>& normalizers,
                          const std::vector<int32_t>& cu, const EncodedTokens& tokens) {
  EnginePtr cpu = MakeEngineOn(model, LUMEN_BACKEND_CPU);
  Sessions sessions = MakeSessions(cpu.get(), layer, n, matrices, normalizers);
  const int64_t T = tokens.num_tokens;
  lumen_layer_inputs in = InputsFor(layer, tokens, 0, T);
  OutputBuffer out;
  out.Reset(T * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  lumen_layer_output o = out.Output(0, T * layer.VPerToken());
  const lumen_status status =
      cu.empty() ? lumen_engine_step_batch(cpu.get(), 0, sessions.handles.data(), n, &in, &o)
                 : lumen_engine_prefill_varlen(cpu.get(), 0, sessions.handles.data(), n,
                                               cu.data(), &in, &o);
  REQUIRE(status == LUMEN_ERROR_INVALID_ARGUMENT);
  return lumen_last_error_message();
}

// A call over device buffers returns before its inputs are checked: its error is recorded
// and reported, quoting the CPU's message, by the next call that waits (here read_state after
// a batched step, and a host-buffer step after a varlen prefill). The failing call and the
// call enqueued after it change no state and no output; after the report calls run again.
// Three shapes, one for each kind of step kernel that must hold still: a staged tile of 32
// rows, a staged tile of 128 rows (the benchmark's shape), and V not a multiple of 4 (the
// tile held in registers).
TEST_CASE("input errors of device-buffer calls reach the next waiting call and change nothing",
          "[.cuda]") {
  std::mt19937 rng(TestSeed());
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  std::vector<RefLayer> layers = EveryFamily(2, 4, 32, 32, rng);
  for (const auto& shape : {std::vector<int32_t>{16, 32, 128, 128}, {1, 2, 40, 30}}) {
    for (RefLayer& layer : EveryFamily(shape[0], shape[1], shape[2], shape[3], rng)) {
      layers.push_back(std::move(layer));
    }
  }
  for (const RefLayer& layer : layers) {
    INFO(layer.Describe());
    const int32_t n = 3;
    const LayerEngines engines(layer, n, rng);
    Sessions sessions = engines.SessionsOn(engines.gpu);
    std::vector<std::vector<float>> before;
    for (lumen_session* s : sessions.handles) before.push_back(AllState(s, layer));
    cudaStream_t stream = nullptr;
    REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    // A batched step with v NaN at session 1's token, last head, then a valid step.
    TokenData bad = RandomTokens(layer, n, rng);
    bad.v[(1 * layer.num_value_heads + layer.num_value_heads - 1) * layer.value_dim + 3] = kNaN;
    const EncodedTokens bad_tokens = EncodeTokens(bad, LUMEN_DTYPE_BFLOAT16);
    const EncodedTokens good_tokens =
        EncodeTokens(RandomTokens(layer, n, rng), LUMEN_DTYPE_BFLOAT16);
    const std::string cpu_message = CpuInputError(layer, engines.model.get(), n, engines.matrices,
                                                  engines.normalizers, {}, bad_tokens);
    CHECK(cpu_message.find("session 1's token 0") != std::string::npos);
    const DeviceTokens bad_device(bad_tokens), good_device(good_tokens);
    const int64_t o_count = n * layer.VPerToken();
    DeviceBuffer o(o_count * 4);
    o.Fill(0xff, stream);
    const std::vector<uint8_t> poisoned = o.Read();
    lumen_layer_output out;
    lumen_layer_output_init(&out);
    out.memory = LUMEN_MEMORY_DEVICE;
    out.o = o.get();
    out.o_count = o_count;
    lumen_layer_inputs bad_in = bad_device.Inputs(layer, n, stream);
    lumen_layer_inputs good_in = good_device.Inputs(layer, n, stream);
    REQUIRE_OK(
        lumen_engine_step_batch(engines.gpu.get(), 0, sessions.handles.data(), n, &bad_in, &out));
    REQUIRE_OK(
        lumen_engine_step_batch(engines.gpu.get(), 0, sessions.handles.data(), n, &good_in, &out));
    REQUIRE_CUDA(cudaStreamSynchronize(stream));
    CHECK(o.Read() == poisoned);
    std::vector<float> matrix, normalizer;
    CHECK(ReadState(sessions.handles[0], 0, layer, &matrix, &normalizer) ==
          LUMEN_ERROR_INVALID_ARGUMENT);
    const std::string reported = lumen_last_error_message();
    INFO("reported: " << reported << "\nCPU: " << cpu_message);
    CHECK(reported.find(cpu_message) != std::string::npos);
    CHECK(reported.find("enqueued before this call") != std::string::npos);
    for (int32_t i = 0; i < n; ++i) CHECK(AllState(sessions.handles[i], layer) == before[i]);
    // Reported once; the same valid step now runs.
    REQUIRE_OK(
        lumen_engine_step_batch(engines.gpu.get(), 0, sessions.handles.data(), n, &good_in, &out));
    REQUIRE_CUDA(cudaStreamSynchronize(stream));
    CHECK(o.Read() != poisoned);
    const std::vector<float> stepped = AllState(sessions.handles[0], layer);
    CHECK(stepped != before[0]);

    // A varlen prefill (the middle session empty) with a bad value in the last tensor the
    // layer has, reported by the next host-buffer call.
    const std::vector<int32_t> cu = {0, 5, 5, 12};
    TokenData bad_prefill = RandomTokens(layer, cu.back(), rng);
    if (layer.HasBeta() && !layer.beta_sigmoid) {
      bad_prefill.beta[8 * layer.num_value_heads + 1] = 1.5f;
    } else if (layer.HasG() && !layer.gate_raw) {
      bad_prefill.g[8 * layer.GPerToken() + layer.GPerToken() - 1] = 0.25f;
    } else {
      bad_prefill.k[8 * layer.QPerToken() + 2] = std::numeric_limits<float>::infinity();
    }
    const EncodedTokens prefill_tokens = EncodeTokens(bad_prefill, LUMEN_DTYPE_FLOAT32);
    std::vector<std::vector<float>> now_matrices(n), now_normalizers(n);
    std::vector<std::vector<float>> now;
    for (int32_t i = 0; i < n; ++i) {
      REQUIRE_OK(ReadState(sessions.handles[i], 0, layer, &now_matrices[i], &now_normalizers[i]));
      now.push_back(AllState(sessions.handles[i], layer));
    }
    // (The CPU sessions start from the same matrices; the message does not depend on state.)
    const std::string prefill_message = CpuInputError(layer, engines.model.get(), n, now_matrices,
                                                      now_normalizers, cu, prefill_tokens);
    CHECK(prefill_message.find("session 2's token 3") != std::string::npos);
    const DeviceTokens prefill_device(prefill_tokens);
    DeviceBuffer prefill_o(cu.back() * layer.VPerToken() * 4);
    lumen_layer_output prefill_out = out;
    prefill_out.o = prefill_o.get();
    prefill_out.o_count = cu.back() * layer.VPerToken();
    lumen_layer_inputs prefill_in = prefill_device.Inputs(layer, cu.back(), stream);
    REQUIRE_OK(lumen_engine_prefill_varlen(engines.gpu.get(), 0, sessions.handles.data(), n,
                                           cu.data(), &prefill_in, &prefill_out));
    lumen_layer_inputs host_in = InputsFor(layer, good_tokens, 0, n);
    OutputBuffer host_out;
    host_out.Reset(o_count, LUMEN_DTYPE_FLOAT32);
    lumen_layer_output host_o = host_out.Output(0, o_count);
    CHECK(lumen_engine_step_batch(engines.gpu.get(), 0, sessions.handles.data(), n, &host_in,
                                  &host_o) == LUMEN_ERROR_INVALID_ARGUMENT);
    const std::string prefill_reported = lumen_last_error_message();
    INFO("reported: " << prefill_reported << "\nCPU: " << prefill_message);
    CHECK(prefill_reported.find(prefill_message) != std::string::npos);
    for (int32_t i = 0; i < n; ++i) CHECK(AllState(sessions.handles[i], layer) == now[i]);
    cudaStreamDestroy(stream);
  }
}

// A one-session step of the published models' shape (the register kernel, its input check
// overlapped by programmatic dependent launch) reports the CPU's status and message, changes
// no state and no output, keeps an earlier call's error for the next waiting call, and a
// valid call then runs: over host buffers (reported at once) and device buffers (reported by
// the next waiting call), for a bad value in each tensor the layer checks.
TEST_CASE("a one-session step of the published shape fails like the CPU and changes nothing",
          "[.cuda]") {
  std::mt19937 rng(TestSeed());
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  for (const RefLayer& layer : EveryFamily(16, 32, 128, 128, rng)) {
    if (layer.normalize) continue;  // the block kernel's layer, covered by the case above
    INFO(layer.Describe());
    const int32_t n = 1;
    const LayerEngines engines(layer, n, rng);
    Sessions sessions = engines.SessionsOn(engines.gpu);
    const std::vector<float> before = AllState(sessions.handles[0], layer);
    std::vector<TokenData> bad_cases;
    for (int tensor = 0; tensor < 5; ++tensor) {
      TokenData bad = RandomTokens(layer, n, rng);
      if (tensor == 0) bad.q[layer.QPerToken() - 1] = kNaN;
      if (tensor == 1) bad.k[5] = std::numeric_limits<float>::infinity();
      if (tensor == 2) {
        if (!layer.HasG()) continue;
        bad.g[layer.GPerToken() - 1] = layer.gate_raw ? kNaN : 0.25f;
      }
      if (tensor == 3) bad.v[layer.VPerToken() - 2] = kNaN;
      if (tensor == 4) {
        if (!layer.HasBeta()) continue;
        bad.beta[layer.num_value_heads - 1] =
            layer.beta_sigmoid ? kNaN : layer.allow_neg_eigval ? 2.5f : 1.5f;
      }
      bad_cases.push_back(bad);
    }
    const EncodedTokens good_tokens = EncodeTokens(RandomTokens(layer, n, rng), LUMEN_DTYPE_BFLOAT16);
    const DeviceTokens good_device(good_tokens);
    const Stream stream;
    const int64_t o_count = layer.VPerToken();
    for (const TokenData& bad : bad_cases) {
      const EncodedTokens bad_tokens = EncodeTokens(bad, LUMEN_DTYPE_BFLOAT16);
      const std::string cpu_message = CpuInputError(layer, engines.model.get(), n,
                                                    engines.matrices, engines.normalizers, {},
                                                    bad_tokens);
      INFO("CPU: " << cpu_message);
      // Host buffers: the status and message at once.
      lumen_layer_inputs host_in = InputsFor(layer, bad_tokens, 0, n);
      OutputBuffer host_out;
      host_out.Reset(o_count, LUMEN_DTYPE_FLOAT32);
      lumen_layer_output host_o = host_out.Output(0, o_count);
      CHECK(lumen_session_step(sessions.handles[0], 0, &host_in, &host_o) ==
            LUMEN_ERROR_INVALID_ARGUMENT);
      CHECK(std::string(lumen_last_error_message()).find(cpu_message) != std::string::npos);
      CHECK(AllState(sessions.handles[0], layer) == before);
      // Device buffers: the bad step, then a valid one enqueued before the report; neither
      // writes, and the next waiting call reports the first.
      const DeviceTokens bad_device(bad_tokens);
      DeviceBuffer o(o_count * 4);
      o.Fill(0xff, stream.get());
      const std::vector<uint8_t> poisoned = o.Read();
      lumen_layer_output out = DeviceOutput(o, o_count, LUMEN_DTYPE_FLOAT32);
      lumen_layer_inputs bad_in = bad_device.Inputs(layer, n, stream.get());
      lumen_layer_inputs good_in = good_device.Inputs(layer, n, stream.get());
      REQUIRE_OK(lumen_session_step(sessions.handles[0], 0, &bad_in, &out));
      REQUIRE_OK(lumen_session_step(sessions.handles[0], 0, &good_in, &out));
      REQUIRE_CUDA(cudaStreamSynchronize(stream.get()));
      CHECK(o.Read() == poisoned);
      std::vector<float> matrix, normalizer;
      CHECK(ReadState(sessions.handles[0], 0, layer, &matrix, &normalizer) ==
            LUMEN_ERROR_INVALID_ARGUMENT);
      const std::string reported = lumen_last_error_message();
      INFO("reported: " << reported);
      CHECK(reported.find(cpu_message) != std::string::npos);
      CHECK(AllState(sessions.handles[0], layer) == before);
    }
    // Reported once each; a valid step now runs and changes the state.
    lumen_layer_inputs good_host = InputsFor(layer, good_tokens, 0, n);
    OutputBuffer good_out;
    good_out.Reset(o_count, LUMEN_DTYPE_FLOAT32);
    lumen_layer_output good_o = good_out.Output(0, o_count);
    REQUIRE_OK(lumen_session_step(sessions.handles[0], 0, &good_host, &good_o));
    CHECK(AllState(sessions.handles[0], layer) != before);
  }
}

// An asynchronous call that fails its input check, and the calls enqueued after it until the
// report, change no state; the report takes their tokens back, so each session's count is
// again the tokens its state has consumed: the count before the failing call. Over 64 good
// calls come first, so the host copies of the record (which confirm calls without waiting)
// have run by then; a conv layer and a plain one.
TEST_CASE("token counts after a failed device-buffer call equal those before it", "[.cuda]") {
  std::mt19937 rng(TestSeed());
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  std::vector<RefLayer> layers = EveryFamily(2, 4, 32, 32, rng);
  for (const RefLayer& layer : {layers[5], layers[10]}) {  // gated_delta_net; Qwen3-Next
    INFO(layer.Describe());
    const int32_t n = 2;
    const LayerEngines engines(layer, n, rng);
    Sessions sessions = engines.SessionsOn(engines.gpu);
    Sessions twins = engines.SessionsOn(engines.gpu);
    const Stream stream;
    const DeviceTokens good(EncodeTokens(RandomTokens(layer, n, rng), LUMEN_DTYPE_FLOAT32));
    TokenData bad_data = RandomTokens(layer, n, rng);
    bad_data.v[layer.VPerToken() + 1] = kNaN;  // session 1's token
    const DeviceTokens bad(EncodeTokens(bad_data, LUMEN_DTYPE_FLOAT32));
    const int32_t prefill_tokens = 7;
    const DeviceTokens prefill(
        EncodeTokens(RandomTokens(layer, prefill_tokens, rng), LUMEN_DTYPE_FLOAT32));
    DeviceBuffer o(prefill_tokens * layer.VPerToken() * 4);
    lumen_layer_inputs good_in = good.Inputs(layer, n, stream.get());
    lumen_layer_inputs bad_in = bad.Inputs(layer, n, stream.get());
    lumen_layer_inputs prefill_in = prefill.Inputs(layer, prefill_tokens, stream.get());
    lumen_layer_output step_out = DeviceOutput(o, n * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
    lumen_layer_output prefill_out =
        DeviceOutput(o, prefill_tokens * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
    const int good_steps = 100;
    for (int i = 0; i < good_steps; ++i) {
      REQUIRE_OK(lumen_engine_step_batch(engines.gpu.get(), 0, sessions.handles.data(), n, &good_in,
                                         &step_out));
      REQUIRE_OK(lumen_engine_step_batch(engines.gpu.get(), 0, twins.handles.data(), n, &good_in,
                                         &step_out));
    }
    REQUIRE_OK(lumen_engine_step_batch(engines.gpu.get(), 0, sessions.handles.data(), n, &bad_in,
                                       &step_out));
    REQUIRE_OK(lumen_engine_step_batch(engines.gpu.get(), 0, sessions.handles.data(), n, &good_in,
                                       &step_out));
    REQUIRE_OK(lumen_session_prefill(sessions.handles[0], 0, prefill_tokens, &prefill_in,
                                     &prefill_out));
    // Until the report the counts include every call made.
    CHECK(Tokens(sessions.handles[0]) == good_steps + 2 + prefill_tokens);
    CHECK(Tokens(sessions.handles[1]) == good_steps + 2);
    std::vector<float> matrix, normalizer;
    CHECK(ReadState(sessions.handles[1], 0, layer, &matrix, &normalizer) ==
          LUMEN_ERROR_INVALID_ARGUMENT);
    const std::string reported = lumen_last_error_message();
    INFO(reported);
    CHECK(reported.find("session 1's token 0") != std::string::npos);
    CHECK(reported.find("token counts no longer include") != std::string::npos);
    for (int32_t i = 0; i < n; ++i) {
      INFO("session " << i);
      CHECK(Tokens(sessions.handles[i]) == good_steps);
      CHECK(AllState(sessions.handles[i], layer) == AllState(twins.handles[i], layer));
      CHECK(Tokens(twins.handles[i]) == good_steps);
    }
    // Reported once: calls count again.
    REQUIRE_OK(lumen_engine_step_batch(engines.gpu.get(), 0, sessions.handles.data(), n, &good_in,
                                       &step_out));
    REQUIRE_OK(lumen_engine_step_batch(engines.gpu.get(), 0, twins.handles.data(), n, &good_in,
                                       &step_out));
    for (int32_t i = 0; i < n; ++i) {
      INFO("session " << i);
      CHECK(AllState(sessions.handles[i], layer) == AllState(twins.handles[i], layer));
      CHECK(Tokens(sessions.handles[i]) == good_steps + 1);
    }
  }
}

TEST_CASE("running out of device memory is LUMEN_ERROR_OUT_OF_MEMORY", "[.cuda]") {
  // 16 GiB of state per session: the GPU runs out after a few.
  RefLayer layer = Layer(LUMEN_FAMILY_SSD, 1, 16, 16384, 16384);
  std::string error;
  ModelPtr model = BuildModel({layer}, &error);
  INFO(error);
  REQUIRE(model);
  EnginePtr gpu = MakeEngineOn(model.get(), LUMEN_BACKEND_CUDA);
  std::vector<SessionPtr> sessions;
  lumen_status status = LUMEN_OK;
  for (int i = 0; i < 64 && status == LUMEN_OK; ++i) {
    lumen_session* session = nullptr;
    status = lumen_session_create(gpu.get(), &session);
    if (status == LUMEN_OK) sessions.emplace_back(session);
  }
  INFO(sessions.size() << " sessions of 16 GiB fit");
  CHECK(status == LUMEN_ERROR_OUT_OF_MEMORY);
  CHECK(std::string(lumen_last_error_message()).find("cannot allocate") != std::string::npos);
  CHECK(!sessions.empty());
  // The engine still works: a session freed makes room for another.
  sessions.pop_back();
  lumen_session* again = nullptr;
  REQUIRE_OK(lumen_session_create(gpu.get(), &again));
  lumen_session_destroy(again);
}

}  // namespace
}  // namespace lumen_test
