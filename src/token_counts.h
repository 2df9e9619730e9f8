#pragma once
// The tokens each layer of a session has consumed. A device backend shares a session's
// counts with its list of asynchronous layer calls whose input check it has not read yet, so
// that it can take a failed call's tokens back when it reports the error, from whichever
// thread reports it: hence atomic (additions and take-backs commute).

#include <atomic>
#include <cstdint>
#include <memory>

namespace lumen {

class TokenCounts {
 public:
  explicit TokenCounts(int32_t num_layers)
      : num_layers_(num_layers), counts_(new std::atomic<int64_t>[num_layers]) {
    SetAll(0);
  }

  int64_t get(int32_t layer) const { return counts_[layer].load(std::memory_order_relaxed); }
  void Add(int32_t layer, int64_t count) {
    counts_[layer].fetch_add(count, std::memory_order_relaxed);
  }
  void Set(int32_t layer, int64_t count) {
    counts_[layer].store(count, std::memory_order_relaxed);
  }
  void SetAll(int64_t count) {
    for (int32_t i = 0; i < num_layers_; ++i) Set(i, count);
  }
  void CopyFrom(const TokenCounts& other) {
    for (int32_t i = 0; i < num_layers_; ++i) Set(i, other.get(i));
  }

 private:
  const int32_t num_layers_;
  std::unique_ptr<std::atomic<int64_t>[]> counts_;
};

}  // namespace lumen
