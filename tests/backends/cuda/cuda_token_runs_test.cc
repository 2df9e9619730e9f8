// Token runs: a varlen prefill whose sequences hold at most 8 tokens (draft tokens, multi-token
// prediction) runs through the register step kernel, each state read and written once, not the
// chunkwise passes. Its outputs and states are bitwise those of stepping the same tokens one
// at a time, and it matches the CPU. Tentative tokens are token runs that write no state, and
// their commit a token run that does: both bitwise plain steps, over host and device buffers.

#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cstring>
#include <random>
#include <vector>

#include "lumen/lumen.h"
#include "tests/backends/cuda/cuda_test_util.h"
#include "tests/reference/layer_reference.h"

namespace lumen_test {
namespace {

// Whether the register kernel takes the layer (backends/cuda/kernels/register_step.cu): fp32
// state, K = 128, V a multiple of 32, no normaliser, the identity feature map.
bool RunsAsTokenRun(const RefLayer& layer) {
  return layer.state_dtype == LUMEN_DTYPE_FLOAT32 && layer.key_dim == 128 &&
         layer.value_dim % 32 == 0 && !layer.normalize &&
         layer.feature_map == LUMEN_FEATURE_MAP_IDENTITY;
}

std::vector<int32_t> Offsets(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu = {0};
  for (const int32_t length : lengths) cu.push_back(cu.back() + length);
  return cu;
}

TEST_CASE("a CUDA prefill of up to 8 tokens per session is bitwise the same as stepping them",
          "[.cuda]") {
  std::mt19937 rng(TestSeed());
  INFO("seed " << TestSeed());
  const std::vector<int32_t> lengths = {3, 0, 1, 8, 5, 2, 7, 4};
  const std::vector<int32_t> cu = Offsets(lengths);
  const int32_t n = static_cast<int32_t>(lengths.size());
  const int64_t T = cu.back();
  int32_t layers_run = 0;
  const std::vector<RefLayer> layers = EveryFamily(2, 4, 128, 64, rng);
  for (const RefLayer& layer : layers) {
    if (!RunsAsTokenRun(layer)) continue;
    ++layers_run;
    INFO(layer.Describe());
    const LayerEngines engines(layer, n, rng);
    Sessions prefilled = engines.SessionsOn(engines.gpu);
    Sessions stepped = engines.SessionsOn(engines.gpu);
    const EncodedTokens tokens = EncodeTokens(RandomTokens(layer, T, rng), LUMEN_DTYPE_BFLOAT16);
    const int64_t per_token = layer.VPerToken();
    OutputBuffer run_out, step_out;
    run_out.Reset(T * per_token, LUMEN_DTYPE_FLOAT32);
    step_out.Reset(T * per_token, LUMEN_DTYPE_FLOAT32);
    lumen_layer_inputs in = InputsFor(layer, tokens, 0, T);
    lumen_layer_output out = run_out.Output(0, T * per_token);
    REQUIRE_OK(lumen_engine_prefill_varlen(engines.gpu.get(), 0, prefilled.handles.data(), n,
                                           cu.data(), &in, &out));
    for (int32_t i = 0; i < n; ++i) {
      for (int32_t t = cu[i]; t < cu[i + 1]; ++t) {
        lumen_layer_inputs one = InputsFor(layer, tokens, t, 1);
        lumen_layer_output one_out = step_out.Output(t * per_token, per_token);
        REQUIRE_OK(lumen_session_step(stepped.handles[i], 0, &one, &one_out));
      }
    }
    for (int32_t i = 0; i < n; ++i) {
      INFO("session " << i << " of " << lengths[i] << " tokens");
      CHECK(std::memcmp(run_out.bytes.data() + cu[i] * per_token * 4,
                        step_out.bytes.data() + cu[i] * per_token * 4,
                        lengths[i] * per_token * 4) == 0);
      CHECK(AllState(prefilled.handles[i], layer) == AllState(stepped.handles[i], layer));
    }
  }
  // Every layer but the normalised linear_attn (the block kernel's).
  CHECK(layers_run == static_cast<int32_t>(layers.size()) - 1);
}

TEST_CASE("CUDA prefills of 1 to 8 tokens per session match the CPU", "[.cuda]") {
  std::mt19937 rng(TestSeed());
  INFO("seed " << TestSeed());
  for (const RefLayer& layer : EveryFamily(4, 8, 128, 128, rng)) {
    CompareVarlenPrefill(layer, {1, 2, 3, 4, 0, 5, 6, 7, 8}, rng);
  }
}

// Steps `count` tokens of `tokens` from `first` one at a time through session `session`'s
// layer 0 (host buffers), their outputs into `out` from token `first` on.
void StepOneByOne(lumen_session* session, const RefLayer& layer, const EncodedTokens& tokens,
                  int64_t first, int64_t count, OutputBuffer* out) {
  for (int64_t t = first; t < first + count; ++t) {
    lumen_layer_inputs one = InputsFor(layer, tokens, t, 1);
    lumen_layer_output one_out = out->Output(t * layer.VPerToken(), layer.VPerToken());
    REQUIRE_OK(lumen_session_step(session, 0, &one, &one_out));
  }
}

TEST_CASE("CUDA tentative tokens and their commit are bitwise plain steps", "[.cuda]") {
  std::mt19937 rng(TestSeed());
  INFO("seed " << TestSeed());
  const int32_t n = 6;
  int32_t layers_run = 0;
  const std::vector<RefLayer> layers = EveryFamily(2, 4, 128, 64, rng);
  for (const RefLayer& layer : layers) {
    INFO(layer.Describe());
    const LayerEngines engines(layer, 1, rng);
    const EncodedTokens tokens = EncodeTokens(RandomTokens(layer, n, rng), LUMEN_DTYPE_BFLOAT16);
    const int64_t per_token = layer.VPerToken();
    Sessions tentative = engines.SessionsOn(engines.gpu);
    lumen_session* session = tentative.handles[0];
    const std::vector<float> before = AllState(session, layer);
    lumen_layer_inputs in = InputsFor(layer, tokens, 0, n);
    OutputBuffer tentative_out;
    tentative_out.Reset(n * per_token, LUMEN_DTYPE_FLOAT32);
    lumen_layer_output out = tentative_out.Output(0, n * per_token);
    if (!RunsAsTokenRun(layer)) {
      CHECK(lumen_session_step_tentative(session, 0, n, &in, &out) == LUMEN_ERROR_UNSUPPORTED);
      CHECK(AllState(session, layer) == before);
      continue;
    }
    ++layers_run;
    for (const int32_t accepted : {0, 4, n}) {
      INFO("commit(" << accepted << ")");
      REQUIRE_OK(lumen_session_step_tentative(session, 0, n, &in, &out));
      Sessions plain = engines.SessionsOn(engines.gpu);
      OutputBuffer plain_out;
      plain_out.Reset(n * per_token, LUMEN_DTYPE_FLOAT32);
      StepOneByOne(plain.handles[0], layer, tokens, 0, n, &plain_out);
      CHECK(tentative_out.bytes == plain_out.bytes);
      REQUIRE_OK(lumen_session_commit(session, accepted));
      Sessions reference = engines.SessionsOn(engines.gpu);
      StepOneByOne(reference.handles[0], layer, tokens, 0, accepted, &plain_out);
      CHECK(AllState(session, layer) == AllState(reference.handles[0], layer));
      // Back to the start for the next case.
      Sessions fresh = engines.SessionsOn(engines.gpu);
      tentative = std::move(fresh);
      session = tentative.handles[0];
    }

    // Over device buffers on a stream: the kept inputs are copied there and the commit's
    // replay runs there.
    const Stream stream;
    const DeviceTokens device(tokens);
    DeviceBuffer o(n * per_token * 4);
    lumen_layer_inputs device_in = device.Inputs(layer, n, stream.get());
    lumen_layer_output device_out = DeviceOutput(o, n * per_token, LUMEN_DTYPE_FLOAT32);
    REQUIRE_OK(lumen_session_step_tentative(session, 0, n, &device_in, &device_out));
    REQUIRE_CUDA(cudaStreamSynchronize(stream.get()));
    Sessions plain = engines.SessionsOn(engines.gpu);
    OutputBuffer plain_out;
    plain_out.Reset(n * per_token, LUMEN_DTYPE_FLOAT32);
    StepOneByOne(plain.handles[0], layer, tokens, 0, n, &plain_out);
    CHECK(o.Read() == plain_out.bytes);
    REQUIRE_OK(lumen_session_commit(session, 3));
    REQUIRE_CUDA(cudaStreamSynchronize(stream.get()));
    Sessions reference = engines.SessionsOn(engines.gpu);
    StepOneByOne(reference.handles[0], layer, tokens, 0, 3, &plain_out);
    CHECK(AllState(session, layer) == AllState(reference.handles[0], layer));
  }
  CHECK(layers_run == static_cast<int32_t>(layers.size()) - 1);
}

}  // namespace
}  // namespace lumen_test
