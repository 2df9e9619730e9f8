#pragma once
// A session's tentative tokens (lumen.h, "Tentative tokens"): how many a tentative call ran,
// and for each layer that ran them the inputs of that call, kept so that a commit can replay
// the accepted ones through the step path. The inputs live in buffers the engine's backend
// allocates in the memory the caller's inputs were in (host memory for a CPU engine, device
// memory for device buffers on a GPU engine): one buffer per layer holding q, k, v, g and
// beta back to back, each [n, ...] in the caller's dtype.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "lumen/lumen.h"
#include "src/backend.h"
#include "src/layer_spec.h"

namespace lumen {

// The most tokens one tentative call runs per session (LUMEN_MAX_TENTATIVE_TOKENS).
inline constexpr int32_t kMaxTentativeTokens = LUMEN_MAX_TENTATIVE_TOKENS;

// The tensors of a layer call's inputs, in the order a kept buffer holds them.
inline constexpr int32_t kNumInputTensors = 5;  // q, k, v, g, beta

// Elements per token of each input tensor of a layer (0 for one the layer does not take).
struct InputShape {
  int64_t per_token[kNumInputTensors] = {};

  explicit InputShape(const LayerSpec& spec);
  int64_t token_elements() const;
};

// One layer's kept inputs.
struct KeptInputs {
  void* buffer = nullptr;  // q [n, H, K], k, v [n, HV, V], g, beta, back to back
  int32_t dtype = LUMEN_DTYPE_FLOAT32;
  lumen_memory memory = LUMEN_MEMORY_HOST;
  void* stream = nullptr;  // the tentative call's stream, which the commit's replay runs on
  int32_t num_tokens = 0;  // n

  // Where tensor `tensor`'s token `token` starts in `buffer`.
  const char* At(const InputShape& shape, int32_t tensor, int64_t token) const;
};

class TentativeTokens {
 public:
  explicit TentativeTokens(int32_t num_layers) : layers_(num_layers) {}

  // n, the tokens each layer that ran them took; 0 when the session holds none.
  int32_t count() const { return count_; }
  bool has_layer(int32_t layer) const { return layers_[layer].buffer != nullptr; }
  const KeptInputs& layer(int32_t layer) const { return layers_[layer]; }

  // Keeps a copy of one session's tokens [first, first + n) of a call's inputs for `layer`
  // (which holds none). Allocates through the backend before it changes anything.
  absl::Status Keep(Backend& backend, const LayerSpec& spec, int32_t layer,
                    const lumen_layer_inputs& inputs, int64_t first, int32_t n);
  // Frees what one layer keeps; the count drops to 0 with the last layer.
  void Drop(Backend& backend, int32_t layer);
  void DropAll(Backend& backend);

 private:
  int32_t count_ = 0;
  int32_t kept_layers_ = 0;
  std::vector<KeptInputs> layers_;
};

}  // namespace lumen
