// Per-channel, per-row and per-block statistics (quant/stats.hpp compute_channel_stats,
// split_channels, parse_channel_list, inverse_rht_double), the outliers generator's mask
// (sim/generators.hpp) and the GEMM's per-row/column errors and outlier split
// (sim/gemm_experiment.hpp):
//   * a 2 x 32 NVFP4 tensor whose every quantized value follows by hand from the spec
//     (power-of-two block scales, so x * e_b is exact and each E2M1 rounding is visible),
//     its per-channel, per-row and per-block sums, quantiles, worst blocks and a mask split
//     compared exactly; the same tensor transposed with blocks along axis 0;
//   * the RHT: the inverse against the explicit matrix H^T, the original-basis sums against an
//     oracle built from rht_matrix, the global NMSE equal in both bases (H orthonormal) while
//     the per-channel NMSE differs (RHT along the channels) or not (along the tokens, where
//     each channel is transformed within itself, and the rows differ instead);
//   * the same bits for 1 and 3 threads;
//   * the generator's mask is the set of columns generate() scaled;
//   * GEMM: per-row errors recombine to the global one, and the outlier splits reduce to the
//     global figures for the all-channel and the empty mask.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "quant/presets.hpp"
#include "quant/quantize.hpp"
#include "quant/rht.hpp"
#include "quant/stats.hpp"
#include "sim/gemm_experiment.hpp"
#include "sim/generators.hpp"
#include "support/catch.hpp"
#include "util/parallel_worth.hpp"

using namespace fp4d;

namespace {

// The hand-worked tensor (rows 2, cols 32). Global amax 2688 = 6 * 448, so s_enc = s_dec = 1.
// Blocks (1x16 rowwise):
//   (0,0) [2688, 0...]: S = 448, 2688 -> 6 exactly; every error 0.
//   (0,1) amax 1536: S = E4M3(1536 * fl(1/6)) = 256, e_b = 2^-8 exact:
//         col 16: 1536 -> 6 (0); col 17: 320 -> 1.25, a tie, RNE to 1 -> 256 (-64);
//         col 18: 672 -> 2.625 -> 3 -> 768 (+96); col 19: 64 -> 0.25, a tie, RNE to 0 (-64).
//   (1,0) amax 768: S = 128, e_b = 2^-7: col 0: 224 -> 1.75, a tie, RNE to 2 -> 256 (+32);
//         col 1: 768 -> 6 (0); col 2: 640 -> 5, a tie, RNE to 4 -> 512 (-128).
//   (1,1) col 20: 0.5: S = E4M3(0.5 * fl(1/6) = 0.08333) = 0.0859375 (0.08333 lies above the
//         midpoint 0.08203125 of 0.078125 and 0.0859375), 0.5 e_b = 5.82 -> 6 ->
//         6 * 0.0859375 = 0.515625 (+2^-6).
Matrix hand_tensor() {
  Matrix m(2, 32);
  m(0, 0) = 2688, m(0, 16) = 1536, m(0, 17) = 320, m(0, 18) = 672, m(0, 19) = 64;
  m(1, 0) = 224, m(1, 1) = 768, m(1, 2) = 640, m(1, 20) = 0.5f;
  return m;
}

struct Sums {
  std::vector<double> ce, cr, re, rr;
};
Sums hand_sums() {
  Sums s{std::vector<double>(32, 0.0), std::vector<double>(32, 0.0), {}, {}};
  const double e[2][32] = {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -64, 96, -64},
                           {32, 0, -128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.015625}};
  const Matrix x = hand_tensor();
  s.re.assign(2, 0.0);
  s.rr.assign(2, 0.0);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 32; ++c) {
      const double v = x(r, c);
      s.ce[c] += e[r][c] * e[r][c];
      s.cr[c] += v * v;
      s.re[r] += e[r][c] * e[r][c];
      s.rr[r] += v * v;
    }
  return s;
}

QuantSpec nvfp4_rows() { return preset("nvfp4").spec; }

