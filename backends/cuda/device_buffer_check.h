#pragma once
// Whether the buffers of a layer call over LUMEN_MEMORY_DEVICE are what that promises, asked of
// the driver before the call enqueues anything: memory the engine's GPU can reach, and each
// [pointer, pointer + bytes) inside one allocation. A kernel handed anything else faults, and
// a fault poisons the GPU context of the whole process; or it reads past an allocation and
// changes a session with whatever lay there. Pointer queries are not stream work, so the check
// also runs while the call's stream is being captured (once, at capture).
//
// The allocations that passed are remembered with the driver's buffer id, a number it never
// gives twice in a process: a call over remembered allocations asks the driver one question
// per allocation (its id), and an allocation freed and made again at the same address, whose
// id differs, is checked anew.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "backends/cuda/gpu_compat.cuh"

namespace lumen::cuda {

// One buffer of a layer call, as the caller described it.
struct CallBuffer {
  const char* name;  // q, k, v, g, beta, o: the field of lumen_layer_inputs or _output
  const void* pointer;
  int64_t count;          // elements the call reads or writes from `pointer`
  int64_t element_bytes;  // of the buffer's dtype
};

class DeviceBufferCheck {
 public:
  // Learns whether `device` reads pageable host memory and finds the driver's pointer queries.
  absl::Status Initialize(int32_t device);

  // OK when every buffer with a count is reachable memory holding its bytes; else
  // LUMEN_ERROR_INVALID_ARGUMENT naming the first that is not, what memory it is, and its
  // allocation's size beside what the count needs (LUMEN_ERROR_BACKEND when the driver fails).
  // The engine's device must be current; the engine's mutex serializes the calls.
  absl::Status CheckBuffers(absl::Span<const CallBuffer> buffers);

  // LUMEN_ERROR_INVALID_ARGUMENT when `stream` belongs to another device than the engine's.
  // A handle that is no stream at all cannot be told apart (the runtime reads through it).
  absl::Status CheckStream(cudaStream_t stream) const;

 private:
  // An allocation that passed, and the driver's id of it then.
  struct KnownAllocation {
    uintptr_t base = 0;
    uint64_t size = 0;
    unsigned long long buffer_id = 0;
    uint64_t confirmed_in = 0;  // the last check_number_ that found the id unchanged
  };
  // Remembered at most: a layer call has six buffers, a server a few sets of them.
  static constexpr size_t kMostKnown = 64;

  // The full question to the driver about one buffer; remembers its allocation if it passes.
  absl::Status CheckUnknown(const CallBuffer& buffer);

  int32_t device_ = -1;
  bool reads_pageable_memory_ = false;  // the device reads pageable host memory (HMM, ATS)
  std::vector<KnownAllocation> known_;  // the most recently confirmed first
  uint64_t check_number_ = 0;           // counts CheckBuffers calls
};

}  // namespace lumen::cuda
