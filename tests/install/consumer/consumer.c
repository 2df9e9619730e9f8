/* Links against an installed lumen and checks the library it loaded is the one it built
 * against. */
#include <lumen/lumen.h>
#include <stdio.h>

int main(void) {
  const int32_t expected =
      LUMEN_VERSION_MAJOR * 10000 + LUMEN_VERSION_MINOR * 100 + LUMEN_VERSION_PATCH;
  lumen_model_builder* builder = NULL;
  if (lumen_model_builder_create(&builder) != LUMEN_OK) return 1;
  lumen_model_builder_destroy(builder);
  if (lumen_version_number() != expected) {
    fprintf(stderr, "header %d, library %d\n", (int)expected, (int)lumen_version_number());
    return 1;
  }
  printf("lumen %s\n", lumen_version_string());
  return 0;
}
