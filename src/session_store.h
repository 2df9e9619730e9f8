#pragma once
// Session stores (lumen_store_*): sessions' snapshots under string keys, with a version per
// key and an optional expiry, in a directory (file_store.h) or a Redis server
// (redis_store.h). Each kind keeps the same promises (lumen.h, "Session stores"): a save is
// atomic and only reads the session, a load is all or nothing, and every failure has its own
// status and a message naming the store and the key.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lumen/lumen.h"
#include "src/layer_spec.h"
#include "src/session.h"

namespace lumen {

// The longest key a store takes, in bytes.
inline constexpr size_t kMaxStoreKeyBytes = 1024;
// lumen_store_save_options.expected_version: replace whatever is stored.
inline constexpr int64_t kAnyVersion = -1;

// What a save writes and when it may.
struct StoreSave {
  DType dtype = DType::kFloat32;
  int64_t expiry_ms = 0;              // 0: never expires
  int64_t expected_version = kAnyVersion;  // 0: only where nothing is stored
};

class SessionStore {
 public:
  virtual ~SessionStore() = default;
  // The URI the store was opened with, for messages.
  virtual const std::string& uri() const = 0;
  // Saves the session's snapshot under `key` and returns the version it now has.
  virtual absl::StatusOr<int64_t> Save(const std::string& key, const Session& session,
                                       const StoreSave& save) = 0;
  // Restores the session from the value under `key` and returns its version.
  virtual absl::StatusOr<int64_t> Load(const std::string& key, Session& session) = 0;
  virtual absl::Status Remove(const std::string& key) = 0;
};

// Opens the store a URI names (file:// or redis://), options already checked and resolved.
absl::StatusOr<std::unique_ptr<SessionStore>> OpenSessionStore(
    const std::string& uri, const lumen_store_options& options);

// INVALID_ARGUMENT unless the key has 1 to kMaxStoreKeyBytes bytes.
absl::Status CheckStoreKey(absl::string_view key);

// `status` with the store and the key in front of its message, its lumen_status kept.
absl::Status AboutKey(const SessionStore& store, absl::string_view key,
                      const absl::Status& status);

// The message of a version conflict, the same for every kind of store.
absl::Status VersionConflict(const SessionStore& store, absl::string_view key,
                             int64_t expected, int64_t stored);

}  // namespace lumen
