#include "src/session_store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/file_store.h"
#include "src/redis_store.h"
#include "src/status.h"

namespace lumen {

absl::StatusOr<std::unique_ptr<SessionStore>> OpenSessionStore(
    const std::string& uri, const lumen_store_options& options) {
  if (absl::StartsWith(uri, "file://")) return OpenFileStore(uri);
  if (absl::StartsWith(uri, "redis://")) return OpenRedisStore(uri, options);
  return absl::InvalidArgumentError(absl::StrCat(
      "store URI '", uri, "' names no store lumen knows: file:///path or redis://host:port/db"));
}

absl::Status CheckStoreKey(absl::string_view key) {
  if (key.empty() || key.size() > kMaxStoreKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a store key has 1 to ", kMaxStoreKeyBytes,
                                                   " bytes; this one has ", key.size()));
  }
  return absl::OkStatus();
}

absl::Status AboutKey(const SessionStore& store, absl::string_view key,
                      const absl::Status& status) {
  if (status.ok()) return status;
  return LumenError(LumenStatusOf(status), absl::StrCat("store '", store.uri(), "', key '", key,
                                                        "': ", status.message()));
}

absl::Status VersionConflict(const SessionStore& store, absl::string_view key,
                             int64_t expected, int64_t stored) {
  const std::string found =
      stored == 0 ? std::string("holds nothing") : absl::StrCat("holds version ", stored);
  const std::string wanted = expected == 0 ? std::string("nothing stored")
                                           : absl::StrCat("version ", expected);
  return AboutKey(store, key,
                  LumenError(LUMEN_ERROR_VERSION_CONFLICT,
                             absl::StrCat("the save expected ", wanted, " but the key ", found,
                                          " (another writer saved first); nothing was written")));
}

}  // namespace lumen
