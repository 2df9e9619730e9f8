#include "src/snapshot_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/checksum.h"
#include "src/snapshot_format.h"
#include "src/status.h"

namespace lumen {
namespace {

absl::Status IoError(absl::string_view step, const std::string& path, int error) {
  return LumenError(LUMEN_ERROR_IO,
                    absl::StrCat("cannot ", step, " '", path, "': ", std::strerror(error)));
}

// Writes all of data, retrying short writes and interrupted calls.
bool WriteAll(int fd, const char* data, int64_t size) {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, static_cast<size_t>(size));
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += written;
    size -= written;
  }
  return true;
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string BaseNameOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The file a save replaces: `path` with every symbolic link along the chain of the last
// component resolved, so that a link keeps pointing at the saved file (as editors and
// databases do). A path that does not exist yet is the file to create.
absl::StatusOr<std::string> ResolveLinks(const std::string& path) {
  constexpr int kMaxLinks = 40;  // Linux's limit on links followed in one lookup
  std::string current = path;
  for (int links = 0; links <= kMaxLinks; ++links) {
    struct stat info;
    if (::lstat(current.c_str(), &info) != 0) {
      if (errno == ENOENT) return current;
      return IoError("inspect", current, errno);
    }
    if (!S_ISLNK(info.st_mode)) return current;
    std::string target(PATH_MAX, '\0');
    const ssize_t length = ::readlink(current.c_str(), target.data(), target.size());
    if (length < 0) return IoError("read the link", current, errno);
    if (length == static_cast<ssize_t>(target.size())) {
      return IoError("read the link", current, ENAMETOOLONG);
    }
    target.resize(static_cast<size_t>(length));
    const bool absolute = !target.empty() && target.front() == '/';
    current = absolute ? target : DirectoryOf(current) + "/" + target;
  }
  return IoError("resolve the links of", path, ELOOP);
}

// The temporary file of every save to `target`, beside it: a fixed name derived from the
// target's, so that the next save to the same path reuses, and so removes, the file a
// killed save left. It is short (27 bytes), so it fits wherever the target's name does.
std::string TemporaryPathFor(const std::string& target) {
  const std::string name = BaseNameOf(target);
  const uint64_t hash = Checksum(name.data(), static_cast<int64_t>(name.size()));
  const std::string temporary = absl::StrCat(".lumen-tmp-", absl::Hex(hash, absl::kZeroPad16));
  const std::string directory = DirectoryOf(target);
  return target.find('/') == std::string::npos ? temporary : directory + "/" + temporary;
}

// The temporary file of a save, held exclusively (flock) for the save's duration: readable
// and writable by its owner only, as a conversation's state should be. Closed, and removed
// unless renamed, on every early return.
class TemporaryFile {
 public:
  explicit TemporaryFile(std::string path) : path_(std::move(path)) {}
  ~TemporaryFile() {
    if (fd_ >= 0 && !renamed_) ::unlink(path_.c_str());
    if (fd_ >= 0) ::close(fd_);
  }

  // Opens the file, creating it or taking over one left by a killed save, and waits until
  // no other save to the same target holds it. Returns false with errno set.
  bool Open() {
    for (;;) {
      const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0) return false;
      // Waits for a save in progress. A file system without flock gives up the guard
      // against two saves to one path at once, not the save.
      while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
      }
      // The name may have moved on while we waited: the holder renamed its file over the
      // target, or another save made a new one. Then the file we locked is not ours: retry.
      struct stat locked, named;
      const bool opened = ::fstat(fd, &locked) == 0;
      const bool named_now = opened && ::stat(path_.c_str(), &named) == 0;
      if (!opened || (!named_now && errno != ENOENT)) {
        const int error = errno;
        ::close(fd);
        errno = error;
        return false;
      }
      if (!named_now || locked.st_dev != named.st_dev || locked.st_ino != named.st_ino) {
        ::close(fd);
        continue;
      }
      fd_ = fd;
      // Whatever it holds is a killed save's leftover: start empty, owner-only.
      return ::ftruncate(fd_, 0) == 0 && ::fchmod(fd_, 0600) == 0;
    }
  }
  bool RenameTo(const std::string& target) {
    renamed_ = ::rename(path_.c_str(), target.c_str()) == 0;
    return renamed_;
  }
  // Closes the file, which releases the lock: only once it is renamed, so that no other
  // save takes it over before.
  bool Close() { return ::close(std::exchange(fd_, -1)) == 0; }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  bool renamed_ = false;
};

