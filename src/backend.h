#pragma once
// The interface every backend implements: state memory and running a layer.
// Never includes a device runtime header; backends live under backends/.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lumen/lumen.h"
#include "src/layer_spec.h"

namespace lumen {

class Session;

// One layer call, already validated by the engine: shapes, counts, dtypes and sessions.
struct LayerRun {
  bool chunkwise = false;               // prefill (chunkwise) or step (recurrent)
  int32_t layer = 0;                    // the layer's index in the model
  // The call's sessions (valid during Run only). The engine adds each one's tokens to its
  // counts once Run returns OK; a backend whose call fails later may take them back
  // (Session::token_counts).
  absl::Span<Session* const> sessions;
  std::vector<void*> states;            // per session: the layer's state in backend memory
  std::vector<int32_t> cu_seqlens;      // [num_sessions + 1] token offsets into the inputs
  const lumen_layer_inputs* inputs = nullptr;
  lumen_layer_output* output = nullptr;
  // Check every input value against its domain (src/input_domain.h) before anything runs.
  bool check_values = true;

  int32_t num_sessions() const { return static_cast<int32_t>(states.size()); }
  int64_t num_tokens() const { return cu_seqlens.back(); }
};

class Model;

class Backend {
 public:
  virtual ~Backend() = default;

  // Called once when an engine binds the backend to its model, before any other call: a
  // device backend copies the layers' parameters to the device here, so that layer calls
  // never need to.
  virtual absl::Status LoadModel(const Model& /*model*/) { return absl::OkStatus(); }

  virtual lumen_backend kind() const = 0;
  // Threads a layer call runs on, the caller's included.
  virtual int32_t num_threads() const = 0;
  // Whether input and output buffers may live in `memory`.
  virtual bool Accepts(lumen_memory memory) const = 0;

  // State memory: zero-filled blocks in the backend's memory.
  virtual absl::StatusOr<void*> AllocateState(int64_t bytes) = 0;
  virtual void FreeState(void* block) = 0;
  virtual absl::Status ZeroState(void* block, int64_t bytes) = 0;
  virtual absl::Status CopyState(void* dst, const void* src, int64_t bytes) = 0;
  virtual absl::Status StateToHost(void* host_dst, const void* src, int64_t bytes) = 0;
  virtual absl::Status StateFromHost(void* dst, const void* host_src, int64_t bytes) = 0;

  // Runs the call's tokens through one layer for every session in it. Must not change any
  // state unless it returns OK.
  virtual absl::Status Run(const LayerSpec& spec, const LayerRun& run) = 0;

  // Makes every later call of at most max_sessions sessions and max_tokens tokens, on any
  // layer of `model`, over device buffers, run without allocating (lumen_engine_reserve).
  // Arguments already checked (both >= 1). Backends without device scratch have nothing to do.
  virtual absl::Status Reserve(const Model& /*model*/, int32_t /*max_sessions*/,
                               int32_t /*max_tokens*/) {
    return absl::OkStatus();
  }
  // Bytes of device scratch held now (lumen_engine_scratch_bytes).
  virtual int64_t scratch_bytes() const { return 0; }
};

// Creates the backend an engine asked for (AUTO resolved here: CUDA when this build has it and
// a device is present, else ROCm likewise, else the CPU).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const lumen_engine_options& options);

}  // namespace lumen
