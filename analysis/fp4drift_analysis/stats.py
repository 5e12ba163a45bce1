"""Statistics on fp4drift traces: power-law growth fits with confidence intervals and the test
of stochastic rounding's bias across seeds. Stdlib + numpy only; the Student t distribution is
evaluated exactly for integer degrees of freedom (Abramowitz & Stegun 26.7.3 / 26.7.4), which
are the only ones these tests need. Assumptions are stated where each is used and in
docs/analysis.md."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np


# --- Student t -------------------------------------------------------------------------------

def t_two_sided_mass(t: float, dof: int) -> float:
    """A(t | dof) = P(|T| <= t) for Student's T with integer dof >= 1, by the finite series of
    Abramowitz & Stegun 26.7.3 (odd dof) and 26.7.4 (even dof) in theta = atan(t / sqrt(dof))."""
    if dof < 1 or int(dof) != dof:
        raise ValueError(f"degrees of freedom must be an integer >= 1, got {dof}")
    dof = int(dof)
    t = abs(float(t))
    if math.isinf(t):
        return 1.0
    theta = math.atan(t / math.sqrt(dof))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if dof % 2 == 0:
        # sin(theta) (1 + 1/2 c^2 + 1*3/(2*4) c^4 + ... + 1*3..(dof-3)/(2*4..(dof-2)) c^(dof-2))
        term, total = 1.0, 1.0
        for k in range(2, dof, 2):
            term *= c2 * (k - 1) / k
            total += term
        return min(1.0, s * total)
    if dof == 1:
        return 2.0 * theta / math.pi
    # 2/pi (theta + sin(theta) cos(theta) (1 + 2/3 c^2 + 2*4/(3*5) c^4 + ... up to c^(dof-3)))
    term, total = 1.0, 1.0
    for k in range(3, dof - 1, 2):
        term *= c2 * (k - 1) / k
        total += term
    return min(1.0, 2.0 / math.pi * (theta + s * math.cos(theta) * total))


LARGE_DOF = 10_000


def t_quantile(p: float, dof: int) -> float:
    """The p quantile of Student's t (0.5 < p < 1) with integer dof, by bisection on
    t_two_sided_mass (monotone): accurate to ~1e-10 relative."""
    if not 0.5 < p < 1.0:
        raise ValueError(f"quantile level must be in (0.5, 1), got {p}")
    if dof > LARGE_DOF:
        # Cornish-Fisher expansion around the normal quantile z (Abramowitz & Stegun 26.7.5);
        # the next term is O(dof^-3) < 1e-12 here, and the series below would cost O(dof).
        z = statistics.NormalDist().inv_cdf(p)
        return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)
    target = 2.0 * p - 1.0   # P(|T| <= t) for the upper p quantile
    lo, hi = 0.0, 1.0
    while t_two_sided_mass(hi, dof) < target:
        hi *= 2.0
        if hi > 1e12:
            raise ValueError(f"t quantile {p} with dof {dof} out of range")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_two_sided_mass(mid, dof) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return 0.5 * (lo + hi)


def t_two_sided_p(t: float, dof: int) -> float:
    """Two-sided p-value of a t statistic: P(|T| >= |t|)."""
    return max(0.0, 1.0 - t_two_sided_mass(t, dof))


# --- growth exponent -------------------------------------------------------------------------

@dataclass
class GrowthFit:
    """error ~ prefactor * step^exponent, fitted by OLS of log(error) on log(step)."""

    exponent: float
    prefactor: float
    stderr: float          # of the exponent, by `method`
    ci_low: float
    ci_high: float
    confidence: float
    points: int            # points used (positive, finite error at step > 0)
    dropped: int           # points left out (zero, negative or non-finite error, step <= 0)
    method: str            # "ols" (iid residuals) or "hac" (Newey-West, Bartlett kernel)
    lag: int               # HAC lag (0 for ols)
    first_step: float = math.nan   # the steps of the points used: the fit's window
    last_step: float = math.nan

    def label(self) -> str:
        pct = round(100 * self.confidence)
        return (f"slope {self.exponent:.2f} [{self.ci_low:.2f}, {self.ci_high:.2f}] ({pct}% CI, {self.method}, "
                f"steps {self.first_step:.0f}-{self.last_step:.0f})")


def newey_west_lag(n: int) -> int:
    """Newey & West's (1994) rule of thumb: floor(4 (n / 100)^(2/9))."""
    return int(math.floor(4.0 * (n / 100.0) ** (2.0 / 9.0)))


