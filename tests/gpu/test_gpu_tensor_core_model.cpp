// The sm90 tensor-core model (quant/tensor_core_model.hpp) against cuBLASLt on the device, output by
// output and bit for bit: the fast subset of `fp4drift accumulator --model-check`
// (sim/accumulator_check.hpp) - BF16 and FP16 on every distribution, FP8 E4M3 and E5M2 x E4M3 on
// five, K 16 .. 1024, small shapes. Every path must agree on every output: BF16, FP16 and FP8 with
// fast accumulation with the published model, FP8 without fast accumulation with promotion every
// kSm90Fp8PromotionInterval products (what the full check measured); the other promotion
// intervals are printed beside it. The model is Hopper's: on another architecture the test skips
// (77) rather than compares.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/device.hpp"
#include "quant/tensor_core_model.hpp"
#include "sim/accumulator_check.hpp"
#include "support/catch.hpp"

using namespace fp4d;

TEST_CASE("gpu tensor-core model: cuBLASLt equals the sm90 model bit for bit", "[gpu]") {
  const std::string arch = cuda::device_architecture();
  if (arch.rfind("sm_90", 0) != 0) {
    std::printf("SKIPPED: the tensor-core model is Hopper's (sm_90); this device is %s\n", arch.c_str());
    std::exit(77);
  }
  const QuantizedProduct plain = cuda_backend().gemm_product(GemmProductOptions{});
  GemmProductOptions fast_opt;
  fast_opt.fp8_fast_accumulation = true;
  const QuantizedProduct fast = cuda_backend().gemm_product(fast_opt);
  const DeviceProduct device = [&](const QuantizedTensor& a, const QuantizedTensor& b, bool f) {
    return f ? fast(a, b) : plain(a, b);
  };
  std::vector<CaseOutcome> cases;
  std::uint64_t seed = 100;
  for (const ModelCheckCase& c : model_check_fast_subset()) {
    cases.push_back(run_model_check_case(c, seed++, device));
    for (const PathOutcome& p : cases.back().paths) {
      INFO(p.path << " " << c.distribution << " K " << c.K << " " << c.M << "x" << c.N);
      CHECK(p.error.empty());
      if (!p.error.empty()) continue;
      REQUIRE(p.modelled);
      REQUIRE_FALSE(p.hypotheses.empty());
      const HypothesisOutcome& h = p.hypotheses[0];  // the model's
      CHECK(h.interval == (p.path == "e4m3" || p.path == "e5m2" ? kSm90Fp8PromotionInterval : 0));
      if (h.mismatches > 0 && !h.first.empty())
        UNSCOPED_INFO("first mismatch (" << h.first[0].i << ", " << h.first[0].j << "): device " << std::hex
                                         << h.first[0].device << ", model " << h.first[0].model << std::dec
                                         << "; worst " << h.worst_ulps << " ulps");
      CHECK(h.mismatches == 0);
    }
  }
  for (const PathTotal& t : model_check_totals(cases)) {
    const HypothesisTotal& v = t.verdict();
    std::printf("model vs cuBLASLt (%s%s): %lld inner products, %lld mismatches\n", t.path.c_str(),
                t.hypotheses.size() > 1 ? (", " + promotion_hypothesis_name(v.interval)).c_str() : "",
                static_cast<long long>(v.inner_products), static_cast<long long>(v.mismatches));
    if (t.hypotheses.size() > 1)
      for (const HypothesisTotal& h : t.hypotheses)
        std::printf("  %s: %lld mismatches, %lld of %lld cases agree\n", promotion_hypothesis_name(h.interval).c_str(),
                    static_cast<long long>(h.mismatches), static_cast<long long>(h.cases_agreeing),
                    static_cast<long long>(h.cases));
  }
}
