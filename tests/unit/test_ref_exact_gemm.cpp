#include "support/catch.hpp"
TEST_CASE("placeholder") { CHECK(true); }
