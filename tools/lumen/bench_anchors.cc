#include "tools/lumen/bench_anchors.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LUMEN_BENCH_X86 1
#endif

// The read-modify-write anchor gets the same clones as lumen's kernels, so that it runs at
// the SIMD level they run at.
#if defined(LUMEN_BENCH_X86) && !defined(__clang__) && defined(__linux__)
#define LUMEN_BENCH_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LUMEN_BENCH_CLONES
#endif

namespace lumen::cli {
namespace {

constexpr int64_t kCacheLine = 64;

// A spin-wait's body: tells the core it is waiting (and an SMT sibling may run).
inline void CpuRelax() {
#ifdef LUMEN_BENCH_X86
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

float* AllocateFloats(int64_t count) {
  const int64_t bytes = (count * 4 + kCacheLine - 1) / kCacheLine * kCacheLine;
  void* p = std::aligned_alloc(kCacheLine, static_cast<size_t>(std::max<int64_t>(bytes, 64)));
  if (p == nullptr) std::abort();
  return static_cast<float*>(p);
}

// [begin, end) of part `index` of `count` over `floats` floats, cut on cache lines.
void Slice(int64_t floats, int32_t index, int32_t count, int64_t* begin, int64_t* end) {
  const int64_t lines = (floats + 15) / 16;
  *begin = std::min(floats, lines * index / count * 16);
  *end = std::min(floats, lines * (index + 1) / count * 16);
}

LUMEN_BENCH_CLONES
void ReadModifyWrite(float* s, int64_t count) {
  for (int64_t i = 0; i < count; ++i) s[i] = 0.999f * s[i] + 1e-6f;
}

// The sum of count floats (a multiple of 16) in 16 lanes, which GCC vectorises.
LUMEN_BENCH_CLONES
float SumOfFloats(const float* s, int64_t count) {
  float lanes[16] = {};
  for (int64_t i = 0; i < count; i += 16) {
    for (int32_t j = 0; j < 16; ++j) lanes[j] += s[i + j];
  }
  float sum = 0.0f;
  for (float lane : lanes) sum += lane;
  return sum;
}

// ---------------------------------------------------------------------------------------
// sgemm micro-kernels: C[MR x NR] += A_panel^T B_panel over depth kc, A packed [kc][MR],
// B packed [kc][NR], C row-major with leading dimension ldc.

constexpr int32_t kDepth = 128;      // kc: a B panel of kc x 32 floats is 16 KiB, in L1
constexpr int32_t kRowPanels = 16;   // MC = 16 MR rows of A, in L2
constexpr int32_t kColPanels = 16;   // NC = 16 NR columns of B

#ifdef LUMEN_BENCH_X86
__attribute__((target("avx512f,fma"))) void Kernel12x32(int32_t kc, const float* a,
                                                       const float* b, float* c,
                                                       int64_t ldc) {
  __m512 acc[12][2];
#pragma GCC unroll 12
  for (int r = 0; r < 12; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int32_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_load_ps(b);
    const __m512 b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 12
    for (int r = 0; r < 12; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r]);
      acc[r][0] = _mm512_fmadd_ps(ar, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(ar, b1, acc[r][1]);
    }
    a += 12;
    b += 32;
  }
#pragma GCC unroll 12
  for (int r = 0; r < 12; ++r) {
    float* row = c + r * ldc;
    _mm512_storeu_ps(row, _mm512_add_ps(_mm512_loadu_ps(row), acc[r][0]));
    _mm512_storeu_ps(row + 16, _mm512_add_ps(_mm512_loadu_ps(row + 16), acc[r][1]));
  }
}

__attribute__((target("avx2,fma"))) void Kernel6x16(int32_t kc, const float* a,
                                                   const float* b, float* c, int64_t ldc) {
  __m256 acc[6][2];
#pragma GCC unroll 6
  for (int r = 0; r < 6; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int32_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_load_ps(b);
    const __m256 b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
    for (int r = 0; r < 6; ++r) {
      const __m256 ar = _mm256_broadcast_ss(a + r);
      acc[r][0] = _mm256_fmadd_ps(ar, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(ar, b1, acc[r][1]);
    }
    a += 6;
    b += 16;
  }
#pragma GCC unroll 6
  for (int r = 0; r < 6; ++r) {
    float* row = c + r * ldc;
    _mm256_storeu_ps(row, _mm256_add_ps(_mm256_loadu_ps(row), acc[r][0]));
    _mm256_storeu_ps(row + 8, _mm256_add_ps(_mm256_loadu_ps(row + 8), acc[r][1]));
  }
}
#endif

void Kernel4x16(int32_t kc, const float* a, const float* b, float* c, int64_t ldc) {
  float acc[4][16] = {};
  for (int32_t p = 0; p < kc; ++p) {
    for (int r = 0; r < 4; ++r) {
      for (int j = 0; j < 16; ++j) acc[r][j] += a[r] * b[j];
    }
    a += 4;
    b += 16;
  }
  for (int r = 0; r < 4; ++r) {
    for (int j = 0; j < 16; ++j) c[r * ldc + j] += acc[r][j];
  }
}

struct MicroKernel {
  void (*run)(int32_t, const float*, const float*, float*, int64_t);
  int32_t rows;
  int32_t cols;
  const char* name;
};

#ifdef LUMEN_BENCH_X86
// The SIMD levels of lumen's CPU kernels, in increasing width.
enum class Level { kBaseline, kAvx2, kAvx512 };

// The cap LUMEN_CPU_MAX_LEVEL puts on lumen's kernels, parsed as the library does
// (backends/cpu/kernel_targets.h, which this program, a user of lumen.h, does not include):
// the peak is measured at the level they run.
bool LevelAllowed(Level level) {
  const char* cap = std::getenv("LUMEN_CPU_MAX_LEVEL");
  Level max = Level::kAvx512;
  if (cap != nullptr && std::strcmp(cap, "baseline") == 0) max = Level::kBaseline;
  if (cap != nullptr && std::strcmp(cap, "avx2") == 0) max = Level::kAvx2;
  return level <= max;
}
#endif

MicroKernel PickMicroKernel() {
#ifdef LUMEN_BENCH_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && LevelAllowed(Level::kAvx512)) {
    return {Kernel12x32, 12, 32, "12x32 AVX-512"};
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      LevelAllowed(Level::kAvx2)) {
    return {Kernel6x16, 6, 16, "6x16 AVX2+FMA"};
  }
#endif
  return {Kernel4x16, 4, 16, "4x16 plain C++"};
}

// One thread's product: MC x kc times kc x NC into C (MC x NC), panels packed once.
struct SgemmProblem {
  MicroKernel kernel;
  int64_t rows, cols;
  std::unique_ptr<float, AlignedFree> a, b, c;

