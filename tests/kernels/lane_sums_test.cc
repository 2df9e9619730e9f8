// The warp-level sums of the GPU kernels (backends/cuda/lane_sums.h) on an emulated warp of
// 32 and of 64 lanes: the code an AMD wavefront of 64 lanes runs, exercised where there is
// no AMD GPU. Each lane is a thread; a shuffle is one lockstep round of the whole warp.

#include <catch2/catch.hpp>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "backends/cuda/lane_sums.h"

namespace {

// `width` threads that run one function together as the lanes of a warp.
class EmulatedWarp {
 public:
  explicit EmulatedWarp(int width) : width_(width), slots_(width) {}

  // Runs body(lane, shuffle_xor) on every lane at once; shuffle_xor(v, mask), called by every
  // lane together, returns lane (lane ^ mask)'s v, as the hardware's shuffle does.
  template <typename Body>
  void Run(Body body) {
    std::vector<std::thread> lanes;
    for (int lane = 0; lane < width_; ++lane) {
      lanes.emplace_back([this, lane, &body] {
        auto shuffle_xor = [this, lane](float value, int mask) {
          slots_[lane] = value;
          Arrive();  // every lane has published its value
          const float other = slots_[lane ^ mask];
          Arrive();  // every lane has read before the next round overwrites
          return other;
        };
        body(lane, shuffle_xor);
      });
    }
    for (std::thread& lane : lanes) lane.join();
  }

 private:
  void Arrive() {
    std::unique_lock<std::mutex> lock(mutex_);
    const int64_t round = round_;
    if (++arrived_ == width_) {
      arrived_ = 0;
      ++round_;
      all_arrived_.notify_all();
    } else {
      all_arrived_.wait(lock, [&] { return round_ != round; });
    }
  }

  const int width_;
  std::vector<float> slots_;
  std::mutex mutex_;
  std::condition_variable all_arrived_;
  int arrived_ = 0;
  int64_t round_ = 0;
};

// Each lane's result of LaneGroupSum<kFirstMask, kReduceWidth> on an emulated warp of
// `warp_width` lanes holding `values`.
template <int kFirstMask, int kReduceWidth>
std::vector<float> RunLaneGroupSum(int warp_width, const std::vector<float>& values) {
  std::vector<float> results(warp_width);
  EmulatedWarp warp(warp_width);
  warp.Run([&](int lane, auto shuffle_xor) {
    results[lane] = lumen::cuda::LaneGroupSum<kFirstMask, kReduceWidth>(values[lane], shuffle_xor);
  });
  return results;
}

// Small integers: every partial sum is exact in fp32, so results compare exactly.
std::vector<float> IntegerValues(int width, std::mt19937& rng) {
  std::uniform_int_distribution<int> value(-1000, 1000);
  std::vector<float> values(width);
  for (float& v : values) v = static_cast<float>(value(rng));
  return values;
}

template <int kWidth, int kFirstMask>
void CheckGroupSums(std::mt19937& rng) {
  INFO("warp width " << kWidth << ", first mask " << kFirstMask);
  const std::vector<float> values = IntegerValues(kWidth, rng);
  const std::vector<float> results = RunLaneGroupSum<kFirstMask, kWidth>(kWidth, values);
  for (int lane = 0; lane < kWidth; ++lane) {
    float expected = 0.0f;
    for (int other = 0; other < kWidth; ++other) {
      if (other % kFirstMask == lane % kFirstMask) expected += values[other];
    }
    INFO("lane " << lane);
    CHECK(results[lane] == expected);
  }
}

}  // namespace

TEST_CASE("lane group sums are right on 32- and 64-lane warps", "[lanes]") {
  std::mt19937 rng(20261201);
  // kFirstMask 1: a whole-warp sum (BlockSum, the L2 norms); 8: the recurrent step's column
  // groups (kColumnThreads lanes apart).
  CheckGroupSums<32, 1>(rng);
  CheckGroupSums<32, 2>(rng);
  CheckGroupSums<32, 8>(rng);
  CheckGroupSums<32, 16>(rng);
  CheckGroupSums<64, 1>(rng);
  CheckGroupSums<64, 2>(rng);
  CheckGroupSums<64, 8>(rng);
  CheckGroupSums<64, 16>(rng);
  CheckGroupSums<64, 32>(rng);
}

TEST_CASE("every lane of a group gets the same bits", "[lanes]") {
  // Arbitrary floats: rounding differs from a sequential sum, but never between the lanes of
  // one group, which kernels rely on when any lane may write the result.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(64);
  for (float& v : values) v = normal(rng) * 1e3f;
  const std::vector<float> results = RunLaneGroupSum<8, 64>(64, values);
  for (int lane = 8; lane < 64; ++lane) {
    INFO("lane " << lane);
    CHECK(std::memcmp(&results[lane], &results[lane % 8], sizeof(float)) == 0);
  }
}

TEST_CASE("a 32-lane reduction on a 64-lane wavefront misses half the lanes", "[lanes]") {
  // What the wave64 port guards against: a reduction written for 32 lanes leaves each half
  // of a 64-lane wavefront with its own partial sum. The emulation must tell the two apart.
  std::vector<float> values(64, 0.0f);
  values[0] = 1.0f;
  values[40] = 2.0f;
  const std::vector<float> wrong = RunLaneGroupSum<1, 32>(64, values);
  CHECK(wrong[0] == 1.0f);
  CHECK(wrong[40] == 2.0f);
  const std::vector<float> right = RunLaneGroupSum<1, 64>(64, values);
  CHECK(right[0] == 3.0f);
  CHECK(right[40] == 3.0f);
}
