// Catch2 main for verlpp_agent_tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
