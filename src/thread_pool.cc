#include "src/thread_pool.h"

namespace lumen {

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
    stopping_ = true;
  }
  start_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::RunTasks(int32_t slot) {
  for (int64_t task = next_task_.fetch_add(1); task < num_tasks_;
       task = next_task_.fetch_add(1)) {
    (*job_)(task, slot);
  }
}

void ThreadPool::WorkerLoop(int32_t slot) {
  uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    RunTasks(slot);
    std::lock_guard<std::mutex> lock(mutex_);
    if (--busy_workers_ == 0) done_.notify_one();
  }
}

void ThreadPool::ParallelFor(int64_t num_tasks,
                             const std::function<void(int64_t, int32_t)>& fn) {
  if (num_tasks <= 0) return;
  if (num_tasks == 1 || workers_.empty()) {
    for (int64_t task = 0; task < num_tasks; ++task) fn(task, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    num_tasks_ = num_tasks;
    next_task_.store(0);
    busy_workers_ = static_cast<int32_t>(workers_.size());
    ++generation_;
  }
  start_.notify_all();
  RunTasks(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return busy_workers_ == 0; });
  job_ = nullptr;
}

}  // namespace lumen
