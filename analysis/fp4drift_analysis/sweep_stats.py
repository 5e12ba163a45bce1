"""Statistics over the seeds of a sweep (`fp4drift-analysis sweep-stats`): the runs of a sweep
index grouped by any of its override keys (and the recipe), one metric per (run, recipe) from
/summary_recipes (or per run from /summary), the mean over seeds with its Student t interval,
and paired comparisons of each recipe with a baseline recipe over the seeds both have.

    from fp4drift_analysis.sweep import load_sweep
    from fp4drift_analysis.sweep_stats import group_runs, paired_gaps
    s = load_sweep("out/sweep/sweep.h5")
    cells = group_runs(s, ["lm.pattern"], "tail_loss")
    pairs = paired_gaps(cells, "bf16")

The statistics and their assumptions are in stats.py (t_interval, sign_test) and docs/analysis.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .stats import MeanInterval, SignTest, sign_test, t_interval, t_two_sided_p
from .sweep import HEADLINE_FALLBACK, Sweep, format_value

SEED_KEYS = ("lm.seed", "mlp.seed", "seed")
ENTRY_KEY = "entry"   # pseudo key: the sweep's list entry (`[list.NAME]`) a run comes from
NO_RECIPE = "-"       # the recipe of a per-run metric (/summary: sum/dot sweeps, reference_final_loss)


@dataclass
class Cell:
    """The runs of one group (values of the --group-by keys) and one recipe, one value per seed."""

    key: tuple               # the group-by keys' values (None: not set, the base config's value)
    recipe: str
    seeds: list              # in run order
    values: list[float]
    runs: list[int]          # run indices
    interval: MeanInterval


@dataclass
class Pair:
    """recipe vs baseline in one group over their common seeds: gap = 100 (x - base) / base per seed."""

    key: tuple
    recipe: str
    baseline: str
    seeds: list
    gaps: list[float]
    interval: MeanInterval
    t: float
    dof: int
    p_t: float
    sign: SignTest


def metric_rows(s: Sweep, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(run index, recipe, value) per row of the metric: a /summary_recipes column (complete runs,
    one row per recipe) or a numeric /summary column (complete runs, recipe NO_RECIPE)."""
    if metric in s.recipes and metric not in ("run", "row", "id", "recipe") and \
            np.issubdtype(np.asarray(s.recipes[metric]).dtype, np.number):
        return (np.asarray(s.recipes["run"], dtype=int), np.asarray(s.recipes["recipe"], dtype=str),
                np.asarray(s.recipes[metric], dtype=float))
    per_run = [k for k, v in s.summary.items()
               if k not in ("index", "rank", "attempts", "exit_code") and np.issubdtype(np.asarray(v).dtype, np.number)]
    if metric in per_run:
        runs = s.complete()
        return runs, np.full(runs.size, NO_RECIPE), np.asarray(s.summary[metric], dtype=float)[runs]
    per_recipe = [k for k, v in s.recipes.items()
                  if k not in ("run", "row") and np.issubdtype(np.asarray(v).dtype, np.number)]
    raise ValueError(f"unknown metric {metric!r}; this index has per recipe: {', '.join(per_recipe) or 'none'}; "
                     f"per run: {', '.join(per_run)}")


def _key_values(s: Sweep, keys: list[str]) -> tuple[list[dict], list[str]]:
    """Each run's value of each key, and the keys the sweep knows (its override keys and `entry`)."""
    sets = [s.overrides(i) for i in range(len(s.ids))]
    known = list(dict.fromkeys(k for o in sets for k in o))
    entries = [s.entry(i) for i in range(len(s.ids))]
    if ENTRY_KEY not in known and any(entries):
        known.append(ENTRY_KEY)
        for o, e in zip(sets, entries):
            o[ENTRY_KEY] = e
    for k in keys:
        if k not in known:
            raise ValueError(f"unknown key {k!r}; the sweep's override keys: {', '.join(known)}")
    return sets, known


def find_seed_key(s: Sweep, seed_key: str | None = None) -> str:
    sets, known = _key_values(s, [seed_key] if seed_key else [])
    if seed_key:
        return seed_key
    for k in SEED_KEYS:
        if k in known:
            return k
    raise ValueError(f"no seed key ({', '.join(SEED_KEYS)}) among the sweep's overrides; name one with --seed-key")


