// Snapshot files: loads read regular files only and never stream a file whose size no
// snapshot of the model has; a killed save leaves no temporary file past the next save to
// the same path; a save through a symbolic link replaces the link's target; a 250-byte file
// name works. (Each used to fail: a FIFO blocked the load forever, a 100 GiB sparse file was
// read whole, temporary files piled up, links were replaced, long names gave ENAMETOOLONG.)

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <string>
#include <thread>
#include <utility>

#include "tests/reference/session_fixture.h"
#include "tests/reference/temp_dir.h"

namespace lumen_fixture {
namespace {

namespace fs = std::filesystem;

using lumen_test::TempDir;

Bytes ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Bytes this process has read through read() and its kin so far (Linux task I/O accounting).
int64_t BytesReadSoFar() {
  std::ifstream in("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (in >> key >> value) {
    if (key == "rchar:") return value;
  }
  FAIL("no rchar in /proc/self/io");
  return 0;
}

// The temporary file of every save to `target` (documented in lumen.h): ".lumen-tmp-" and
// the 16 hex digits of XXH3-64 of the target's file name.
fs::path TemporaryPathFor(const fs::path& target) {
  const std::string name = target.filename().string();
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(name.data(), name.size())));
  return target.parent_path() / (std::string(".lumen-tmp-") + hex);
}

// A few MiB of state, so that a save takes long enough to be killed in the middle of it.
std::vector<RefLayer> LargeLayers() {
  RefLayer layer = SmallLayer(LUMEN_FAMILY_DELTA_NET);
  layer.num_heads = 4;
  layer.num_value_heads = 8;
  layer.key_dim = 128;
  layer.value_dim = 128;
  return {layer, layer, layer, layer};  // 4 x 512 KiB
}

TEST_CASE("loading something other than a regular file fails at once with IO",
          "[files]") {
  const Stack stack({SmallLayer(LUMEN_FAMILY_DELTA_NET)});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 3, 1);
  const SessionState before = Capture(session.get(), stack.layers);
  TempDir dir;

  SECTION("a FIFO, which would block until a writer comes") {
    const fs::path fifo = dir.path() / "fifo.lumen";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    auto load = std::async(std::launch::async, [&] {
      const lumen_status status = lumen_session_load(session.get(), fifo.c_str());
      return std::make_pair(status, std::string(lumen_last_error_message()));
    });
    if (load.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
      // Blocked in open: a writer that opens and closes lets it return.
      const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (writer >= 0) ::close(writer);
      FAIL_CHECK("lumen_session_load blocked on a FIFO");
    }
    const auto [status, message] = load.get();
    INFO(lumen_status_string(status) << ": " << message);
    CHECK(status == LUMEN_ERROR_IO);
    CHECK(message.find("not a regular file") != std::string::npos);
  }
  SECTION("a character device") {
    const lumen_status status = lumen_session_load(session.get(), "/dev/null");
    const std::string message = lumen_last_error_message();
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_IO);
    CHECK(message.find("not a regular file") != std::string::npos);
  }
  SECTION("a directory") {
    const lumen_status status = lumen_session_load(session.get(), dir.path().c_str());
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_IO);
  }
  CHECK(Capture(session.get(), stack.layers).SameBits(before));
}

TEST_CASE("a file no snapshot of the model can be is rejected after reading its head only",
          "[files]") {
  const Stack stack({SmallLayer(LUMEN_FAMILY_GLA), LargeLayers()[0]});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 3, 2);
  const SessionState before = Capture(session.get(), stack.layers);
  TempDir dir;
  const fs::path path = dir.path() / "huge.lumen";
  REQUIRE_OK(lumen_session_save(session.get(), path.c_str(), nullptr));
  const int64_t head_bytes = kHeaderBytes + 2 * kRecordBytes;

  // A valid head followed by a sparse 100 GiB, or by three times the snapshot's size:
  // nothing but the head may be read.
  for (int64_t size : {int64_t(fs::file_size(path)) * 3, int64_t{100} << 30}) {
    INFO("file of " << size << " bytes");
    REQUIRE(::truncate(path.c_str(), size) == 0);
    const int64_t read_before = BytesReadSoFar();
    const lumen_status status = lumen_session_load(session.get(), path.c_str());
    const int64_t read = BytesReadSoFar() - read_before;
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_CORRUPT_SNAPSHOT);
    CHECK(read < head_bytes + 4096);  // the head, and /proc/self/io itself
    CHECK(Capture(session.get(), stack.layers).SameBits(before));
  }
}

