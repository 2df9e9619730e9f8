#include "src/thread_pool.h"

#include <chrono>

namespace lumen {
namespace {

// How long a thread spins before it sleeps. A model's layer calls come back to back, and
// waking a sleeping thread costs tens of microseconds, more than a short spin; an idle
// pool still sleeps after this.
constexpr std::chrono::microseconds kSpin(50);

// Spins until done() or kSpin has passed; returns done().
template <typename Done>
bool SpinUntil(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  while (!done()) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      std::this_thread::yield();
    }
    if (std::chrono::steady_clock::now() > deadline) return done();
  }
  return true;
}

}  // namespace

ThreadPool::ThreadPool(int32_t num_threads) {
  if (num_threads <= 0) {
    num_threads = static_cast<int32_t>(std::thread::hardware_concurrency());
    if (num_threads <= 0) num_threads = 1;
  }
  workers_.reserve(num_threads - 1);
  for (int32_t slot = 1; slot < num_threads; ++slot) {
    workers_.emplace_back([this, slot] { WorkerLoop(slot); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true);
  }
  start_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::RunTasks(int32_t slot) {
  if (blocks_) {
    const int64_t threads = num_threads();
    const int64_t end = num_tasks_ * (slot + 1) / threads;
    for (int64_t task = num_tasks_ * slot / threads; task < end; ++task) (*job_)(task, slot);
    return;
  }
  for (int64_t task = next_task_.fetch_add(1); task < num_tasks_;
       task = next_task_.fetch_add(1)) {
    (*job_)(task, slot);
  }
}

void ThreadPool::WorkerLoop(int32_t slot) {
  uint64_t seen = 0;
  while (true) {
    auto started = [&] {
      return stopping_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!SpinUntil(started)) {
      std::unique_lock<std::mutex> lock(mutex_);
      start_.wait(lock, started);
    }
    if (stopping_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    RunTasks(slot);
    if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(int64_t num_tasks,
                             const std::function<void(int64_t, int32_t)>& fn) {
  Run(num_tasks, false, fn);
}

void ThreadPool::ParallelForBlocks(int64_t num_tasks,
                                   const std::function<void(int64_t, int32_t)>& fn) {
  Run(num_tasks, true, fn);
}

void ThreadPool::Run(int64_t num_tasks, bool blocks,
                     const std::function<void(int64_t, int32_t)>& fn) {
  if (num_tasks <= 0) return;
  if (num_tasks == 1 || workers_.empty()) {
    for (int64_t task = 0; task < num_tasks; ++task) fn(task, 0);
    return;
  }
  job_ = &fn;
  num_tasks_ = num_tasks;
  blocks_ = blocks;
  next_task_.store(0);
  busy_workers_.store(static_cast<int32_t>(workers_.size()));
  {
    // Under the mutex, so a worker between its check and its wait cannot miss the call.
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_.notify_all();
  RunTasks(0);
  auto finished = [&] { return busy_workers_.load(std::memory_order_acquire) == 0; };
  if (!SpinUntil(finished)) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, finished);
  }
  job_ = nullptr;
}

}  // namespace lumen
