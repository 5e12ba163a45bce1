#include "ref/exact_block_gemm.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>

namespace fp4d::ref {

namespace {

using i128 = __int128;
using u128 = unsigned __int128;

inline int bitlen_u64(std::uint64_t x) { return x ? 64 - std::countl_zero(x) : 0; }
inline std::uint64_t uabs64(std::int64_t x) {
  return x < 0 ? std::uint64_t(0) - static_cast<std::uint64_t>(x) : static_cast<std::uint64_t>(x);
}
inline int ceil_log2(std::int64_t n) { return n <= 1 ? 0 : bitlen_u64(static_cast<std::uint64_t>(n - 1)); }

// An operand in the form the kernels use: blocks of `bs` elements (K padded with zeros to
// nb * bs), each element an integer relative to its block's exponent.
struct Prepared {
  std::int64_t rows = 0, nb = 0, bs = 0, kp = 0;
  bool small = false;               // elements in e16 (|x| <= 32767), else in e64
  std::vector<std::int16_t> e16;
  std::vector<std::int64_t> e64;
  std::vector<std::int64_t> ssig;   // 0: block contributes nothing
  std::vector<std::int32_t> sexp;   // exponent of the block's unit
  std::uint64_t max_elem = 0;       // max |element integer|
  int scale_bits = 0;               // max bit length of |ssig|
  std::int64_t min_exp = std::numeric_limits<std::int64_t>::max();
  std::int64_t max_exp = std::numeric_limits<std::int64_t>::min();
};

Prepared prepare(const BlockOperand& op, int bs, const char* name) {
  op.validate();
  if (op.block % bs != 0) throw std::logic_error("prepare: block length does not divide");
  Prepared p;
  p.rows = op.rows;
  p.bs = bs;
  p.nb = (op.cols + bs - 1) / bs;
  p.kp = p.nb * bs;
  const std::int64_t onb = op.blocks_per_row();
  const bool has_exp = !op.exp.empty();
  // Element integers and block exponents.
  std::vector<std::int64_t> ints(static_cast<std::size_t>(p.rows * p.kp), 0);
  p.ssig.assign(static_cast<std::size_t>(p.rows * p.nb), 0);
  p.sexp.assign(static_cast<std::size_t>(p.rows * p.nb), 0);
  for (std::int64_t r = 0; r < p.rows; ++r) {
    for (std::int64_t b = 0; b < p.nb; ++b) {
      const std::int64_t k0 = b * bs, k1 = std::min<std::int64_t>(k0 + bs, op.cols);
      const std::int64_t ob = k0 / op.block;
      const std::int64_t s = op.scale_sig[static_cast<std::size_t>(r * onb + ob)];
      int min_e = 0;
      bool any = false;
      if (has_exp) {
        min_e = std::numeric_limits<int>::max();
        for (std::int64_t k = k0; k < k1; ++k)
          if (op.sig[static_cast<std::size_t>(r * op.cols + k)] != 0) {
            min_e = std::min<int>(min_e, op.exp[static_cast<std::size_t>(r * op.cols + k)]);
            any = true;
          }
      } else {
        for (std::int64_t k = k0; k < k1 && !any; ++k) any = op.sig[static_cast<std::size_t>(r * op.cols + k)] != 0;
      }
      if (!any || s == 0) continue;  // the block contributes nothing
      for (std::int64_t k = k0; k < k1; ++k) {
        const std::int64_t v = op.sig[static_cast<std::size_t>(r * op.cols + k)];
        std::int64_t x = v;
        if (has_exp && v != 0) {
          const int sh = op.exp[static_cast<std::size_t>(r * op.cols + k)] - min_e;
          if (sh + bitlen_u64(uabs64(v)) > 62)
            throw std::overflow_error(std::string("exact_block_gemm: the elements of one block of operand ") + name +
                                      " (row " + std::to_string(r) + ", block " + std::to_string(b) + ") span " +
                                      std::to_string(sh) + " binades: more than a 62-bit block integer holds");
          x = v * (std::int64_t(1) << sh);
        }
        ints[static_cast<std::size_t>(r * p.kp + (k - k0) + b * bs)] = x;
        p.max_elem = std::max(p.max_elem, uabs64(x));
      }
      const std::int64_t e = std::int64_t(op.scale_exp[static_cast<std::size_t>(r * onb + ob)]) + op.exp_base + min_e;
      if (e > std::numeric_limits<std::int32_t>::max() / 2 || e < std::numeric_limits<std::int32_t>::min() / 2)
        throw std::overflow_error(std::string("exact_block_gemm: block exponent out of range in operand ") + name);
      p.ssig[static_cast<std::size_t>(r * p.nb + b)] = s;
      p.sexp[static_cast<std::size_t>(r * p.nb + b)] = static_cast<std::int32_t>(e);
      p.scale_bits = std::max(p.scale_bits, bitlen_u64(uabs64(s)));
      p.min_exp = std::min(p.min_exp, e);
      p.max_exp = std::max(p.max_exp, e);
    }
  }
  p.small = p.max_elem <= 32767;
  if (p.small) {
    p.e16.resize(ints.size());
    for (std::size_t i = 0; i < ints.size(); ++i) p.e16[i] = static_cast<std::int16_t>(ints[i]);
  } else {
    p.e64 = std::move(ints);
  }
  return p;
}

// Plan of one product: accumulator geometry and kernel choice.
struct Plan {
  bool empty = false;     // some operand has no non-zero block: C = 0
  bool fast32 = false;    // block sums in int32 from int16 elements
  bool term64 = false;    // block terms fit 62 bits
  std::int64_t emin = 0;  // exponent of accumulator bit 0
  int bits = 0, limbs = 0;
  std::int64_t g = 1;     // product of the global significands
  std::int64_t gexp = 0;
};

Plan make_plan(const Prepared& a, const Prepared& b, const BlockOperand& A, const BlockOperand& B,
               const ExactGemmOptions& opt) {
  Plan pl;
  if (a.nb >= (std::int64_t(1) << 29))
    throw std::overflow_error("exact_block_gemm: more than 2^29 blocks along K: the accumulator's lazy carries could overflow");
  const int gbits = bitlen_u64(uabs64(A.global_sig)) + bitlen_u64(uabs64(B.global_sig));
  if (gbits > 63) throw std::overflow_error("exact_block_gemm: the product of the global significands exceeds 63 bits");
  pl.g = A.global_sig * B.global_sig;
  pl.gexp = std::int64_t(A.global_exp) + B.global_exp;
  if (a.max_exp < a.min_exp || b.max_exp < b.min_exp || pl.g == 0) {
    pl.empty = true;
    return pl;
  }
  const int dot_bits = bitlen_u64(a.max_elem) + bitlen_u64(b.max_elem) + ceil_log2(a.bs);
  const int term_bits = dot_bits + a.scale_bits + b.scale_bits;
  if (term_bits > 126)
    throw std::overflow_error("exact_block_gemm: a block product needs " + std::to_string(term_bits) +
                              " bits (element and scale significands too wide): more than the 126 the kernel handles");
  pl.fast32 = a.small && b.small &&
              static_cast<u128>(a.max_elem) * b.max_elem * static_cast<std::uint64_t>(a.bs) < (u128(1) << 31);
  pl.term64 = term_bits <= 62;
  pl.emin = a.min_exp + b.min_exp;
  const std::int64_t span = (a.max_exp + b.max_exp) - pl.emin;
  const std::int64_t bits = span + term_bits + ceil_log2(a.nb + 1) + 2;
  if (bits > opt.max_accumulator_bits)
    throw std::overflow_error("exact_block_gemm: the operands' exponent range needs a " + std::to_string(bits) +
                              "-bit accumulator, more than the limit of " + std::to_string(opt.max_accumulator_bits) +
                              " (ExactGemmOptions::max_accumulator_bits)");
  pl.bits = static_cast<int>(bits);
  pl.limbs = static_cast<int>((bits + 31) / 32) + 6;
  return pl;
}

// t * 2^s added to the limbs, |t| < 2^62: three digits, each addition < 2^32 in magnitude.
inline void add64(std::int64_t* limbs, std::int64_t t, std::int64_t s) {
  const std::int64_t d = s >> 5;
  const i128 tt = static_cast<i128>(t) << (s & 31);
  limbs[d] += static_cast<std::int64_t>(static_cast<std::uint32_t>(tt));
  limbs[d + 1] += static_cast<std::int64_t>(static_cast<std::uint32_t>(tt >> 32));
  limbs[d + 2] += static_cast<std::int64_t>(tt >> 64);
}
// |t| < 2^126.
inline void add128(std::int64_t* limbs, i128 t, std::int64_t s) {
  const std::uint64_t lo = static_cast<std::uint64_t>(t);
  const std::int64_t hi = static_cast<std::int64_t>(t >> 64);
  const std::int64_t d = s >> 5;
  const u128 ll = static_cast<u128>(lo) << (s & 31);
  limbs[d] += static_cast<std::int64_t>(static_cast<std::uint32_t>(ll));
  limbs[d + 1] += static_cast<std::int64_t>(static_cast<std::uint32_t>(ll >> 32));
  limbs[d + 2] += static_cast<std::int64_t>(static_cast<std::uint32_t>(ll >> 64));
  if (hi) add64(limbs, hi, s + 64);
}

// Carries propagated, sign taken, global significand multiplied in: magnitude digits.
// Returns false for zero.
bool finalize(const std::int64_t* limbs, int L, std::uint64_t gabs, std::vector<std::uint32_t>& dig, bool& neg) {
  dig.assign(static_cast<std::size_t>(L) + 3, 0);
  std::int64_t carry = 0;
  bool nonzero = false;
  for (int i = 0; i < L; ++i) {
    const i128 v = static_cast<i128>(limbs[i]) + carry;
    dig[static_cast<std::size_t>(i)] = static_cast<std::uint32_t>(v);
    carry = static_cast<std::int64_t>(v >> 32);
    nonzero |= dig[static_cast<std::size_t>(i)] != 0;
  }
  if (carry != 0 && carry != -1) throw std::logic_error("exact_block_gemm: accumulator overflow (internal error)");
  neg = carry == -1;
  if (neg) {  // two's complement over L digits -> magnitude
    std::uint64_t c = 1;
    for (int i = 0; i < L; ++i) {
      const std::uint64_t v = static_cast<std::uint64_t>(~dig[static_cast<std::size_t>(i)]) + c;
      dig[static_cast<std::size_t>(i)] = static_cast<std::uint32_t>(v);
      c = v >> 32;
    }
    nonzero = true;
  }
  if (!nonzero) return false;
  if (gabs != 1) {
    u128 c = 0;
    for (std::size_t i = 0; i < dig.size(); ++i) {
      const u128 v = static_cast<u128>(dig[i]) * gabs + c;
      dig[i] = static_cast<std::uint32_t>(v);
      c = v >> 32;
    }
    if (c != 0) throw std::logic_error("exact_block_gemm: digit buffer too small (internal error)");
  }
  return true;
}

ExactValue to_exact(const std::vector<std::uint32_t>& dig, bool neg, std::int64_t exp) {
  ExactValue v;
  bmp::import_bits(v.significand, dig.begin(), dig.end(), 32, false);
  if (neg) v.significand = -v.significand;
  v.exponent = exp;
  return v;
}

// One dot product into the (zeroed) limbs.
template <int BS>
void dot_fast32(const Prepared& a, std::int64_t i, const Prepared& b, std::int64_t j, const Plan& pl,
                std::int64_t* limbs) {
  const std::int64_t bs = BS ? BS : a.bs;
  const std::int16_t* ar = a.e16.data() + i * a.kp;
  const std::int16_t* br = b.e16.data() + j * b.kp;
  const std::int64_t* sa = a.ssig.data() + i * a.nb;
  const std::int64_t* sb = b.ssig.data() + j * b.nb;
  const std::int32_t* ea = a.sexp.data() + i * a.nb;
  const std::int32_t* eb = b.sexp.data() + j * b.nb;
  for (std::int64_t blk = 0; blk < a.nb; ++blk) {
    if (sa[blk] == 0 || sb[blk] == 0) continue;
    const std::int16_t* x = ar + blk * bs;
    const std::int16_t* y = br + blk * bs;
    std::int32_t dot = 0;
    for (std::int64_t k = 0; k < bs; ++k) dot += static_cast<std::int32_t>(x[k]) * y[k];
    if (dot == 0) continue;
    const std::int64_t pos = std::int64_t(ea[blk]) + eb[blk] - pl.emin;
    if (pl.term64)  // |dot * sa * sb| < 2^62
      add64(limbs, dot * sa[blk] * sb[blk], pos);
    else
      add128(limbs, static_cast<i128>(dot) * sa[blk] * sb[blk], pos);
  }
}

void dot_general(const Prepared& a, std::int64_t i, const Prepared& b, std::int64_t j, const Plan& pl,
                 std::int64_t* limbs) {
  const std::int64_t bs = a.bs;
  for (std::int64_t blk = 0; blk < a.nb; ++blk) {
    const std::int64_t sa = a.ssig[static_cast<std::size_t>(i * a.nb + blk)];
    const std::int64_t sb = b.ssig[static_cast<std::size_t>(j * b.nb + blk)];
    if (sa == 0 || sb == 0) continue;
    i128 dot = 0;
    for (std::int64_t k = 0; k < bs; ++k) {
      const std::size_t ia = static_cast<std::size_t>(i * a.kp + blk * bs + k);
      const std::size_t ib = static_cast<std::size_t>(j * b.kp + blk * bs + k);
      const std::int64_t x = a.small ? a.e16[ia] : a.e64[ia];
      const std::int64_t y = b.small ? b.e16[ib] : b.e64[ib];
      dot += static_cast<i128>(x) * y;
    }
    if (dot == 0) continue;
    const std::int64_t pos = std::int64_t(a.sexp[static_cast<std::size_t>(i * a.nb + blk)]) +
                             b.sexp[static_cast<std::size_t>(j * b.nb + blk)] - pl.emin;
    add128(limbs, dot * (static_cast<i128>(sa) * sb), pos);
  }
}

void dot_any(const Prepared& a, std::int64_t i, const Prepared& b, std::int64_t j, const Plan& pl,
             std::int64_t* limbs) {
  if (pl.fast32) {
    if (a.bs == 16)
      dot_fast32<16>(a, i, b, j, pl, limbs);
    else if (a.bs == 32)
      dot_fast32<32>(a, i, b, j, pl, limbs);
    else
      dot_fast32<0>(a, i, b, j, pl, limbs);
  } else {
    dot_general(a, i, b, j, pl, limbs);
  }
}

int common_block(const BlockOperand& A, const BlockOperand& B) {
  if (A.block <= 0 || B.block <= 0) throw std::invalid_argument("exact_block_gemm: block length must be >= 1");
  const int lo = std::min(A.block, B.block), hi = std::max(A.block, B.block);
  if (hi % lo != 0)
    throw std::invalid_argument("exact_block_gemm: block lengths " + std::to_string(A.block) + " and " +
                                std::to_string(B.block) + " are not multiples of one another");
  return lo;
}

}  // namespace

void BlockOperand::validate() const {
  if (rows < 0 || cols < 0) throw std::invalid_argument("BlockOperand: negative shape");
  if (block <= 0) throw std::invalid_argument("BlockOperand: block length must be >= 1");
  const auto n = static_cast<std::size_t>(rows * cols);
  const auto nbk = static_cast<std::size_t>(rows * blocks_per_row());
  if (sig.size() != n) throw std::invalid_argument("BlockOperand: sig has " + std::to_string(sig.size()) +
                                                   " elements, expected rows*cols = " + std::to_string(n));
  if (!exp.empty() && exp.size() != n) throw std::invalid_argument("BlockOperand: exp must be empty or rows*cols");
  if (scale_sig.size() != nbk || scale_exp.size() != nbk)
    throw std::invalid_argument("BlockOperand: scale_sig/scale_exp must have rows*blocks_per_row = " +
                                std::to_string(nbk) + " entries");
}

ExactValue BlockOperand::value(std::int64_t r, std::int64_t k) const {
  const auto i = static_cast<std::size_t>(r * cols + k);
  const auto b = static_cast<std::size_t>(r * blocks_per_row() + k / block);
  ExactValue v;
  v.significand = bmp::cpp_int(sig[i]) * scale_sig[b] * global_sig;
  v.exponent = std::int64_t(exp_base) + (exp.empty() ? 0 : exp[i]) + scale_exp[b] + global_exp;
  return v;
}

ExactGemmResult exact_block_gemm_nt(const BlockOperand& A, const BlockOperand& B, const ExactGemmOptions& opt) {
  if (A.cols != B.cols)
    throw std::invalid_argument("exact_block_gemm: A has K = " + std::to_string(A.cols) + ", B has K = " +
                                std::to_string(B.cols));
  const int bs = common_block(A, B);
  const Prepared a = prepare(A, bs, "A"), b = prepare(B, bs, "B");
  const Plan pl = make_plan(a, b, A, B, opt);
  ExactGemmResult res;
  res.rows = A.rows;
  res.cols = B.rows;
  res.accumulator_bits = pl.bits;
  res.fast_path = pl.fast32;
  const std::int64_t M = A.rows, N = B.rows;
  res.rounded.assign(static_cast<std::size_t>(M * N), 0.0);
  if (opt.keep_exact) res.exact.assign(static_cast<std::size_t>(M * N), ExactValue{});
  if (pl.empty || M == 0 || N == 0) return res;
  const bool gneg = pl.g < 0;
  const std::uint64_t gabs = uabs64(pl.g);
  const std::int64_t exp0 = pl.emin + pl.gexp;
  std::atomic<std::int64_t> rows_done{0};
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_report = Clock::now();
  std::mutex reporting;  // one report at a time, by whichever thread finds one due; no one waits
#pragma omp parallel
  {
    std::vector<std::int64_t> limbs(static_cast<std::size_t>(pl.limbs));
    std::vector<std::uint32_t> dig;
#pragma omp for schedule(dynamic, 4)
    for (std::int64_t i = 0; i < M; ++i) {
      if (opt.progress && reporting.try_lock()) {
        if (std::chrono::duration<double>(Clock::now() - last_report).count() >= opt.progress_every_s) {
          last_report = Clock::now();
          opt.progress(rows_done.load(), M);
        }
        reporting.unlock();
      }
      for (std::int64_t j = 0; j < N; ++j) {
        std::fill(limbs.begin(), limbs.end(), 0);
        dot_any(a, i, b, j, pl, limbs.data());
        bool neg = false;
        if (!finalize(limbs.data(), pl.limbs, gabs, dig, neg)) continue;
        neg = neg != gneg;
        const auto o = static_cast<std::size_t>(i * N + j);
        res.rounded[o] = round_to_double(dig.data(), dig.size(), exp0, neg);
        if (opt.keep_exact) res.exact[o] = to_exact(dig, neg, exp0);
      }
      rows_done.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return res;
}

ExactValue exact_block_dot(const BlockOperand& A, std::int64_t i, const BlockOperand& B, std::int64_t j) {
  if (A.cols != B.cols) throw std::invalid_argument("exact_block_dot: K differs");
  if (i < 0 || i >= A.rows || j < 0 || j >= B.rows) throw std::invalid_argument("exact_block_dot: row out of range");
  const int bs = common_block(A, B);
  const Prepared a = prepare(A, bs, "A"), b = prepare(B, bs, "B");
  const Plan pl = make_plan(a, b, A, B, ExactGemmOptions{});
  if (pl.empty) return ExactValue{};
  std::vector<std::int64_t> limbs(static_cast<std::size_t>(pl.limbs), 0);
  std::vector<std::uint32_t> dig;
  dot_any(a, i, b, j, pl, limbs.data());
  bool neg = false;
  if (!finalize(limbs.data(), pl.limbs, uabs64(pl.g), dig, neg)) return ExactValue{};
  return to_exact(dig, neg != (pl.g < 0), pl.emin + pl.gexp);
}

BlockOperand block_operand_from_doubles(const double* x, std::int64_t rows, std::int64_t cols) {
  // One element per block: the element is 1 (or 0), its block scale the double's significand.
  BlockOperand op;
  op.rows = rows;
  op.cols = cols;
  op.block = 1;
  op.sig.assign(static_cast<std::size_t>(rows * cols), 0);
  op.scale_sig.assign(static_cast<std::size_t>(rows * cols), 0);
  op.scale_exp.assign(static_cast<std::size_t>(rows * cols), 0);
  for (std::int64_t i = 0; i < rows * cols; ++i) {
    const double v = x[i];
    if (!std::isfinite(v)) throw std::invalid_argument("block_operand_from_doubles: non-finite element " + std::to_string(i));
    if (v == 0) continue;
    int e = 0;
    const double m = std::frexp(v, &e);  // v = m * 2^e, 0.5 <= |m| < 1
    op.sig[static_cast<std::size_t>(i)] = 1;
    op.scale_sig[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(std::ldexp(m, 53));
    op.scale_exp[static_cast<std::size_t>(i)] = e - 53;
  }
  return op;
}

}  // namespace fp4d::ref
