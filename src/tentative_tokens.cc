#include "src/tentative_tokens.h"

#include "src/dtype_convert.h"

namespace lumen {

InputShape::InputShape(const LayerSpec& spec) {
  per_token[0] = per_token[1] = int64_t{spec.num_heads} * spec.key_dim;
  per_token[2] = int64_t{spec.num_value_heads} * spec.value_dim;
  per_token[3] = spec.needs_g_input() ? spec.g_per_token() : 0;
  per_token[4] = spec.delta_rule() ? spec.num_value_heads : 0;
}

int64_t InputShape::token_elements() const {
  int64_t total = 0;
  for (int64_t elements : per_token) total += elements;
  return total;
}

const char* KeptInputs::At(const InputShape& shape, int32_t tensor, int64_t token) const {
  const int64_t size = DTypeSize(static_cast<DType>(dtype));
  int64_t elements = 0;
  for (int32_t i = 0; i < tensor; ++i) elements += shape.per_token[i] * num_tokens;
  elements += shape.per_token[tensor] * token;
  return static_cast<const char*>(buffer) + elements * size;
}

absl::Status TentativeTokens::Keep(Backend& backend, const LayerSpec& spec, int32_t layer,
                                   const lumen_layer_inputs& inputs, int64_t first,
                                   int32_t n) {
  const InputShape shape(spec);
  const int64_t size = DTypeSize(static_cast<DType>(inputs.dtype));
  const lumen_memory memory = static_cast<lumen_memory>(inputs.memory);
  absl::StatusOr<void*> buffer = backend.AllocateBuffer(memory, shape.token_elements() * n * size);
  if (!buffer.ok()) return buffer.status();
  KeptInputs kept{*buffer, inputs.dtype, memory, inputs.stream, n};
  const void* sources[kNumInputTensors] = {inputs.q, inputs.k, inputs.v, inputs.g, inputs.beta};
  for (int32_t tensor = 0; tensor < kNumInputTensors; ++tensor) {
    const int64_t elements = shape.per_token[tensor];
    if (elements == 0) continue;
    absl::Status status = backend.CopyBuffer(
        memory, const_cast<char*>(kept.At(shape, tensor, 0)),
        static_cast<const char*>(sources[tensor]) + first * elements * size, n * elements * size,
        inputs.stream);
    if (!status.ok()) {
      backend.FreeBuffer(memory, *buffer);
      return status;
    }
  }
  layers_[layer] = kept;
  count_ = n;
  ++kept_layers_;
  return absl::OkStatus();
}

void TentativeTokens::Drop(Backend& backend, int32_t layer) {
  KeptInputs& kept = layers_[layer];
  if (kept.buffer == nullptr) return;
  backend.FreeBuffer(kept.memory, kept.buffer);
  kept = KeptInputs{};
  if (--kept_layers_ == 0) count_ = 0;
}

void TentativeTokens::DropAll(Backend& backend) {
  for (int32_t layer = 0; layer < static_cast<int32_t>(layers_.size()); ++layer) {
    Drop(backend, layer);
  }
}

}  // namespace lumen