def group_runs(s: Sweep, group_by: list[str], metric: str, seed_key: str | None = None,
               confidence: float = 0.95) -> list[Cell]:
    """Cells (group, recipe) in the sweep's run order, each with the metric over its seeds. Rows
    whose value is not finite (tail_loss of an mlp, growth_exponent without a reference) are left
    out; a cell with two runs of one seed is refused, naming the keys that tell them apart."""
    seed_key = find_seed_key(s, seed_key)
    if seed_key in group_by:
        raise ValueError(f"the seed key {seed_key} cannot also be a --group-by key")
    sets, _ = _key_values(s, group_by)
    runs, recipes, values = metric_rows(s, metric)
    ok = np.isfinite(values)
    if not ok.any():
        hint = (f" (its runs' traces predate the run summary attributes; {HEADLINE_FALLBACK[metric][0]} holds "
                f"{HEADLINE_FALLBACK[metric][1]})") if metric in HEADLINE_FALLBACK and metric not in s.fallbacks else ""
        raise ValueError(f"metric {metric!r} is not finite in any complete run of {s.path}{hint}")
    cells: dict[tuple, dict] = {}
    for run, recipe, v in zip(runs[ok], recipes[ok], values[ok]):
        key = tuple(sets[run].get(k) for k in group_by)
        c = cells.setdefault((key, str(recipe)), {"seeds": [], "values": [], "runs": []})
        seed = sets[run].get(seed_key)
        if seed in c["seeds"]:
            other = c["runs"][c["seeds"].index(seed)]
            differ = [k for k in dict.fromkeys([*sets[run], *sets[other]])
                      if sets[run].get(k) != sets[other].get(k)]
            raise ValueError(f"group {describe(group_by, key)} recipe {recipe} has two runs with {seed_key}="
                             f"{format_value(seed)} (runs {other} and {run}, differing in {', '.join(differ) or 'nothing'}); "
                             "add a key to --group-by")
        c["seeds"].append(seed)
        c["values"].append(float(v))
        c["runs"].append(int(run))
    return [Cell(key=key, recipe=recipe, seeds=c["seeds"], values=c["values"], runs=c["runs"],
                 interval=t_interval(c["values"], confidence)) for (key, recipe), c in cells.items()]


def paired_gaps(cells: list[Cell], baseline: str, confidence: float = 0.95) -> list[Pair]:
    """Each recipe's gap to `baseline` in percent of the baseline, seed by seed over the seeds both
    cells of a group have, with the t interval of the mean gap, the paired t statistic (H0: mean
    gap 0; n - 1 dof) and the exact sign test. Groups without the baseline are skipped."""
    if not any(c.recipe == baseline for c in cells):
        raise ValueError(f"unknown --baseline recipe {baseline!r}; recipes: "
                         f"{', '.join(dict.fromkeys(c.recipe for c in cells))}")
    base = {c.key: c for c in cells if c.recipe == baseline}
    out = []
    for c in cells:
        b = base.get(c.key)
        if c.recipe == baseline or b is None:
            continue
        common = [sd for sd in c.seeds if sd in b.seeds]
        if not common:
            continue
        x = np.array([c.values[c.seeds.index(sd)] for sd in common])
        y = np.array([b.values[b.seeds.index(sd)] for sd in common])
        if np.any(y == 0):
            raise ValueError(f"baseline {baseline} is 0 in group {c.key}: no gap in percent")
        gaps = 100.0 * (x - y) / np.abs(y)
        iv = t_interval(gaps, confidence)
        n = len(gaps)
        if n < 2:
            t, p = math.nan, math.nan
        elif iv.sd == 0.0:
            t = 0.0 if iv.mean == 0.0 else math.copysign(math.inf, iv.mean)
            p = 1.0 if iv.mean == 0.0 else 0.0
        else:
            t = iv.mean / (iv.sd / math.sqrt(n))
            p = t_two_sided_p(t, n - 1)
        out.append(Pair(key=c.key, recipe=c.recipe, baseline=baseline, seeds=common, gaps=[float(g) for g in gaps],
                        interval=iv, t=t, dof=n - 1, p_t=p, sign=sign_test(gaps)))
    return out


def describe(keys: list[str], values: tuple) -> str:
    if not keys:
        return "(all runs)"
    return " ".join(f"{k}={format_value(v)}" for k, v in zip(keys, values))


