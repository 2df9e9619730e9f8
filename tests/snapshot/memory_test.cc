// Snapshots in memory through the public C API, on a model that mixes families after random
// tokens: snapshot -> restore is bit exact (state of every layer and part, token counts, the
// snapshot bytes themselves), and the restored session continues exactly like one that was
// never saved (step and prefill); restore replaces everything; the size is O(state),
// identical after 10 and after 100,000 tokens; BUFFER_TOO_SMALL writes nothing; NULL and
// bad arguments; fork, then restore the parent's snapshot into the fork; conv windows and
// Mamba-2 layers round-trip and continue exactly.

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/reference/layer_reference.h"
#include "tests/snapshot/snapshot_test_util.h"

namespace lumen_snapshot_test {
namespace {

// ---------------------------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------------------------

TEST_CASE("snapshot then restore is bit exact and the session continues exactly",
          "[snapshot]") {
  // (state dtype of the layers, dtype of the snapshot): the combinations that lose nothing.
  const auto combo = GENERATE(std::make_pair(LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_FLOAT32),
                              std::make_pair(LUMEN_DTYPE_BFLOAT16, LUMEN_DTYPE_FLOAT32),
                              std::make_pair(LUMEN_DTYPE_BFLOAT16, LUMEN_DTYPE_BFLOAT16));
  INFO("state dtype " << combo.first << ", snapshot dtype " << combo.second);
  const Stack stack(MixedLayers(kDims, combo.first));
  std::mt19937 rng(1234);

  // Two sessions with the same history: `saved` is snapshotted, `never_saved` is not touched.
  SessionPtr saved = stack.NewSession(), never_saved = stack.NewSession();
  AddHistory(stack, {saved.get(), never_saved.get()}, rng);
  const SessionState original = Capture(saved.get(), stack.model.get());
  REQUIRE(AnyNonZero(original));
  REQUIRE(original.tokens == std::vector<int64_t>{41, 49, 57, 65});

  const Bytes snapshot = TakeSnapshot(saved.get(), combo.second);
  CHECK(std::memcmp(snapshot.data(), "LUMENSNP", 8) == 0);
  CHECK(GetU32(snapshot, kVersionOffset) == kFormatVersion);
  CHECK(GetU32(snapshot, kNumLayersOffset) == 4);
  // Taking a snapshot only reads the session, and twice gives the same bytes.
  CHECK(SameBits(original, Capture(saved.get(), stack.model.get())));
  CHECK(TakeSnapshot(saved.get(), combo.second) == snapshot);

  SessionPtr restored = stack.NewSession();
  REQUIRE_OK(Restore(restored.get(), snapshot));
  CHECK(SameBits(original, Capture(restored.get(), stack.model.get())));
  CHECK(TakeSnapshot(restored.get(), combo.second) == snapshot);
  CHECK(TakeSnapshot(restored.get(), LUMEN_DTYPE_FLOAT32) ==
        TakeSnapshot(saved.get(), LUMEN_DTYPE_FLOAT32));

  // A session of another engine (4 threads) on another build of the same model.
  const Stack twin(MixedLayers(kDims, combo.first), 4);
  SessionPtr elsewhere = twin.NewSession();
  REQUIRE_OK(Restore(elsewhere.get(), snapshot));
  CHECK(SameBits(original, Capture(elsewhere.get(), twin.model.get())));

  // Restoring twice changes nothing.
  REQUIRE_OK(Restore(restored.get(), snapshot));
  CHECK(SameBits(original, Capture(restored.get(), stack.model.get())));

  // The next tokens: steps, then prefills that cross chunk boundaries, per layer.
  for (int32_t i = 0; i < stack.num_layers(); ++i) {
    INFO("layer " << i);
    const Tokens steps = RandomTokens(stack.layers[i], 3, rng);
    CHECK(SameBits(Run(restored.get(), i, steps, Path::kStep),
                   Run(never_saved.get(), i, steps, Path::kStep)));
    const Tokens prefill = RandomTokens(stack.layers[i], 70, rng);
    const std::vector<float> o_restored = Run(restored.get(), i, prefill, Path::kPrefill);
    const std::vector<float> o_never = Run(never_saved.get(), i, prefill, Path::kPrefill);
    CHECK(SameBits(o_restored, o_never));
    CHECK(std::all_of(o_restored.begin(), o_restored.end(),
                      [](float x) { return std::isfinite(x); }));
  }
  CHECK(SameBits(Capture(restored.get(), stack.model.get()),
                 Capture(never_saved.get(), stack.model.get())));

  // Rewind: restoring into the session that advanced brings it back, and the same tokens give
  // the same outputs a second time.
  const Tokens again = RandomTokens(stack.layers[0], 33, rng);
  SessionPtr rewound = stack.NewSession();
  REQUIRE_OK(Restore(rewound.get(), snapshot));
  const std::vector<float> first = Run(rewound.get(), 0, again, Path::kPrefill);
  REQUIRE_OK(Restore(rewound.get(), snapshot));
  CHECK(SameBits(original, Capture(rewound.get(), stack.model.get())));
  CHECK(SameBits(first, Run(rewound.get(), 0, again, Path::kPrefill)));
}

TEST_CASE("restore replaces every layer's state and token count, including zeros",
          "[snapshot]") {
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(77);
  SessionPtr fresh = stack.NewSession();
  const Bytes zero = TakeSnapshot(fresh.get());
  SessionPtr busy = stack.NewSession();
  AddHistory(stack, {busy.get()}, rng);
  REQUIRE_OK(Restore(busy.get(), zero));
  CHECK(SameBits(Capture(fresh.get(), stack.model.get()), Capture(busy.get(), stack.model.get())));
  CHECK(TakeSnapshot(busy.get()) == zero);
}

TEST_CASE("snapshot size is the same after 10 and after 100,000 tokens", "[snapshot]") {
  Dims d{1, 2, 16, 16};
  const Stack stack({GatedDeltaNet(d)});
  std::mt19937 rng(5);
  SessionPtr s = stack.NewSession();
  const int64_t empty_size = SnapshotSize(s.get());
  const int64_t empty_bf16 = SnapshotSize(s.get(), LUMEN_DTYPE_BFLOAT16);

  Run(s.get(), 0, RandomTokens(stack.layers[0], 10, rng), Path::kPrefill);
  const Bytes at_10 = TakeSnapshot(s.get());
  CHECK(static_cast<int64_t>(at_10.size()) == empty_size);
  CHECK(SnapshotSize(s.get(), LUMEN_DTYPE_BFLOAT16) == empty_bf16);

  const auto start = std::chrono::steady_clock::now();
  const int32_t kChunk = 4000;
  const std::vector<Tokens> blocks = {RandomTokens(stack.layers[0], kChunk, rng),
                                      RandomTokens(stack.layers[0], kChunk, rng),
                                      RandomTokens(stack.layers[0], kChunk, rng)};
  std::vector<float> o;
  for (int32_t call = 0; call < 100000 / kChunk; ++call) {
    o = Run(s.get(), 0, blocks[call % blocks.size()], Path::kPrefill);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t tokens = 0;
  REQUIRE(lumen_session_tokens(s.get(), 0, &tokens) == LUMEN_OK);
  CHECK(tokens == 100010);
  CHECK(std::all_of(o.begin(), o.end(), [](float x) { return std::isfinite(x); }));

  const Bytes at_100k = TakeSnapshot(s.get());
  CHECK(at_100k.size() == at_10.size());
  CHECK(SnapshotSize(s.get(), LUMEN_DTYPE_BFLOAT16) == empty_bf16);
  CHECK(at_100k != at_10);
  // O(state): the state itself plus a small fixed overhead.
  int64_t state_bytes = 0;
  REQUIRE(lumen_model_state_bytes(stack.model.get(), -1, &state_bytes) == LUMEN_OK);
  CHECK(static_cast<int64_t>(at_100k.size()) - state_bytes <= 256);
  INFO("100,000 tokens took " << seconds << " s");
  CHECK(seconds < 30.0);

  // And it restores, token count included.
  SessionPtr back = stack.NewSession();
  REQUIRE_OK(Restore(back.get(), at_100k));
  CHECK(SameBits(Capture(s.get(), stack.model.get()), Capture(back.get(), stack.model.get())));
}

// ---------------------------------------------------------------------------------------------
// Buffers and arguments
// ---------------------------------------------------------------------------------------------

TEST_CASE("a buffer one byte short gives BUFFER_TOO_SMALL and is not written",
          "[snapshot][buffer]") {
  const int32_t dtype = GENERATE(LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_BFLOAT16);
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(51);
  SessionPtr s = stack.NewSession();
  AddHistory(stack, {s.get()}, rng);
  lumen_snapshot_options options;
  lumen_snapshot_options_init(&options);
  options.state_dtype = dtype;
  const int64_t size = SnapshotSize(s.get(), dtype);

  for (int64_t capacity : {size - 1, int64_t{1}, int64_t{0}, int64_t{-1}}) {
    INFO("capacity " << capacity);
    Bytes buffer(static_cast<size_t>(size + 16), 0xA5);
    int64_t out_size = -7;
    const lumen_status status =
        lumen_session_snapshot(s.get(), &options, buffer.data(), capacity, &out_size);
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_BUFFER_TOO_SMALL);
    CHECK(std::all_of(buffer.begin(), buffer.end(), [](unsigned char c) { return c == 0xA5; }));
    CHECK(out_size == -7);
  }
  // A larger buffer: exactly `size` bytes written, the rest untouched.
  Bytes buffer(static_cast<size_t>(size + 16), 0xA5);
  int64_t out_size = -7;
  REQUIRE_OK(lumen_session_snapshot(s.get(), &options, buffer.data(), size + 16, &out_size));
  CHECK(out_size == size);
  CHECK(std::all_of(buffer.begin() + size, buffer.end(),
                    [](unsigned char c) { return c == 0xA5; }));
  CHECK(Bytes(buffer.begin(), buffer.begin() + size) == TakeSnapshot(s.get(), dtype));
  // out_size may be NULL.
  REQUIRE_OK(lumen_session_snapshot(s.get(), &options, buffer.data(), size, nullptr));
}

TEST_CASE("NULL and bad arguments give INVALID_ARGUMENT with a message",
          "[snapshot][args]") {
  const Stack stack(MixedLayers(kSmall));
  SessionPtr s = stack.NewSession();
  std::mt19937 rng(61);
  AddHistory(stack, {s.get()}, rng);
  const Bytes snapshot = TakeSnapshot(s.get());
  const SessionState before = Capture(s.get(), stack.model.get());
  Bytes buffer(snapshot.size());
  int64_t size = 0;
  lumen_snapshot_options options;
  lumen_snapshot_options_init(&options);
  lumen_snapshot_options_init(nullptr);  // a no-op

  auto expect_invalid = [&](lumen_status status, const char* what) {
    const std::string message = lumen_last_error_message();
    INFO(what << " -> " << lumen_status_string(status) << ": " << message);
    CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(!message.empty());
  };
  expect_invalid(lumen_session_snapshot_size(nullptr, &options, &size), "size(NULL session)");
  expect_invalid(lumen_session_snapshot_size(s.get(), &options, nullptr), "size(NULL out)");
  expect_invalid(lumen_session_snapshot(nullptr, &options, buffer.data(), 1 << 20, &size),
                 "snapshot(NULL session)");
  expect_invalid(lumen_session_snapshot(s.get(), &options, nullptr, 1 << 20, &size),
                 "snapshot(NULL buffer)");
  expect_invalid(lumen_session_restore(nullptr, snapshot.data(), snapshot.size()),
                 "restore(NULL session)");
  expect_invalid(lumen_session_restore(s.get(), nullptr, snapshot.size()), "restore(NULL data)");
  expect_invalid(lumen_session_restore(s.get(), snapshot.data(), -1), "restore(size -1)");
  expect_invalid(lumen_session_save(nullptr, "x.snap", nullptr), "save(NULL session)");
  expect_invalid(lumen_session_save(s.get(), nullptr, nullptr), "save(NULL path)");
  expect_invalid(lumen_session_load(nullptr, "x.snap"), "load(NULL session)");
  expect_invalid(lumen_session_load(s.get(), nullptr), "load(NULL path)");

  lumen_snapshot_options bad = options;
  bad.struct_size = 0;
  expect_invalid(lumen_session_snapshot_size(s.get(), &bad, &size), "size(struct_size 0)");
  expect_invalid(lumen_session_snapshot(s.get(), &bad, buffer.data(), buffer.size(), &size),
                 "snapshot(struct_size 0)");
  bad = options;
  bad.state_dtype = LUMEN_DTYPE_FLOAT16;
  expect_invalid(lumen_session_snapshot_size(s.get(), &bad, &size), "size(FLOAT16)");
  expect_invalid(lumen_session_save(s.get(), "x.snap", &bad), "save(FLOAT16)");
  bad.state_dtype = 99;
  expect_invalid(lumen_session_snapshot(s.get(), &bad, buffer.data(), buffer.size(), &size),
                 "snapshot(dtype 99)");
  CHECK(SameBits(before, Capture(s.get(), stack.model.get())));

  // NULL options mean the defaults.
  int64_t default_size = 0;
  REQUIRE_OK(lumen_session_snapshot_size(s.get(), nullptr, &default_size));
  CHECK(default_size == static_cast<int64_t>(snapshot.size()));
  REQUIRE_OK(lumen_session_snapshot(s.get(), nullptr, buffer.data(), buffer.size(), nullptr));
  CHECK(buffer == snapshot);
  // A zero-length restore from a valid pointer is a truncated snapshot, not a bad argument.
  CHECK(lumen_session_restore(s.get(), snapshot.data(), 0) == LUMEN_ERROR_CORRUPT_SNAPSHOT);
  CHECK(SameBits(before, Capture(s.get(), stack.model.get())));
}

// ---------------------------------------------------------------------------------------------
// Fork
// ---------------------------------------------------------------------------------------------

TEST_CASE("fork, diverge, then restore the parent's snapshot into the fork", "[snapshot][fork]") {
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(81);
  SessionPtr parent = stack.NewSession();
  AddHistory(stack, {parent.get()}, rng);
  lumen_session* child_raw = nullptr;
  REQUIRE_OK(lumen_session_fork(parent.get(), &child_raw));
  SessionPtr child(child_raw);
  const Bytes parent_snapshot = TakeSnapshot(parent.get());
  CHECK(TakeSnapshot(child.get()) == parent_snapshot);  // a fork snapshots like its parent

  // The child goes its own way.
  AddHistory(stack, {child.get()}, rng, 30);
  const Bytes child_snapshot = TakeSnapshot(child.get());
  REQUIRE(child_snapshot != parent_snapshot);

  REQUIRE_OK(Restore(child.get(), parent_snapshot));
  CHECK(SameBits(Capture(parent.get(), stack.model.get()),
                 Capture(child.get(), stack.model.get())));
  CHECK(TakeSnapshot(child.get()) == parent_snapshot);
  for (int32_t i = 0; i < stack.num_layers(); ++i) {
    const Tokens t = RandomTokens(stack.layers[i], 9, rng);
    CHECK(SameBits(Run(parent.get(), i, t, Path::kPrefill),
                   Run(child.get(), i, t, Path::kPrefill)));
  }

  // The parent can take the child's diverged snapshot too; the fork of a restored session is
  // the same again.
  REQUIRE_OK(Restore(parent.get(), child_snapshot));
  CHECK(TakeSnapshot(parent.get()) == child_snapshot);
  lumen_session* grandchild_raw = nullptr;
  REQUIRE_OK(lumen_session_fork(parent.get(), &grandchild_raw));
  SessionPtr grandchild(grandchild_raw);
  CHECK(TakeSnapshot(grandchild.get()) == child_snapshot);
}

// ---------------------------------------------------------------------------------------------
// Convolution windows and older formats
// ---------------------------------------------------------------------------------------------

TEST_CASE("conv windows and Mamba-2 layers round-trip and the session continues exactly",
          "[snapshot][conv]") {
  const int32_t state_dtype = GENERATE(LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_BFLOAT16);
  std::vector<LayerDesc> layers = {GatedDeltaNet(kDims), Mamba2({1, 4, 16, 8})};
  for (LayerDesc& l : layers) l.options.state_dtype = state_dtype;
  const Stack stack(layers);
  std::mt19937 rng(61);
  SessionPtr saved = stack.NewSession(), never_saved = stack.NewSession();
  AddHistory(stack, {saved.get(), never_saved.get()}, rng);
  const SessionState original = Capture(saved.get(), stack.model.get());
  // Matrix and three windows per layer, all holding something.
  REQUIRE(original.parts.size() == 8);
  for (const auto& part : original.parts) {
    CHECK(std::any_of(part.begin(), part.end(), [](float x) { return x != 0.0f; }));
  }

  const Bytes snapshot = TakeSnapshot(saved.get());
  SessionPtr restored = stack.NewSession();
  REQUIRE_OK(Restore(restored.get(), snapshot));
  CHECK(SameBits(original, Capture(restored.get(), stack.model.get())));
  CHECK(TakeSnapshot(restored.get()) == snapshot);

  // Inside the first W-1 tokens after the restore the windows are what the outputs read.
  for (int32_t i = 0; i < stack.num_layers(); ++i) {
    INFO("layer " << i);
    for (int32_t n : {1, 2, 40}) {
      const Tokens t = RandomTokens(stack.layers[i], n, rng);
      const Path path = n == 1 ? Path::kStep : Path::kPrefill;
      CHECK(SameBits(Run(restored.get(), i, t, path), Run(never_saved.get(), i, t, path)));
    }
  }
  CHECK(SameBits(Capture(restored.get(), stack.model.get()),
                 Capture(never_saved.get(), stack.model.get())));

  // Through a file too.
  const TempDir dir;
  const std::string path = (dir.path() / "conv.snap").string();
  REQUIRE_OK(lumen_session_save(restored.get(), path.c_str(), nullptr));
  SessionPtr loaded = stack.NewSession();
  REQUIRE_OK(lumen_session_load(loaded.get(), path.c_str()));
  CHECK(SameBits(Capture(restored.get(), stack.model.get()),
                 Capture(loaded.get(), stack.model.get())));
}

}  // namespace
}  // namespace lumen_snapshot_test
