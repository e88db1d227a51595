// Catch2 main for verlpp_controller_tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
