#pragma once
// The redis:// session store, through hiredis (built where libhiredis-dev is found; elsewhere
// opening one is LUMEN_ERROR_UNSUPPORTED).

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lumen/lumen.h"
#include "src/session_store.h"

namespace lumen {

// Connects to the server of a redis://[:password@]host[:port][/db] URI.
absl::StatusOr<std::unique_ptr<SessionStore>> OpenRedisStore(const std::string& uri,
                                                             const lumen_store_options& options);

}  // namespace lumen
