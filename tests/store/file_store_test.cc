// The file:// store's own cases: what a damaged file gives, and failures injected into the
// directory (a full disk, a file that cannot be created, a read-only directory) leave the
// stored value and the session as they were, each reported.

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "tests/store/store_test_util.h"

namespace lumen_store_test {
namespace {

struct FileStoreCase {
  TempDir dir;
  Stack stack{MixedLayers(kDims)};
  std::mt19937 rng{2911};
  SessionPtr saved = stack.NewSession();
  SessionPtr target = stack.NewSession();
  StorePtr store;

  FileStoreCase() {
    AddHistory(stack, {saved.get()}, rng);
    AddHistory(stack, {target.get()}, rng, 9);
    store = OpenStore(uri());
    REQUIRE_OK(Save(store.get(), "chat", saved.get()));
  }
  std::string uri() const { return "file://" + dir.path().string(); }
  fs::path file() const { return dir.path() / "chat.lumen-store"; }
  // The key's value is still the one first saved: loads, equal bit for bit, version 1.
  void ExpectValueIntact() {
    SessionPtr check = stack.NewSession();
    int64_t version = -1;
    REQUIRE_OK(lumen_store_load(store.get(), "chat", check.get(), &version));
    CHECK(version == 1);
    CHECK(SameBits(Capture(saved.get(), stack.model.get()),
                   Capture(check.get(), stack.model.get())));
  }
};

TEST_CASE("file store: a key is one file, owner-only, no temporary left", "[store][file]") {
  FileStoreCase c;
  CHECK(fs::exists(c.file()));
  struct stat info;
  REQUIRE(::stat(c.file().c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0600);
  for (const std::string& name : c.dir.Entries()) CHECK(name.find(".tmp") == std::string::npos);
  // Bytes outside [A-Za-z0-9_-] are escaped.
  REQUIRE_OK(Save(c.store.get(), "a/b c", c.saved.get()));
  CHECK(fs::exists(c.dir.path() / "a%2Fb%20c.lumen-store"));
}

TEST_CASE("file store: damaged files are reported and change nothing", "[store][file]") {
  FileStoreCase c;
  const Bytes good = ReadFile(c.file());
  const SessionState before = Capture(c.target.get(), c.stack.model.get());
  auto expect_corrupt = [&](const Bytes& bytes, const char* word) {
    WriteFile(c.file(), bytes);
    ExpectStatus(lumen_store_load(c.store.get(), "chat", c.target.get(), nullptr),
                 LUMEN_ERROR_CORRUPT_SNAPSHOT, {word, "chat"});
    CHECK(SameBits(before, Capture(c.target.get(), c.stack.model.get())));
  };
  Bytes flipped = good;
  flipped[flipped.size() / 2] ^= 0x10;  // inside the snapshot's payload
  expect_corrupt(flipped, "checksum");
  Bytes envelope = good;
  envelope[17] ^= 0x01;  // the version, under the envelope's own checksum
  expect_corrupt(envelope, "envelope");
  expect_corrupt(Bytes(good.begin(), good.begin() + 20), "envelope");
  expect_corrupt(Bytes(good.begin(), good.end() - 100), "corrupt");
  WriteFile(c.file(), envelope);
  // A damaged value is replaced by a save without a version check; one with a check says
  // the stored version is unknown.
  ExpectStatus(Save(c.store.get(), "chat", c.saved.get(), 1), LUMEN_ERROR_CORRUPT_SNAPSHOT);
  int64_t version = -1;
  REQUIRE_OK(Save(c.store.get(), "chat", c.saved.get(), -1, &version));
  CHECK(version == 1);
  c.ExpectValueIntact();
}

TEST_CASE("file store: a full disk keeps the old value and says why", "[store][file]") {
  FileStoreCase c;
  // RLIMIT_FSIZE makes writes past the limit fail with EFBIG, as a full disk fails them
  // with ENOSPC, without needing a small file system.
  struct sigaction ignore{}, previous{};
  ignore.sa_handler = SIG_IGN;
  REQUIRE(::sigaction(SIGXFSZ, &ignore, &previous) == 0);
  struct rlimit old_limit{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  const lumen_status status = Save(c.store.get(), "chat", c.target.get());
  const std::string message = lumen_last_error_message();
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  REQUIRE(::sigaction(SIGXFSZ, &previous, nullptr) == 0);
  INFO(lumen_status_string(status) << ": " << message);
  CHECK(status == LUMEN_ERROR_IO);
  CHECK(message.find("cannot write") != std::string::npos);
  CHECK(message.find("chat") != std::string::npos);
  for (const std::string& name : c.dir.Entries()) CHECK(name.find(".tmp") == std::string::npos);
  c.ExpectValueIntact();
}

TEST_CASE("file store: a file that cannot be created, a read-only directory",
          "[store][file]") {
  FileStoreCase c;
  SECTION("the temporary file's name is taken by a directory") {
    fs::create_directory(c.dir.path() / ".chat.tmp");
    ExpectStatus(Save(c.store.get(), "chat", c.target.get()), LUMEN_ERROR_IO,
                 {"temporary", "chat"});
    c.ExpectValueIntact();
  }
  SECTION("a read-only directory") {
    if (::geteuid() == 0) {
      WARN("running as root, which writes into read-only directories: case not checked");
      return;
    }
    REQUIRE(::chmod(c.dir.path().c_str(), 0500) == 0);
    const lumen_status status = Save(c.store.get(), "chat", c.target.get());
    const std::string message = lumen_last_error_message();
    REQUIRE(::chmod(c.dir.path().c_str(), 0700) == 0);
    INFO(message);
    CHECK(status == LUMEN_ERROR_IO);
    c.ExpectValueIntact();
  }
}

}  // namespace
}  // namespace lumen_store_test
