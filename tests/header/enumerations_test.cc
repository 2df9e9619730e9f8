// lumen.h's "Enumerations" section: the names of families and backends.

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/header/header_claims.h"

namespace {

TEST_CASE("lumen_family_string spells each family as fla does, anything else \"unknown\"",
          "[header]") {
  LUMEN_CLAIM("lumen_family_string",
              "Returns a static name for a lumen_family value, as the bindings and fla spell it "
              "(\"linear_attn\", \"retention\", \"ssd\", \"gla\", \"delta_net\", "
              "\"gated_delta_net\", \"kda\"), or \"unknown\" for any other value; never NULL.");
  const std::vector<std::string> names = {"linear_attn", "retention",       "ssd", "gla",
                                          "delta_net",   "gated_delta_net", "kda"};
  for (int32_t family = LUMEN_FAMILY_LINEAR_ATTN; family <= LUMEN_FAMILY_KDA; ++family) {
    const char* name = lumen_family_string(family);
    REQUIRE(name != nullptr);
    CHECK(name == names[static_cast<size_t>(family - 1)]);
  }
  for (int32_t other : {0, -1, LUMEN_FAMILY_KDA + 1, INT32_MIN, INT32_MAX}) {
    const char* name = lumen_family_string(other);
    REQUIRE(name != nullptr);
    CHECK(std::string(name) == "unknown");
  }
}

TEST_CASE("lumen_backend_string names each backend, anything else \"UNKNOWN\"", "[header]") {
  LUMEN_CLAIM("lumen_backend_string",
              "Returns a static name for a lumen_backend value (\"AUTO\", \"CPU\", \"CUDA\", "
              "\"ROCM\"), or \"UNKNOWN\" for any other value; never NULL.");
  const std::vector<std::string> names = {"AUTO", "CPU", "CUDA", "ROCM"};
  for (int32_t backend = LUMEN_BACKEND_AUTO; backend <= LUMEN_BACKEND_ROCM; ++backend) {
    const char* name = lumen_backend_string(backend);
    REQUIRE(name != nullptr);
    CHECK(name == names[static_cast<size_t>(backend)]);
  }
  for (int32_t other : {-1, LUMEN_BACKEND_ROCM + 1, INT32_MIN, INT32_MAX}) {
    const char* name = lumen_backend_string(other);
    REQUIRE(name != nullptr);
    CHECK(std::string(name) == "UNKNOWN");
  }
}

}  // namespace
