#pragma once
// Session state blocks in device memory: slots cut from large allocations, grown on demand,
// so that creating and destroying sessions costs no cudaMalloc each. Zeroing runs on the
// engine's own stream and waits for that stream alone, never for the device.

#include <cstdint>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/cuda/gpu_compat.cuh"

namespace lumen::cuda {

class StatePool {
 public:
  explicit StatePool(int32_t device) : device_(device) {}
  // The stream the pool zeroes slots on (a non-blocking stream of the engine's); set once,
  // before the first Take.
  void set_stream(cudaStream_t stream) { stream_ = stream; }
  ~StatePool();
  StatePool(const StatePool&) = delete;
  StatePool& operator=(const StatePool&) = delete;

  // A zero-filled block of at least `bytes` bytes, 256-byte aligned. Out of device memory is
  // LUMEN_ERROR_OUT_OF_MEMORY with a message. The caller has the device current and no
  // kernel of its own still running on a freed slot (the backend waits first).
  absl::StatusOr<void*> Take(int64_t bytes);

  // Gives a block back; its bytes are zeroed in a batch before the slot is handed out again.
  void Give(void* block);

  int64_t reserved_bytes() const { return reserved_bytes_; }

 private:
  struct SizeClass {
    std::vector<void*> clean;  // zero-filled, ready to hand out
    std::vector<void*> dirty;  // given back, not yet zeroed
    int64_t next_chunk_slots = 0;
  };

  // Zeroes every dirty slot of the class in one batch (one memset per run of neighbouring
  // slots, one wait for the device).
  absl::Status Clean(int64_t slot_bytes, SizeClass& size_class);
  // Adds a chunk of slots (zeroed) to the class.
  absl::Status Grow(int64_t slot_bytes, SizeClass& size_class);

  int32_t device_;
  cudaStream_t stream_ = nullptr;
  std::map<int64_t, SizeClass> classes_;              // by slot size
  std::unordered_map<void*, int64_t> slot_bytes_of_;  // every slot handed out
  std::vector<void*> chunks_;                         // the cudaMalloc'd memory
  std::unordered_set<const void*> chunk_starts_;      // the same, for lookups
  int64_t reserved_bytes_ = 0;
};

}  // namespace lumen::cuda
