#include "model/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace fp4d {

namespace {
const char* const kKnown = "(known: constant, warmup-cosine, warmup-stable-decay)";
}

double scheduled_lr(const LrSchedule& s, std::int64_t step) {
  if (s.name == "constant") return s.lr;
  const auto t = static_cast<double>(step);
  const auto total = static_cast<double>(s.total_steps);
  const auto warm = static_cast<double>(s.warmup_steps);
  if (step >= s.total_steps) return 0.0;
  // Linear warmup: step 0 gets 1/warmup, step warmup-1 the full rate.
  const double fw = step < s.warmup_steps ? (t + 1.0) / warm : 1.0;
  if (s.name == "warmup-cosine") {
    if (step < s.warmup_steps) return s.lr * fw;
    const double p = (t - warm) / (total - warm);  // in [0, 1): total > step >= warmup
    return s.lr * 0.5 * (1.0 + std::cos(3.14159265358979323846 * p));
  }
  if (s.name == "warmup-stable-decay") {
    // Linear decay to 0 at total_steps over the last decay_fraction * total_steps steps.
    const double d = s.decay_fraction * total;
    const double fd = d > 0.0 ? std::min(1.0, (total - t) / d) : 1.0;
    return s.lr * std::min(fw, fd);
  }
  throw std::invalid_argument("schedule '" + s.name + "' is unknown " + kKnown);
}

void validate_lr_schedule(const LrSchedule& s, const std::string& prefix) {
  auto bad = [&](const char* field, const std::string& why) {
    throw std::invalid_argument(prefix + field + " " + why);
  };
  if (s.name != "constant" && s.name != "warmup-cosine" && s.name != "warmup-stable-decay")
    bad("schedule", "'" + s.name + "' is unknown " + kKnown);
  if (!(s.lr > 0.0) || !std::isfinite(s.lr)) bad("lr", "must be > 0 and finite");
  if (s.total_steps < 0) bad("total_steps", "must be >= 0");
  if (s.warmup_steps < 0) bad("warmup_steps", "must be >= 0");
  if (s.warmup_steps > s.total_steps) bad("warmup_steps", "must be <= total_steps");
  if (!(s.decay_fraction >= 0.0 && s.decay_fraction <= 1.0)) bad("decay_fraction", "must be in [0, 1]");
}

}  // namespace fp4d
