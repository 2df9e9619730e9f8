// Which level's kernels run (kernel_targets.h), and the head kernels' entry points, which
// call that level's through its table. The CPU's features come from cpuid directly, not
// from __builtin_cpu_supports: clang 14 does not know the x86-64-v3/v4 names, and the
// registers a level uses must also be saved by the operating system (XGETBV).

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "backends/cpu/head_kernels.h"
#include "backends/cpu/kernel_table.h"
#include "backends/cpu/kernel_targets.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#define LUMEN_CPUID_X86 1
#endif

namespace lumen::cpu {

// The wider levels' tables, defined by their builds of kernel_table.cc.
#if LUMEN_KERNEL_LEVELS_X86
namespace avx2 {
extern const KernelTable kLevelKernels;
}
namespace avx512 {
extern const KernelTable kLevelKernels;
}
#endif

namespace {

#if LUMEN_CPUID_X86
struct CpuidRegisters {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

CpuidRegisters Cpuid(unsigned leaf, unsigned subleaf = 0) {
  CpuidRegisters r;
  if (!__get_cpuid_count(leaf, subleaf, &r.a, &r.b, &r.c, &r.d)) return CpuidRegisters{};
  return r;
}

bool AllBits(unsigned value, unsigned bits) { return (value & bits) == bits; }

// The register states the operating system saves (XCR0); only where OSXSAVE is set.
uint64_t SavedRegisterStates() {
  unsigned low, high;
  __asm__("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return (uint64_t{high} << 32) | low;
}

// The x86-64 psABI's levels: x86-64-v3 is v2 (SSE3, SSSE3, SSE4.1, SSE4.2, POPCNT,
// CMPXCHG16B, LAHF) plus AVX, AVX2, BMI1, BMI2, F16C, FMA, LZCNT, MOVBE with the YMM state
// saved; x86-64-v4 adds AVX512F, BW, CD, DQ and VL with the opmask and ZMM states saved.
KernelLevel DetectX86Level() {
  const CpuidRegisters leaf1 = Cpuid(1);
  const CpuidRegisters leaf7 = Cpuid(0).a >= 7 ? Cpuid(7, 0) : CpuidRegisters{};
  const CpuidRegisters extended =
      Cpuid(0x80000000u).a >= 0x80000001u ? Cpuid(0x80000001u) : CpuidRegisters{};
  constexpr unsigned kSse3 = 1u << 0, kSsse3 = 1u << 9, kFma = 1u << 12, kCx16 = 1u << 13,
                     kSse41 = 1u << 19, kSse42 = 1u << 20, kMovbe = 1u << 22,
                     kPopcnt = 1u << 23, kOsxsave = 1u << 27, kAvx = 1u << 28,
                     kF16c = 1u << 29;
  constexpr unsigned kBmi1 = 1u << 3, kAvx2 = 1u << 5, kBmi2 = 1u << 8;
  constexpr unsigned kAvx512f = 1u << 16, kAvx512dq = 1u << 17, kAvx512cd = 1u << 28,
                     kAvx512bw = 1u << 30, kAvx512vl = 1u << 31;
  constexpr unsigned kLahf = 1u << 0, kLzcnt = 1u << 5;
  constexpr uint64_t kYmmStates = 0x6;      // SSE, AVX
  constexpr uint64_t kZmmStates = 0xe0;     // opmask, ZMM_Hi256, Hi16_ZMM
  const bool v3 =
      AllBits(leaf1.c, kSse3 | kSsse3 | kFma | kCx16 | kSse41 | kSse42 | kMovbe | kPopcnt |
                           kOsxsave | kAvx | kF16c) &&
      AllBits(leaf7.b, kBmi1 | kAvx2 | kBmi2) && AllBits(extended.c, kLahf | kLzcnt) &&
      (SavedRegisterStates() & kYmmStates) == kYmmStates;
  if (!v3) return KernelLevel::kBaseline;
  const bool v4 = AllBits(leaf7.b, kAvx512f | kAvx512dq | kAvx512cd | kAvx512bw | kAvx512vl) &&
                  (SavedRegisterStates() & kZmmStates) == kZmmStates;
  return v4 ? KernelLevel::kAvx512 : KernelLevel::kAvx2;
}
#endif

// The widest level this build has.
constexpr KernelLevel kWidestBuilt =
#if LUMEN_KERNEL_LEVELS_X86
    KernelLevel::kAvx512;
#else
    KernelLevel::kBaseline;
#endif

}  // namespace

KernelLevel CpuSimdLevel() {
#if LUMEN_CPUID_X86
  static const KernelLevel level = DetectX86Level();
  return level;
#else
  return KernelLevel::kBaseline;  // aarch64's NEON is its baseline
#endif
}

KernelLevel CpuKernelLevel() {
  static const KernelLevel level = [] {
    const KernelLevel cap = MaxKernelLevelFromEnvironment(std::getenv("LUMEN_CPU_MAX_LEVEL"));
    return std::min({CpuSimdLevel(), kWidestBuilt, cap});
  }();
  return level;
}

const KernelTable* KernelsAt(KernelLevel level) {
  switch (level) {
    case KernelLevel::kBaseline: return &baseline::kLevelKernels;
#if LUMEN_KERNEL_LEVELS_X86
    case KernelLevel::kAvx2: return &avx2::kLevelKernels;
    case KernelLevel::kAvx512: return &avx512::kLevelKernels;
#endif
    default: return nullptr;
  }
}

const KernelTable& Kernels() {
  static const KernelTable* const table = KernelsAt(CpuKernelLevel());
  return *table;
}

void RunRecurrent(const HeadRule& rule, const HeadSequence& seq, float* state,
                  float* normalizer, HeldWrite* write) {
  Kernels().run_recurrent(rule, seq, state, normalizer, write);
}

// A held write is applied by the level that made it: the one level a process runs.
void ApplyHeldWrite(int32_t key_dim, int32_t value_dim, float* state, HeldWrite* write) {
  if (!write->held) return;
  Kernels().apply_held_write(key_dim, value_dim, *write, state);
  write->held = false;
}

void ReserveChunkWorkspace(int32_t key_dim, int32_t value_dim, ChunkWorkspace* workspace) {
  const int64_t needed = ChunkScratchFloats(key_dim, value_dim);
  if (static_cast<int64_t>(workspace->buffer.size()) < needed) {
    workspace->buffer.resize(needed);
  }
}

void RunChunkwise(const HeadRule& rule, const HeadSequence& seq, int64_t tokens_after,
                  ChunkState* state, float* normalizer, ChunkWorkspace* workspace) {
  ReserveChunkWorkspace(seq.key_dim, seq.value_dim, workspace);
  Kernels().run_chunkwise(rule, seq, tokens_after, state, normalizer, workspace);
}

}  // namespace lumen::cpu
