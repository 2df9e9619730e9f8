// C entry points for session stores: open, save, load, remove.

#include <string>

#include "absl/strings/str_cat.h"
#include "capi/src/capi_util.h"
#include "src/session_store.h"
#include "src/struct_size.h"

struct lumen_store {
  std::unique_ptr<lumen::SessionStore> store;
};

using lumen::capi::Fail;
using lumen::capi::FromStatus;
using lumen::capi::Guard;
using lumen::capi::Ok;

namespace {

// The smallest and largest part a Redis value is split into (lumen_store_options).
constexpr int64_t kMinPartBytes = 4096;
constexpr int64_t kMaxPartBytes = int64_t{512} << 20;

lumen_status CheckKey(const char* key) {
  return FromStatus(lumen::CheckStoreKey(key));
}

}  // namespace

extern "C" {

void lumen_store_options_init(lumen_store_options* options) {
  if (options == nullptr) return;
  *options = lumen_store_options{};
  options->struct_size = sizeof(lumen_store_options);
  options->timeout_ms = 5000;
  options->part_bytes = int64_t{4} << 20;
}

void lumen_store_save_options_init(lumen_store_save_options* options) {
  if (options == nullptr) return;
  *options = lumen_store_save_options{};
  options->struct_size = sizeof(lumen_store_save_options);
  options->state_dtype = LUMEN_DTYPE_FLOAT32;
  options->expiry_ms = 0;
  options->expected_version = lumen::kAnyVersion;
}

lumen_status lumen_store_open(const char* uri, const lumen_store_options* options,
                              lumen_store** out) {
  LUMEN_REQUIRE_NOT_NULL(uri);
  LUMEN_REQUIRE_NOT_NULL(out);
  lumen_store_options resolved;
  lumen_store_options_init(&resolved);
  if (options != nullptr) {
    absl::Status size = lumen::CheckStructSize(*options, "lumen_store_options");
    if (!size.ok()) return FromStatus(size);
    resolved = lumen::CurrentLayout(*options);
    if (resolved.timeout_ms == 0) resolved.timeout_ms = 5000;
    if (resolved.part_bytes == 0) resolved.part_bytes = int64_t{4} << 20;
  }
  if (resolved.timeout_ms < 0) {
    return Fail(LUMEN_ERROR_INVALID_ARGUMENT,
                absl::StrCat("timeout_ms is ", resolved.timeout_ms, ", must be >= 0"));
  }
  if (resolved.part_bytes < kMinPartBytes || resolved.part_bytes > kMaxPartBytes) {
    return Fail(LUMEN_ERROR_INVALID_ARGUMENT,
                absl::StrCat("part_bytes is ", resolved.part_bytes, ", must be 0 or in [",
                             kMinPartBytes, ", ", kMaxPartBytes, "]"));
  }
  return Guard([&] {
    absl::StatusOr<std::unique_ptr<lumen::SessionStore>> store =
        lumen::OpenSessionStore(uri, resolved);
    if (!store.ok()) return FromStatus(store.status());
    *out = new lumen_store{*std::move(store)};
    return Ok();
  });
}

void lumen_store_destroy(lumen_store* store) { delete store; }

lumen_status lumen_store_save(lumen_store* store, const char* key, const lumen_session* session,
                              const lumen_store_save_options* options, int64_t* out_version) {
  LUMEN_REQUIRE_NOT_NULL(store);
  LUMEN_REQUIRE_NOT_NULL(key);
  LUMEN_REQUIRE_NOT_NULL(session);
  if (lumen_status s = CheckKey(key); s != LUMEN_OK) return s;
  lumen::StoreSave save;
  if (options != nullptr) {
    absl::Status size = lumen::CheckStructSize(*options, "lumen_store_save_options");
    if (!size.ok()) return FromStatus(size);
    const lumen_store_save_options current = lumen::CurrentLayout(*options);
    if (current.state_dtype != LUMEN_DTYPE_FLOAT32 &&
        current.state_dtype != LUMEN_DTYPE_BFLOAT16) {
      return Fail(LUMEN_ERROR_INVALID_ARGUMENT,
                  absl::StrCat("state_dtype ", current.state_dtype,
                               " is not supported (FLOAT32 or BFLOAT16)"));
    }
    if (current.expiry_ms < 0) {
      return Fail(LUMEN_ERROR_INVALID_ARGUMENT,
                  absl::StrCat("expiry_ms is ", current.expiry_ms, ", must be >= 0"));
    }
    if (current.expected_version < lumen::kAnyVersion) {
      return Fail(LUMEN_ERROR_INVALID_ARGUMENT,
                  absl::StrCat("expected_version is ", current.expected_version,
                               ", must be -1 (any), 0 (nothing stored) or a version"));
    }
    save.dtype = static_cast<lumen::DType>(current.state_dtype);
    save.expiry_ms = current.expiry_ms;
    save.expected_version = current.expected_version;
  }
  return Guard([&] {
    // Before the store is asked anything: a session with tentative tokens is not saved.
    if (absl::Status held = session->session->CheckNoTentativeTokens(); !held.ok()) {
      return FromStatus(held);
    }
    absl::StatusOr<int64_t> version = store->store->Save(key, *session->session, save);
    if (!version.ok()) return FromStatus(version.status());
    if (out_version != nullptr) *out_version = *version;
    return Ok();
  });
}

lumen_status lumen_store_load(lumen_store* store, const char* key, lumen_session* session,
                              int64_t* out_version) {
  LUMEN_REQUIRE_NOT_NULL(store);
  LUMEN_REQUIRE_NOT_NULL(key);
  LUMEN_REQUIRE_NOT_NULL(session);
  if (lumen_status s = CheckKey(key); s != LUMEN_OK) return s;
  return Guard([&] {
    // Before the store is read: a session with tentative tokens is not replaced.
    if (absl::Status held = session->session->CheckNoTentativeTokens(); !held.ok()) {
      return FromStatus(held);
    }
    absl::StatusOr<int64_t> version = store->store->Load(key, *session->session);
    if (!version.ok()) return FromStatus(version.status());
    if (out_version != nullptr) *out_version = *version;
    return Ok();
  });
}

lumen_status lumen_store_remove(lumen_store* store, const char* key) {
  LUMEN_REQUIRE_NOT_NULL(store);
  LUMEN_REQUIRE_NOT_NULL(key);
  if (lumen_status s = CheckKey(key); s != LUMEN_OK) return s;
  return Guard([&] { return FromStatus(store->store->Remove(key)); });
}

}  // extern "C"
