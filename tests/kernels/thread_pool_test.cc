// The fork-join pool (src/thread_pool.h): every task of a call runs exactly once, no two
// threads of a call share a slot, blocks are contiguous, pieces cover an array once, and a
// call completes whether the workers are spinning, asleep or late (the caller then runs
// their share).

#include "src/thread_pool.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

namespace lumen {
namespace {

// Runs one call and checks that each task ran once and that slots were never shared.
void CheckCall(ThreadPool& pool, int64_t num_tasks, bool blocks) {
  std::vector<std::atomic<int32_t>> runs(static_cast<size_t>(num_tasks));
  std::vector<std::atomic<bool>> slot_busy(static_cast<size_t>(pool.num_threads()));
  std::vector<std::atomic<int32_t>> slot_of(static_cast<size_t>(num_tasks));
  std::atomic<bool> shared_slot{false};
  auto task = [&](int64_t t, int32_t slot) {
    if (slot < 0 || slot >= pool.num_threads() || slot_busy[slot].exchange(true)) {
      shared_slot = true;
      return;
    }
    runs[t].fetch_add(1);
    slot_of[t].store(slot);
    slot_busy[slot].store(false);
  };
  if (blocks) {
    pool.ParallelForBlocks(num_tasks, task);
  } else {
    pool.ParallelFor(num_tasks, task);
  }
  REQUIRE_FALSE(shared_slot.load());
  for (int64_t t = 0; t < num_tasks; ++t) REQUIRE(runs[t].load() == 1);
  if (blocks && num_tasks > 1 && pool.num_threads() > 1) {
    // Block b = [b n / T, (b + 1) n / T) runs on one thread.
    const int64_t threads = pool.num_threads();
    for (int64_t b = 0; b < threads; ++b) {
      const int64_t begin = num_tasks * b / threads, end = num_tasks * (b + 1) / threads;
      for (int64_t t = begin; t < end; ++t) REQUIRE(slot_of[t].load() == slot_of[begin].load());
    }
  }
}

TEST_CASE("ThreadPool runs every task once on distinct slots", "[cpu][thread_pool]") {
  for (int32_t threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int64_t tasks : {0, 1, 2, 3, 7, 64, 1000}) {
      for (int repeat = 0; repeat < 20; ++repeat) {
        CheckCall(pool, tasks, false);
        CheckCall(pool, tasks, true);
      }
    }
  }
}

TEST_CASE("ThreadPool calls complete after the workers have gone to sleep",
          "[cpu][thread_pool]") {
  ThreadPool pool(3);
  for (int repeat = 0; repeat < 10; ++repeat) {
    // Longer than the workers' spin, so each call finds them asleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    CheckCall(pool, 32, repeat % 2 == 0);
  }
}

TEST_CASE("ThreadPool tasks start in order, so a task may wait on an earlier one",
          "[cpu][thread_pool]") {
  ThreadPool pool(2);
  for (int repeat = 0; repeat < 200; ++repeat) {
    std::atomic<bool> first_started{false};
    std::atomic<bool> second_done{false};
    pool.ParallelFor(2, [&](int64_t task, int32_t) {
      if (task == 0) {
        first_started = true;
      } else {
        while (!first_started.load()) std::this_thread::yield();
        second_done = true;
      }
    });
    REQUIRE(second_done.load());
  }
}

TEST_CASE("ThreadPool lets a slow worker finish the task it claimed", "[cpu][thread_pool]") {
  ThreadPool pool(2);
  for (int repeat = 0; repeat < 20; ++repeat) {
    std::atomic<int32_t> finished{0};
    pool.ParallelFor(4, [&](int64_t, int32_t slot) {
      if (slot != 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
      finished.fetch_add(1);
    });
    REQUIRE(finished.load() == 4);  // the call returned only once every task was done
  }
}

TEST_CASE("ThreadPool::ParallelForPieces covers every element once, the last piece short",
          "[cpu][thread_pool]") {
  ThreadPool pool(3);
  for (int64_t count : {0, 1, 64, 65, 1000}) {
    INFO("count " << count);
    std::vector<std::atomic<int32_t>> covered(static_cast<size_t>(count));
    std::atomic<int64_t> pieces{0};
    pool.ParallelForPieces(count, 64, [&](int64_t begin, int64_t size) {
      pieces.fetch_add(1);
      if (begin % 64 != 0 || size < 1 || size > 64) return;  // leaves its elements uncovered
      for (int64_t i = begin; i < begin + size; ++i) covered[i].fetch_add(1);
    });
    CHECK(pieces.load() == (count + 63) / 64);
    for (int64_t i = 0; i < count; ++i) REQUIRE(covered[i].load() == 1);
  }
}

}  // namespace
}  // namespace lumen