// |a - b| <= rel * |b|: a relative tolerance (Catch2's Approx is spelt differently in 2 and 3).
bool close(double a, double b, double rel) { return std::fabs(a - b) <= rel * std::fabs(b); }

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

Matrix normal_matrix(std::int64_t r, std::int64_t c, unsigned seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, scale);
  Matrix m(r, c);
  for (float& v : m.data) v = n(g);
  return m;
}

}  // namespace

TEST_CASE("channel stats: a hand-worked NVFP4 tensor, per channel, row and block") {
  const Matrix x = hand_tensor();
  const QuantizedTensor q = quantize_cpu(x, nvfp4_rows());
  // The quantized values as worked out above (the premise of every figure below).
  CHECK(q.dequantized(0, 17) == 256.0f);
  CHECK(q.dequantized(0, 18) == 768.0f);
  CHECK(q.dequantized(0, 19) == 0.0f);
  CHECK(q.dequantized(1, 0) == 256.0f);
  CHECK(q.dequantized(1, 2) == 512.0f);
  CHECK(q.dequantized(1, 20) == 0.515625f);
  const ChannelStats c = compute_channel_stats(x, q);
  const Sums h = hand_sums();
  CHECK(c.channel_err2 == h.ce);
  CHECK(c.channel_ref2 == h.cr);
  CHECK(c.row_err2 == h.re);
  CHECK(c.row_ref2 == h.rr);
  CHECK(c.channel_err2[19] == 4096.0);  // the underflowing element: NMSE 1 in its channel
  CHECK(c.channel_err2[19] / c.channel_ref2[19] == 1.0);
  CHECK(c.channel_err2_transformed.empty());  // no RHT, one basis
  double e2 = 0, r2 = 0;
  for (int j = 0; j < 32; ++j) e2 += h.ce[j], r2 += h.cr[j];
  CHECK(c.nmse_original_basis == e2 / r2);
  CHECK(close(c.nmse_original_basis, q.stats.nmse, 1e-15));

  // Blocks: grid 2 x 2, row-major.
  REQUIRE(c.block_nmse.size() == 4);
  CHECK(c.block_nmse[0] == 0.0);
  CHECK(c.block_nmse[1] == 17408.0 / (1536.0 * 1536 + 320.0 * 320 + 672.0 * 672 + 64.0 * 64));
  CHECK(c.block_nmse[2] == 17408.0 / (224.0 * 224 + 768.0 * 768 + 640.0 * 640));
  CHECK(c.block_nmse[3] == (0.015625 * 0.015625) / 0.25);
  CHECK(c.blocks_with_energy == 4);
  // Nearest rank over the sorted {0, b3, b1, b2} (b1 < b2): p50 -> index 1, p90, p99 -> 2.
  CHECK(c.block_nmse_p50 == c.block_nmse[3]);
  CHECK(c.block_nmse_p90 == c.block_nmse[1]);
  CHECK(c.block_nmse_max == c.block_nmse[2]);
  // Worst by squared error: blocks 1 and 2 tie at 17408 (lower index first), then 3, then 0.
  REQUIRE(c.worst_blocks == std::vector<std::int64_t>{1, 2, 3, 0});
  CHECK(c.worst_block_error_share[0] == 17408.0 / (2 * 17408.0 + 0.015625 * 0.015625));
  CHECK(c.worst_block_error_share[3] == 0.0);
  CHECK(compute_channel_stats(x, q, 2).worst_blocks == std::vector<std::int64_t>{1, 2});

  // A mask {0, 16, 17}: pooled sums per group.
  const std::vector<std::uint8_t> mask = parse_channel_list("0,16-17", 32);
  const ChannelSplit s = split_channels(c, mask);
  CHECK(s.outlier_channels == 3);
  CHECK(s.normal_channels == 29);
  const double oe = h.ce[0] + h.ce[16] + h.ce[17], orr = h.cr[0] + h.cr[16] + h.cr[17];
  CHECK(s.outlier_nmse == oe / orr);
  CHECK(s.normal_nmse == (e2 - oe) / (r2 - orr));
  CHECK(s.outlier_energy_fraction == orr / r2);
  CHECK_THROWS_AS(split_channels(c, std::vector<std::uint8_t>(31, 0)), std::invalid_argument);
}

