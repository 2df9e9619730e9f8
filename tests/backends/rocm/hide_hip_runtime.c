/* Preloaded into a test to make the HIP runtime look absent: dlopen of libamdhip64 fails as
 * it does on a machine without ROCm; every other dlopen goes through. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

void* dlopen(const char* file, int mode) {
  static void* (*real_dlopen)(const char*, int) = NULL;
  if (file != NULL && strstr(file, "libamdhip64") != NULL) return NULL;
  if (real_dlopen == NULL) real_dlopen = (void* (*)(const char*, int))dlsym(RTLD_NEXT, "dlopen");
  return real_dlopen(file, mode);
}
