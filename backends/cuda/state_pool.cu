#include "backends/cuda/state_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "backends/cuda/gpu_compat.cuh"
#include "backends/cuda/runtime_status.h"
#include "backends/cuda/slot_runs.h"
#include "src/status.h"

namespace lumen::cuda {
namespace {

constexpr int64_t kSlotAlignment = 256;
// The first chunk of a size class holds about this many bytes; each next one twice the last,
// up to kMaxChunkBytes (or one slot, when a slot is larger).
constexpr int64_t kFirstChunkBytes = int64_t{16} << 20;
constexpr int64_t kMaxChunkBytes = int64_t{1} << 30;

}  // namespace

StatePool::~StatePool() {
  cudaSetDevice(device_);
  RelaxedCaptureMode relaxed;
  for (void* chunk : chunks_) cudaFree(chunk);
}

absl::Status StatePool::Grow(int64_t slot_bytes, SizeClass& size_class) {
  if (size_class.next_chunk_slots == 0) {
    size_class.next_chunk_slots = std::max<int64_t>(1, kFirstChunkBytes / slot_bytes);
  }
  int64_t slots = size_class.next_chunk_slots;
  void* chunk = nullptr;
  RelaxedCaptureMode relaxed;  // another thread may be capturing a graph meanwhile
  cudaError_t error = cudaMalloc(&chunk, slots * slot_bytes);
  if (error == cudaErrorMemoryAllocation && slots > 1) {
    cudaGetLastError();  // not sticky; clear it and try for one slot
    slots = 1;
    error = cudaMalloc(&chunk, slot_bytes);
  }
  if (error != cudaSuccess) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    cudaGetLastError();
    const std::string message = absl::StrCat(
        "cannot allocate ", slot_bytes,
        " bytes of session state on " LUMEN_GPU_RUNTIME_NAME " device ", device_,
        ": ", cudaGetErrorString(error), " (", free_bytes, " of ", total_bytes,
        " bytes free; the engine's pool holds ", reserved_bytes_, ")");
    return LumenError(error == cudaErrorMemoryAllocation ? LUMEN_ERROR_OUT_OF_MEMORY
                                                         : LUMEN_ERROR_BACKEND,
                      message);
  }
  error = cudaMemsetAsync(chunk, 0, slots * slot_bytes, stream_);
  if (error == cudaSuccess) error = cudaStreamSynchronize(stream_);
  if (error != cudaSuccess) {
    cudaFree(chunk);
    return LumenError(LUMEN_ERROR_BACKEND, absl::StrCat("cannot zero session state: ",
                                                        cudaGetErrorString(error)));
  }
  chunks_.push_back(chunk);
  chunk_starts_.insert(chunk);
  reserved_bytes_ += slots * slot_bytes;
  size_class.next_chunk_slots =
      std::max<int64_t>(1, std::min(slots * 2, kMaxChunkBytes / slot_bytes));
  // Hand out low addresses first.
  for (int64_t i = slots - 1; i >= 0; --i) {
    size_class.clean.push_back(static_cast<char*>(chunk) + i * slot_bytes);
  }
  return absl::OkStatus();
}

absl::Status StatePool::Clean(int64_t slot_bytes, SizeClass& size_class) {
  std::vector<char*> dirty;
  dirty.reserve(size_class.dirty.size());
  for (void* slot : size_class.dirty) dirty.push_back(static_cast<char*>(slot));
  const std::vector<std::pair<char*, int64_t>> runs = SlotRuns(
      dirty, slot_bytes, [this](const char* slot) { return chunk_starts_.count(slot) > 0; });
  cudaError_t error = cudaSuccess;
  for (const auto& [start, bytes] : runs) {
    error = cudaMemsetAsync(start, 0, bytes, stream_);
    if (error != cudaSuccess) break;
  }
  if (error == cudaSuccess) error = cudaStreamSynchronize(stream_);
  if (error != cudaSuccess) {
    return LumenError(LUMEN_ERROR_BACKEND,
                      absl::StrCat("cannot zero session state: ", cudaGetErrorString(error)));
  }
  // Hand out low addresses first (the clean list is taken from its back).
  for (auto run = runs.rbegin(); run != runs.rend(); ++run) {
    for (int64_t at = run->second - slot_bytes; at >= 0; at -= slot_bytes) {
      size_class.clean.push_back(run->first + at);
    }
  }
  size_class.dirty.clear();
  return absl::OkStatus();
}

absl::StatusOr<void*> StatePool::Take(int64_t bytes) {
  const int64_t slot_bytes =
      (std::max<int64_t>(bytes, 1) + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
  SizeClass& size_class = classes_[slot_bytes];
  if (size_class.clean.empty() && !size_class.dirty.empty()) {
    if (absl::Status status = Clean(slot_bytes, size_class); !status.ok()) return status;
  }
  if (size_class.clean.empty()) {
    if (absl::Status status = Grow(slot_bytes, size_class); !status.ok()) return status;
  }
  void* slot = size_class.clean.back();
  size_class.clean.pop_back();
  slot_bytes_of_[slot] = slot_bytes;
  return slot;
}

void StatePool::Give(void* block) {
  if (block == nullptr) return;
  const auto it = slot_bytes_of_.find(block);
  if (it == slot_bytes_of_.end()) return;
  classes_[it->second].dirty.push_back(block);
  slot_bytes_of_.erase(it);
}

}  // namespace lumen::cuda