def fit_growth(step, error, confidence: float = 0.95, method: str = "ols", lag: int | None = None,
               window: tuple[float, float] | None = None) -> GrowthFit:
    """Fit log(error) = log(prefactor) + exponent log(step) by ordinary least squares, over the
    points with lo < step <= hi when `window` = (lo, hi) is given (every point otherwise). The
    curves of a training run bend (local_exponents), so a fit says which window it was taken
    over: first_step and last_step are the steps of the points it used.

    The interval is exponent +- t_{(1+confidence)/2, n-2} * stderr.
    - method "ols": stderr from the residual variance, which assumes independent, equal-variance
      residuals. Errors along one trajectory are strongly autocorrelated (each step's error
      carries the previous one), so this interval is optimistic: read it as the precision of
      the fit to this one trajectory, not as the spread over trajectories.
    - method "hac": the Newey-West heteroskedasticity-and-autocorrelation-consistent stderr
      (Bartlett weights 1 - l/(lag+1), lag by newey_west_lag unless given), which widens the
      interval for positively correlated residuals. With residuals as persistent as a random
      walk no fixed small lag is enough either; the honest spread over trajectories needs
      several seeds (a sweep).
    Points with error <= 0, non-finite error or step <= 0 have no logarithm and are dropped
    (counted in `dropped`). Note that equally spaced steps put most points at large step on
    the log axis, so the fit is dominated by the late trajectory."""
    if method not in ("ols", "hac"):
        raise ValueError(f"unknown fit method {method!r} (ols, hac)")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    s = np.asarray(step, dtype=float).ravel()
    e = np.asarray(error, dtype=float).ravel()
    if s.shape != e.shape:
        raise ValueError(f"step and error differ in length ({s.size} vs {e.size})")
    ok = np.isfinite(s) & np.isfinite(e) & (s > 0) & (e > 0)
    if window is not None:
        lo, hi = window
        if not lo < hi:
            raise ValueError(f"a fit window needs lo < hi, got ({lo}, {hi}]")
        inside = (s > lo) & (s <= hi)
        ok &= inside
        dropped_outside = int((~inside).sum())
    else:
        dropped_outside = 0
    n = int(ok.sum())
    if n < 3:
        raise ValueError(f"a growth fit needs at least 3 points with positive finite error, got {n}")
    x, y = np.log(s[ok]), np.log(e[ok])
    xc = x - x.mean()
    sxx = float(xc @ xc)
    if sxx == 0.0:
        raise ValueError("all points share one step: no growth exponent")
    b = float(xc @ (y - y.mean())) / sxx
    a = float(y.mean() - b * x.mean())
    u = y - a - b * x
    dof = n - 2
    if method == "ols":
        se = math.sqrt(float(u @ u) / dof / sxx)
        L = 0
    else:
        L = newey_west_lag(n) if lag is None else int(lag)
        v = xc * u
        meat = float(v @ v)
        for l in range(1, min(L, n - 1) + 1):
            meat += 2.0 * (1.0 - l / (L + 1.0)) * float(v[l:] @ v[:-l])
        se = math.sqrt(max(meat, 0.0) * n / dof) / sxx   # n/(n-2): the small-sample factor of HC1
    half = t_quantile(0.5 + confidence / 2.0, dof) * se
    return GrowthFit(exponent=b, prefactor=math.exp(a), stderr=se, ci_low=b - half, ci_high=b + half,
                     confidence=confidence, points=n, dropped=int(s.size - n - dropped_outside), method=method,
                     lag=L, first_step=float(s[ok].min()), last_step=float(s[ok].max()))


# --- run summary metrics (the Python side of src/trace/run_metrics.hpp) ---------------------

# The trailing window of the loss gap: the last tenth of the records, at least 20 (all of them
# in a shorter run); docs/numerics.md, "Run summary metrics", says why.
GAP_WINDOW_FRACTION = 0.1
GAP_WINDOW_MIN_RECORDS = 20
GROWTH_WINDOW_FACTOR = 2.0   # a local exponent's window spans a factor 2 in steps
GROWTH_CONFIDENCE = 0.95


@dataclass
class GapWindow:
    """The relative loss gap (L_run - L_ref) / L_ref averaged over a trailing window of records."""

    mean: float          # NaN when a gap in the window is not finite
    first_step: int      # recorded steps, inclusive
    last_step: int
    records: int

    def label(self) -> str:
        return f"loss gap, mean of steps {self.first_step}-{self.last_step}"