TEST_CASE("channel stats: blocks along axis 0 (stored transposed) map to the same elements") {
  // The transpose of the hand tensor with 1x16 blocks along axis 0 quantizes the same blocks:
  // its channels are the hand tensor's rows and vice versa, the block grid is the same.
  const Matrix xt = transpose(hand_tensor());
  QuantSpec s = nvfp4_rows();
  s.axis = 0;
  REQUIRE(s.stored_transposed());
  const QuantizedTensor q = quantize_cpu(xt, s);
  const ChannelStats c = compute_channel_stats(xt, q);
  const Sums h = hand_sums();
  CHECK(c.channel_err2 == h.re);
  CHECK(c.row_err2 == h.ce);
  REQUIRE(c.block_nmse.size() == 4);
  CHECK(c.block_nmse[1] == 17408.0 / (1536.0 * 1536 + 320.0 * 320 + 672.0 * 672 + 64.0 * 64));
  CHECK(c.block_nmse[3] == (0.015625 * 0.015625) / 0.25);
  CHECK(c.worst_blocks == std::vector<std::int64_t>{1, 2, 3, 0});
}

TEST_CASE("channel stats: casts have no blocks, FP8 per tensor one; zero energy is NaN, not 0") {
  const Matrix x = hand_tensor();
  const ChannelStats cast = compute_channel_stats(x, quantize_cpu(x, preset("bf16").spec));
  CHECK(cast.block_nmse.empty());
  CHECK(cast.worst_blocks.empty());
  CHECK(cast.channel_err2 == std::vector<double>(32, 0.0));  // every value is exact in BF16
  const ChannelStats fp8 = compute_channel_stats(x, quantize_cpu(x, preset("fp8-e4m3-tensor").spec));
  REQUIRE(fp8.block_nmse.size() == 1);
  CHECK(fp8.worst_blocks == std::vector<std::int64_t>{0});
  Matrix z(16, 32);
  const ChannelStats zero = compute_channel_stats(z, quantize_cpu(z, nvfp4_rows()));
  CHECK(zero.blocks_with_energy == 0);
  CHECK(std::isnan(zero.block_nmse[0]));
  CHECK(zero.nmse_original_basis == 0.0);
}

