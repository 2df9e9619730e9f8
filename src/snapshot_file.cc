#include "src/snapshot_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/snapshot.h"
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

// Closes a descriptor and removes the temporary file on every early return.
class TemporaryFile {
 public:
  explicit TemporaryFile(std::string path) : path_(std::move(path)) {}
  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!kept_) ::unlink(path_.c_str());
  }
  bool Open() {
    fd_ = ::mkstemp(path_.data());
    return fd_ >= 0;
  }
  bool Close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0;
  }
  void Keep() { kept_ = true; }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  bool kept_ = false;
};

}  // namespace

absl::Status SaveSnapshotFile(const Session& session, DType dtype, const std::string& path) {
  std::vector<char> bytes(SnapshotSize(session.model(), dtype));
  absl::Status status = WriteSnapshot(session, dtype, bytes.data(), bytes.size());
  if (!status.ok()) return status;

  TemporaryFile temp(path + ".tmp-XXXXXX");
  if (!temp.Open()) return IoError("create a temporary file for", path, errno);
  if (!WriteAll(temp.fd(), bytes.data(), bytes.size())) return IoError("write", temp.path(), errno);
  if (::fsync(temp.fd()) != 0) return IoError("flush", temp.path(), errno);
  if (!temp.Close()) return IoError("close", temp.path(), errno);
  if (::rename(temp.path().c_str(), path.c_str()) != 0) return IoError("rename over", path, errno);
  temp.Keep();
  // The rename is durable only once the directory entry is on disk too.
  const std::string directory = DirectoryOf(path);
  const int dir_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd < 0) return IoError("open the directory", directory, errno);
  const bool synced = ::fsync(dir_fd) == 0;
  const int sync_error = errno;
  ::close(dir_fd);
  if (!synced) return IoError("flush the directory", directory, sync_error);
  return absl::OkStatus();
}

absl::Status LoadSnapshotFile(Session& session, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return IoError("open", path, errno);
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return IoError("stat", path, error);
  }
  // Any snapshot of this model is at most this large: refuse a bigger file before reading it.
  const int64_t limit = SnapshotSize(session.model(), DType::kFloat32);
  if (info.st_size > limit) {
    ::close(fd);
    return LumenError(LUMEN_ERROR_CORRUPT_SNAPSHOT,
                      absl::StrCat("corrupt snapshot: '", path, "' is ", info.st_size,
                                   " bytes, more than any snapshot of this model (", limit,
                                   ")"));
  }
  // Left uninitialised: the read fills it, and zeroing would cost a pass over the bytes.
  const int64_t size = info.st_size;
  std::unique_ptr<char[]> bytes(new char[size]);
  int64_t done = 0;
  while (done < size) {
    const ssize_t got = ::read(fd, bytes.get() + done, size - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      ::close(fd);
      return IoError("read", path, error);
    }
    if (got == 0) break;  // the file shrank meanwhile: restore reports the truncation
    done += got;
  }
  ::close(fd);
  return RestoreSnapshot(session, bytes.get(), done);
}

}  // namespace lumen
