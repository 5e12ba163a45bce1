"""Loading the index of an `fp4drift sweep` (OUTDIR/sweep.h5, schema fp4drift.sweep; layout in
docs/trace-format.md, semantics in docs/sweeps.md) as one dataset: the summary table as numpy
arrays, the swept parameters as columns, and each run's trace through `load_run`.

    from fp4drift_analysis.sweep import load_sweep
    s = load_sweep("out/sweep/sweep.h5")
    s.params["mlp.lr"], s.summary["status"], s.recipes["final_loss"]   # aligned arrays
    s.run(0)                                                           # MlpRun / LmRun / SumDotRun
    s.overrides(0), s.label(0)   # {"lm.seed": 2, ...}, "lm.pattern=MMMMM lm.seed=2" (the keys that vary)

`recipes` holds every column the index has. The headline of each (run, recipe) row is its run
summary's (docs/numerics.md 8g, copied from the trace's attributes): rel_loss_gap_window_mean
over the window gap_window_first_step..gap_window_last_step, quantized_weight_rel_error (the
layers the recipe quantizes together) and quantized_growth_exponent with its t interval
(quantized_growth_ci_low/high) over quantized_growth_first_step..last_step. The older columns
keep their meaning: final_rel_loss_gap is the last record's (one noisy batch's) gap,
final_weight_rel_error an mlp's last layer or an lm's whole model, growth_exponent a fit over
every compare. An index written before the headline columns gets them filled from those older
columns, and `Sweep.metric_label` says so; a row whose trace predates the run summary has NaN
there.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field

import h5py
import numpy as np

from .traces import SchemaError, load_run, register_loader

SWEEP_SCHEMA_VERSIONS = {1}

# The headline columns of /summary_recipes and, for an index written before them, the older
# column that stands in for each and what that column measures instead.
HEADLINE_FALLBACK = {
    "rel_loss_gap_window_mean": ("final_rel_loss_gap", "the last record's gap"),
    "quantized_weight_rel_error": ("final_weight_rel_error", "an mlp's last layer, an lm's whole model"),
    "quantized_growth_exponent": ("growth_exponent", "fitted over every compare, an mlp's last layer"),
}


def _column(ds: h5py.Dataset) -> np.ndarray:
    if h5py.check_string_dtype(ds.dtype) is not None:
        return np.array(ds.asstr()[()], dtype=str)
    return ds[()]


def parse_overrides(text: str) -> dict:
    """One run's override set (`key = value` lines, each value TOML text) as {dotted key: value};
    lists become tuples so that values can be grouped on. Blank and `#` lines are skipped."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        if not eq or not key.strip():
            raise SchemaError(f"override line {n} is not `key = value`: {line!r}")
        try:
            v = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError as e:
            raise SchemaError(f"override line {n}: bad TOML value {value.strip()!r} ({e})") from None
        out[key.strip()] = _hashable(v)
    return out


def _hashable(v):
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v


def format_value(v) -> str:
    """A parsed override value as a label writes it: strings bare, lists bracketed, true/false."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, tuple):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    return str(v)


def _param_column(texts: np.ndarray) -> np.ndarray:
    """The TOML value texts of one axis as values: float64 when every run sets a number (NaN
    where a run leaves the key at the base config's value), else an object array (None there)."""
    values = [tomllib.loads(f"v = {t}")["v"] if t else None for t in texts]
    if all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values):
        return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


@dataclass
class Sweep:
    path: str
    attrs: dict                                   # root: status, counts, sweep file text, provenance
    summary: dict[str, np.ndarray]                # one entry per run (index, id, status, wall_s, ...)
    params: dict[str, np.ndarray]                 # per swept key, one value per run
    recipes: dict[str, np.ndarray] = field(default_factory=dict)  # mlp, lm: one row per (run, recipe)
    fallbacks: dict[str, str] = field(default_factory=dict)  # headline column -> the older one filling it

    def metric_label(self, metric: str) -> str:
        """The metric's name, and for a headline column filled from an older index's column, which
        column that is and what it measures."""
        if metric in self.fallbacks:
            old = self.fallbacks[metric]
            return f"{metric} (older index: {old}, {HEADLINE_FALLBACK[metric][1]})"
        return metric

    @property
    def ids(self) -> list[str]:
        return list(self.summary["id"])

    def trace_path(self, run: int | str) -> str:
        rid = self.ids[run] if isinstance(run, (int, np.integer)) else run
        return os.path.join(os.path.dirname(os.path.abspath(self.path)), "runs", rid, "trace.h5")

    def run(self, run: int | str, allow_incomplete: bool = False):
        """The trace of one run (index or id) through fp4drift_analysis.load_run."""
        return load_run(self.trace_path(run), allow_incomplete=allow_incomplete)

    def overrides(self, run: int) -> dict:
        """The run's override set, parsed (parse_overrides)."""
        return parse_overrides(str(self.summary["overrides"][run]))

    def entry(self, run: int) -> str:
        """The name of the sweep's list entry the run comes from (`[list.NAME]`), or "" for none:
        the part of its summary label before `: `."""
        head, sep, _ = str(self.summary["label"][run]).partition(": ")
        return head if sep and "=" not in head else ""

    def varying_keys(self) -> list[str]:
        """The override keys whose value differs between runs (in first-seen order)."""
        sets = [self.overrides(i) for i in range(len(self.ids))]
        keys = list(dict.fromkeys(k for o in sets for k in o))
        return [k for k in keys if len({o.get(k) for o in sets}) > 1]

    def label(self, run: int, keys: list[str] | None = None) -> str:
        """The run named by its overrides, `key=value` for `keys` (default: the varying ones)."""
        o = self.overrides(run)
        o.setdefault("entry", self.entry(run))
        keys = self.varying_keys() if keys is None else keys
        return " ".join(f"{k}={format_value(o.get(k))}" for k in keys) or str(self.ids[run])

    def complete(self) -> np.ndarray:
        """Indices of the runs whose status is complete."""
        return np.flatnonzero(self.summary["status"] == "complete")