  explicit SgemmProblem(MicroKernel k)
      : kernel(k), rows(int64_t{kRowPanels} * k.rows), cols(int64_t{kColPanels} * k.cols) {
    a.reset(AllocateFloats(rows * kDepth));
    b.reset(AllocateFloats(cols * kDepth));
    c.reset(AllocateFloats(rows * cols));
    for (int64_t i = 0; i < rows * kDepth; ++i) a.get()[i] = 1e-3f * static_cast<float>(i % 7);
    for (int64_t i = 0; i < cols * kDepth; ++i) b.get()[i] = 1e-3f * static_cast<float>(i % 5);
    std::memset(c.get(), 0, static_cast<size_t>(rows * cols * 4));
  }
  double Flops() const { return 2.0 * static_cast<double>(rows * cols) * kDepth; }
  void Run() {
    for (int32_t j = 0; j < kColPanels; ++j) {  // a B panel stays in L1 across A's panels
      const float* b_panel = b.get() + int64_t{j} * kDepth * kernel.cols;
      for (int32_t i = 0; i < kRowPanels; ++i) {
        kernel.run(kDepth, a.get() + int64_t{i} * kDepth * kernel.rows, b_panel,
                   c.get() + int64_t{i} * kernel.rows * cols + int64_t{j} * kernel.cols, cols);
      }
    }
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------
// SpinTeam

struct SpinTeam::Shared {
  std::atomic<uint64_t> generation{0};
  std::atomic<int32_t> pending{0};
  std::atomic<bool> stopping{false};
  const std::function<void(int32_t, int32_t)>* fn = nullptr;
  std::vector<std::thread> workers;
};

SpinTeam::SpinTeam(int32_t threads) : threads_(std::max(threads, 1)), shared_(new Shared) {
  for (int32_t index = 1; index < threads_; ++index) {
    shared_->workers.emplace_back([this, index] {
      uint64_t seen = 0;
      while (true) {
        uint64_t now;
        while ((now = shared_->generation.load(std::memory_order_acquire)) == seen) {
          if (shared_->stopping.load(std::memory_order_acquire)) return;
          CpuRelax();
        }
        seen = now;
        (*shared_->fn)(index, threads_);
        shared_->pending.fetch_sub(1, std::memory_order_acq_rel);
      }
    });
  }
}

SpinTeam::~SpinTeam() {
  shared_->stopping.store(true, std::memory_order_release);
  for (std::thread& worker : shared_->workers) worker.join();
  delete shared_;
}

void SpinTeam::Run(const std::function<void(int32_t, int32_t)>& fn) {
  shared_->fn = &fn;
  shared_->pending.store(threads_ - 1, std::memory_order_release);
  shared_->generation.fetch_add(1, std::memory_order_acq_rel);
  fn(0, threads_);
  while (shared_->pending.load(std::memory_order_acquire) != 0) CpuRelax();
}

// ---------------------------------------------------------------------------------------
// Anchors

Timing TimeMemcpy(SpinTeam& team, int64_t bytes, int32_t repeats, double min_seconds) {
  const int64_t floats = bytes / 4;
  std::unique_ptr<float, AlignedFree> src(AllocateFloats(floats)), dst(AllocateFloats(floats));
  std::fill(src.get(), src.get() + floats, 1.0f);
  std::fill(dst.get(), dst.get() + floats, 0.0f);
  const std::function<void(int32_t, int32_t)> part = [&](int32_t index, int32_t count) {
    int64_t begin, end;
    Slice(floats, index, count, &begin, &end);
    std::memcpy(dst.get() + begin, src.get() + begin, static_cast<size_t>(end - begin) * 4);
  };
  return TimeCalls([&] { team.Run(part); }, repeats, min_seconds);
}

Timing TimeReadModifyWrite(SpinTeam& team, int64_t bytes, int32_t repeats,
                           double min_seconds) {
  const int64_t floats = bytes / 4;
  std::unique_ptr<float, AlignedFree> state(AllocateFloats(floats));
  std::fill(state.get(), state.get() + floats, 1.0f);
  const std::function<void(int32_t, int32_t)> part = [&](int32_t index, int32_t count) {
    int64_t begin, end;
    Slice(floats, index, count, &begin, &end);
    ReadModifyWrite(state.get() + begin, end - begin);
  };
  return TimeCalls([&] { team.Run(part); }, repeats, min_seconds);
}

Timing TimeReadThenReadModifyWrite(SpinTeam& team, int64_t bytes, int64_t block_bytes,
                                   int32_t repeats, double min_seconds) {
  const int64_t block_floats = block_bytes / 4;
  const int64_t blocks = bytes / block_bytes;
  std::unique_ptr<float, AlignedFree> state(AllocateFloats(blocks * block_floats));
  std::fill(state.get(), state.get() + blocks * block_floats, 1.0f);
  std::vector<float> sums(team.threads());  // kept, so the read passes are not dropped
  const std::function<void(int32_t, int32_t)> part = [&](int32_t index, int32_t count) {
    float sum = 0.0f;
    for (int64_t b = blocks * index / count; b < blocks * (index + 1) / count; ++b) {
      float* block = state.get() + b * block_floats;
      sum += SumOfFloats(block, block_floats);
      ReadModifyWrite(block, block_floats);
    }
    sums[index] = sum;
  };
  return TimeCalls([&] { team.Run(part); }, repeats, min_seconds);
}

double MeasureSgemmPeak(SpinTeam& team, int32_t repeats, double min_seconds,
                        std::string* kernel) {
  const MicroKernel micro = PickMicroKernel();
  *kernel = micro.name;
  std::vector<std::unique_ptr<SgemmProblem>> problems;
  for (int32_t t = 0; t < team.threads(); ++t) {
    problems.push_back(std::make_unique<SgemmProblem>(micro));
  }
  // Several products per pass, so that one pass outlasts the team's start by far.
  constexpr int32_t kProductsPerPass = 8;
  const std::function<void(int32_t, int32_t)> part = [&](int32_t index, int32_t) {
    for (int32_t i = 0; i < kProductsPerPass; ++i) problems[index]->Run();
  };
  const Timing timing = TimeCalls([&] { team.Run(part); }, repeats, min_seconds);
  const double flops = problems[0]->Flops() * kProductsPerPass * team.threads();
  return flops / timing.best_seconds * 1e-9;
}

std::string KernelSimdLevel() {
#if defined(LUMEN_BENCH_X86) && defined(__linux__)
  // The levels' main features by name (clang 14 does not know "x86-64-v4"); lumen's own
  // check (backends/cpu/kernel_dispatch.cc) reads all of them from cpuid.
  __builtin_cpu_init();
  const std::string capped =
      std::getenv("LUMEN_CPU_MAX_LEVEL") != nullptr
          ? std::string(", capped by LUMEN_CPU_MAX_LEVEL=") + std::getenv("LUMEN_CPU_MAX_LEVEL")
          : "";
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") &&
                  __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512cd") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (v4 && LevelAllowed(Level::kAvx512)) {
    return "x86-64-v4 (AVX-512)" + capped;
  }
  if (v3 && LevelAllowed(Level::kAvx2)) {
    return "x86-64-v3 (AVX2 + FMA)" + capped;
  }
  return "x86-64 baseline (SSE2)" + capped;
#elif defined(__aarch64__)
  return "aarch64 (NEON, compiler-vectorised)";
#else
  return "baseline";
#endif
}

}  // namespace lumen::cli
