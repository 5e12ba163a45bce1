#include "model/recipe_gemm.hpp"

#include <algorithm>
#include <stdexcept>

#include "quant/gemm_emulated.hpp"
#include "quant/quantize.hpp"

namespace fp4d {

namespace {


OperandRecord record_of(const QuantizedTensor& q) {
  OperandRecord r;
  r.nmse = q.stats.nmse;
  r.bias = q.stats.bias;
  r.clipped_fraction = q.stats.clipped_fraction;
  r.underflow_fraction = q.stats.underflow_fraction;
  if (q.stats.blocks > 0) {
    r.zero_scale_fraction = static_cast<double>(q.stats.zero_scale_blocks) / static_cast<double>(q.stats.blocks);
    r.subnormal_scale_fraction = static_cast<double>(q.stats.subnormal_scale_blocks) / static_cast<double>(q.stats.blocks);
  }
  return r;
}

}  // namespace


RecipeGemm::RecipeGemm(RecipeGemmOptions opt, int layers) : opt_(std::move(opt)), layers_(layers) {
  plain_fp32_ = opt_.recipe == "fp32";
  if (!plain_fp32_) recipe_ = gemm_recipe(opt_.recipe);
  edge_ = gemm_recipe(opt_.edge_recipe);
  for (const int l : opt_.high_precision_layers)
    if (l < 0 || l >= layers)
      throw std::invalid_argument("high-precision layer " + std::to_string(l) + " does not exist (the model has " +
                                  std::to_string(layers) + " layers)");
  records_.assign(static_cast<std::size_t>(layers) * 6, OperandRecord{});
}

const std::string& RecipeGemm::recipe_name(int layer) const {
  // Only a recipe below BF16 has layers to keep in high precision: fp32 and bf16 runs keep
  // their own precision everywhere.
  const bool low = !plain_fp32_ && recipe_.kind != GemmRecipe::Kind::Bf16;
  const bool edge = low && std::find(opt_.high_precision_layers.begin(), opt_.high_precision_layers.end(), layer) !=
                               opt_.high_precision_layers.end();
  return edge ? opt_.edge_recipe : opt_.recipe;
}

// NT form C = A B^T (quant/training_recipe.hpp): fprop A = X, B = W; dgrad A = dY, B = W^T;
// wgrad A = X^T, B = dY^T (C = X^T dY, in x out). Returns false for a plain fp32 call
// (a_plain, b_plain set), true with the quantized operands (statistics recorded) otherwise.
bool RecipeGemm::quantize_call(const GemmCall& call, const Matrix& first, const Matrix& second, QuantizedTensor* qa,
                               QuantizedTensor* qb, Matrix* a_plain, Matrix* b_plain) {
  Matrix A, B;
  OperandKind ka{}, kb{};
  switch (call.role) {
    case GemmRole::Fprop: A = first, B = second, ka = OperandKind::Activation, kb = OperandKind::Weight; break;
    case GemmRole::Dgrad: A = first, B = transpose(second), ka = OperandKind::Gradient, kb = OperandKind::Weight; break;
    case GemmRole::Wgrad:
      A = transpose(first), B = transpose(second), ka = OperandKind::Activation, kb = OperandKind::Gradient;
      break;
  }
  const GemmRecipe* g = layer_recipe(call.layer);
  if (!g) {
    *a_plain = std::move(A);
    *b_plain = std::move(B);
    return false;
  }
  const std::uint64_t seed = recipe_step_seed(opt_.seed, call.step);
  const bool wgrad = call.role == GemmRole::Wgrad;
  *qa = quantize_cpu(A, gemm_operand_spec(*g, ka, wgrad, seed, recipe_operand_stream(call.layer, call.role, 0)));
  *qb = quantize_cpu(B, gemm_operand_spec(*g, kb, wgrad, seed, recipe_operand_stream(call.layer, call.role, 1)));
  const std::size_t slot = static_cast<std::size_t>(call.layer) * 6 + static_cast<std::size_t>(call.role) * 2;
  records_[slot] = record_of(*qa);
  records_[slot + 1] = record_of(*qb);
  return true;
}

Matrix RecipeGemm::operator()(const GemmCall& call, const Matrix& first, const Matrix& second) {
  QuantizedTensor qa, qb;
  Matrix A, B;
  if (!quantize_call(call, first, second, &qa, &qb, &A, &B)) return gemm_fp32(A, B);
  if (opt_.product) return opt_.product(qa, qb);
  const EmulatedGemmOptions emulation{opt_.accumulator};
  if (qa.spec.scheme == Scheme::Cast) return gemm_dequantized_fp32(qa, qb, emulation);
  return gemm_block_scaled_emulated(qa, qb, emulation);
}

std::optional<std::pair<QuantizedTensor, QuantizedTensor>> RecipeGemm::quantize_operands(const GemmCall& call,
                                                                                         const Matrix& first,
                                                                                         const Matrix& second) {
  QuantizedTensor qa, qb;
  Matrix A, B;
  if (!quantize_call(call, first, second, &qa, &qb, &A, &B)) return std::nullopt;
  return std::make_pair(std::move(qa), std::move(qb));
}

const GemmRecipe* RecipeGemm::layer_recipe(int layer) const {
  const bool edge = recipe_name(layer) != opt_.recipe;
  if (plain_fp32_ && !edge) return nullptr;
  return edge ? &edge_ : &recipe_;
}

bool RecipeGemm::uses_sr() const {
  return !plain_fp32_ && recipe_.kind == GemmRecipe::Kind::Nvfp4 && recipe_.sr_gradients;
}

GemmFn RecipeGemm::fn() {
  return [this](const GemmCall& c, const Matrix& a, const Matrix& b) { return (*this)(c, a, b); };
}

}  // namespace fp4d