def window_mean_gap(step, gap, fraction: float = GAP_WINDOW_FRACTION,
                    min_records: int = GAP_WINDOW_MIN_RECORDS) -> GapWindow:
    """Mean of the per-step gaps over the last max(min_records, ceil(fraction * N)) records
    (capped at N): the one definition of a run's loss gap, as fp4drift's summary computes it."""
    st = np.asarray(step).ravel()
    g = np.asarray(gap, dtype=float).ravel()
    if st.shape != g.shape:
        raise ValueError(f"steps and gaps differ in length ({st.size} vs {g.size})")
    if not 0.0 < fraction <= 1.0 or int(min_records) < 1:
        raise ValueError(f"gap window: fraction must be in (0, 1] and min_records >= 1, got {fraction}, {min_records}")
    n = g.size
    if n == 0:
        return GapWindow(mean=math.nan, first_step=-1, last_step=-1, records=0)
    k = min(n, max(int(min_records), math.ceil(fraction * n - 1e-9)))
    w = g[n - k:]
    total = math.fsum(w) if np.all(np.isfinite(w)) else math.nan
    return GapWindow(mean=total / k, first_step=int(st[n - k]), last_step=int(st[-1]), records=k)


def aggregate_rel_error(rel_error, ref_sq_norm) -> np.ndarray:
    """||W - W_ref||_F / ||W_ref||_F over several layers together from each layer's relative
    error e_l (last axis) and ||W_ref,l||_F^2: sqrt(sum e_l^2 n_l / sum n_l)."""
    e = np.asarray(rel_error, dtype=float)
    n = np.asarray(ref_sq_norm, dtype=float).ravel()
    if e.shape[-1] != n.size:
        raise ValueError(f"{e.shape[-1]} errors per row but {n.size} norms")
    if n.size == 0:
        return np.full(e.shape[:-1], np.nan)
    return np.sqrt((e * e * n).sum(axis=-1) / n.sum())


@dataclass
class SlopeWindow:
    """A local growth exponent: the OLS slope of log(error) on log(step) over the compares with
    lo < step <= hi, with its Student t interval from the residuals (n - 2 dof; along one
    trajectory the residuals are correlated, so it is the precision of this trajectory's fit)."""

    first_step: int
    last_step: int
    points: int
    exponent: float
    ci_low: float
    ci_high: float
    confidence: float

    def label(self) -> str:
        return (f"steps {self.first_step}-{self.last_step}: {self.exponent:.2f} "
                f"[{self.ci_low:.2f}, {self.ci_high:.2f}]")


def fit_slope(step, error, lo: float, hi: float, confidence: float = GROWTH_CONFIDENCE) -> SlopeWindow:
    """The slope over (lo, hi]; NaN with fewer than 3 usable points."""
    s = np.asarray(step, dtype=float).ravel()
    e = np.asarray(error, dtype=float).ravel()
    ok = np.isfinite(s) & np.isfinite(e) & (s > 0) & (e > 0) & (s > lo) & (s <= hi)
    pts = int(ok.sum())
    if pts < 3:
        first = int(s[ok].min()) if pts else -1
        last = int(s[ok].max()) if pts else -1
        return SlopeWindow(first, last, pts, math.nan, math.nan, math.nan, confidence)
    f = fit_growth(s[ok], e[ok], confidence, "ols")
    return SlopeWindow(int(s[ok].min()), int(s[ok].max()), pts, f.exponent, f.ci_low, f.ci_high, confidence)


def local_exponents(step, error, factor: float = GROWTH_WINDOW_FACTOR,
                    confidence: float = GROWTH_CONFIDENCE) -> list[SlopeWindow]:
    """Slopes over the windows (S / f^(k+1), S / f^k], anchored at the last compare S and going
    back while a window holds 3 compares; in step order. The last one is the run's headline
    growth exponent (final_growth_window)."""
    if not factor > 1:
        raise ValueError(f"the window factor must exceed 1, got {factor}")
    s = np.asarray(step, dtype=float).ravel()
    out: list[SlopeWindow] = []
    if s.size == 0 or s[-1] <= 0:
        return out
    hi = float(s[-1])
    while hi >= 1:
        w = fit_slope(step, error, hi / factor, hi, confidence)
        if w.points < 3:
            break
        out.append(w)
        hi /= factor
    return out[::-1]


def final_growth_window(step, error, factor: float = GROWTH_WINDOW_FACTOR,
                        confidence: float = GROWTH_CONFIDENCE) -> SlopeWindow:
    """The headline growth exponent: the slope over (S / factor, S], S the last compare."""
    s = np.asarray(step, dtype=float).ravel()
    if s.size == 0 or s[-1] <= 0:
        return SlopeWindow(-1, -1, 0, math.nan, math.nan, math.nan, confidence)
    return fit_slope(step, error, float(s[-1]) / factor, float(s[-1]), confidence)


