// vector_math.h against libm in float64, over the whole fp32 range: the vectorised exp and
// softplus (kda's gate) as the kernels run them, in loops built at each SIMD level; and the
// chunkwise decays' ExpAboveFloor against VectorExp, bit for bit.

#include "backends/cpu/vector_math.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "backends/cpu/kernel_targets.h"
#include "tests/kernels/vector_math_loops.h"

namespace lumen::cpu::vector_math_test {

#if LUMEN_KERNEL_LEVELS_X86
namespace avx2 {
extern const VectorMathLoops kLevelLoops;
}
namespace avx512 {
extern const VectorMathLoops kLevelLoops;
}
#endif

namespace {

// The loops of every level this build has and this CPU runs (and LUMEN_CPU_MAX_LEVEL allows),
// with the level's name.
struct LevelLoops {
  const char* level;
  const VectorMathLoops* loops;
};

std::vector<LevelLoops> LoopsToTest() {
  std::vector<LevelLoops> levels = {{"baseline", &baseline::kLevelLoops}};
#if LUMEN_KERNEL_LEVELS_X86
  if (CpuKernelLevel() >= KernelLevel::kAvx2) levels.push_back({"avx2", &avx2::kLevelLoops});
  if (CpuKernelLevel() >= KernelLevel::kAvx512) {
    levels.push_back({"avx512", &avx512::kLevelLoops});
  }
#endif
  return levels;
}

// The bound vector_math.h promises: 4 units in the last place (2^-21 relative) where the
// result is a normal float; within one denormal step (2^-149) below that.
constexpr double kMaxRelative = 4.0 * 0x1p-23;
constexpr double kDenormalStep = 0x1p-149;
constexpr double kFloatMin = 0x1p-126;

float FromBits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

// Every `stride`-th fp32 value in [lo, hi] (both of one sign), in bit order.
void AppendRange(float lo, float hi, uint32_t stride, std::vector<float>* out) {
  uint32_t a, b;
  std::memcpy(&a, &lo, 4);
  std::memcpy(&b, &hi, 4);
  if (a > b) std::swap(a, b);
  for (uint64_t bits = a; bits <= b; bits += stride) out->push_back(FromBits(bits));
  out->push_back(hi);
}

struct Errors {
  double relative = 0.0;  // worst, over normal results
  double denormal = 0.0;  // worst absolute error, over results below FLT_MIN
  int64_t wrong_special = 0;  // overflow not infinite, non-finite where finite, negative
};

template <typename Reference>
Errors Measure(const std::vector<float>& x, const std::vector<float>& out, Reference ref) {
  Errors e;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = ref(static_cast<double>(x[i]));
    const double got = out[i];
    if (want > std::numeric_limits<float>::max() * (1.0 + 0x1p-24)) {
      e.wrong_special += !std::isinf(got);
      continue;
    }
    if (!std::isfinite(got) || got < 0.0) {
      ++e.wrong_special;
      continue;
    }
    if (want >= kFloatMin) {
      e.relative = std::max(e.relative, std::abs(got - want) / want);
    } else {
      e.denormal = std::max(e.denormal, std::abs(got - want));
    }
  }
  return e;
}

void Report(const char* level, const char* name, const Errors& e) {
  std::printf("%-8s %-10s worst relative error %.2e (%.2f ulp), denormal results within "
              "%.2g x 2^-149\n",
              level, name, e.relative, e.relative / 0x1p-23, e.denormal / kDenormalStep);
  CHECK(e.wrong_special == 0);
  CHECK(e.relative <= kMaxRelative);
  CHECK(e.denormal <= kDenormalStep);
}

TEST_CASE("VectorExp matches exp over the fp32 range", "[kernels][cpu][vector_math]") {
  std::vector<float> x;
  AppendRange(-0.0f, -120.0f, 4099, &x);  // down past the last denormal result
  AppendRange(0.0f, 100.0f, 4099, &x);    // up past overflow
  AppendRange(-1e30f, -120.0f, 100003, &x);
  AppendRange(100.0f, 1e30f, 100003, &x);
  std::vector<float> out(x.size());
  for (const LevelLoops& level : LoopsToTest()) {
    INFO(level.level);
    level.loops->exp(x.data(), static_cast<int64_t>(x.size()), out.data());
    Report(level.level, "exp", Measure(x, out, [](double v) { return std::exp(v); }));
  }
}

TEST_CASE("ExpAboveFloor is VectorExp with results below the floor taken as 0",
          "[kernels][cpu][vector_math]") {
  std::vector<float> x;
  AppendRange(-0.0f, -120.0f, 257, &x);  // every result from 1 down past the floors
  AppendRange(-120.0f, -3e38f, 100003, &x);
  std::vector<float> exp(x.size()), out(x.size());
  for (const LevelLoops& level : LoopsToTest()) {
    INFO(level.level);
    level.loops->exp(x.data(), static_cast<int64_t>(x.size()), exp.data());
    for (const float floor : {1e-30f, 1e-37f}) {
      level.loops->exp_above_floor(x.data(), static_cast<int64_t>(x.size()), floor, out.data());
      int64_t differing = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const float want = exp[i] < floor ? 0.0f : exp[i];
        differing += std::memcmp(&want, &out[i], sizeof(float)) != 0;
      }
      CAPTURE(floor);
      CHECK(differing == 0);
    }
  }
}

TEST_CASE("VectorSoftplus matches log1p(exp) over the fp32 range",
          "[kernels][cpu][vector_math]") {
  std::vector<float> x;
  AppendRange(-0.0f, -120.0f, 4099, &x);
  AppendRange(0.0f, 120.0f, 4099, &x);
  AppendRange(-3e38f, -120.0f, 100003, &x);  // large |x|: 0 and x itself
  AppendRange(120.0f, 3e38f, 100003, &x);
  std::vector<float> out(x.size());
  for (const LevelLoops& level : LoopsToTest()) {
    INFO(level.level);
    level.loops->softplus(x.data(), static_cast<int64_t>(x.size()), out.data());
    Report(level.level, "softplus", Measure(x, out, [](double v) {
             return v > 0 ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v));
           }));
  }
}

TEST_CASE("Log1pUnit matches log1p on [0, 1]", "[kernels][cpu][vector_math]") {
  std::vector<float> x;
  AppendRange(0.0f, 1.0f, 4099, &x);
  std::vector<float> out(x.size());
  for (const LevelLoops& level : LoopsToTest()) {
    INFO(level.level);
    level.loops->log1p_unit(x.data(), static_cast<int64_t>(x.size()), out.data());
    Report(level.level, "log1p", Measure(x, out, [](double v) { return std::log1p(v); }));
  }
}

}  // namespace
}  // namespace lumen::cpu::vector_math_test
