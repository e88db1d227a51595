// Catch2 main for verlpp_data_tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