// Reads up to `size` bytes, retrying short reads; fewer only at the end of the file.
absl::StatusOr<int64_t> ReadUpTo(int fd, char* data, int64_t size, const std::string& path) {
  int64_t done = 0;
  while (done < size) {
    const ssize_t got = ::read(fd, data + done, static_cast<size_t>(size - done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return IoError("read", path, errno);
    if (got == 0) break;
    done += got;
  }
  return done;
}

// Reads `size` bytes or reports the file as truncated (it shrank while being read).
absl::Status ReadExactly(int fd, char* data, int64_t size, const std::string& path) {
  absl::StatusOr<int64_t> got = ReadUpTo(fd, data, size, path);
  if (!got.ok()) return got.status();
  if (*got != size) {
    return LumenError(LUMEN_ERROR_CORRUPT_SNAPSHOT,
                      absl::StrCat("corrupt snapshot: '", path, "' is truncated"));
  }
  return absl::OkStatus();
}

// Whether the file's last 8 bytes are the checksum of all the bytes before them. `head`
// holds the first bytes of the file, already read; the rest streams through a small buffer,
// so a file of any size is checked without holding it.
absl::StatusOr<bool> ChecksumMatches(int fd, const char* head, int64_t head_bytes,
                                     int64_t size, const std::string& path) {
  ChecksumStream checksum;
  char trailer[snapshot::kChecksumBytes] = {};
  const int64_t covered = size - snapshot::kChecksumBytes;
  int64_t offset = 0;
  auto feed = [&](const char* data, int64_t n) {
    const int64_t hashed = std::clamp<int64_t>(covered - offset, 0, n);
    checksum.Update(data, hashed);
    for (int64_t i = hashed; i < n; ++i) trailer[offset + i - covered] = data[i];
    offset += n;
  };
  feed(head, head_bytes);
  std::unique_ptr<char[]> buffer(new char[snapshot::kBlockBytes]);
  while (offset < size) {
    absl::StatusOr<int64_t> got =
        ReadUpTo(fd, buffer.get(), std::min(snapshot::kBlockBytes, size - offset), path);
    if (!got.ok()) return got.status();
    if (*got == 0) return false;  // the file shrank meanwhile
    feed(buffer.get(), *got);
  }
  return checksum.Digest() == snapshot::StoredChecksum(trailer);
}

// Streams the payload through a block-sized buffer into a spare state block, checking the
// checksum on the way; the session changes only once everything has passed.
absl::Status RestoreStreamed(Session& session, int fd, const char* head, int64_t head_bytes,
                             const std::string& path) {
  Engine& engine = session.engine();
  absl::StatusOr<void*> spare = engine.TakeSpareState();
  if (!spare.ok()) return spare.status();
  std::unique_ptr<char[]> block_bytes(new char[snapshot::kBlockBytes]);
  std::unique_ptr<char[]> staging(new char[snapshot::kBlockBytes]);
  ChecksumStream checksum;
  checksum.Update(head, head_bytes);
  absl::Status status;
  for (const snapshot::PayloadBlock& block : snapshot::PayloadBlocks(session.model())) {
    const DType dtype = snapshot::PayloadDType(head, block.layer);
    const int64_t bytes = block.count * DTypeSize(dtype);
    status = ReadExactly(fd, block_bytes.get(), bytes, path);
    if (!status.ok()) break;
    checksum.Update(block_bytes.get(), bytes);
    status = snapshot::WriteBlock(session, block, dtype, block_bytes.get(), *spare,
                                  staging.get());
    if (!status.ok()) break;
  }
  char trailer[snapshot::kChecksumBytes];
  if (status.ok()) status = ReadExactly(fd, trailer, sizeof(trailer), path);
  if (status.ok() && checksum.Digest() != snapshot::StoredChecksum(trailer)) {
    status = snapshot::ChecksumMismatch();
  }
  if (!status.ok()) {
    engine.ReturnSpareState(*spare);
    return status;
  }
  snapshot::Commit(session, *spare, head);
  return absl::OkStatus();
}

}  // namespace

absl::Status SaveSnapshotFile(const Session& session, DType dtype, const std::string& path) {
  if (absl::Status status = session.CheckNoTentativeTokens(); !status.ok()) return status;
  Session* self = const_cast<Session*>(&session);  // pinning changes residency only
  PinnedSessions pinned(session.engine(), {&self, 1});
  if (!pinned.status().ok()) return pinned.status();
  absl::StatusOr<std::string> target = ResolveLinks(path);
  if (!target.ok()) return target.status();
  TemporaryFile temp(TemporaryPathFor(*target));
  if (!temp.Open()) return IoError("create a temporary file for", *target, errno);

  // The snapshot streams through a block-sized buffer: no allocation the size of the state.
  const Model& model = session.model();
  ChecksumStream checksum;
  auto emit = [&](const char* data, int64_t size) {
    checksum.Update(data, size);
    return WriteAll(temp.fd(), data, size);
  };
  std::vector<char> head(snapshot::HeadBytes(model));
  snapshot::WriteHead(session, dtype, head.data());
  if (!emit(head.data(), head.size())) return IoError("write", temp.path(), errno);
  std::unique_ptr<char[]> block_bytes(new char[snapshot::kBlockBytes]);
  std::unique_ptr<char[]> staging(new char[snapshot::kBlockBytes]);
  for (const snapshot::PayloadBlock& block : snapshot::PayloadBlocks(model)) {
    absl::Status status =
        snapshot::ReadBlock(session, block, dtype, block_bytes.get(), staging.get());
    if (!status.ok()) return status;
    if (!emit(block_bytes.get(), block.count * DTypeSize(dtype))) {
      return IoError("write", temp.path(), errno);
    }
  }
  const uint64_t digest = checksum.Digest();
  if (!WriteAll(temp.fd(), reinterpret_cast<const char*>(&digest), sizeof(digest))) {
    return IoError("write", temp.path(), errno);
  }
  if (::fsync(temp.fd()) != 0) return IoError("flush", temp.path(), errno);
  if (!temp.RenameTo(*target)) return IoError("rename over", *target, errno);
  if (!temp.Close()) return IoError("close", *target, errno);
  // The rename is durable only once the directory entry is on disk too.
  const std::string directory = DirectoryOf(*target);
  const int dir_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return IoError("open the directory", directory, errno);
  const bool synced = ::fsync(dir_fd) == 0;
  const int sync_error = errno;
  ::close(dir_fd);
  if (!synced) return IoError("flush the directory", directory, sync_error);
  return absl::OkStatus();
}

absl::Status LoadSnapshotFile(Session& session, const std::string& path) {
  if (absl::Status status = session.CheckNoTentativeTokens(); !status.ok()) return status;
  Session* self = &session;
  PinnedSessions pinned(session.engine(), {&self, 1});
  if (!pinned.status().ok()) return pinned.status();
  // O_NONBLOCK: opening a FIFO or a device must not wait for a writer; only regular files
  // are read, and on those the flag changes nothing.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return IoError("open", path, errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info;
  if (::fstat(fd, &info) != 0) return IoError("stat", path, errno);
  if (!S_ISREG(info.st_mode)) {
    return LumenError(LUMEN_ERROR_IO,
                      absl::StrCat("cannot load '", path, "': not a regular file"));
  }
  const int64_t size = info.st_size;

  // The head decides the path: a well-formed one streams the payload into the session; a
  // damaged or foreign one is reported as the specification orders, checksum first.
  const Model& model = session.model();
  std::vector<char> head(std::min(snapshot::HeadBytes(model), size));
  absl::StatusOr<int64_t> got = ReadUpTo(fd, head.data(), head.size(), path);
  if (!got.ok()) return got.status();
  if (absl::Status magic = snapshot::CheckMagic(head.data(), *got); !magic.ok()) return magic;
  if (absl::Status problem = snapshot::CheckHead(model, head.data(), size); !problem.ok()) {
    if (!snapshot::PossibleSize(model, size)) return problem;
    absl::StatusOr<bool> intact = ChecksumMatches(fd, head.data(), *got, size, path);
    if (!intact.ok()) return intact.status();
    return *intact ? problem : snapshot::ChecksumMismatch();
  }
  if (*got != static_cast<int64_t>(head.size())) return snapshot::ChecksumMismatch();
  // An older format's head is shorter: its payload starts inside what was read.
  const int64_t head_bytes = snapshot::HeadBytes(model, snapshot::FormatVersion(head.data()));
  if (head_bytes != *got && ::lseek(fd, head_bytes, SEEK_SET) != head_bytes) {
    return IoError("seek in", path, errno);
  }
  absl::Status status = RestoreStreamed(session, fd, head.data(), head_bytes, path);
  // The loaded state has no history to go back to.
  if (status.ok()) session.rewind().Reset(session.rewind().depth());
  return status;
}

}  // namespace lumen
