// The state pool's runs of freed slots (backends/cuda/slot_runs.h): neighbours join, gaps and
// allocation starts split, every slot is covered exactly once.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "backends/cuda/slot_runs.h"

namespace {

using Runs = std::vector<std::pair<char*, int64_t>>;

}  // namespace

TEST_CASE("freed slots become runs of neighbours inside one allocation", "[pool]") {
  constexpr int64_t kSlot = 256;
  static char memory[64 * kSlot];
  char* base = memory;
  // Two allocations side by side: slots 0..31 and 32..63.
  auto starts = [&](const char* p) { return p == base || p == base + 32 * kSlot; };
  SECTION("neighbours given back in any order make one run") {
    std::vector<char*> slots;
    for (int i = 9; i >= 0; --i) slots.push_back(base + i * kSlot);
    CHECK(lumen::cuda::SlotRuns(slots, kSlot, starts) == Runs{{base, 10 * kSlot}});
  }
  SECTION("a gap and an allocation boundary split runs") {
    const std::vector<char*> slots = {base + 33 * kSlot, base + 31 * kSlot, base + 32 * kSlot,
                                      base + 30 * kSlot, base + 5 * kSlot, base + 3 * kSlot};
    CHECK(lumen::cuda::SlotRuns(slots, kSlot, starts) ==
          Runs{{base + 3 * kSlot, kSlot},
               {base + 5 * kSlot, kSlot},
               {base + 30 * kSlot, 2 * kSlot},
               {base + 32 * kSlot, 2 * kSlot}});
  }
  SECTION("random subsets: every slot covered once, no run crosses an allocation") {
    std::mt19937 rng(20261201);
    for (int trial = 0; trial < 100; ++trial) {
      std::vector<char*> slots;
      for (int i = 0; i < 64; ++i) {
        if (rng() % 3 != 0) slots.push_back(base + i * kSlot);
      }
      std::shuffle(slots.begin(), slots.end(), rng);
      const Runs runs = lumen::cuda::SlotRuns(slots, kSlot, starts);
      std::multiset<char*> covered;
      for (const auto& [start, bytes] : runs) {
        REQUIRE(bytes % kSlot == 0);
        for (char* p = start; p < start + bytes; p += kSlot) {
          covered.insert(p);
          if (p != start) CHECK(!starts(p));
        }
      }
      CHECK(covered == std::multiset<char*>(slots.begin(), slots.end()));
      for (size_t r = 1; r < runs.size(); ++r) CHECK(runs[r - 1].first < runs[r].first);
    }
  }
  SECTION("nothing given back, no runs") {
    CHECK(lumen::cuda::SlotRuns({}, kSlot, starts).empty());
  }
}