def _f(x: float, fmt: str = ".4g") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _table(header: list[str], rows: list[list[str]]) -> str:
    w = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    right = [any(_numeric(r[i]) for r in rows) and all(_numeric(r[i]) or r[i] == "-" for r in rows)
             for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w[i]) if right[i] else c.ljust(w[i]) for i, c in enumerate(r)).rstrip()
                     for r in [header, *rows])


def _numeric(text: str) -> bool:
    try:
        float(text.strip("[]%,"))
        return True
    except ValueError:
        return False


def text_report(s: Sweep, cells: list[Cell], pairs: list[Pair] | None, group_by: list[str], metric: str,
                seed_key: str, confidence: float) -> str:
    pct = f"{100 * confidence:g}%"
    lines = [f"{s.path}: {s.metric_label(metric)} over {seed_key}, grouped by {', '.join(group_by) or '(nothing)'} and recipe; "
             f"mean and {pct} t interval, n-1 dof (mean +- half)"]
    rows = [[*(format_value(v) for v in c.key), c.recipe, str(c.interval.n),
             ",".join(format_value(x) for x in c.seeds), _f(c.interval.mean), _f(c.interval.half_width, ".3g"),
             _f(c.interval.ci_low), _f(c.interval.ci_high)] for c in cells]
    lines.append(_table([*group_by, "recipe", "n", "seeds", "mean", "+-half", "low", "high"], rows))
    if pairs is not None:
        base = pairs[0].baseline if pairs else "?"
        lines.append("")
        lines.append(f"paired gap to {base}: 100 (x - {base}) / |{base}| per seed, over the seeds both have; "
                     f"mean and {pct} t interval, n-1 dof; paired t (H0: gap 0); exact two-sided sign test")
        rows = [[*(format_value(v) for v in p.key), p.recipe, str(p.interval.n),
                 ",".join(format_value(x) for x in p.seeds), _f(p.interval.mean, "+.3g") + "%",
                 _f(p.interval.half_width, ".3g"), _f(p.t, ".3g"), _f(p.p_t, ".3g"),
                 f"{p.sign.positive}/{p.sign.negative}/{p.sign.ties}", _f(p.sign.p_value, ".3g")] for p in pairs]
        lines.append(_table([*group_by, "recipe", "n", "seeds", "gap", "+-half", "t", "p(t)", "+/-/0", "p(sign)"],
                            rows))
    return "\n".join(lines)


def json_report(s: Sweep, cells: list[Cell], pairs: list[Pair] | None, group_by: list[str], metric: str,
                seed_key: str, confidence: float) -> dict:
    def num(x):
        return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x

    def val(v):
        return list(val(x) for x in v) if isinstance(v, tuple) else v

    out = {"sweep": s.path, "metric": metric, "metric_label": s.metric_label(metric), "seed_key": seed_key, "group_by": group_by, "confidence": confidence,
           "interval": "Student t, n-1 dof: mean +- t_{(1+confidence)/2, n-1} sd / sqrt(n)",
           "groups": [{"keys": {k: val(v) for k, v in zip(group_by, c.key)}, "recipe": c.recipe, "n": c.interval.n,
                       "seeds": [val(x) for x in c.seeds], "values": c.values,
                       "runs": [s.label(r) for r in c.runs], "mean": c.interval.mean, "sd": num(c.interval.sd),
                       "half_width": num(c.interval.half_width), "ci_low": num(c.interval.ci_low),
                       "ci_high": num(c.interval.ci_high)} for c in cells]}
    if pairs is not None:
        out["paired"] = [{"keys": {k: val(v) for k, v in zip(group_by, p.key)}, "recipe": p.recipe,
                          "baseline": p.baseline, "n": p.interval.n, "seeds": [val(x) for x in p.seeds],
                          "gaps_percent": p.gaps, "mean_gap_percent": p.interval.mean,
                          "half_width": num(p.interval.half_width), "ci_low": num(p.interval.ci_low),
                          "ci_high": num(p.interval.ci_high), "t": num(p.t), "dof": p.dof, "p_t": num(p.p_t),
                          "sign_positive": p.sign.positive, "sign_negative": p.sign.negative,
                          "sign_ties": p.sign.ties, "p_sign": p.sign.p_value} for p in pairs]
    return out
