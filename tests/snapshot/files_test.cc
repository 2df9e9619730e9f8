// Snapshot files through the public C API: save and load round-trip (absolute and relative
// paths, fp32 and bf16), and the errors: a missing file or directory, saving onto a
// directory, replacing an older file without leaving a temporary one, oversize, empty and
// truncated files, a file of another model. (What the filesystem itself can throw at loads
// and saves is in file_edge_cases_test.cc.)

#include <catch2/catch.hpp>

#include <algorithm>
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

TEST_CASE("save and load round-trip through a file", "[snapshot][file]") {
  const int32_t dtype = GENERATE(LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_BFLOAT16);
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(71);
  SessionPtr source = stack.NewSession();
  AddHistory(stack, {source.get()}, rng);
  lumen_snapshot_options options;
  lumen_snapshot_options_init(&options);
  options.state_dtype = dtype;

  TempDir dir;
  const fs::path path = dir.path() / "session.lumen";
  REQUIRE_OK(lumen_session_save(source.get(), path.c_str(), &options));
  CHECK(ReadFile(path) == TakeSnapshot(source.get(), dtype));
  CHECK(dir.Entries() == std::vector<std::string>{"session.lumen"});

  SessionPtr loaded = stack.NewSession();
  REQUIRE_OK(lumen_session_load(loaded.get(), path.c_str()));
  const SessionState expected = dtype == LUMEN_DTYPE_FLOAT32
                                    ? Capture(source.get(), stack.model.get())
                                    : RoundedToBFloat16(Capture(source.get(), stack.model.get()));
  CHECK(SameBits(expected, Capture(loaded.get(), stack.model.get())));

  // A relative path works too (the directory of "name" is ".").
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path());
  const lumen_status relative = lumen_session_save(source.get(), "relative.lumen", &options);
  const std::string relative_message = Describe(relative);
  fs::current_path(cwd);
  INFO(relative_message);
  CHECK(relative == LUMEN_OK);
  CHECK(dir.Entries() == std::vector<std::string>{"relative.lumen", "session.lumen"});
}

TEST_CASE("file errors: missing file, missing directory, replacing, oversize",
          "[snapshot][file]") {
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(72);
  SessionPtr source = stack.NewSession(), target = stack.NewSession();
  AddHistory(stack, {source.get()}, rng);
  AddHistory(stack, {target.get()}, rng, 25);
  const Bytes snapshot = TakeSnapshot(source.get());
  const SessionState before = Capture(target.get(), stack.model.get());
  TempDir dir;

  SECTION("loading a missing file gives IO") {
    const fs::path path = dir.path() / "missing.lumen";
    const lumen_status status = lumen_session_load(target.get(), path.c_str());
    const std::string message = lumen_last_error_message();
    INFO(lumen_status_string(status) << ": " << message);
    CHECK(status == LUMEN_ERROR_IO);
    CHECK(message.find("missing.lumen") != std::string::npos);
    CHECK(SameBits(before, Capture(target.get(), stack.model.get())));
  }
  SECTION("saving into a missing directory gives IO and leaves nothing behind") {
    const fs::path path = dir.path() / "no-such-dir" / "session.lumen";
    const lumen_status status = lumen_session_save(source.get(), path.c_str(), nullptr);
    const std::string message = lumen_last_error_message();
    INFO(lumen_status_string(status) << ": " << message);
    CHECK(status == LUMEN_ERROR_IO);
    CHECK(!message.empty());
    CHECK(dir.Entries().empty());
    CHECK(!fs::exists(dir.path() / "no-such-dir"));
  }
  SECTION("saving onto a directory gives IO and removes its temporary file") {
    fs::create_directory(dir.path() / "taken");
    const fs::path path = dir.path() / "taken";
    const lumen_status status = lumen_session_save(source.get(), path.c_str(), nullptr);
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_IO);
    CHECK(dir.Entries() == std::vector<std::string>{"taken"});
    CHECK(fs::is_empty(path));
  }
  SECTION("saving over an existing file replaces it and leaves no temporary file") {
    const fs::path path = dir.path() / "session.lumen";
    WriteFile(path, Bytes(100000, 'x'));  // an old, longer file
    REQUIRE_OK(lumen_session_save(source.get(), path.c_str(), nullptr));
    CHECK(ReadFile(path) == snapshot);
    // Again, over a valid snapshot of another session.
    REQUIRE_OK(lumen_session_save(target.get(), path.c_str(), nullptr));
    CHECK(ReadFile(path) == TakeSnapshot(target.get()));
    REQUIRE_OK(lumen_session_save(source.get(), path.c_str(), nullptr));
    CHECK(ReadFile(path) == snapshot);
    for (const std::string& name : dir.Entries()) {
      INFO(name);
      CHECK(name.find(".tmp-") == std::string::npos);
    }
    CHECK(dir.Entries() == std::vector<std::string>{"session.lumen"});
  }
  SECTION("loading a file larger than any snapshot gives CORRUPT") {
    const fs::path path = dir.path() / "big.lumen";
    Bytes bigger = snapshot;
    bigger.push_back(0);
    WriteFile(path, bigger);
    ExpectRejected(target.get(), stack.model.get(), bigger, LUMEN_ERROR_CORRUPT_SNAPSHOT);
    lumen_status status = lumen_session_load(target.get(), path.c_str());
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_CORRUPT_SNAPSHOT);
    WriteFile(path, Bytes(1 << 20, 0));  // 1 MiB of zeros
    status = lumen_session_load(target.get(), path.c_str());
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_CORRUPT_SNAPSHOT);
    CHECK(SameBits(before, Capture(target.get(), stack.model.get())));
  }
  SECTION("loading an empty file gives CORRUPT") {
    // Like restore(data, 0): a truncated snapshot, not a bad argument.
    const fs::path path = dir.path() / "empty.lumen";
    WriteFile(path, Bytes());
    const lumen_status status = lumen_session_load(target.get(), path.c_str());
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_CORRUPT_SNAPSHOT);
    CHECK(SameBits(before, Capture(target.get(), stack.model.get())));
  }
  SECTION("loading a truncated file gives CORRUPT") {
    const fs::path path = dir.path() / "short.lumen";
    for (size_t length : {size_t{1}, size_t{7}, snapshot.size() / 2, snapshot.size() - 1}) {
      WriteFile(path, Bytes(snapshot.begin(), snapshot.begin() + length));
      const lumen_status status = lumen_session_load(target.get(), path.c_str());
      INFO("length " << length << ": " << Describe(status));
      CHECK(status == LUMEN_ERROR_CORRUPT_SNAPSHOT);
    }
    CHECK(SameBits(before, Capture(target.get(), stack.model.get())));
  }
  SECTION("loading a snapshot file of another model gives MODEL_MISMATCH") {
    Dims d = kDims;
    d.v = 4;
    const Stack other(MixedLayers(d));
    SessionPtr s = other.NewSession();
    const fs::path path = dir.path() / "other.lumen";
    REQUIRE_OK(lumen_session_save(s.get(), path.c_str(), nullptr));
    const lumen_status status = lumen_session_load(target.get(), path.c_str());
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_MODEL_MISMATCH);
    CHECK(SameBits(before, Capture(target.get(), stack.model.get())));
  }
}

}  // namespace
}  // namespace lumen_snapshot_test
