#pragma once
// The C API calls the benchmarks make, as a table of function pointers: the library this
// program links, or another build of it loaded from a file. `lumen bench --builds` times two
// builds in one process through two such tables, so that they share the host's phases.

#include <lumen/lumen.h>

#include <string>

namespace lumen::cli {

#define LUMEN_BENCH_CALLS(X)          \
  X(lumen_version_string)             \
  X(lumen_status_string)              \
  X(lumen_last_error_message)         \
  X(lumen_layer_options_init)         \
  X(lumen_model_builder_create)       \
  X(lumen_model_builder_destroy)      \
  X(lumen_model_builder_add_layer)    \
  X(lumen_model_builder_set_param)    \
  X(lumen_model_builder_build)        \
  X(lumen_model_destroy)              \
  X(lumen_model_state_count)          \
  X(lumen_engine_options_init)        \
  X(lumen_engine_create)              \
  X(lumen_engine_destroy)             \
  X(lumen_session_create)             \
  X(lumen_session_destroy)            \
  X(lumen_session_reset)              \
  X(lumen_session_read_state)         \
  X(lumen_layer_inputs_init)          \
  X(lumen_layer_output_init)          \
  X(lumen_session_step)               \
  X(lumen_session_prefill)            \
  X(lumen_engine_step_batch)

struct LumenApi {
#define LUMEN_API_FIELD(name) decltype(&::name) name = nullptr;
  LUMEN_BENCH_CALLS(LUMEN_API_FIELD)
#undef LUMEN_API_FIELD
  std::string path;  // the file it came from; "linked" for the program's own library
};

// The library this program is linked with.
const LumenApi& LinkedApi();

// The build of lumen in the shared library at `path`, loaded beside the linked one (its own
// symbols kept apart) and never unloaded. On failure returns false with the reason in *error.
bool LoadApi(const std::string& path, LumenApi* api, std::string* error);

}  // namespace lumen::cli
