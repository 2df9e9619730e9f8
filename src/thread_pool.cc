#include "src/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace lumen {
namespace {

// How long a thread spins before it sleeps. A model's layer calls come back to back, and
// waking a sleeping thread costs tens of microseconds, more than a short spin; an idle
// pool still sleeps after this.
constexpr std::chrono::microseconds kSpin(50);

// ThreadPool::call_'s fields.
constexpr uint64_t kClosed = uint64_t{1} << 31;
constexpr uint64_t kCountMask = kClosed - 1;
uint64_t Generation(uint64_t call) { return call >> 32; }
uint64_t Inside(uint64_t call) { return call & kCountMask; }

// A spin-wait's body: tells the core it is waiting, and keeps the core. Not
// std::this_thread::yield(): under load (other processes runnable, even at low priority) a
// yield hands the core away for a scheduler slice, milliseconds against a step's tens of
// microseconds.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Spins until done() or kSpin has passed; returns done().
template <typename Done>
bool SpinUntil(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  while (!done()) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      CpuRelax();
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
  block_claimed_ = std::make_unique<std::atomic<bool>[]>(num_threads);
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

void ThreadPool::RunBlock(int64_t block, int32_t slot) {
  if (block_claimed_[block].exchange(true, std::memory_order_acq_rel)) return;
  const int64_t threads = num_threads();
  const int64_t end = num_tasks_ * (block + 1) / threads;
  for (int64_t task = num_tasks_ * block / threads; task < end; ++task) (*job_)(task, slot);
}

void ThreadPool::RunTasks(int32_t slot) {
  if (blocks_) {
    // Its own block first, then whatever nobody has claimed.
    RunBlock(slot, slot);
    for (int64_t block = 0; block < num_threads(); ++block) RunBlock(block, slot);
    return;
  }
  for (int64_t task = next_task_.fetch_add(1); task < num_tasks_;
       task = next_task_.fetch_add(1)) {
    (*job_)(task, slot);
  }
}

void ThreadPool::WorkerLoop(int32_t slot) {
  uint64_t seen = 0;  // the last generation this worker joined or found closed
  while (true) {
    uint64_t call = 0;
    auto started = [&] {
      call = call_.load();
      return stopping_.load(std::memory_order_acquire) || Generation(call) != seen;
    };
    if (!SpinUntil(started)) {
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1);  // seq_cst with call_, against Run's check of sleepers_
      start_.wait(lock, started);
      sleepers_.fetch_sub(1);
    }
    if (stopping_.load(std::memory_order_acquire)) return;
    while ((call & kClosed) == 0) {
      if (call_.compare_exchange_weak(call, call + 1, std::memory_order_acq_rel)) {
        RunTasks(slot);
        const uint64_t left = call_.fetch_sub(1, std::memory_order_acq_rel) - 1;
        if ((left & kClosed) != 0 && Inside(left) == 0) {
          std::lock_guard<std::mutex> lock(mutex_);
          done_.notify_one();
        }
        break;
      }
    }
    seen = Generation(call);
  }
}

void ThreadPool::ParallelFor(int64_t num_tasks,
                             const std::function<void(int64_t, int32_t)>& fn) {
  Run(num_tasks, false, fn);
}

void ThreadPool::ParallelForPieces(int64_t count, int64_t piece,
                                   const std::function<void(int64_t, int64_t)>& fn) {
  if (count <= 0) return;
  Run((count + piece - 1) / piece, false, [&](int64_t task, int32_t) {
    const int64_t begin = task * piece;
    fn(begin, std::min(piece, count - begin));
  });
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
  next_task_.store(0, std::memory_order_relaxed);
  for (int32_t b = 0; b < num_threads(); ++b) {
    block_claimed_[b].store(false, std::memory_order_relaxed);
  }
  // Opens the call (releasing the fields above to the workers that join it).
  call_.store((Generation(call_.load()) + 1) << 32);
  if (sleepers_.load() > 0) {
    // Under the mutex, so a worker between its check and its wait cannot miss the call.
    { std::lock_guard<std::mutex> lock(mutex_); }
    start_.notify_all();
  }
  RunTasks(0);
  // Every task is claimed now; close the call and wait for the workers still inside.
  auto finished = [&] { return Inside(call_.load(std::memory_order_acquire)) == 0; };
  if (Inside(call_.fetch_or(kClosed, std::memory_order_acq_rel)) != 0 && !SpinUntil(finished)) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, finished);
  }
  job_ = nullptr;
}

}  // namespace lumen
