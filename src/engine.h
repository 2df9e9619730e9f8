#pragma once
// An engine binds a model to a backend and runs layer calls for its sessions.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lumen/lumen.h"
#include "src/backend.h"
#include "src/model.h"

namespace lumen {

class Session;

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  static absl::StatusOr<std::shared_ptr<Engine>> Create(std::shared_ptr<const Model> model,
                                                        const lumen_engine_options& options);

  const Model& model() const { return *model_; }
  const std::shared_ptr<const Model>& shared_model() const { return model_; }
  Backend& backend() const { return *backend_; }

  absl::StatusOr<std::unique_ptr<Session>> CreateSession();

  // One token for each session (inputs stacked [N, ...]).
  absl::Status Step(int32_t layer, absl::Span<Session* const> sessions,
                    const lumen_layer_inputs& inputs, lumen_layer_output& output);

  // Session i consumes tokens cu_seqlens[i] .. cu_seqlens[i + 1] of the inputs.
  absl::Status Prefill(int32_t layer, absl::Span<Session* const> sessions,
                       absl::Span<const int32_t> cu_seqlens, const lumen_layer_inputs& inputs,
                       lumen_layer_output& output);

 private:
  Engine(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend)
      : model_(std::move(model)), backend_(std::move(backend)) {}

  // Validates everything about a call, then runs it and advances the token counts.
  absl::Status RunLayer(bool chunkwise, int32_t layer, absl::Span<Session* const> sessions,
                        std::vector<int32_t> cu_seqlens, const lumen_layer_inputs& inputs,
                        lumen_layer_output& output);

  std::shared_ptr<const Model> model_;
  std::unique_ptr<Backend> backend_;
};

}  // namespace lumen
