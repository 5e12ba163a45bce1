"""The CI regression of numeric bounds (data/bounds/*.toml; format in docs/analysis.md).

A bounds file names small experiments (an `fp4drift` command line, or a run config with
overrides) and bounds on metrics of their traces, each with limits, a one-line rationale and
its provenance. `check` runs every experiment once (or reads its trace from a directory when
the trace's command or config matches exactly), evaluates every bound, prints a table
(bound, value, limit, margin, verdict) and, for each violation, what moved and by how much.
Exit status: 0 all bounds hold, 1 a bound is violated, 2 bad input (unknown key, missing file,
an experiment that fails)."""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import stats
from .traces import MlpRun, SumDotRun, _str, load

REPO = Path(__file__).resolve().parents[2]


class BoundsError(ValueError):
    """Bad input: a bounds file that cannot be checked as written (exit status 2)."""


# --- metrics ---------------------------------------------------------------------------------
# name -> (required parameters, optional parameters with defaults, function(trace, params) ->
# (value, detail)). `detail` says what the value is made of, for the table and the diff.

def _need(trace, kind, metric: str):
    if not isinstance(trace, kind):
        raise BoundsError(f"metric {metric} needs a {kind.__name__} trace, {trace.path} is {type(trace).__name__}")
    return trace


def _m_quantize_stat(tr, p):
    r = tr.recipe(p["recipe"])
    if p["stat"] not in r.stats:
        raise BoundsError(f"{tr.path}: recipe {p['recipe']} has no statistic {p['stat']!r}")
    return float(r.stats[p["stat"]]), f"{p['recipe']} {p['stat']}"


def _m_gemm_attr(tr, p):
    r = tr.recipe(p["recipe"])
    if p["attr"] not in r.stats:
        raise BoundsError(f"{tr.path}: GEMM recipe {p['recipe']} has no attribute {p['attr']!r}")
    return float(r.stats[p["attr"]]), f"{p['recipe']} {p['attr']}"


def _m_sum_first_stagnation(tr, p):
    tr = _need(tr, SumDotRun, "sum.first_stagnation")
    return float(tr.first_stagnation[int(p["run"])]), f"run {p['run']}: first lost addend"


def _m_sum_value(tr, p):
    tr = _need(tr, SumDotRun, "sum.value")
    i, r = int(p["point"]), int(p["run"])
    q = p["quantity"]
    if q == "computed":
        v = tr.computed[i, r]
    elif q == "error":
        v = tr.error[i, r]
    elif q == "rel_error":
        v = tr.error[i, r] / abs(tr.exact[i])
    else:
        raise BoundsError(f"sum.value: quantity {q!r} is not computed, error or rel_error")
    return float(v), f"{q} at n = {int(tr.n[i])}, run {r}"


def _m_sr_bias_p(tr, p):
    tr = _need(tr, SumDotRun, "sr.bias_p")
    i = int(p["point"])
    t = stats.sr_bias_test(tr.error[i, :], confidence=float(p["confidence"]))
    return t.p_value, (f"n = {int(tr.n[i])}: mean error {t.mean:.3g} +- {t.stderr:.3g} over {t.dof + 1} seeds, "
                       f"t = {t.t:.2f} (|t| <= {t.critical_t:.2f} at {100 * t.confidence:g}%)")


def _m_sr_rms_ratio(tr, p):
    tr = _need(tr, SumDotRun, "sr.rms_ratio")
    i = int(p["point"])
    if tr.sr_variance[i] <= 0:
        raise BoundsError(f"{tr.path}: sr_variance is 0 at point {i} (not an SR trace?)")
    return float(tr.rms_error[i] / math.sqrt(tr.sr_variance[i])), f"n = {int(tr.n[i])}: RMS / sqrt(E[err^2])"


