#pragma once
// The interface every backend implements: state memory and running a layer.
// Never includes a device runtime header; backends live under backends/.

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lumen/lumen.h"
#include "src/layer_spec.h"

namespace lumen {

// One layer call, already validated by the engine: shapes, counts, dtypes and sessions.
struct LayerRun {
  bool chunkwise = false;               // prefill (chunkwise) or step (recurrent)
  // A tentative pass (lumen_session_step_tentative): recurrent (chunkwise false), any number
  // of tokens per session up to kMaxTentativeTokens, every token's output written, and the
  // states and conv windows only read. Its outputs must be bitwise those of stepping the
  // tokens one by one (the same per-token arithmetic as a recurrent run that writes).
  bool read_only = false;
  int32_t layer = 0;                    // the layer's index in the model
  std::vector<void*> states;            // per session: the layer's state in backend memory
  std::vector<int32_t> cu_seqlens;      // [num_sessions + 1] token offsets into the inputs
  const lumen_layer_inputs* inputs = nullptr;
  lumen_layer_output* output = nullptr;

  int32_t num_sessions() const { return static_cast<int32_t>(states.size()); }
  int64_t num_tokens() const { return cu_seqlens.back(); }
};

// A device backend numbers the layer calls it returns from before they have run (calls over
// device buffers, enqueued on the caller's stream): their input check may still fail, and
// then they change nothing. Numbers grow with each call; kFinishedCall is no number.
using AsyncCallId = uint64_t;
inline constexpr AsyncCallId kFinishedCall = 0;

// What a backend has learned of its numbered calls since its last report: every call up to
// `settled_through` has run, and the calls of each `failed` range [first, last] changed
// nothing (their input check failed, or an earlier call's did). The engine keeps the ledger
// of what each numbered call added to its sessions' token counts and settles it with this.
struct AsyncCallReport {
  AsyncCallId settled_through = kFinishedCall;
  std::vector<std::pair<AsyncCallId, AsyncCallId>> failed;
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

  // Buffers for the inputs a session keeps beside its state (its tentative tokens, replayed
  // by a commit), in `memory`: the memory of the caller's input buffers, which the backend
  // Accepts. Allocate returns a block of at least `bytes` (contents undefined); Copy copies
  // within that memory (both pointers in it); Free takes nullptr. The base class serves
  // LUMEN_MEMORY_HOST with malloc and memcpy and answers UNIMPLEMENTED for device memory.
  // A device backend copies on `stream` (the tentative call's lumen_layer_inputs.stream,
  // which its commit's replay runs on too), in order with the layer calls there, so that a
  // copy of a call's inputs made after the call returned reads what the call read.
  virtual absl::StatusOr<void*> AllocateBuffer(lumen_memory memory, int64_t bytes);
  virtual void FreeBuffer(lumen_memory memory, void* buffer);
  virtual absl::Status CopyBuffer(lumen_memory memory, void* dst, const void* src,
                                  int64_t bytes, void* stream);

  // Runs the call's tokens through one layer for every session in it. Must not change any
  // state unless it returns OK (a read_only run changes none at all). Returns kFinishedCall for a call that has run (or whose
  // failure will not be charged to its sessions: one captured into a graph), else the number
  // a later TakeAsyncCallReport speaks of.
  virtual absl::StatusOr<AsyncCallId> Run(const LayerSpec& spec, const LayerRun& run) = 0;
  // Whether Run may return numbered calls. A backend whose calls all finish in Run says no,
  // and the engine then keeps no ledger for it (and takes no lock for one).
  virtual bool has_async_calls() const { return false; }
  // What the backend learned of its numbered calls since the last report; each fact is
  // reported once. The engine asks after every call into the backend that may wait for the
  // device.
  virtual AsyncCallReport TakeAsyncCallReport() { return {}; }

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
