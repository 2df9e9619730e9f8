#pragma once
// The anchors `lumen bench --cpu` measures beside lumen's own timings: what the machine can
// do with the same bytes and the same threads, independent of lumen; and the timing loop
// that both use.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lumen::cli {

// Runs a function on `threads` threads at once (the caller is thread 0), the way a
// fork-join pool would, for anchors that must use the same number of cores as lumen's
// engine. Workers spin while the team exists, so make one around a measurement only.
class SpinTeam {
 public:
  explicit SpinTeam(int32_t threads);
  ~SpinTeam();
  SpinTeam(const SpinTeam&) = delete;
  SpinTeam& operator=(const SpinTeam&) = delete;

  int32_t threads() const { return threads_; }
  // Runs fn(index, threads()) on every thread and returns when all have finished.
  void Run(const std::function<void(int32_t index, int32_t count)>& fn);

 private:
  struct Shared;
  int32_t threads_;
  Shared* shared_;
};

// A timing's best seconds per call, with the spread (worst / best - 1) of its repeats.
struct Timing {
  double best_seconds = 0;
  double spread = 0;
};

// Seconds per call of `call` over calls run until min_seconds have gone (at least one).
template <typename Call>
double SecondsPerCall(Call call, double min_seconds) {
  using Clock = std::chrono::steady_clock;
  int64_t calls = 0;
  const Clock::time_point start = Clock::now();
  double elapsed = 0;
  do {
    call();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < min_seconds);
  return elapsed / static_cast<double>(calls);
}

// The best of `seconds` (not empty) and their spread.
inline Timing BestAndSpread(const std::vector<double>& seconds) {
  const auto [lo, hi] = std::minmax_element(seconds.begin(), seconds.end());
  return Timing{*lo, *hi / *lo - 1.0};
}

// Seconds per call of `call`, best of `repeats` (each repeat runs calls until min_seconds
// have gone), after one warm-up call (page faults, caches).
template <typename Call>
Timing TimeCalls(Call call, int32_t repeats, double min_seconds) {
  call();
  std::vector<double> per_call;
  for (int32_t r = 0; r < repeats; ++r) per_call.push_back(SecondsPerCall(call, min_seconds));
  return BestAndSpread(per_call);
}

// The anchors below time their passes over `bytes` of fp32 state with TimeCalls.

// memcpy of `bytes` from one buffer to another, split across the team's threads on cache
// line boundaries.
Timing TimeMemcpy(SpinTeam& team, int64_t bytes, int32_t repeats, double min_seconds);

// In place, s = a * s + b over `bytes` of floats: the least work that reads and writes every
// element of a state once, vectorised for the widest SIMD level the CPU has.
Timing TimeReadModifyWrite(SpinTeam& team, int64_t bytes, int32_t repeats,
                           double min_seconds);

// Per block of `block_bytes` (one head's state), a read pass (a sum of its floats) and then
// the read-modify-write pass above: the memory traffic of a delta rule that reads a head for
// S'^T k before it writes it (two passes), without its arithmetic; lumen's step holds its
// write back and makes one pass (backends/cpu/recurrent.cc). Blocks are split across the
// team's threads as lumen splits a step's heads (contiguous runs, one per thread).
Timing TimeReadThenReadModifyWrite(SpinTeam& team, int64_t bytes, int64_t block_bytes,
                                   int32_t repeats, double min_seconds);

// The fp32 matrix-product peak: a register-blocked sgemm micro-kernel (12 x 32 with
// AVX-512, 6 x 16 with AVX2 + FMA, plain C++ elsewhere) over packed panels that stay in
// cache, one independent product per thread. Returns GFLOP/s over all threads, best of
// `repeats`, and names the kernel in *kernel.
double MeasureSgemmPeak(SpinTeam& team, int32_t repeats, double min_seconds,
                        std::string* kernel);

// The widest SIMD level of the CPU that lumen's kernels have a build for ("x86-64-v4
// (AVX-512)", "x86-64-v3 (AVX2 + FMA)", "baseline"): the one its load-time dispatch runs,
// under the cap LUMEN_CPU_MAX_LEVEL sets, which the sgemm peak follows too.
std::string KernelSimdLevel();

}  // namespace lumen::cli
