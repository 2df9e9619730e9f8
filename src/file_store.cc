#include "src/file_store.h"

// Each key is one file, "<key, %XX-escaped>.lumen-store": a small envelope (the key, its
// version and expiry, sealed by a checksum of their own) followed by the session's snapshot,
// which carries its own checksum and model fingerprint. A save holds the key's lock file
// (flock) while it reads the stored version, compares it, writes a temporary file, flushes
// it and renames it over the key's file, so that saves to one key from several processes
// take turns and a reader, which takes no lock, sees the old file or the new one.

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/checksum.h"
#include "src/snapshot.h"
#include "src/status.h"

namespace lumen {
namespace {

constexpr char kMagic[8] = {'L', 'U', 'M', 'N', 'S', 'T', 'O', 'R'};
constexpr uint32_t kEnvelopeFormat = 1;
// magic, u32 format, u32 key bytes, i64 version, i64 expiry (Unix ms, 0 = never); then the
// key, then the XXH3-64 of everything before it.
constexpr size_t kFixedBytes = 8 + 4 + 4 + 8 + 8;
constexpr size_t kSealBytes = 8;
// Longest escaped key kept whole in a file name; longer ones are cut and end in a hash.
constexpr size_t kMaxNameKeyBytes = 180;

struct Envelope {
  int64_t version = 0;
  int64_t expires_at_ms = 0;  // 0: never
  size_t bytes = 0;           // the envelope's size; the snapshot follows
};

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::Status IoError(absl::string_view step, const std::string& path, int error) {
  return LumenError(LUMEN_ERROR_IO,
                    absl::StrCat("cannot ", step, " '", path, "': ", std::strerror(error)));
}

absl::Status Corrupt(absl::string_view what) {
  return LumenError(LUMEN_ERROR_CORRUPT_SNAPSHOT, absl::StrCat("corrupt store file: ", what));
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
  return true;
}

// The key as a file name: [A-Za-z0-9_-] kept, every other byte %XX, cut with a hash of the
// whole key appended where it would be too long for a file name.
std::string FileNameOf(const std::string& key) {
  std::string name;
  for (unsigned char c : key) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
        c == '-') {
      name.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&name, "%",
                      absl::AsciiStrToUpper(absl::StrCat(absl::Hex(c, absl::kZeroPad2))));
    }
  }
  if (name.size() > kMaxNameKeyBytes) {
    name.resize(kMaxNameKeyBytes);
    absl::StrAppend(&name, "~",
                    absl::Hex(Checksum(key.data(), static_cast<int64_t>(key.size())),
                              absl::kZeroPad16));
  }
  return name;
}

std::vector<char> MakeEnvelope(const std::string& key, int64_t version, int64_t expires_at_ms) {
  std::vector<char> out(kFixedBytes + key.size() + kSealBytes);
  const uint32_t key_bytes = static_cast<uint32_t>(key.size());
  char* p = out.data();
  std::memcpy(p, kMagic, 8);
  std::memcpy(p + 8, &kEnvelopeFormat, 4);
  std::memcpy(p + 12, &key_bytes, 4);
  std::memcpy(p + 16, &version, 8);
  std::memcpy(p + 24, &expires_at_ms, 8);
  std::memcpy(p + kFixedBytes, key.data(), key.size());
  const uint64_t seal = Checksum(p, static_cast<int64_t>(kFixedBytes + key.size()));
  std::memcpy(p + kFixedBytes + key.size(), &seal, kSealBytes);
  return out;
}

// Reads the envelope at the start of `data`, checking that it is whole, sealed and `key`'s.
absl::StatusOr<Envelope> ReadEnvelope(const char* data, size_t size, const std::string& key) {
  if (size < kFixedBytes || std::memcmp(data, kMagic, 8) != 0) {
    return Corrupt("it does not start with a lumen store envelope");
  }
  uint32_t format = 0, key_bytes = 0;
  std::memcpy(&format, data + 8, 4);
  std::memcpy(&key_bytes, data + 12, 4);
  if (key_bytes > kMaxStoreKeyBytes || size < kFixedBytes + key_bytes + kSealBytes) {
    return Corrupt("its envelope is truncated or damaged");
  }
  uint64_t seal = 0;
  std::memcpy(&seal, data + kFixedBytes + key_bytes, kSealBytes);
  if (seal != Checksum(data, static_cast<int64_t>(kFixedBytes + key_bytes))) {
    return Corrupt("its envelope's checksum does not match");
  }
  if (format != kEnvelopeFormat) {
    return LumenError(LUMEN_ERROR_SNAPSHOT_VERSION,
                      absl::StrCat("the store file's envelope has format ", format,
                                   "; this library reads format ", kEnvelopeFormat));
  }
  if (absl::string_view(data + kFixedBytes, key_bytes) != key) {
    return Corrupt("it holds the value of another key");
  }
  Envelope envelope;
  std::memcpy(&envelope.version, data + 16, 8);
  std::memcpy(&envelope.expires_at_ms, data + 24, 8);
  envelope.bytes = kFixedBytes + key_bytes + kSealBytes;
  if (envelope.version < 1 || envelope.expires_at_ms < 0) {
    return Corrupt("its envelope's version or expiry is out of range");
  }
  return envelope;
}

