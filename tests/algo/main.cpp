// Catch2 main for verlpp_algo_tests (its own file, so editing a test does not rebuild it).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