# --- SR bias across seeds --------------------------------------------------------------------

@dataclass
class BiasTest:
    """Two-sided t test of H0: E[error] = 0 over independent SR runs (one error per seed)."""

    mean: float
    stderr: float
    t: float
    dof: int
    p_value: float
    confidence: float
    critical_t: float

    @property
    def unbiased(self) -> bool:
        """True when the mean error is indistinguishable from zero at `confidence`."""
        return abs(self.t) <= self.critical_t

    def summary(self) -> str:
        verdict = "indistinguishable from 0" if self.unbiased else "BIASED"
        return (f"mean error {self.mean:.4g} +- {self.stderr:.3g} (s.e.), t = {self.t:.3f}, dof {self.dof}, "
                f"p = {self.p_value:.3g}: {verdict} at {100 * self.confidence:g}% (|t| <= {self.critical_t:.3f})")


def sr_bias_test(errors, confidence: float = 0.99) -> BiasTest:
    """Test whether SR's errors over independent seeds have mean zero.

    t = mean / (s / sqrt(R)) with R runs and the sample standard deviation s; under H0 and
    approximately normal errors (or R large enough for the central limit theorem; a sum of
    many independent rounding errors is close to normal) t follows Student's t with R - 1
    degrees of freedom. Assumes the runs are independent: distinct SR seeds, the same input.
    A systematic bias b is detected once |b| exceeds about critical_t * stderr."""
    e = np.asarray(errors, dtype=float).ravel()
    if e.size < 2:
        raise ValueError(f"a bias test needs at least 2 runs, got {e.size}")
    if not np.all(np.isfinite(e)):
        raise ValueError(f"{int((~np.isfinite(e)).sum())} non-finite errors among {e.size} runs")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    R = e.size
    mean = float(e.mean())
    se = float(e.std(ddof=1)) / math.sqrt(R)
    if se == 0.0:
        t = 0.0 if mean == 0.0 else math.copysign(math.inf, mean)
    else:
        t = mean / se
    return BiasTest(mean=mean, stderr=se, t=t, dof=R - 1, p_value=t_two_sided_p(t, R - 1), confidence=confidence,
                    critical_t=t_quantile(0.5 + confidence / 2.0, R - 1))


# --- replicates over seeds -------------------------------------------------------------------

@dataclass
class MeanInterval:
    """Mean of n independent replicates (one value per seed) with its two-sided Student t interval
    mean +- t_{(1+confidence)/2, n-1} s / sqrt(n). Assumes independent, roughly normal values;
    with n = 1 there is no spread to estimate, and sd, half_width are NaN."""

    n: int
    mean: float
    sd: float
    half_width: float
    confidence: float

    @property
    def ci_low(self) -> float:
        return self.mean - self.half_width

    @property
    def ci_high(self) -> float:
        return self.mean + self.half_width


def t_interval(values, confidence: float = 0.95) -> MeanInterval:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    v = np.asarray(values, dtype=float).ravel()
    if v.size == 0:
        raise ValueError("a mean needs at least one value")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{int((~np.isfinite(v)).sum())} non-finite values among {v.size}")
    n = int(v.size)
    if n < 2:
        return MeanInterval(n=1, mean=float(v[0]), sd=math.nan, half_width=math.nan, confidence=confidence)
    sd = float(v.std(ddof=1))
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * sd / math.sqrt(n)
    return MeanInterval(n=n, mean=float(v.mean()), sd=sd, half_width=half, confidence=confidence)


@dataclass
class SignTest:
    """Exact two-sided sign test of H0: a paired difference is as likely positive as negative.
    Zero differences (ties) are left out; p = min(1, 2 P(K <= min(k+, k-))) with K ~ Bin(k+ + k-, 1/2).
    Assumes only independent pairs, no distribution; with few pairs p cannot be small (3 pairs: p >= 0.25)."""

    positive: int
    negative: int
    ties: int
    p_value: float


def sign_test(differences) -> SignTest:
    d = np.asarray(differences, dtype=float).ravel()
    if not np.all(np.isfinite(d)):
        raise ValueError(f"{int((~np.isfinite(d)).sum())} non-finite differences among {d.size}")
    pos, neg = int((d > 0).sum()), int((d < 0).sum())
    n = pos + neg
    if n == 0:
        return SignTest(positive=0, negative=0, ties=int(d.size), p_value=1.0)
    k = min(pos, neg)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return SignTest(positive=pos, negative=neg, ties=int(d.size) - n, p_value=min(1.0, 2.0 * tail))
