#include "tools/lumen/lumen_api.h"

#include <dlfcn.h>

namespace lumen::cli {

const LumenApi& LinkedApi() {
  static const LumenApi api = [] {
    LumenApi linked;
#define LUMEN_API_LINK(name) linked.name = &::name;
    LUMEN_BENCH_CALLS(LUMEN_API_LINK)
#undef LUMEN_API_LINK
    linked.path = "linked";
    return linked;
  }();
  return api;
}

bool LoadApi(const std::string& path, LumenApi* api, std::string* error) {
  // RTLD_LOCAL keeps this build's symbols out of the global scope, and a path with a slash
  // names the file itself, so a second build with the same soname loads as its own copy.
  const std::string name = path.find('/') == std::string::npos ? "./" + path : path;
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    *error = "cannot load '" + path + "': " + dlerror();
    return false;
  }
  LumenApi loaded;
#define LUMEN_API_LOAD(name)                                                     \
  loaded.name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name));       \
  if (loaded.name == nullptr) {                                                  \
    *error = "'" + path + "' has no " #name ": not a build of this lumen version"; \
    dlclose(handle);                                                             \
    return false;                                                                \
  }
  LUMEN_BENCH_CALLS(LUMEN_API_LOAD)
#undef LUMEN_API_LOAD
  loaded.path = path;
  *api = loaded;
  return true;
}

}  // namespace lumen::cli
