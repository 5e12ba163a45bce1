#include "sim/gemm_experiment.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "format/e2m1.hpp"
#include "quant/gemm_emulated.hpp"
#include "quant/nvfp4.hpp"
#include "quant/quantize.hpp"
#include "quant/presets.hpp"
#include "quant/ref_operand.hpp"
#include "ref/exact_block_gemm.hpp"

namespace fp4d {

void expected_shapes(GemmRole role, std::int64_t M, std::int64_t N, std::int64_t K, std::int64_t* r1,
                     std::int64_t* c1, std::int64_t* r2, std::int64_t* c2) {
  switch (role) {
    case GemmRole::Fprop: *r1 = M, *c1 = K, *r2 = N, *c2 = K; break;   // X, W
    case GemmRole::Dgrad: *r1 = M, *c1 = N, *r2 = N, *c2 = K; break;   // dY, W
    case GemmRole::Wgrad: *r1 = M, *c1 = K, *r2 = M, *c2 = N; break;   // X, dY
  }
}


namespace {

ref::ExactValue exact_of_float(float f) {
  std::int64_t sig;
  std::int32_t e;
  float_to_sig_exp(f, sig, e);
  return ref::ExactValue{sig, e};
}

ref::ExactValue exact_sub(const ref::ExactValue& a, const ref::ExactValue& b) {
  if (a.is_zero()) return ref::ExactValue{-b.significand, b.exponent};
  if (b.is_zero()) return a;
  const std::int64_t e = std::min(a.exponent, b.exponent);
  return ref::ExactValue{(a.significand << static_cast<unsigned>(a.exponent - e)) -
                             (b.significand << static_cast<unsigned>(b.exponent - e)),
                         e};
}

bool exact_equal(const ref::ExactValue& a, const ref::ExactValue& b) { return exact_sub(a, b).is_zero(); }

ErrorStats error_stats(const std::vector<double>& e, const std::vector<double>& reference) {
  ErrorStats s;
  double e2 = 0, r2 = 0, sum = 0;
  for (std::size_t i = 0; i < e.size(); ++i) {
    e2 += e[i] * e[i];
    r2 += reference[i] * reference[i];
    sum += e[i];
    s.max_abs = std::max(s.max_abs, std::fabs(e[i]));
  }
  s.rel_frobenius = r2 > 0 ? std::sqrt(e2 / r2) : (e2 > 0 ? INFINITY : 0.0);
  s.bias = e.empty() ? 0.0 : sum / static_cast<double>(e.size());
  return s;
}

ref::BlockOperand exact_operand(const QuantizedTensor& q) {
  if (q.spec.scheme != Scheme::Cast) return block_operand(q);
  const Matrix d = stored_dequantized(q);
  std::vector<double> v(d.data.begin(), d.data.end());
  return ref::block_operand_from_doubles(v.data(), d.rows, d.cols);
}

// T_ij = sum_k |a_ik b_jk| over the dequantized operands, in double (a magnitude for a log2).
std::vector<double> product_magnitudes(const QuantizedTensor& a, const QuantizedTensor& b) {
  const Matrix da = stored_dequantized(a), db = stored_dequantized(b);
  const std::int64_t M = da.rows, N = db.rows, K = da.cols;
  std::vector<double> t(static_cast<std::size_t>(M * N), 0.0);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (std::int64_t k = 0; k < K; ++k) s += std::fabs(static_cast<double>(da(i, k)) * static_cast<double>(db(j, k)));
      t[static_cast<std::size_t>(i * N + j)] = s;
    }
  return t;
}

AccumulationBits accumulation_bits(const std::vector<double>& err, const std::vector<double>& mag) {
  AccumulationBits b;
  std::vector<double> bits;
  bits.reserve(err.size());
  std::size_t exact = 0;
  for (std::size_t i = 0; i < err.size(); ++i) {
    if (!(mag[i] > 0)) continue;
    if (err[i] == 0) {
      ++exact;
      bits.push_back(AccumulationBits::kCappedBits);
    } else {
      bits.push_back(std::min(AccumulationBits::kCappedBits, -std::log2(std::fabs(err[i]) / mag[i])));
    }
  }
  if (bits.empty()) return b;
  std::sort(bits.begin(), bits.end());
  const auto at = [&](double q) { return bits[static_cast<std::size_t>(q * static_cast<double>(bits.size() - 1))]; };
  b.min = bits.front();
  b.p01 = at(0.01);
  b.median = at(0.5);
  b.exact_fraction = static_cast<double>(exact) / static_cast<double>(bits.size());
  return b;
}

Matrix computed_product(const QuantizedTensor& a, const QuantizedTensor& b, const EmulatedGemmOptions& opt) {
  if (a.spec.scheme == Scheme::Cast) return gemm_dequantized_fp32(a, b, opt);
  return gemm_block_scaled_emulated(a, b, opt);
}

// The SR operand's values before element rounding, in the stored orientation: the RHT's output
// where there is one, else the input.
Matrix unrounded_stored(const QuantizedTensor& q, const Matrix& input) {
  const Matrix& x = q.spec.rht.enabled() ? q.transformed : input;
  return q.spec.stored_transposed() ? transpose(x) : x;
}

// The exact values of a quantized NVFP4 operand (codes x block scale x global decode scale,
// stored orientation) in double: at most 2 + 4 + 24 significant bits, so exact.
std::vector<double> exact_nvfp4_values(const QuantizedTensor& q) {
  std::vector<double> v(static_cast<std::size_t>(q.rows * q.cols));
  const std::int64_t br = q.spec.is_2d() ? q.spec.block_rows : 1, bc = q.spec.block_cols;
  for (std::int64_t r = 0; r < q.rows; ++r)
    for (std::int64_t k = 0; k < q.cols; ++k)
      v[static_cast<std::size_t>(r * q.cols + k)] =
          static_cast<double>(e2m1_decode(q.code_at(r, k))) *
          static_cast<double>(q.scale_values[static_cast<std::size_t>((r / br) * q.scale_cols + k / bc)]) *
          static_cast<double>(q.global.decode);
  return v;
}

// The product an unbiased SR operand averages to, exactly (rounded to double): the SR operand
// unrounded times the other, deterministic operand's exact quantized values. Empty unless
// exactly one NVFP4 operand is stochastically rounded.
std::vector<double> sr_unbiased_target(const QuantizedTensor& qa, const QuantizedTensor& qb, const Matrix& A,
                                       const Matrix& B) {
  const bool sa = qa.spec.rounding.mode == Rounding::Stochastic, sb = qb.spec.rounding.mode == Rounding::Stochastic;
  if (sa == sb || qa.spec.scheme != Scheme::Nvfp4 || qb.spec.scheme != Scheme::Nvfp4) return {};
  const Matrix u = unrounded_stored(sa ? qa : qb, sa ? A : B);
  const std::vector<double> ud(u.data.begin(), u.data.end()), det = exact_nvfp4_values(sa ? qb : qa);
  const QuantizedTensor& qd = sa ? qb : qa;
  const ref::BlockOperand ou = ref::block_operand_from_doubles(ud.data(), u.rows, u.cols),
                          od = ref::block_operand_from_doubles(det.data(), qd.rows, qd.cols);
  return sa ? ref::exact_block_gemm_nt(ou, od).rounded : ref::exact_block_gemm_nt(od, ou).rounded;
}

// Per-row and per-column relative errors of the three terms, and the split by the first
// operand's outlier channels (GemmChannelErrors).
double rel(double e2, double r2) { return r2 > 0 ? std::sqrt(e2 / r2) : (e2 > 0 ? INFINITY : 0.0); }

GemmChannelErrors channel_errors(const std::vector<double>* terms, const std::vector<double>& exact, std::int64_t R,
                                 std::int64_t C, const std::vector<std::uint8_t>& mask, GemmRole role,
                                 const QuantizedTensor& qa, const QuantizedTensor& qb, const Matrix& A, const Matrix& B) {
  GemmChannelErrors g;
  constexpr int T = GemmChannelErrors::kTerms;
  std::vector<double> rr2(static_cast<std::size_t>(R), 0.0), cr2(static_cast<std::size_t>(C), 0.0);
  for (int t = 0; t < T; ++t) {
    g.row_rel[t].assign(static_cast<std::size_t>(R), 0.0);
    g.col_rel[t].assign(static_cast<std::size_t>(C), 0.0);
  }
  // Row-major, serial: every sum runs in one fixed order.
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t j = 0; j < C; ++j) {
      const std::size_t k = static_cast<std::size_t>(i * C + j);
      rr2[static_cast<std::size_t>(i)] += exact[k] * exact[k];
      cr2[static_cast<std::size_t>(j)] += exact[k] * exact[k];
      for (int t = 0; t < T; ++t) {
        const double e = terms[t][k];
        g.row_rel[t][static_cast<std::size_t>(i)] += e * e;
        g.col_rel[t][static_cast<std::size_t>(j)] += e * e;
      }
    }
  if (!mask.empty()) {
    g.outlier_channels = 0;
    for (std::uint8_t m : mask) g.outlier_channels += m != 0;
    if (role == GemmRole::Wgrad) {
      g.outlier_axis = "output_rows";
      if (static_cast<std::int64_t>(mask.size()) != R) throw std::invalid_argument("the X channel mask does not match the rows of C");
      double so[T] = {0, 0, 0}, sn[T] = {0, 0, 0}, ro = 0, rn = 0;
      for (std::int64_t i = 0; i < R; ++i) {
        const bool out = mask[static_cast<std::size_t>(i)] != 0;
        (out ? ro : rn) += rr2[static_cast<std::size_t>(i)];
        for (int t = 0; t < T; ++t) (out ? so : sn)[t] += g.row_rel[t][static_cast<std::size_t>(i)];
      }
      for (int t = 0; t < T; ++t) {
        g.outlier_rows_rel[t] = g.outlier_channels > 0 ? rel(so[t], ro) : -1;
        g.normal_rows_rel[t] = g.outlier_channels < R ? rel(sn[t], rn) : -1;
      }
    } else {
      g.outlier_axis = "reduction";
      const std::int64_t K = A.cols;
      if (static_cast<std::int64_t>(mask.size()) != K) throw std::invalid_argument("the channel mask does not match K");
      const bool same_layout = qa.rows == A.rows && qa.cols == K && qb.rows == B.rows && qb.cols == K;
      if (same_layout && !qa.spec.rht.enabled() && !qb.spec.rht.enabled()) {
        const auto values = [](const QuantizedTensor& q) {
          if (q.spec.scheme == Scheme::Nvfp4) return exact_nvfp4_values(q);
          const Matrix d = stored_dequantized(q);
          return std::vector<double>(d.data.begin(), d.data.end());
        };
        const std::vector<double> va = values(qa), vb = values(qb);
        std::vector<std::int64_t> S;
        for (std::int64_t k = 0; k < K; ++k)
          if (mask[static_cast<std::size_t>(k)]) S.push_back(k);
        double o2 = 0, n2 = 0, r2 = 0;
        for (std::int64_t i = 0; i < R; ++i)
          for (std::int64_t j = 0; j < C; ++j) {
            double o = 0;
            for (std::int64_t k : S) {
              const std::size_t ia = static_cast<std::size_t>(i * K + k), ib = static_cast<std::size_t>(j * K + k);
              o += va[ia] * vb[ib] - static_cast<double>(A.data[ia]) * static_cast<double>(B.data[ib]);
            }
            const std::size_t c = static_cast<std::size_t>(i * C + j);
            const double nrm = terms[1][c] - o;
            o2 += o * o;
            n2 += nrm * nrm;
            r2 += exact[c] * exact[c];
          }
        g.quantization_from_outlier_rel = rel(o2, r2);
        g.quantization_from_normal_rel = rel(n2, r2);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    for (std::int64_t i = 0; i < R; ++i)
      g.row_rel[t][static_cast<std::size_t>(i)] = rel(g.row_rel[t][static_cast<std::size_t>(i)], rr2[static_cast<std::size_t>(i)]);
    for (std::int64_t j = 0; j < C; ++j)
      g.col_rel[t][static_cast<std::size_t>(j)] = rel(g.col_rel[t][static_cast<std::size_t>(j)], cr2[static_cast<std::size_t>(j)]);
  }
  return g;
}

}  // namespace

GemmResult run_gemm_experiment(const GemmOperands& ops, const GemmRecipe& recipe, const GemmExperimentOptions& opt) {
  if (opt.draws < 1) throw std::invalid_argument("the number of SR draws must be >= 1");
  // NT form of the two operands and their kinds.
  Matrix A, B;
  OperandKind ka{}, kb{};
  const bool wgrad = ops.role == GemmRole::Wgrad;
  switch (ops.role) {
    case GemmRole::Fprop: A = ops.first, B = ops.second, ka = OperandKind::Activation, kb = OperandKind::Weight; break;
    case GemmRole::Dgrad: A = ops.first, B = transpose(ops.second), ka = OperandKind::Gradient, kb = OperandKind::Weight; break;
    case GemmRole::Wgrad:
      A = transpose(ops.first), B = transpose(ops.second), ka = OperandKind::Activation, kb = OperandKind::Gradient;
      break;
  }
  if (A.cols != B.cols)
    throw std::invalid_argument("operands do not share the reduction dimension: " + std::to_string(A.cols) + " vs " +
                                std::to_string(B.cols));

  GemmResult r;
  r.recipe = recipe.name;
  r.accumulator = opt.product ? "device" : to_string(opt.emulation.accumulator);
  if (opt.product) r.product_path = opt.product_path.empty() ? "external" : opt.product_path;
  r.role = ops.role;
  r.rows = A.rows;
  r.cols = B.rows;
  const auto stream_base = static_cast<std::uint64_t>(ops.role) * 16;

  // Exact product of the unquantized operands (float32 values, exactly).
  std::vector<double> ad(A.data.begin(), A.data.end()), bd(B.data.begin(), B.data.end());
  ref::ExactGemmOptions keep;
  keep.keep_exact = true;
  const auto progress_of = [&](const char* which) {
    ref::ExactGemmOptions o = keep;
    if (opt.exact_progress) o.progress = [&opt, which](std::int64_t d, std::int64_t m) { opt.exact_progress(which, d, m); };
    return o;
  };
  const ref::ExactGemmResult exact = ref::exact_block_gemm_nt(ref::block_operand_from_doubles(ad.data(), A.rows, A.cols),
                                                              ref::block_operand_from_doubles(bd.data(), B.rows, B.cols),
                                                              progress_of("operands"));
  r.exact = exact.rounded;

  const std::size_t n = static_cast<std::size_t>(r.rows * r.cols);
  std::vector<double> sum(n, 0.0), sum2(n, 0.0);
  r.draws = (recipe.sr_gradients && recipe.kind == GemmRecipe::Kind::Nvfp4) ? opt.draws : 1;
  for (int d = 0; d < r.draws; ++d) {
    const std::uint64_t seed = opt.seed + static_cast<std::uint64_t>(d);
    QuantizedTensor qa = quantize_cpu(A, gemm_operand_spec(recipe, ka, wgrad, seed, stream_base + 1));
    QuantizedTensor qb = quantize_cpu(B, gemm_operand_spec(recipe, kb, wgrad, seed, stream_base + 2));
    const Matrix c = opt.product ? opt.product(qa, qb) : computed_product(qa, qb, opt.emulation);
    if (c.rows != r.rows || c.cols != r.cols) throw std::runtime_error("the GEMM backend returned a product of the wrong shape");
    for (std::size_t i = 0; i < n; ++i) {
      sum[i] += c.data[i];
      sum2[i] += static_cast<double>(c.data[i]) * c.data[i];
    }
    if (d == 0) {
      r.computed = c.data;
      r.qa = std::move(qa);
      r.qb = std::move(qb);
    }
  }

  // Exact product of the quantized operands, and the split in exact arithmetic.
  const ref::ExactGemmResult exact_q = ref::exact_block_gemm_nt(exact_operand(r.qa), exact_operand(r.qb), progress_of("quantized operands"));
  r.exact_quantized = exact_q.rounded;
  std::vector<double> et(n), eq(n), ea(n);
  for (std::size_t i = 0; i < n; ++i) {
    const ref::ExactValue c = exact_of_float(r.computed[i]);
    const ref::ExactValue t = exact_sub(c, exact.exact[i]), q = exact_sub(exact_q.exact[i], exact.exact[i]),
                          a = exact_sub(c, exact_q.exact[i]);
    const ref::ExactValue qa_sum = exact_sub(q, ref::ExactValue{-a.significand, a.exponent});  // q + a
    r.split_exact = r.split_exact && exact_equal(t, qa_sum);
    et[i] = t.to_double();
    eq[i] = q.to_double();
    ea[i] = a.to_double();
  }
  {
    const Matrix c2 = gemm_dequantized_fp32(r.qa, r.qb);
    std::vector<double> e2(n);
    for (std::size_t i = 0; i < n; ++i) e2[i] = exact_sub(exact_of_float(c2.data[i]), exact_q.exact[i]).to_double();
    r.accumulation_dequant_fp32 = error_stats(e2, r.exact);
    const std::vector<double> mag = product_magnitudes(r.qa, r.qb);
    r.accumulation_bits = accumulation_bits(ea, mag);
    r.accumulation_bits_dequant_fp32 = accumulation_bits(e2, mag);
  }
  r.total = error_stats(et, r.exact);
  r.quantization = error_stats(eq, r.exact);
  r.accumulation = error_stats(ea, r.exact);
  {
    const std::vector<double> terms[GemmChannelErrors::kTerms] = {std::move(et), std::move(eq), std::move(ea)};
    r.channels = channel_errors(terms, r.exact, r.rows, r.cols, ops.first_channel_mask, ops.role, r.qa, r.qb, A, B);
  }

  // The accumulation split once more, against sequential FP32: accumulation =
  // (fp32-sequential - exact) + (computed - fp32-sequential), the second part being what the
  // tensor cores' (or the chosen model's) accumulation adds.
  {
    const Matrix seq = computed_product(r.qa, r.qb, EmulatedGemmOptions{});
    std::vector<double> es(n), eb(n);
    for (std::size_t i = 0; i < n; ++i) {
      const ref::ExactValue cs = exact_of_float(seq.data[i]);
      const ref::ExactValue s_part = exact_sub(cs, exact_q.exact[i]), b_part = exact_sub(exact_of_float(r.computed[i]), cs);
      es[i] = s_part.to_double();
      eb[i] = b_part.to_double();
    }
    r.accumulation_fp32_sequential = error_stats(es, r.exact);
    r.accumulation_beyond_fp32_sequential = error_stats(eb, r.exact);
  }
  // A device product checked against the CPU's model of its arithmetic.
  if (opt.product && opt.check_model) {
    const Matrix model = computed_product(r.qa, r.qb, opt.emulation);
    r.model_mismatches = 0;
    for (std::size_t i = 0; i < n; ++i)
      r.model_mismatches += std::memcmp(&model.data[i], &r.computed[i], sizeof(float)) != 0;
  }

  if (r.draws > 1) {
    // SR's own bias is measured against the product SR is unbiased for: the SR operand as the
    // quantizer saw it (unrounded) times the other operand as quantized (deterministic, the
    // same in every draw). What separates that product from the exact one is the deterministic
    // operand's rounding, reported apart.
    const std::vector<double> sr_target = sr_unbiased_target(r.qa, r.qb, A, B);
    double bias2 = 0, own2 = 0, det2 = 0, var = 0, ref2 = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double mean = sum[i] / r.draws;
      bias2 += (mean - r.exact[i]) * (mean - r.exact[i]);
      if (!sr_target.empty()) {
        own2 += (mean - sr_target[i]) * (mean - sr_target[i]);
        det2 += (sr_target[i] - r.exact[i]) * (sr_target[i] - r.exact[i]);
      }
      var += std::max(0.0, (sum2[i] - r.draws * mean * mean) / (r.draws - 1));
      ref2 += r.exact[i] * r.exact[i];
    }
    r.sr_rel_bias = ref2 > 0 ? std::sqrt(bias2 / ref2) : 0.0;
    r.sr_rel_std = ref2 > 0 ? std::sqrt(var / ref2) : 0.0;
    r.sr_mean_rel_noise = r.sr_rel_std / std::sqrt(static_cast<double>(r.draws));
    if (!sr_target.empty() && ref2 > 0) {
      r.sr_own_rel_bias = std::sqrt(own2 / ref2);
      r.sr_deterministic_rel_bias = std::sqrt(det2 / ref2);
    }
  }
  return r;
}

}  // namespace fp4d
