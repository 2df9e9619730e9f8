// C entry points for snapshots: size, write, restore, save and load.

#include "absl/strings/str_cat.h"
#include "capi/src/capi_util.h"
#include "src/snapshot.h"
#include "src/snapshot_file.h"
#include "src/struct_size.h"

using lumen::capi::Fail;
using lumen::capi::FromStatus;
using lumen::capi::Guard;
using lumen::capi::Ok;

namespace {

// The snapshot's state dtype from (possibly NULL) options.
lumen_status ResolveDType(const lumen_snapshot_options* options, lumen::DType* out) {
  *out = lumen::DType::kFloat32;
  if (options == nullptr) return LUMEN_OK;
  absl::Status size = lumen::CheckStructSize(*options, "lumen_snapshot_options");
  if (!size.ok()) return FromStatus(size);
  const lumen_snapshot_options current = lumen::CurrentLayout(*options);
  if (current.state_dtype != LUMEN_DTYPE_FLOAT32 &&
      current.state_dtype != LUMEN_DTYPE_BFLOAT16) {
    return Fail(LUMEN_ERROR_INVALID_ARGUMENT,
                absl::StrCat("snapshot state_dtype ", current.state_dtype,
                             " is not supported (FLOAT32 or BFLOAT16)"));
  }
  *out = static_cast<lumen::DType>(current.state_dtype);
  return LUMEN_OK;
}

}  // namespace

extern "C" {

void lumen_snapshot_options_init(lumen_snapshot_options* options) {
  if (options == nullptr) return;
  *options = lumen_snapshot_options{};
  options->struct_size = sizeof(lumen_snapshot_options);
  options->state_dtype = LUMEN_DTYPE_FLOAT32;
}

lumen_status lumen_session_snapshot_size(const lumen_session* session,
                                         const lumen_snapshot_options* options, int64_t* out) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(out);
  lumen::DType dtype;
  if (lumen_status s = ResolveDType(options, &dtype); s != LUMEN_OK) return s;
  *out = lumen::SnapshotSize(session->session->model(), dtype);
  return Ok();
}

lumen_status lumen_session_snapshot(const lumen_session* session,
                                    const lumen_snapshot_options* options, void* buffer,
                                    int64_t capacity, int64_t* out_size) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(buffer);
  lumen::DType dtype;
  if (lumen_status s = ResolveDType(options, &dtype); s != LUMEN_OK) return s;
  return Guard([&] {
    absl::Status status = lumen::WriteSnapshot(*session->session, dtype, buffer, capacity);
    if (!status.ok()) return FromStatus(status);
    if (out_size != nullptr) *out_size = lumen::SnapshotSize(session->session->model(), dtype);
    return Ok();
  });
}

lumen_status lumen_session_restore(lumen_session* session, const void* data, int64_t size) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(data);
  if (size < 0) {
    return Fail(LUMEN_ERROR_INVALID_ARGUMENT, absl::StrCat("size is ", size, ", must be >= 0"));
  }
  return Guard([&] { return FromStatus(lumen::RestoreSnapshot(*session->session, data, size)); });
}

lumen_status lumen_session_save(const lumen_session* session, const char* path,
                                const lumen_snapshot_options* options) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(path);
  lumen::DType dtype;
  if (lumen_status s = ResolveDType(options, &dtype); s != LUMEN_OK) return s;
  return Guard(
      [&] { return FromStatus(lumen::SaveSnapshotFile(*session->session, dtype, path)); });
}

lumen_status lumen_session_load(lumen_session* session, const char* path) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(path);
  return Guard([&] { return FromStatus(lumen::LoadSnapshotFile(*session->session, path)); });
}

}  // extern "C"