TEST_CASE("channel stats: the RHT, original against transformed basis") {
  SECTION("the inverse is H^T, and undoes the transform") {
    RhtSpec r;
    r.size = 16;
    r.signs = RhtSigns::Te;
    const Matrix x = normal_matrix(32, 48, 7);
    const std::vector<double> H = rht_matrix(r);
    for (int axis : {0, 1}) {
      const std::vector<double> y(x.data.begin(), x.data.end());
      const std::vector<double> back = inverse_rht_double(y, x.rows, x.cols, r, axis);
      // Oracle: each run v -> v H^T with the explicit matrix.
      for (std::int64_t o = 0; o < (axis == 0 ? x.cols : x.rows); ++o)
        for (std::int64_t k = 0; k < (axis == 0 ? x.rows : x.cols) / 16; ++k)
          for (int i = 0; i < 16; ++i) {
            double v = 0;
            for (int j = 0; j < 16; ++j)
              v += (axis == 0 ? x(k * 16 + j, o) : x(o, k * 16 + j)) * H[static_cast<std::size_t>(i * 16 + j)];
            const double got = axis == 0 ? back[static_cast<std::size_t>((k * 16 + i) * x.cols + o)]
                                         : back[static_cast<std::size_t>(o * x.cols + k * 16 + i)];
            REQUIRE(std::fabs(got - v) <= 1e-14);
          }
      const std::vector<double> t = apply_rht_double(x, r, axis), round = inverse_rht_double(t, x.rows, x.cols, r, axis);
      for (std::size_t i = 0; i < round.size(); ++i) REQUIRE(std::fabs(round[i] - x.data[i]) <= 1e-14);
    }
    CHECK_THROWS_AS(inverse_rht_double(std::vector<double>(40 * 3), 40, 3, r, 0), std::invalid_argument);
  }

  // An outlier channel among normal ones, quantized after an RHT-16 along either axis.
  Matrix x = normal_matrix(64, 64, 11);
  for (std::int64_t r = 0; r < x.rows; ++r) x(r, 5) *= 50.0f;
  for (int axis : {0, 1}) {
    INFO("rht_axis " << axis);
    QuantSpec s = nvfp4_rows();
    s.rht.size = 16;
    s.rht.signs = RhtSigns::Te;
    s.rht_axis = axis;
    const QuantizedTensor q = quantize_cpu(x, s);
    const ChannelStats c = compute_channel_stats(x, q);
    // Oracle of the original basis: x_hat H^T by the explicit matrix, in double.
    const std::vector<double> H = rht_matrix(s.rht);
    std::vector<double> ce(64, 0.0), cr(64, 0.0);
    for (std::int64_t i = 0; i < 64; ++i)
      for (std::int64_t j = 0; j < 64; ++j) {
        double v = 0;
        for (int t = 0; t < 16; ++t) {
          const std::int64_t ri = axis == 0 ? (i / 16) * 16 + t : i, cj = axis == 0 ? j : (j / 16) * 16 + t;
          const int a = static_cast<int>(axis == 0 ? i % 16 : j % 16);
          v += static_cast<double>(q.dequantized(ri, cj)) * H[static_cast<std::size_t>(a * 16 + t)];
        }
        const double e = v - x(i, j);
        ce[static_cast<std::size_t>(j)] += e * e;
        cr[static_cast<std::size_t>(j)] += static_cast<double>(x(i, j)) * x(i, j);
      }
    for (int j = 0; j < 64; ++j) {
      CHECK(close(c.channel_err2[j], ce[j], 1e-10));
      CHECK(close(c.channel_ref2[j], cr[j], 1e-12));
    }
    // Derived identity: H is orthonormal, so the global NMSE is the same in both bases up to
    // double rounding (QuantStats::nmse is taken against the transform).
    CHECK(close(c.nmse_original_basis, q.stats.nmse, 1e-12));
    const auto max_rel_diff = [](const std::vector<double>& a, const std::vector<double>& b) {
      double m = 0;
      for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]) / std::max(a[i], b[i]));
      return m;
    };
    const double ch = max_rel_diff(c.channel_err2, c.channel_err2_transformed),
                 rows = max_rel_diff(c.row_err2, c.row_err2_transformed);
    if (axis == 1) {
      // Along the channels the transform mixes the outlier channel into its 15 neighbours: the
      // outlier's error in the original basis is not its error in the transformed one.
      CHECK(ch > 0.1);
    } else {
      // Along the tokens each channel is transformed within itself: channel sums agree, rows do not.
      CHECK(ch < 1e-12);
      CHECK(rows > 0.1);
    }
  }
}

