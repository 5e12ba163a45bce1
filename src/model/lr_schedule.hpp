// The learning-rate schedules every workload shares (mlp, lm): one formula, so that a schedule
// named in a config means the same curve whichever model it trains.
//
// lr(step), step 0-based:
//   constant             lr at every step (warmup and total ignored).
//   warmup (both below)  factor (step + 1) / warmup_steps for step < warmup_steps: step 0
//                        already moves, step warmup_steps - 1 gets the full rate.
//   warmup-cosine        then lr 0.5 (1 + cos(pi (step - warmup) / (total - warmup))).
//   warmup-stable-decay  lr min(warmup factor, (total - step) / (decay_fraction total)):
//                        constant, then a linear decay to 0 over the last decay_fraction of
//                        total_steps (decay_fraction = 0: no decay).
//   Both non-constant schedules give 0 from total_steps on.
// Evaluated in double whatever the run's scalar: the schedule is part of the problem, so the
// low-precision run and its reference see the same rate at every step.
#pragma once

#include <cstdint>
#include <string>

namespace fp4d {

struct LrSchedule {
  std::string name = "constant";  // constant | warmup-cosine | warmup-stable-decay
  double lr = 1e-3;               // the peak rate
  std::int64_t warmup_steps = 0, total_steps = 1000;
  double decay_fraction = 0.2;    // warmup-stable-decay
};

// Throws std::invalid_argument for an unknown name.
double scheduled_lr(const LrSchedule& s, std::int64_t step);

// Throws std::invalid_argument naming the field (prefix + field, e.g. "lm: optimizer.lr") for
// an unknown name, lr <= 0 or not finite, total_steps < 0, warmup_steps < 0 or > total_steps,
// decay_fraction outside [0, 1].
void validate_lr_schedule(const LrSchedule& s, const std::string& prefix);

}  // namespace fp4d
