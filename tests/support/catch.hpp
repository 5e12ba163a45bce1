// Catch2 compatibility: Debian 12 ships Catch2 2.13 (single header), the GPU image 3.4
// (split headers). Tests include this file only.
#pragma once

#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#define FP4D_CATCH_VERSION 3
#else
#include <catch2/catch.hpp>
#define FP4D_CATCH_VERSION 2
#endif