TEST_CASE("channel stats: the same bits for 1 and 3 threads") {
  const ParallelWorkThreshold every_loop_parallel(0);  // small tensors: the threads must take part
  Matrix x = normal_matrix(257, 160, 3);
  for (std::int64_t r = 0; r < x.rows; ++r) x(r, 9) *= 30.0f;
  for (const char* p : {"nvfp4", "nvfp4-col", "nvfp4-2d", "mxfp4", "fp8-e4m3-1x128"}) {
    INFO(p);
    const QuantizedTensor q = quantize_cpu(x, preset(p).spec);
    omp_set_num_threads(1);
    const ChannelStats a = compute_channel_stats(x, q);
    omp_set_num_threads(3);
    const ChannelStats b = compute_channel_stats(x, q);
    CHECK(same_bits(a.channel_err2, b.channel_err2));
    CHECK(same_bits(a.row_err2, b.row_err2));
    CHECK(same_bits(a.block_nmse, b.block_nmse));
    CHECK(std::memcmp(&a.nmse_original_basis, &b.nmse_original_basis, sizeof(double)) == 0);
    CHECK(a.worst_blocks == b.worst_blocks);
  }
  Matrix xr = normal_matrix(256, 160, 4);
  const QuantizedTensor q = quantize_cpu(xr, preset("nvfp4-rht").spec);
  omp_set_num_threads(1);
  const ChannelStats a = compute_channel_stats(xr, q);
  omp_set_num_threads(3);
  const ChannelStats b = compute_channel_stats(xr, q);
  CHECK(same_bits(a.channel_err2, b.channel_err2));
  CHECK(same_bits(a.row_err2_transformed, b.row_err2_transformed));
  omp_set_num_threads(omp_get_num_procs());
}

