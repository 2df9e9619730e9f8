// The one main() of every Catch2 test executable (compiled once, linked into each).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
