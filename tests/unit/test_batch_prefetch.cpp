// BatchPrefetcher: the batches it hands out are make_batch's, bit for bit, in order, whatever
// the number of workers; out-of-order takes and bad arguments are refused.
#include "sim/batch_prefetch.hpp"
#include "support/catch.hpp"

using namespace fp4d;

namespace {
MlpSpec spec() {
  MlpSpec s;
  s.widths = {32, 64, 16};
  s.batch = 16;
  s.teacher_width = 32;
  s.outlier_fraction = 0.1;
  s.outlier_scale = 8.0;
  s.seed = 3;
  return s;
}
}  // namespace

TEST_CASE("batch prefetch: the batches equal make_batch's, in order", "[mlp][prefetch]") {
  const MlpSpec s = spec();
  for (const int workers : {1, 3}) {
    BatchPrefetcher p(s, 5, 25, workers, 4);
    for (std::int64_t step = 5; step < 25; ++step) {
      const Batch got = p.take(step), want = make_batch(s, step);
      INFO("workers " << workers << ", step " << step);
      REQUIRE(got.x.data == want.x.data);
      REQUIRE(got.t.data == want.t.data);
    }
  }
  // Consecutive batches differ (the comparison above is not of one repeated batch).
  CHECK(make_batch(s, 5).x.data != make_batch(s, 6).x.data);
}

TEST_CASE("batch prefetch: refuses out-of-order takes and bad arguments", "[mlp][prefetch]") {
  const MlpSpec s = spec();
  BatchPrefetcher p(s, 0, 4, 2, 2);
  CHECK_THROWS_AS(p.take(1), std::logic_error);
  CHECK(p.take(0).x.rows == 16);
  CHECK_THROWS_AS(p.take(0), std::logic_error);
  CHECK_THROWS_AS(BatchPrefetcher(s, 0, 4, 0, 2), std::invalid_argument);
  // Stopping with batches in flight and never taken is fine (the destructor joins).
  BatchPrefetcher q(s, 0, 100, 2, 8);
}