TEST_CASE("channel list: indices and ranges; bad lists are refused naming the item") {
  const std::vector<std::uint8_t> m = parse_channel_list("1,3-5,9", 10);
  CHECK(m == std::vector<std::uint8_t>{0, 1, 0, 1, 1, 1, 0, 0, 0, 1});
  const auto msg = [](const std::string& list) {
    try {
      parse_channel_list(list, 10);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(msg("10").find("out of range") != std::string::npos);
  CHECK(msg("2,2").find("listed twice") != std::string::npos);
  CHECK(msg("1-3,3").find("listed twice") != std::string::npos);
  CHECK(msg("5-3").find("empty") != std::string::npos);
  CHECK(msg("a").find("'a'") != std::string::npos);
  CHECK(msg("1,").find("not an index") != std::string::npos);
  CHECK(msg("-1").find("not an index") != std::string::npos);
  CHECK(msg("").find("empty") != std::string::npos);
}

TEST_CASE("generator: the outlier mask is the set of columns generate() scaled") {
  GeneratorSpec g;
  g.kind = "outliers";
  g.rows = 8, g.cols = 300, g.seed = 5, g.outlier_fraction = 0.02, g.outlier_scale = 50;
  const std::vector<std::uint8_t> mask = outlier_channel_mask(g);
  REQUIRE(mask.size() == 300);
  CHECK(std::count(mask.begin(), mask.end(), 1) == 6);  // round(0.02 * 300)
  const Matrix o = generate(g);
  GeneratorSpec n = g;
  n.kind = "normal";
  const Matrix base = generate(n);
  for (std::int64_t c = 0; c < g.cols; ++c)
    for (std::int64_t r = 0; r < g.rows; ++r)
      REQUIRE(o(r, c) == (mask[static_cast<std::size_t>(c)] ? static_cast<float>(base(r, c) * 50.0) : base(r, c)));
  CHECK(outlier_channel_mask(n).empty());
  g.outlier_fraction = 0;
  CHECK_THROWS_AS(outlier_channel_mask(g), std::invalid_argument);
}

TEST_CASE("gemm: per-row errors recombine to the global one; outlier splits at their limits") {
  GemmOperands ops;
  ops.first_name = "X", ops.second_name = "W";
  ops.first = normal_matrix(32, 64, 21);
  ops.second = normal_matrix(48, 64, 22);
  for (std::int64_t r = 0; r < 32; ++r) ops.first(r, 3) *= 40.0f;
  GemmExperimentOptions opt;
  for (GemmRole role : {GemmRole::Fprop, GemmRole::Wgrad}) {
    INFO("role " << static_cast<int>(role));
    ops.role = role;
    if (role == GemmRole::Wgrad) ops.second = normal_matrix(32, 48, 23);  // dY: M x N
    const std::int64_t channels = ops.first.cols;
    ops.first_channel_mask.assign(static_cast<std::size_t>(channels), 0);
    ops.first_channel_mask[3] = 1;
    const GemmResult r = run_gemm_experiment(ops, gemm_recipe("nvfp4"), opt);
    const GemmChannelErrors& c = r.channels;
    REQUIRE(c.row_rel[0].size() == static_cast<std::size_t>(r.rows));
    REQUIRE(c.col_rel[1].size() == static_cast<std::size_t>(r.cols));
    // sum_i rel_i^2 ||C_i||^2 = ||E||^2: the rows recombine to the global relative error.
    double e2[3] = {0, 0, 0}, e2c[3] = {0, 0, 0}, r2 = 0;
    std::vector<double> row2(static_cast<std::size_t>(r.rows), 0.0), col2(static_cast<std::size_t>(r.cols), 0.0);
    for (std::int64_t i = 0; i < r.rows; ++i)
      for (std::int64_t j = 0; j < r.cols; ++j) {
        const double v = r.exact[static_cast<std::size_t>(i * r.cols + j)];
        row2[static_cast<std::size_t>(i)] += v * v;
        col2[static_cast<std::size_t>(j)] += v * v;
        r2 += v * v;
      }
    for (int t = 0; t < 3; ++t) {
      for (std::int64_t i = 0; i < r.rows; ++i) e2[t] += c.row_rel[t][i] * c.row_rel[t][i] * row2[i];
      for (std::int64_t j = 0; j < r.cols; ++j) e2c[t] += c.col_rel[t][j] * c.col_rel[t][j] * col2[j];
    }
    const ErrorStats* g[3] = {&r.total, &r.quantization, &r.accumulation};
    for (int t = 0; t < 3; ++t) {
      CHECK(close(std::sqrt(e2[t] / r2), g[t]->rel_frobenius, 1e-12));
      CHECK(close(std::sqrt(e2c[t] / r2), g[t]->rel_frobenius, 1e-12));
    }
    CHECK(c.outlier_channels == 1);
    if (role == GemmRole::Fprop) {
      REQUIRE(c.outlier_axis == "reduction");
      CHECK(c.quantization_from_outlier_rel >= 0);
      // Every channel an outlier: the outlier part is the whole quantization term (computed
      // in double against an exactly rounded reference: agreement to rounding).
      ops.first_channel_mask.assign(static_cast<std::size_t>(channels), 1);
      const GemmResult all = run_gemm_experiment(ops, gemm_recipe("nvfp4"), opt);
      CHECK(close(all.channels.quantization_from_outlier_rel, all.quantization.rel_frobenius, 1e-10));
      CHECK(all.channels.quantization_from_normal_rel < 1e-10 * all.quantization.rel_frobenius);
      ops.first_channel_mask.assign(static_cast<std::size_t>(channels), 0);
      const GemmResult none = run_gemm_experiment(ops, gemm_recipe("nvfp4"), opt);
      CHECK(none.channels.quantization_from_outlier_rel == 0.0);
      CHECK(none.channels.quantization_from_normal_rel == none.quantization.rel_frobenius);
    } else {
      REQUIRE(c.outlier_axis == "output_rows");
      // The outlier row's error is row 3's.
      for (int t = 0; t < 3; ++t) CHECK(close(c.outlier_rows_rel[t], c.row_rel[t][3], 1e-14));
      ops.first_channel_mask.assign(static_cast<std::size_t>(channels), 1);
      const GemmResult all = run_gemm_experiment(ops, gemm_recipe("nvfp4"), opt);
      CHECK(close(all.channels.outlier_rows_rel[0], all.total.rel_frobenius, 1e-12));
      CHECK(all.channels.normal_rows_rel[0] == -1);
    }
  }
  ops.first_channel_mask.clear();
  ops.role = GemmRole::Fprop;
  ops.second = normal_matrix(48, 64, 22);
  CHECK(run_gemm_experiment(ops, gemm_recipe("bf16"), opt).channels.outlier_axis == "none");
}