bool Expired(const Envelope& envelope) {
  return envelope.expires_at_ms != 0 && envelope.expires_at_ms <= NowMs();
}

// A file's bytes, at most `limit` of them (the whole file by default); NOT_FOUND when there
// is no such file.
absl::StatusOr<std::vector<char>> ReadFileStart(const std::string& path,
                                               int64_t limit = INT64_MAX) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return LumenError(LUMEN_ERROR_NOT_FOUND, "the store holds nothing under this key");
    }
    return IoError("open", path, errno);
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info;
  if (::fstat(fd, &info) != 0) return IoError("stat", path, errno);
  if (!S_ISREG(info.st_mode)) {
    return LumenError(LUMEN_ERROR_IO, absl::StrCat("'", path, "' is not a regular file"));
  }
  std::vector<char> bytes(static_cast<size_t>(std::min<int64_t>(info.st_size, limit)));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return IoError("read", path, errno);
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  bytes.resize(done);
  return bytes;
}

// Holds a key's lock file locked (flock) until destroyed.
class KeyLock {
 public:
  ~KeyLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  absl::Status Acquire(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd_ < 0) return IoError("open the lock file", path, errno);
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) return IoError("lock", path, errno);
    }
    return absl::OkStatus();
  }

 private:
  int fd_ = -1;
};

absl::Status SyncDirectory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError("open the directory", directory, errno);
  const bool synced = ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  if (!synced) return IoError("flush the directory", directory, error);
  return absl::OkStatus();
}

class FileStore final : public SessionStore {
 public:
  FileStore(std::string uri, std::string directory)
      : uri_(std::move(uri)), directory_(std::move(directory)) {}

  const std::string& uri() const override { return uri_; }

  absl::StatusOr<int64_t> Save(const std::string& key, const Session& session,
                               const StoreSave& save) override {
    const std::string name = FileNameOf(key);
    KeyLock lock;
    if (absl::Status s = lock.Acquire(PathOf("." + name + ".lock")); !s.ok()) {
      return AboutKey(*this, key, s);
    }
    absl::StatusOr<int64_t> stored = StoredVersion(key, PathOf(name + ".lumen-store"),
                                                   save.expected_version != kAnyVersion);
    if (!stored.ok()) return AboutKey(*this, key, stored.status());
    if (save.expected_version != kAnyVersion && save.expected_version != *stored) {
      return VersionConflict(*this, key, save.expected_version, *stored);
    }
    const int64_t version = *stored + 1;
    const int64_t expires_at = save.expiry_ms > 0 ? NowMs() + save.expiry_ms : 0;
    std::vector<char> bytes = MakeEnvelope(key, version, expires_at);
    const size_t envelope_bytes = bytes.size();
    const int64_t snapshot_bytes = SnapshotSize(session.model(), save.dtype);
    bytes.resize(envelope_bytes + static_cast<size_t>(snapshot_bytes));
    absl::Status status =
        WriteSnapshot(session, save.dtype, bytes.data() + envelope_bytes, snapshot_bytes);
    if (status.ok()) {
      status = Replace(PathOf(name + ".lumen-store"), PathOf("." + name + ".tmp"), bytes);
    }
    if (!status.ok()) return AboutKey(*this, key, status);
    return version;
  }

  absl::StatusOr<int64_t> Load(const std::string& key, Session& session) override {
    absl::StatusOr<std::vector<char>> bytes =
        ReadFileStart(PathOf(FileNameOf(key) + ".lumen-store"));
    if (!bytes.ok()) return AboutKey(*this, key, bytes.status());
    absl::StatusOr<Envelope> envelope = ReadEnvelope(bytes->data(), bytes->size(), key);
    if (!envelope.ok()) return AboutKey(*this, key, envelope.status());
    if (Expired(*envelope)) return AboutKey(*this, key, ExpiredError(*envelope));
    absl::Status status = RestoreSnapshot(session, bytes->data() + envelope->bytes,
                                          static_cast<int64_t>(bytes->size() - envelope->bytes));
    if (!status.ok()) return AboutKey(*this, key, status);
    return envelope->version;
  }

