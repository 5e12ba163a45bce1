// main() of the GPU tests: exit 77 (CTest: skipped) with a clear message where no CUDA
// device can be used, so that a machine without a GPU never reports these as passed.
#include <cstdio>
#include <string>

#include "backend/cuda/device.hpp"

#if __has_include(<catch2/catch_session.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

int main(int argc, char** argv) {
  std::string why;
  if (!fp4d::cuda::device_available(&why)) {
    std::printf("SKIPPED: no usable CUDA device (%s); GPU tests run on the device machine (scripts/gpu-check)\n",
                why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
