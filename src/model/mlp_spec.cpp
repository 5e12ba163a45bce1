#include "model/mlp_spec.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "model/lr_schedule.hpp"

namespace fp4d {

Activation parse_activation(const std::string& s) {
  if (s == "relu") return Activation::Relu;
  if (s == "gelu") return Activation::Gelu;
  if (s == "swiglu") return Activation::Swiglu;
  throw std::invalid_argument("unknown activation '" + s + "' (known: relu, gelu, swiglu)");
}

std::string to_string(Activation a) {
  switch (a) {
    case Activation::Relu: return "relu";
    case Activation::Gelu: return "gelu";
    case Activation::Swiglu: break;
  }
  return "swiglu";
}

Norm parse_norm(const std::string& s) {
  if (s == "none") return Norm::None;
  if (s == "rmsnorm") return Norm::RmsNorm;
  throw std::invalid_argument("unknown norm '" + s + "' (known: none, rmsnorm)");
}

std::string to_string(Norm n) { return n == Norm::None ? "none" : "rmsnorm"; }

std::int64_t weight_rows(const MlpSpec& s, int layer) {
  const auto l = static_cast<std::size_t>(layer);
  const bool hidden = l + 2 < s.widths.size();
  return (hidden && s.activation == Activation::Swiglu ? 2 : 1) * s.widths[l + 1];
}

bool norm_at(const MlpSpec& s, int layer) { return s.norm == Norm::RmsNorm && layer >= 1; }

bool residual_at(const MlpSpec& s, int layer) {
  const auto l = static_cast<std::size_t>(layer);
  return s.residual && layer >= 1 && l + 2 < s.widths.size() && s.widths[l] == s.widths[l + 1];
}

void validate(const MlpSpec& s) {
  auto bad = [](const std::string& field, const std::string& why) {
    throw std::invalid_argument("mlp: " + field + " " + why);
  };
  if (s.widths.size() < 2) bad("widths", "needs at least 2 entries (input, output)");
  if (s.task != "regression" && s.task != "classification") bad("task", "must be regression or classification");
  if (s.task == "classification" && s.widths.back() < 2) bad("widths", "classification needs at least 2 outputs (classes)");
  for (std::size_t i = 0; i < s.widths.size(); ++i)
    if (s.widths[i] < 1) bad("widths", "entry " + std::to_string(i) + " must be >= 1");
  if (s.batch < 1) bad("batch", "must be >= 1");
  if (!(s.norm_eps > 0.0) || !std::isfinite(s.norm_eps)) bad("norm_eps", "must be > 0 and finite");
  if (s.residual) {
    bool any = false;
    for (std::size_t l = 1; l + 2 < s.widths.size(); ++l) any = any || s.widths[l] == s.widths[l + 1];
    if (!any)
      bad("residual", "is set but no hidden layer can have one (needs widths[l] == widths[l+1] for some "
                      "1 <= l <= layers - 2)");
  }
  if (s.teacher_width < 1) bad("teacher_width", "must be >= 1");
  if (!(s.outlier_fraction >= 0.0 && s.outlier_fraction <= 1.0)) bad("outlier_fraction", "must be in [0, 1]");
  if (!(s.outlier_scale > 0.0) || !std::isfinite(s.outlier_scale)) bad("outlier_scale", "must be > 0 and finite");
  if (!(s.student_t_nu >= 0.0) || !std::isfinite(s.student_t_nu)) bad("student_t_nu", "must be >= 0 (0: normal inputs)");
  if (!(s.lr > 0.0) || !std::isfinite(s.lr)) bad("lr", "must be > 0 and finite");
  if (!(s.momentum >= 0.0 && s.momentum < 1.0)) bad("momentum", "must be in [0, 1)");
  if (!(s.beta1 >= 0.0 && s.beta1 < 1.0)) bad("beta1", "must be in [0, 1)");
  if (!(s.beta2 >= 0.0 && s.beta2 < 1.0)) bad("beta2", "must be in [0, 1)");
  if (!(s.eps > 0.0) || !std::isfinite(s.eps)) bad("eps", "must be > 0 and finite");
  if (!(s.weight_decay >= 0.0) || !std::isfinite(s.weight_decay)) bad("weight_decay", "must be >= 0 and finite");
  if (s.schedule != "constant" && s.schedule != "warmup-cosine" && s.schedule != "warmup-stable-decay")
    bad("schedule", "'" + s.schedule + "' is unknown (known: constant, warmup-cosine, warmup-stable-decay)");
  if (s.total_steps < 0) bad("total_steps", "must be >= 0");
  if (s.warmup_steps < 0) bad("warmup_steps", "must be >= 0");
  if (s.warmup_steps > s.total_steps) bad("warmup_steps", "must be <= total_steps");
  if (!(s.decay_fraction >= 0.0 && s.decay_fraction <= 1.0)) bad("decay_fraction", "must be in [0, 1]");
}

double lr_at(const MlpSpec& s, std::int64_t step) {
  return scheduled_lr(LrSchedule{s.schedule, s.lr, s.warmup_steps, s.total_steps, s.decay_fraction}, step);
}

}  // namespace fp4d