  absl::Status Remove(const std::string& key) override {
    const std::string name = FileNameOf(key);
    KeyLock lock;
    if (absl::Status s = lock.Acquire(PathOf("." + name + ".lock")); !s.ok()) {
      return AboutKey(*this, key, s);
    }
    const std::string path = PathOf(name + ".lumen-store");
    absl::StatusOr<int64_t> stored = StoredVersion(key, path, /*strict=*/false);
    if (!stored.ok()) return AboutKey(*this, key, stored.status());
    // An expired value is removed all the same, and reported as the nothing it is.
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return AboutKey(*this, key, IoError("remove", path, errno));
    }
    if (absl::Status s = SyncDirectory(directory_); !s.ok()) return AboutKey(*this, key, s);
    if (*stored == 0) {
      return AboutKey(*this, key, LumenError(LUMEN_ERROR_NOT_FOUND,
                                             "the store holds nothing under this key"));
    }
    return absl::OkStatus();
  }

 private:
  std::string PathOf(const std::string& name) const { return directory_ + "/" + name; }

  static absl::Status ExpiredError(const Envelope& envelope) {
    return LumenError(LUMEN_ERROR_NOT_FOUND,
                      absl::StrCat("the value under this key expired (at Unix time ",
                                   envelope.expires_at_ms, " ms)"));
  }

  // The version stored under the key, 0 when it holds nothing or an expired value. A file
  // whose envelope cannot be read counts as nothing when no version is expected (the save
  // replaces it), and is an error when one is (strict), since its version is unknown.
  absl::StatusOr<int64_t> StoredVersion(const std::string& key, const std::string& path,
                                        bool strict) {
    // The envelope is all a version needs: never more than its largest size.
    absl::StatusOr<std::vector<char>> bytes =
        ReadFileStart(path, kFixedBytes + kMaxStoreKeyBytes + kSealBytes);
    if (!bytes.ok()) {
      return LumenStatusOf(bytes.status()) == LUMEN_ERROR_NOT_FOUND
                 ? absl::StatusOr<int64_t>(0)
                 : bytes.status();
    }
    absl::StatusOr<Envelope> envelope = ReadEnvelope(bytes->data(), bytes->size(), key);
    if (!envelope.ok()) {
      if (strict) return envelope.status();
      return 0;
    }
    return Expired(*envelope) ? 0 : envelope->version;
  }

  // Writes `bytes` to `temporary`, flushes it, renames it over `target` and flushes the
  // directory; on any failure removes the temporary file and leaves `target` as it was.
  absl::Status Replace(const std::string& target, const std::string& temporary,
                       const std::vector<char>& bytes) {
    const int fd =
        ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return IoError("create the temporary file", temporary, errno);
    absl::Status status;
    if (!WriteAll(fd, bytes.data(), bytes.size())) {
      status = IoError("write", temporary, errno);
    } else if (::fsync(fd) != 0) {
      status = IoError("flush", temporary, errno);
    }
    if (::close(fd) != 0 && status.ok()) status = IoError("close", temporary, errno);
    if (status.ok() && ::rename(temporary.c_str(), target.c_str()) != 0) {
      status = IoError("rename over", target, errno);
    }
    if (!status.ok()) {
      ::unlink(temporary.c_str());
      return status;
    }
    return SyncDirectory(directory_);
  }

  std::string uri_;
  std::string directory_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SessionStore>> OpenFileStore(const std::string& uri) {
  std::string path = uri.substr(std::strlen("file://"));
  if (absl::StartsWith(path, "localhost/")) path = path.substr(std::strlen("localhost"));
  if (path.empty() || path.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "store URI '", uri, "': a file store's URI is file:// and an absolute path, "
                            "e.g. file:///var/lib/sessions"));
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return IoError("create the store directory", path, errno);
  }
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) return IoError("inspect the store directory", path, errno);
  if (!S_ISDIR(info.st_mode)) {
    return LumenError(LUMEN_ERROR_IO,
                      absl::StrCat("store URI '", uri, "': '", path, "' is not a directory"));
  }
  return std::unique_ptr<SessionStore>(new FileStore(uri, path));
}

}  // namespace lumen
