// lumen.h's "Status" section: the names of statuses.

#include <catch2/catch.hpp>

#include <cstdint>
#include <set>
#include <string>

#include "lumen/lumen.h"
#include "tests/header/header_claims.h"

namespace {

TEST_CASE("lumen_status_string names every status, and any other value UNKNOWN_STATUS",
          "[header]") {
  LUMEN_CLAIM("lumen_status_string",
              "Returns a static, human-readable name for a lumen_status value (\"LUMEN_OK\", "
              "...), or \"LUMEN_ERROR_UNKNOWN_STATUS\" for any other value; never NULL.");
  CHECK(std::string(lumen_status_string(LUMEN_OK)) == "LUMEN_OK");
  CHECK(std::string(lumen_status_string(LUMEN_ERROR_IO)) == "LUMEN_ERROR_IO");
  CHECK(std::string(lumen_status_string(LUMEN_ERROR_TIMEOUT)) == "LUMEN_ERROR_TIMEOUT");
  std::set<std::string> names;
  for (int32_t status = LUMEN_OK; status <= LUMEN_ERROR_UNCOMMITTED_TOKENS; ++status) {
    const char* name = lumen_status_string(status);
    REQUIRE(name != nullptr);
    INFO(status << ": " << name);
    CHECK(std::string(name).rfind(status == 0 ? "LUMEN_OK" : "LUMEN_ERROR_", 0) == 0);
    CHECK(std::string(name) != "LUMEN_ERROR_UNKNOWN_STATUS");
    names.insert(name);
  }
  CHECK(names.size() == static_cast<size_t>(LUMEN_ERROR_UNCOMMITTED_TOKENS) + 1);
  for (int32_t other : {-1, LUMEN_ERROR_UNCOMMITTED_TOKENS + 1, 1000, INT32_MIN, INT32_MAX}) {
    const char* name = lumen_status_string(other);
    REQUIRE(name != nullptr);
    CHECK(std::string(name) == "LUMEN_ERROR_UNKNOWN_STATUS");
  }
}

TEST_CASE("status values are fixed: each keeps the number it was released with", "[header]") {
  LUMEN_CLAIM("lumen_status", "Values are fixed forever; new codes are appended.");
  // The numbers every released lumen has given them: a renumbering breaks every caller.
  CHECK(LUMEN_OK == 0);
  CHECK(LUMEN_ERROR_INVALID_ARGUMENT == 1);
  CHECK(LUMEN_ERROR_OUT_OF_RANGE == 2);
  CHECK(LUMEN_ERROR_MODEL_MISMATCH == 3);
  CHECK(LUMEN_ERROR_OUT_OF_MEMORY == 4);
  CHECK(LUMEN_ERROR_UNSUPPORTED == 5);
  CHECK(LUMEN_ERROR_BACKEND == 6);
  CHECK(LUMEN_ERROR_INTERNAL == 7);
  CHECK(LUMEN_ERROR_BUFFER_TOO_SMALL == 8);
  CHECK(LUMEN_ERROR_CORRUPT_SNAPSHOT == 9);
  CHECK(LUMEN_ERROR_SNAPSHOT_VERSION == 10);
  CHECK(LUMEN_ERROR_IO == 11);
  CHECK(LUMEN_ERROR_NOT_FOUND == 12);
  CHECK(LUMEN_ERROR_VERSION_CONFLICT == 13);
  CHECK(LUMEN_ERROR_UNAVAILABLE == 14);
  CHECK(LUMEN_ERROR_TIMEOUT == 15);
  CHECK(LUMEN_ERROR_UNCOMMITTED_TOKENS == 16);
  // And the library agrees with the header on each.
  CHECK(std::string(lumen_status_string(9)) == "LUMEN_ERROR_CORRUPT_SNAPSHOT");
  CHECK(std::string(lumen_status_string(11)) == "LUMEN_ERROR_IO");
  CHECK(std::string(lumen_status_string(15)) == "LUMEN_ERROR_TIMEOUT");
  CHECK(std::string(lumen_status_string(16)) == "LUMEN_ERROR_UNCOMMITTED_TOKENS");
}

}  // namespace
