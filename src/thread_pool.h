#pragma once
// A fork-join pool: the calling thread and num_threads - 1 workers share the tasks of one
// ParallelFor at a time.
//
// A call never waits for a worker to wake up: the calling thread runs whatever no worker
// has claimed by the time its own share is done, and the call ends once every claimed task
// has finished. A worker that is asleep, descheduled or sharing the caller's core then costs
// the call nothing instead of a scheduler wake-up (tens of microseconds, milliseconds under
// load).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
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
  // Tasks are claimed in increasing order. slot, in [0, num_threads()), is unique among the
  // threads running this call, so callers can index per-thread scratch with it. Not
  // reentrant: callers serialise their calls.
  void ParallelFor(int64_t num_tasks, const std::function<void(int64_t, int32_t)>& fn);

  // As ParallelFor, but the tasks are cut into num_threads() contiguous blocks, block b =
  // [b n / T, (b + 1) n / T), and slot b runs block b when it joins the call in time (else
  // another thread does, with its own slot). Calls that repeat the same tasks (a decode step
  // after another) then give each thread the same data every time, so it stays in that
  // core's cache, and threads meet only at the blocks' edges.
  void ParallelForBlocks(int64_t num_tasks, const std::function<void(int64_t, int32_t)>& fn);

  // ParallelFor over [0, count) cut into pieces of `piece` elements (the last one shorter):
  // fn(begin, size) once per piece, for a pass over a large array.
  void ParallelForPieces(int64_t count, int64_t piece,
                         const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int32_t slot);
  void RunTasks(int32_t slot);
  void RunBlock(int64_t block, int32_t slot);
  void Run(int64_t num_tasks, bool blocks, const std::function<void(int64_t, int32_t)>& fn);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  std::atomic<bool> stopping_{false};
  std::atomic<int32_t> sleepers_{0};  // workers waiting on start_

  // The current call: (generation << 32) | kClosed if no worker may join it any more |
  // the number of workers inside it. A worker joins by raising the count while the call is
  // open; the caller closes it once every task is claimed and waits for the count to drop.
  std::atomic<uint64_t> call_{0};

  const std::function<void(int64_t, int32_t)>* job_ = nullptr;
  int64_t num_tasks_ = 0;
  bool blocks_ = false;  // ParallelForBlocks
  std::atomic<int64_t> next_task_{0};
  // ParallelForBlocks: whether block b has been claimed in this call.
  std::unique_ptr<std::atomic<bool>[]> block_claimed_;
};

}  // namespace lumen