def _mlp_series(tr: MlpRun, p):
    r = tr.run(p["recipe"])
    q, layer = p["quantity"], int(p["layer"])
    if q in ("loss", "rel_loss_gap"):
        return getattr(r, q), "step"
    if q == "weight_rel_error":
        return r.weight_rel_error[:, layer], "compare"
    if q == "lost_update_fraction":
        return r.lost_update_fraction[:, layer], "step"
    if q in ("grad_rel_error", "grad_cosine", "grad_sr_mean_rel_error"):
        if q not in r.extra:
            raise BoundsError(f"{tr.path}: run {r.name} has no {q}")
        return r.extra[q][:, layer], "compare"
    raise BoundsError(f"mlp metric: unknown quantity {q!r} (loss, rel_loss_gap, weight_rel_error, "
                      "lost_update_fraction, grad_rel_error, grad_cosine, grad_sr_mean_rel_error)")


def _m_mlp_final(tr, p):
    tr = _need(tr, MlpRun, "mlp.final")
    if p["quantity"] == "growth_exponent":
        r = tr.run(p["recipe"])
        return r.growth_exponent, f"{r.name} last-layer weight error growth exponent"
    series, unit = _mlp_series(tr, p)
    w = int(p["window"])
    if w < 1 or w > len(series):
        raise BoundsError(f"mlp.final: window {w} outside 1..{len(series)}")
    layer = f" layer {p['layer']}" if p["quantity"] not in ("loss", "rel_loss_gap") else ""
    return float(np.mean(series[-w:])), f"{p['recipe']} {p['quantity']}{layer}, mean of the last {w} {unit}s"


def _m_mlp_max_abs(tr, p):
    tr = _need(tr, MlpRun, "mlp.max_abs")
    r = tr.run(p["recipe"])
    q, first = p["quantity"], int(p["first"])
    if q == "rel_loss_gap":
        a, unit = r.rel_loss_gap, "steps"
    elif q == "weight_rel_error":
        a, unit = r.weight_rel_error, "compares"
    else:
        raise BoundsError(f"mlp.max_abs: quantity {q!r} is not rel_loss_gap or weight_rel_error")
    if first < 0 or first > len(a):
        raise BoundsError(f"mlp.max_abs: first {first} outside 0..{len(a)}")
    span = f"the first {first} {unit}" if first else "the whole run"
    a = a[:first] if first else a
    return float(np.max(np.abs(a))), f"{r.name} max |{q}| over {span}" + (", all layers" if a.ndim > 1 else "")


METRICS: dict[str, tuple[tuple[str, ...], dict, Callable]] = {
    "quantize.stat": (("recipe", "stat"), {}, _m_quantize_stat),
    "gemm.attr": (("recipe", "attr"), {}, _m_gemm_attr),
    "sum.first_stagnation": ((), {"run": 0}, _m_sum_first_stagnation),
    "sum.value": (("quantity",), {"point": -1, "run": 0}, _m_sum_value),
    "sr.bias_p": ((), {"point": -1, "confidence": 0.999}, _m_sr_bias_p),
    "sr.rms_ratio": ((), {"point": -1}, _m_sr_rms_ratio),
    "mlp.final": (("recipe", "quantity"), {"layer": -1, "window": 1}, _m_mlp_final),
    "mlp.max_abs": (("recipe", "quantity"), {"first": 0}, _m_mlp_max_abs),
}
RATIO = "ratio"   # numerator / denominator, each a metric table with its own experiment

BOUND_KEYS = {"name", "experiment", "metric", "min", "max", "rationale", "provenance", "numerator", "denominator"}
EXPERIMENT_KEYS = {"args", "config", "overrides", "steps"}


# --- bounds files ----------------------------------------------------------------------------

@dataclass
class Experiment:
    name: str
    file: str
    args: list[str] = field(default_factory=list)   # fp4drift arguments without --out
    config: str | None = None                       # repo-relative config path
    overrides: dict = field(default_factory=dict)   # "section.key" -> value
    steps: int | None = None                        # --steps for `fp4drift run`

    def expected_config(self) -> dict:
        cfg = tomllib.loads(_resolve(self.config, self.file).read_text())
        for dotted, value in self.overrides.items():
            *sections, key = dotted.split(".")
            table = cfg
            for s in sections:
                table = table.setdefault(s, {})
                if not isinstance(table, dict):
                    raise BoundsError(f"{self.file}: experiment {self.name}: override {dotted!r} is not a table key")
            table[key] = value
        return cfg

    def describe(self) -> str:
        if self.config:
            o = ", ".join(f"{k} = {json.dumps(v)}" for k, v in self.overrides.items())
            st = f" --steps {self.steps}" if self.steps else ""
            return f"fp4drift run {self.config}{st}" + (f" with {o}" if o else "")
        return "fp4drift " + shlex.join(self.args)


