#pragma once
// The state pool zeroes the slots given back to it before it hands them out again. One memset
// per slot costs a launch each (10,000 sessions: tens of milliseconds of launches alone);
// slots freed together mostly lie side by side in one allocation, so they are zeroed as runs.
// Plain C++: tests/kernels/slot_runs_test.cc runs it without a GPU.

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace lumen::cuda {

// The slots (each `slot_bytes` long) as runs of neighbours in memory, lowest address first:
// {start, bytes}. A slot that `starts_allocation` does not join the run before it, even when
// it follows it in memory, since one memset must stay inside one allocation.
template <typename StartsAllocation>
std::vector<std::pair<char*, int64_t>> SlotRuns(std::vector<char*> slots, int64_t slot_bytes,
                                                StartsAllocation starts_allocation) {
  std::sort(slots.begin(), slots.end());
  std::vector<std::pair<char*, int64_t>> runs;
  for (char* slot : slots) {
    if (!runs.empty() && runs.back().first + runs.back().second == slot &&
        !starts_allocation(slot)) {
      runs.back().second += slot_bytes;
    } else {
      runs.emplace_back(slot, slot_bytes);
    }
  }
  return runs;
}

}  // namespace lumen::cuda
