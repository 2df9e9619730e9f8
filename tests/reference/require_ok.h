#pragma once
// REQUIRE_OK(call): a lumen call that must succeed. On failure the test stops and reports the
// call, the status's name and the thread's message. One definition for every suite.

#include <catch2/catch.hpp>

#include "lumen/lumen.h"
#include "tests/reference/layer_reference.h"

#define REQUIRE_OK(call)                                          \
  do {                                                            \
    const lumen_status status_ = (call);                          \
    INFO(#call << " -> " << ::lumen_test::LastError(status_));    \
    REQUIRE(status_ == LUMEN_OK);                                 \
  } while (0)