// Saves `session` to `path` in a child process, again and again, and kills it after `delay`.
void KillDuringSaves(const lumen_session* session, const fs::path& path,
                     std::chrono::microseconds delay) {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    for (;;) lumen_session_save(session, path.c_str(), nullptr);
  }
  std::this_thread::sleep_for(delay);
  ::kill(child, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
}

TEST_CASE("a save killed midway leaves no temporary file past the next save", "[files]") {
  const Stack stack(LargeLayers());
  SessionPtr saved = stack.NewSession(), other = stack.NewSession();
  AddHistory(stack, saved.get(), 4, 3);
  AddHistory(stack, other.get(), 5, 4);
  const Bytes snapshot = TakeSnapshot(saved.get());
  TempDir dir;
  const fs::path path = dir.path() / "session.lumen";
  const std::string temporary = TemporaryPathFor(path).filename().string();

  const uint32_t seed = lumen_test::TestSeed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  int left_behind = 0;
  for (int kill = 0; kill < 12; ++kill) {
    KillDuringSaves(other.get(), path, std::chrono::microseconds(500 + rng() % 20000));
    // A killed save may leave its temporary file, under the one name every save uses.
    std::vector<std::string> entries = dir.Entries();
    INFO("kill " << kill);
    for (const std::string& name : entries) CHECK((name == "session.lumen" || name == temporary));
    left_behind += std::count(entries.begin(), entries.end(), temporary);
    // The file itself is the old one or the new one, never torn.
    if (fs::exists(path)) {
      SessionPtr check = stack.NewSession();
      REQUIRE_OK(lumen_session_load(check.get(), path.c_str()));
    }
    // The next save removes (reuses) it.
    REQUIRE_OK(lumen_session_save(saved.get(), path.c_str(), nullptr));
    CHECK(dir.Entries() == std::vector<std::string>{"session.lumen"});
    CHECK(ReadFile(path) == snapshot);
  }
  WARN(left_behind << " of 12 kills left a temporary file that the next save removed");
}

TEST_CASE("a temporary file left by a killed save is taken over by the next save", "[files]") {
  const Stack stack({SmallLayer(LUMEN_FAMILY_DELTA_NET)});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 3, 5);
  TempDir dir;
  const fs::path path = dir.path() / "session.lumen";
  const fs::path temporary = TemporaryPathFor(path);
  // As a killed save leaves it (here longer than the snapshot, and readable by all).
  WriteFile(temporary, std::string(100000, 'x'));
  fs::permissions(temporary, fs::perms::owner_read | fs::perms::owner_write |
                                 fs::perms::group_read | fs::perms::others_read);
  REQUIRE_OK(lumen_session_save(session.get(), path.c_str(), nullptr));
  CHECK(dir.Entries() == std::vector<std::string>{"session.lumen"});
  CHECK(ReadFile(path) == TakeSnapshot(session.get()));
  CHECK((fs::status(path).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write));
}

TEST_CASE("saves from two threads to one path each succeed and leave one whole file",
          "[files]") {
  const Stack stack({SmallLayer(LUMEN_FAMILY_DELTA_NET)});
  SessionPtr a = stack.NewSession(), b = stack.NewSession();
  AddHistory(stack, a.get(), 3, 6);
  AddHistory(stack, b.get(), 4, 7);
  TempDir dir;
  const fs::path path = dir.path() / "session.lumen";
  auto save_many = [&](const lumen_session* session) {
    int failures = 0;
    for (int i = 0; i < 20; ++i) {
      failures += lumen_session_save(session, path.c_str(), nullptr) != LUMEN_OK;
    }
    return failures;
  };
  auto first = std::async(std::launch::async, save_many, a.get());
  auto second = std::async(std::launch::async, save_many, b.get());
  CHECK(first.get() == 0);
  CHECK(second.get() == 0);
  const Bytes file = ReadFile(path);
  CHECK((file == TakeSnapshot(a.get()) || file == TakeSnapshot(b.get())));
  CHECK(dir.Entries() == std::vector<std::string>{"session.lumen"});
}