def load_sweep(path: str, allow_incomplete: bool = False) -> Sweep:
    """Load a sweep index. A sweep still running or interrupted is refused unless
    allow_incomplete (its table then has runs whose status is not 'complete')."""
    with h5py.File(path, "r") as f:
        schema, version = f.attrs.get("schema"), f.attrs.get("schema_version")
        if schema != "fp4drift.sweep":
            raise SchemaError(f"{path}: schema {schema!r}, expected 'fp4drift.sweep'")
        if int(version) not in SWEEP_SCHEMA_VERSIONS:
            raise SchemaError(f"{path}: fp4drift.sweep schema version {int(version)} is not supported "
                              f"(this package reads {sorted(SWEEP_SCHEMA_VERSIONS)})")
        status = f.attrs.get("status")
        if status != "complete" and not allow_incomplete:
            raise SchemaError(f"{path}: sweep status is {status!r}, not 'complete' (allow_incomplete=True to read it)")
        g = f["summary"]
        summary = {k: _column(g[k]) for k in g if isinstance(g[k], h5py.Dataset)}
        params = {}
        axes = [a for a in str(f.attrs.get("axes", "")).split(",") if a]
        for axis in axes:
            params[axis] = _param_column(_column(g["param"][axis]))
        r = f["summary_recipes"]
        recipes = {k: _column(r[k]) for k in r}
        fallbacks = {}
        for new, (old, _) in HEADLINE_FALLBACK.items():
            if new not in recipes and old in recipes:
                recipes[new] = recipes[old]
                fallbacks[new] = old
        return Sweep(path=path, attrs=dict(f.attrs), summary=summary, params=params, recipes=recipes,
                     fallbacks=fallbacks)


# `fp4drift_analysis.load(path)` reads sweep indexes too.
register_loader("fp4drift.sweep", SWEEP_SCHEMA_VERSIONS, load_sweep)


def parse_where(conditions: list[str] | None) -> dict:
    """`KEY=VALUE` conditions (VALUE as TOML text, a bare word as a string) as {key: value}."""
    out = {}
    for c in conditions or []:
        key, eq, value = c.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--where {c!r}: expected KEY=VALUE")
        try:
            v = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            v = value.strip()
        out[key.strip()] = _hashable(v)
    return out


def select_runs(s: Sweep, where: dict) -> list[int]:
    """The complete runs whose overrides match every condition (a number matches a number of equal
    value; `entry` is the list entry's name unless an override is called so)."""
    sets = [s.overrides(i) for i in range(len(s.ids))]
    for i, o in enumerate(sets):
        o.setdefault("entry", s.entry(i))
    known = set(k for o in sets for k in o)
    for k in where:
        if k not in known:
            raise ValueError(f"--where: unknown key {k!r}; the sweep's override keys: "
                             f"{', '.join(dict.fromkeys(k for o in sets for k in o))}")
    return [int(i) for i in s.complete() if all(sets[i].get(k) == v for k, v in where.items())]


def expand_traces(paths: list[str], where: list[str] | None = None,
                  allow_incomplete: bool = False) -> tuple[list[str], dict[str, str]]:
    """The trace paths behind `paths`, a sweep index standing for the traces of its complete runs
    that match `where` (KEY=VALUE), and a label per sweep trace: the override keys that vary
    between the selected runs (`lm.pattern=MMMMM lm.seed=2`). Other paths pass through unlabelled.
    allow_incomplete: a trace being written passes too, and a sweep still running is read (its
    complete runs, as load_sweep's allow_incomplete)."""
    from .traces import schema_of
    cond = parse_where(where)
    out, labels, sweeps = [], {}, 0
    for p in paths:
        if schema_of(p, allow_incomplete) != "fp4drift.sweep":
            out.append(p)
            continue
        sweeps += 1
        s = load_sweep(p, allow_incomplete)
        runs = select_runs(s, cond)
        if not runs:
            raise ValueError(f"{p}: no complete run matches {' '.join(where or []) or 'the sweep'}")
        sets = [s.overrides(i) for i in runs]
        keys = list(dict.fromkeys(k for o in sets for k in o))
        vary = [k for k in keys if len({o.get(k) for o in sets}) > 1] or [k for k in cond if k in keys]
        for i in runs:
            t = s.trace_path(i)
            out.append(t)
            labels[t] = s.label(i, vary) if vary else str(s.ids[i])
    if cond and not sweeps:
        raise ValueError("--where selects runs of a sweep index; none was given")
    return out, labels