@dataclass
class Bound:
    name: str
    file: str
    metric: str
    params: dict
    experiment: str | None
    lo: float | None
    hi: float | None
    rationale: str
    provenance: str
    numerator: "Bound | None" = None
    denominator: "Bound | None" = None

    def experiments(self) -> list[str]:
        if self.metric == RATIO:
            return [self.numerator.experiment, self.denominator.experiment]
        return [self.experiment]

    def expression(self) -> str:
        if self.metric == RATIO:
            return f"{self.numerator.expression()} / {self.denominator.expression()}"
        args = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.metric}({self.experiment}: {args})"


def _resolve(path: str, relative_to_file: str) -> Path:
    """Config paths in bounds files are relative to the repository root."""
    p = Path(path)
    if not p.is_absolute():
        p = REPO / p
    if not p.is_file():
        raise BoundsError(f"{relative_to_file}: config {path} not found")
    return p


def _number(v, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise BoundsError(f"{what} must be a finite number, got {v!r}")
    return float(v)


def _metric_params(t: dict, where: str, allowed_extra: set[str]) -> tuple[str, dict]:
    metric = t.get("metric")
    if metric not in METRICS:
        raise BoundsError(f"{where}: unknown metric {metric!r} (metrics: {', '.join(sorted(METRICS))}, {RATIO})")
    required, optional, _ = METRICS[metric]
    params = {}
    for k in required:
        if k not in t:
            raise BoundsError(f"{where}: metric {metric} needs key {k!r}")
    for k, v in t.items():
        if k in required or k in optional:
            params[k] = v
        elif k not in allowed_extra:
            raise BoundsError(f"{where}: unknown key {k!r} (metric {metric} takes "
                              f"{', '.join(list(required) + list(optional)) or 'no parameters'})")
    return metric, {**optional, **params}


def _parse_bound(t: dict, file: str, index: int) -> Bound:
    name = t.get("name")
    if not isinstance(name, str) or not name:
        raise BoundsError(f"{file}: bounds[{index}] has no name")
    where = f"{file}: bound {name}"
    for k in ("rationale", "provenance"):
        if not isinstance(t.get(k), str) or not t[k].strip():
            raise BoundsError(f"{where}: needs a one-line {k!r}")
    if not t["provenance"].startswith(("theory:", "measured:")):
        raise BoundsError(f"{where}: provenance must start with 'theory:' (derivation in a comment) or "
                          "'measured:' (command and date)")
    if "min" not in t and "max" not in t:
        raise BoundsError(f"{where}: needs 'min', 'max' or both")
    lo = _number(t["min"], f"{where}: min") if "min" in t else None
    hi = _number(t["max"], f"{where}: max") if "max" in t else None
    if lo is not None and hi is not None and lo > hi:
        raise BoundsError(f"{where}: min {lo} > max {hi}")
    common = {"name", "min", "max", "rationale", "provenance", "metric"}
    if t.get("metric") == RATIO:
        extra = set(t) - common - {"numerator", "denominator"}
        if extra:
            raise BoundsError(f"{where}: unknown key {sorted(extra)[0]!r} (a ratio takes numerator, denominator)")
        parts = []
        for side in ("numerator", "denominator"):
            s = t.get(side)
            if not isinstance(s, dict):
                raise BoundsError(f"{where}: a ratio needs a {side} table (experiment, metric, parameters)")
            if not isinstance(s.get("experiment"), str):
                raise BoundsError(f"{where}: {side} needs an experiment")
            m, p = _metric_params(s, f"{where} {side}", {"metric", "experiment"})
            parts.append(Bound(f"{name}.{side}", file, m, p, s["experiment"], None, None, "", ""))
        return Bound(name, file, RATIO, {}, None, lo, hi, t["rationale"], t["provenance"], *parts)
    if not isinstance(t.get("experiment"), str):
        raise BoundsError(f"{where}: needs an experiment")
    metric, params = _metric_params(t, where, common | {"experiment"})
    return Bound(name, file, metric, params, t["experiment"], lo, hi, t["rationale"], t["provenance"])


def _parse_experiment(name: str, t, file: str) -> Experiment:
    where = f"{file}: experiment {name}"
    if not isinstance(t, dict):
        raise BoundsError(f"{where}: must be a table")
    unknown = set(t) - EXPERIMENT_KEYS
    if unknown:
        raise BoundsError(f"{where}: unknown key {sorted(unknown)[0]!r} (keys: {', '.join(sorted(EXPERIMENT_KEYS))})")
    if ("args" in t) == ("config" in t):
        raise BoundsError(f"{where}: needs exactly one of 'args' (fp4drift arguments) or 'config' (a run config)")
    if "args" in t:
        if not (isinstance(t["args"], list) and all(isinstance(a, str) for a in t["args"]) and t["args"]):
            raise BoundsError(f"{where}: args must be a list of strings")
        if "--out" in t["args"] or "overrides" in t or "steps" in t:
            raise BoundsError(f"{where}: args take no --out, overrides or steps (the checker adds --out)")
        return Experiment(name, file, args=list(t["args"]))
    e = Experiment(name, file, config=t["config"], overrides=dict(t.get("overrides", {})), steps=t.get("steps"))
    e.expected_config()   # the config exists and the overrides apply
    return e


def load_bounds(paths: list[str]) -> tuple[dict[str, Experiment], list[Bound]]:
    """Read bounds files (or every *.toml in a directory); every key is checked."""
    files: list[Path] = []
    for p in paths:
        q = Path(p)
        if q.is_dir():
            found = sorted(q.glob("*.toml"))
            if not found:
                raise BoundsError(f"{p}: no *.toml bounds files")
            files += found
        elif q.is_file():
            files.append(q)
        else:
            raise BoundsError(f"{p}: no such file or directory")
    experiments: dict[str, Experiment] = {}
    bounds: list[Bound] = []
    for path in files:
        try:
            doc = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise BoundsError(f"{path}: not valid TOML: {e}") from e
        unknown = set(doc) - {"experiments", "bounds"}
        if unknown:
            raise BoundsError(f"{path}: unknown top-level key {sorted(unknown)[0]!r} (experiments, bounds)")
        for name, t in doc.get("experiments", {}).items():
            e = _parse_experiment(name, t, str(path))
            if name in experiments and experiments[name].describe() != e.describe():
                raise BoundsError(f"{path}: experiment {name} is defined differently in {experiments[name].file}")
            experiments[name] = e
        for i, t in enumerate(doc.get("bounds", [])):
            bounds.append(_parse_bound(t, str(path), i))
    names = [b.name for b in bounds]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise BoundsError(f"bound name {sorted(dup)[0]!r} is used twice")
    for b in bounds:
        for e in b.experiments():
            if e not in experiments:
                raise BoundsError(f"{b.file}: bound {b.name}: unknown experiment {e!r}")
    return experiments, bounds


# --- running experiments ---------------------------------------------------------------------

def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise BoundsError(f"config value {v!r} cannot be written in fp4drift's TOML subset")


def write_config(cfg: dict) -> str:
    """fp4drift's TOML subset (docs: data/configs/README.md): top-level keys, then [sections]."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in cfg.items() if not isinstance(v, dict)]
    for section, table in cfg.items():
        if isinstance(table, dict):
            lines.append(f"\n[{section}]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def _trace_matches(e: Experiment, trace) -> str | None:
    """None when `trace` was written by exactly this experiment, else why not."""
    a = trace.attrs
    if e.config:
        try:
            got = tomllib.loads(_str(a.get("config", "")))
        except tomllib.TOMLDecodeError:
            return "its config does not parse"
        if got != e.expected_config():
            return "its config differs from the experiment's"
        # --steps changes the run without showing in its config attribute: read it from the
        # command line (both spellings), and refuse a shortened run where none was asked for.
        words = shlex.split(_str(a.get("command_line", "")))
        given = None
        for i, w in enumerate(words):
            if w == "--steps" and i + 1 < len(words):
                given = words[i + 1]
            elif w.startswith("--steps="):
                given = w.split("=", 1)[1]
        if e.steps is None and given is not None:
            return f"it was run with --steps {given}, the experiment runs the config's length"
        if e.steps is not None and given is None:
            return "it was not run with --steps"
        if e.steps is not None and given != str(e.steps):
            return "it was run with another --steps"
        return None
    words = shlex.split(_str(a.get("command_line", "")))
    if "--out" in words:
        i = words.index("--out")
        del words[i:i + 2]
    return None if words[1:] == e.args else f"its command line is {shlex.join(words[1:])!r}"


def run_experiment(e: Experiment, exe: str, workdir: Path) -> tuple[str, float]:
    out = workdir / f"{e.name}.h5"
    if e.config:
        cfg_path = workdir / f"{e.name}.toml"
        cfg_path.write_text(write_config(e.expected_config()))
        cmd = [exe, "run", str(cfg_path), "--out", str(out)] + (["--steps", str(e.steps)] if e.steps else [])
    else:
        cmd = [exe, *e.args, "--out", str(out)]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise BoundsError(f"experiment {e.name} failed (exit {r.returncode}): {shlex.join(cmd)}\n  " + "\n  ".join(tail))
    return str(out), time.monotonic() - t0


def default_fp4drift() -> str:
    return os.environ.get("FP4DRIFT_EXE") or str(REPO / "build" / "apps" / "fp4drift" / "fp4drift")


# --- evaluation and report -------------------------------------------------------------------

@dataclass
class Result:
    bound: Bound
    value: float
    detail: str
    ok: bool
    margin: float      # signed distance to the nearest limit, relative to it (absolute if it is 0)
    relative: bool = True


def _margin(v: float, lo: float | None, hi: float | None) -> tuple[float, bool]:
    """Signed distance to the nearest limit (negative outside), as a fraction of that limit, or
    absolute when the limit is 0; the nearest limit is the one with the smaller absolute gap."""
    if not math.isfinite(v):
        return -math.inf, False
    gaps = [(v - lo, lo) for _ in [0] if lo is not None] + [(hi - v, hi) for _ in [0] if hi is not None]
    gap, limit = min(gaps, key=lambda g: g[0])
    return (gap / abs(limit), True) if limit != 0 else (gap, False)


def evaluate(b: Bound, traces: dict) -> Result:
    if b.metric == RATIO:
        (n, nd), (d, dd) = _value(b.numerator, traces), _value(b.denominator, traces)
        # A ranking needs magnitudes of one sign: -0.2 / -0.1 = 2 would "pass" a ratio >= 1
        # while saying the opposite. A non-positive denominator (or a negative numerator) makes
        # the ratio meaningless: NaN, which fails.
        v = n / d if d > 0 and n >= 0 else math.nan
        detail = f"{n:.4g} ({nd}) / {d:.4g} ({dd})" + ("" if d > 0 and n >= 0 else " (signs make the ratio meaningless)")
    else:
        v, detail = _value(b, traces)
    ok = math.isfinite(v) and (b.lo is None or v >= b.lo) and (b.hi is None or v <= b.hi)
    return Result(b, v, detail, ok, *_margin(v, b.lo, b.hi))


def _value(b: Bound, traces: dict) -> tuple[float, str]:
    _, _, fn = METRICS[b.metric]
    try:
        return fn(traces[b.experiment], b.params)
    except (KeyError, IndexError, ValueError) as e:
        if isinstance(e, BoundsError):
            raise
        raise BoundsError(f"{b.file}: bound {b.name}: {e}") from e


def _limit(b: Bound) -> str:
    if b.lo is not None and b.hi is not None:
        return f"[{b.lo:.6g}, {b.hi:.6g}]" if b.lo != b.hi else f"= {b.lo:.6g}"
    return f">= {b.lo:.6g}" if b.lo is not None else f"<= {b.hi:.6g}"


def _fmt_margin(r: Result) -> str:
    """The margin cell. A violation shows its signed distance to the limit with two significant
    digits: a fixed one decimal printed 2048 against "= 2049" as "-0.0%", which reads as a pass."""
    if not math.isfinite(r.margin):
        return "-" if r.ok else "VIOLATED"
    if not r.ok:
        return f"{100 * r.margin:+#.2g}%" if r.relative else f"{r.margin:+#.2g}"
    if r.relative:
        return f"{100 * r.margin:+.1f}%" if r.margin < 10 else ">+999%"
    return f"{r.margin:+.3g}"


def explain(r: Result) -> str:
    """A diff-like account of a violation: the limit, the value, what moved by how much, why."""
    b, v = r.bound, r.value
    if not math.isfinite(v):
        moved = "the value is not finite"
    elif b.lo is not None and v < b.lo:
        moved = f"{b.lo - v:.4g} below the min" + (f" ({100 * (b.lo - v) / abs(b.lo):#.2g}% of it)" if b.lo else "")
    else:
        moved = f"{v - b.hi:.4g} above the max" + (f" ({100 * (v - b.hi) / abs(b.hi):#.2g}% of it)" if b.hi else "")
    return "\n".join([
        f"--- bound {b.name} ({b.file})",
        f"-   expected: {b.expression()} {_limit(b)}",
        f"+   measured: {v:.6g}   ({moved})",
        f"    value:      {r.detail}",
        f"    rationale:  {b.rationale}",
        f"    provenance: {b.provenance}",
        "    A deliberate change of numerics updates this bound in the same commit (docs/analysis.md).",
    ])


def check(paths: list[str], exe: str | None = None, traces_dir: str | None = None, out=sys.stdout) -> int:
    """Run (or read) every experiment, evaluate every bound, print the table; the exit status."""
    try:
        experiments, bounds = load_bounds(paths)
        if traces_dir is not None and not Path(traces_dir).is_dir():   # else every experiment reran unnoticed
            raise BoundsError(f"--traces {traces_dir}: is not a directory")
        exe = exe or default_fp4drift()
        needed = [n for n in experiments if any(n in b.experiments() for b in bounds)]
        loaded = {}
        with tempfile.TemporaryDirectory(prefix="fp4drift-bounds-") as tmp:
            for name in needed:
                e = experiments[name]
                cand = Path(traces_dir) / f"{name}.h5" if traces_dir else None
                why = None
                if cand is not None and cand.is_file():
                    tr = load(str(cand))
                    why = _trace_matches(e, tr)
                    if why is None:
                        loaded[name] = tr
                        print(f"experiment {name}: read {cand} ({e.describe()})", file=out)
                        continue
                if not os.access(exe, os.X_OK):
                    raise BoundsError(f"fp4drift executable {exe} not found (build it, or pass --fp4drift PATH)")
                path, secs = run_experiment(e, exe, Path(tmp))
                loaded[name] = load(path)
                note = f"; {cand} not used: {why}" if why else ""
                print(f"experiment {name}: ran {e.describe()} ({secs:.1f} s{note})", file=out)
            results = [evaluate(b, loaded) for b in bounds]
    except (ValueError, OSError) as e:   # BoundsError, SchemaError and a bad value are ValueErrors
        print(f"fp4drift_analysis check: error: {e}", file=out if out is not sys.stdout else sys.stderr)
        return 2
    w = max([len(r.bound.name) for r in results] + [5])
    print(f"\n{'bound':<{w}}  {'value':>11}  {'limit':>22}  {'margin':>8}  verdict", file=out)
    for r in results:
        print(f"{r.bound.name:<{w}}  {r.value:>11.5g}  {_limit(r.bound):>22}  {_fmt_margin(r):>8}  "
              f"{'PASS' if r.ok else 'FAIL'}", file=out)
    failed = [r for r in results if not r.ok]
    for r in failed:
        print("\n" + explain(r), file=out)
    print(f"\nbounds: {len(results) - len(failed)} of {len(results)} hold"
          + (f", {len(failed)} VIOLATED" if failed else ""), file=out)
    return 1 if failed else 0