TEST_CASE("saving through a symbolic link replaces its target and keeps the link", "[files]") {
  const Stack stack({SmallLayer(LUMEN_FAMILY_DELTA_NET)});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 3, 8);
  const Bytes snapshot = TakeSnapshot(session.get());
  TempDir dir;

  SECTION("a relative link, and a chain of two") {
    WriteFile(dir.path() / "real.lumen", "old");
    fs::create_symlink("real.lumen", dir.path() / "link.lumen");
    fs::create_symlink("link.lumen", dir.path() / "chain.lumen");
    for (const char* name : {"link.lumen", "chain.lumen"}) {
      INFO(name);
      WriteFile(dir.path() / "real.lumen", "old");
      REQUIRE_OK(lumen_session_save(session.get(), (dir.path() / name).c_str(), nullptr));
      CHECK(fs::is_symlink(dir.path() / "link.lumen"));
      CHECK(fs::is_symlink(dir.path() / "chain.lumen"));
      CHECK(ReadFile(dir.path() / "real.lumen") == snapshot);
      CHECK(dir.Entries() ==
            std::vector<std::string>{"chain.lumen", "link.lumen", "real.lumen"});
    }
  }
  SECTION("an absolute link into another directory") {
    fs::create_directory(dir.path() / "store");
    fs::create_directory(dir.path() / "work");
    const fs::path real = dir.path() / "store" / "real.lumen";
    WriteFile(real, "old");
    fs::create_symlink(real, dir.path() / "work" / "link.lumen");
    REQUIRE_OK(lumen_session_save(session.get(), (dir.path() / "work" / "link.lumen").c_str(),
                                  nullptr));
    CHECK(fs::is_symlink(dir.path() / "work" / "link.lumen"));
    CHECK(ReadFile(real) == snapshot);
    CHECK(dir.Entries(dir.path() / "store") == std::vector<std::string>{"real.lumen"});
    CHECK(dir.Entries(dir.path() / "work") == std::vector<std::string>{"link.lumen"});
  }
  SECTION("a dangling link: its target is created") {
    fs::create_symlink("new.lumen", dir.path() / "link.lumen");
    REQUIRE_OK(lumen_session_save(session.get(), (dir.path() / "link.lumen").c_str(), nullptr));
    CHECK(fs::is_symlink(dir.path() / "link.lumen"));
    CHECK(ReadFile(dir.path() / "new.lumen") == snapshot);
    SessionPtr loaded = stack.NewSession();
    REQUIRE_OK(lumen_session_load(loaded.get(), (dir.path() / "link.lumen").c_str()));
    CHECK(Capture(loaded.get(), stack.layers).SameBits(Capture(session.get(), stack.layers)));
  }
  SECTION("a loop of links gives IO") {
    fs::create_symlink("b.lumen", dir.path() / "a.lumen");
    fs::create_symlink("a.lumen", dir.path() / "b.lumen");
    const lumen_status status =
        lumen_session_save(session.get(), (dir.path() / "a.lumen").c_str(), nullptr);
    INFO(Describe(status));
    CHECK(status == LUMEN_ERROR_IO);
    CHECK(dir.Entries() == std::vector<std::string>{"a.lumen", "b.lumen"});
  }
}

TEST_CASE("a 250-byte file name saves and loads", "[files]") {
  const Stack stack({SmallLayer(LUMEN_FAMILY_DELTA_NET)});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 3, 9);
  TempDir dir;
  const std::string name = std::string(244, 'n') + ".lumen";
  REQUIRE(name.size() == 250);
  const fs::path path = dir.path() / name;
  REQUIRE_OK(lumen_session_save(session.get(), path.c_str(), nullptr));
  CHECK(dir.Entries() == std::vector<std::string>{name});
  SessionPtr loaded = stack.NewSession();
  REQUIRE_OK(lumen_session_load(loaded.get(), path.c_str()));
  CHECK(Capture(loaded.get(), stack.layers).SameBits(Capture(session.get(), stack.layers)));
}

}  // namespace
}  // namespace lumen_fixture
