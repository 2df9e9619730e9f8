#pragma once
// An engine binds a model to a backend and runs layer calls for its sessions.

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lumen/lumen.h"
#include "src/backend.h"
#include "src/model.h"
#include "src/thread_pool.h"

namespace lumen {

class Session;

// The most sessions a reservation may name (lumen_engine_reserve): far more than one call can
// hold the states of, and few enough that sizing the scratch for every count stays quick.
inline constexpr int32_t kMaxReservedSessions = 1 << 20;

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  static absl::StatusOr<std::shared_ptr<Engine>> Create(std::shared_ptr<const Model> model,
                                                        const lumen_engine_options& options);

  const Model& model() const { return *model_; }
  const std::shared_ptr<const Model>& shared_model() const { return model_; }
  Backend& backend() const { return *backend_; }

  absl::StatusOr<std::unique_ptr<Session>> CreateSession();

  // Whether layer calls check their input values (finite, gates and beta in range) before
  // they run; on unless turned off. Only benchmarks turn it off, to measure what it costs:
  // the C API always checks.
  void set_check_input_values(bool check) { check_input_values_ = check; }

  // One token for each session (inputs stacked [N, ...]).
  absl::Status Step(int32_t layer, absl::Span<Session* const> sessions,
                    const lumen_layer_inputs& inputs, lumen_layer_output& output);

  // Session i consumes tokens cu_seqlens[i] .. cu_seqlens[i + 1] of the inputs.
  absl::Status Prefill(int32_t layer, absl::Span<Session* const> sessions,
                       absl::Span<const int32_t> cu_seqlens, const lumen_layer_inputs& inputs,
                       lumen_layer_output& output);

  // Makes the backend ready for every layer call within `reservation` (lumen_engine_reserve:
  // checked here, then handed to the backend).
  absl::Status Reserve(const lumen_reservation& reservation);

  // A state block for a session of this model whose contents are undefined. Restores fill
  // one and swap it with the session's, so they never half-update a session and never pay
  // for a fresh allocation twice: the swapped-out block comes back with ReturnSpareState.
  absl::StatusOr<void*> TakeSpareState();
  void ReturnSpareState(void* block);

  // Runs first() and second() at the same time on two threads (snapshot copies and their
  // checksums overlap this way) and returns when both are done.
  void RunConcurrently(const std::function<void()>& first,
                       const std::function<void()>& second);

  ~Engine();

 private:
  Engine(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend)
      : model_(std::move(model)), backend_(std::move(backend)) {}

  // Validates everything about a call, then runs it and advances the token counts.
  absl::Status RunLayer(bool chunkwise, int32_t layer, absl::Span<Session* const> sessions,
                        std::vector<int32_t> cu_seqlens, const lumen_layer_inputs& inputs,
                        lumen_layer_output& output);

  std::shared_ptr<const Model> model_;
  std::unique_ptr<Backend> backend_;
  bool check_input_values_ = true;

  std::mutex spare_mutex_;
  void* spare_state_ = nullptr;  // guarded by spare_mutex_

  std::mutex pair_mutex_;                 // one RunConcurrently at a time
  std::unique_ptr<ThreadPool> pair_pool_;  // two threads, made on first use
};

}  // namespace lumen
