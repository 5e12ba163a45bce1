"""fp4drift_analysis.stats: Student t against table values, the growth fit against hand
formulas and its coverage, the SR bias test's size and power. No fp4drift binary needed."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from fp4drift_analysis.stats import (fit_growth, newey_west_lag, sr_bias_test, t_quantile,
                                     t_two_sided_mass, t_two_sided_p)

# Student t quantiles as printed in standard tables (3 decimals), e.g. NIST/SEMATECH
# e-Handbook table 1.3.6.7.2: (upper tail probability, dof) -> t.
T_TABLE = [(0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 3, 3.182), (0.975, 10, 2.228), (0.975, 30, 2.042),
           (0.995, 5, 4.032), (0.95, 20, 1.725), (0.9995, 60, 3.460), (0.99, 100, 2.364)]


@pytest.mark.parametrize("p,dof,table", T_TABLE)
def test_t_quantile_matches_tables(p, dof, table) -> None:
    assert abs(t_quantile(p, dof) - table) <= 0.0005 + 1e-9   # the table's rounding


def test_t_distribution_closed_forms() -> None:
    # dof 1 is Cauchy: P(|T| <= 1) = 1/2 exactly; dof 2: P(|T| <= t) = t / sqrt(2 + t^2).
    assert t_two_sided_mass(1.0, 1) == pytest.approx(0.5, abs=1e-15)
    for t in (0.3, 1.0, 4.0):
        assert t_two_sided_mass(t, 2) == pytest.approx(t / math.sqrt(2 + t * t), rel=1e-14)
    # large dof: the normal 97.5% point z = 1.959964 plus the first Cornish-Fisher term
    # (z^3 + z) / (4 dof); the next term is O(dof^-2) = 1e-8 here.
    z = 1.959964
    assert t_quantile(0.975, 20000) == pytest.approx(z + (z**3 + z) / (4 * 20000), abs=2e-6)
    # above LARGE_DOF the quantile comes from the expansion: it agrees with the exact series
    from fp4drift_analysis.stats import LARGE_DOF
    target = 2 * 0.995 - 1
    q = t_quantile(0.995, LARGE_DOF + 1)
    assert t_two_sided_mass(q, LARGE_DOF + 1) == pytest.approx(target, abs=1e-10)
    assert t_two_sided_p(0.0, 7) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="integer"):
        t_two_sided_mass(1.0, 2.5)


def test_exact_power_law_gives_its_exponent_and_a_zero_width_interval() -> None:
    step = np.arange(10, 610, 10, dtype=float)
    fit = fit_growth(step, 3e-3 * step ** 0.5)
    assert fit.exponent == pytest.approx(0.5, abs=1e-12)
    assert fit.prefactor == pytest.approx(3e-3, rel=1e-10)
    assert fit.ci_high - fit.ci_low < 1e-10
    assert fit.points == 60 and fit.dropped == 0


def test_ols_interval_is_the_textbook_one() -> None:
    rng = np.random.default_rng(5)
    step = np.arange(1, 41, dtype=float)
    err = 0.01 * step ** 0.7 * np.exp(rng.normal(0, 0.2, step.size))
    err[3] = 0.0          # no logarithm: dropped, counted
    fit = fit_growth(step, err, confidence=0.95)
    keep = err > 0
    x, y = np.log(step[keep]), np.log(err[keep])
    slope, intercept = statistics.linear_regression(x, y)
    resid = y - intercept - slope * x
    se = math.sqrt((resid @ resid) / (x.size - 2) / ((x - x.mean()) @ (x - x.mean())))
    assert fit.dropped == 1 and fit.points == 39
    assert fit.exponent == pytest.approx(slope, rel=1e-12)
    assert fit.stderr == pytest.approx(se, rel=1e-12)
    assert fit.ci_high - fit.exponent == pytest.approx(2.026 * se, rel=1e-3)   # t_{0.975, 37} = 2.026


def test_ols_interval_covers_at_its_level_with_independent_residuals() -> None:
    # 2000 fits with i.i.d. log-normal noise: the 95% interval must cover the true exponent in
    # 95% of them, within 4 binomial standard errors (sqrt(0.95 * 0.05 / 2000) = 0.0049).
    rng = np.random.default_rng(11)
    step = np.arange(10, 310, 10, dtype=float)
    hits = 0
    for _ in range(2000):
        err = 0.02 * step ** 0.4 * np.exp(rng.normal(0, 0.3, step.size))
        f = fit_growth(step, err)
        hits += f.ci_low <= 0.4 <= f.ci_high
    assert abs(hits / 2000 - 0.95) <= 4 * math.sqrt(0.95 * 0.05 / 2000)


def test_autocorrelated_residuals_make_ols_optimistic_and_hac_wider() -> None:
    # AR(1) log-residuals with phi = 0.9, the situation of one training trajectory: the OLS
    # interval under-covers badly (its stated assumption fails); Newey-West covers more often.
    rng = np.random.default_rng(3)
    step = np.arange(10, 1010, 10, dtype=float)
    ols = hac = 0
    reps = 600
    for _ in range(reps):
        u = np.empty(step.size)
        u[0] = rng.normal(0, 0.3)
        for i in range(1, step.size):
            u[i] = 0.9 * u[i - 1] + rng.normal(0, 0.3 * math.sqrt(1 - 0.81))
        err = 0.05 * step ** 0.5 * np.exp(u)
        a, b = fit_growth(step, err, method="ols"), fit_growth(step, err, method="hac")
        ols += a.ci_low <= 0.5 <= a.ci_high
        hac += b.ci_low <= 0.5 <= b.ci_high
    # 0.95 - 4 binomial s.e. (0.0089 at 600 reps) would still be 0.914: OLS is far below it.
    assert ols / reps < 0.85
    assert hac / reps > ols / reps + 0.1
    assert newey_west_lag(100) == 4


def test_fit_refuses_too_few_points() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        fit_growth([1, 2, 3], [1.0, 0.0, np.nan])
    with pytest.raises(ValueError, match="differ in length"):
        fit_growth([1, 2, 3], [1.0, 2.0])


def test_bias_test_known_value() -> None:
    # errors 1, 2, 3, 4: mean 2.5, s = 1.2910, s.e. 0.6455, t = 3.8730 with 3 dof; by hand from
    # A&S 26.7.3, P(|T| >= t) = 1 - 2/pi (theta + sin theta cos theta), theta = atan(t / sqrt 3)
    # = 1.15026: p = 0.03047.
    t = sr_bias_test([1.0, 2.0, 3.0, 4.0], confidence=0.95)
    assert t.t == pytest.approx(3.872983, rel=1e-6)
    assert t.dof == 3
    assert t.p_value == pytest.approx(0.03047, abs=5e-5)
    assert not t.unbiased and t.critical_t == pytest.approx(3.182, abs=5e-4)
    assert sr_bias_test([1.0, 2.0, 3.0, 4.0], confidence=0.99).unbiased   # t_{0.995,3} = 5.841


def test_bias_test_size_and_power() -> None:
    # Size: zero-mean errors over 64 seeds are called biased in 1% of 3000 repetitions at 99%
    # confidence, within 4 binomial s.e. (0.0018). Power: a bias of 0.75 s.d. gives a
    # noncentrality of 6 against a critical t of 2.66: detected essentially always (> 99%).
    rng = np.random.default_rng(7)
    false = sum(not sr_bias_test(rng.normal(0, 1, 64), 0.99).unbiased for _ in range(3000))
    assert abs(false / 3000 - 0.01) <= 4 * math.sqrt(0.01 * 0.99 / 3000)
    found = sum(not sr_bias_test(rng.normal(0.75, 1, 64), 0.99).unbiased for _ in range(500))
    assert found / 500 > 0.99


def test_bias_test_bad_input() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        sr_bias_test([1.0, np.nan, 2.0])
    with pytest.raises(ValueError, match="at least 2"):
        sr_bias_test([1.0])
    assert sr_bias_test([0.0, 0.0, 0.0]).p_value == 1.0
