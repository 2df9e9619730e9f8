#pragma once
// A fork-join pool: the calling thread and num_threads - 1 workers share the tasks of one
// ParallelFor at a time.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lumen {

class ThreadPool {
 public:
  // num_threads counts the caller; 0 means one per hardware thread.
  explicit ThreadPool(int32_t num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int32_t num_threads() const { return static_cast<int32_t>(workers_.size()) + 1; }

  // Runs fn(task, slot) for every task in [0, num_tasks) and returns when all are done.
  // slot, in [0, num_threads()), is unique among the threads running this call, so callers
  // can index per-thread scratch with it. Not reentrant: callers serialise their calls.
  void ParallelFor(int64_t num_tasks, const std::function<void(int64_t, int32_t)>& fn);

  // As ParallelFor, but slot s runs the contiguous block of tasks [s n / T, (s + 1) n / T)
  // for T = num_threads(). Calls that repeat the same tasks (a decode step after another)
  // then give each thread the same data every time, so it stays in that core's cache, and
  // threads meet only at the blocks' edges.
  void ParallelForBlocks(int64_t num_tasks, const std::function<void(int64_t, int32_t)>& fn);

 private:
  void WorkerLoop(int32_t slot);
  void RunTasks(int32_t slot);
  void Run(int64_t num_tasks, bool blocks, const std::function<void(int64_t, int32_t)>& fn);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  // Bumped (under mutex_) for every call; workers spin on it briefly before sleeping.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int32_t> busy_workers_{0};  // workers still in the current call
  std::atomic<bool> stopping_{false};

  const std::function<void(int64_t, int32_t)>* job_ = nullptr;
  int64_t num_tasks_ = 0;
  bool blocks_ = false;  // ParallelForBlocks: a fixed block per slot
  std::atomic<int64_t> next_task_{0};
};

}  // namespace lumen
