"""Loading fp4drift output files (layout: docs/trace-format.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

import h5py
import numpy as np

KNOWN_SCHEMAS = {"fp4drift.quantize": {1}, "fp4drift.run": {1}}


class SchemaError(ValueError):
    """The file is not an fp4drift output of a schema version this package understands."""


def _check_schema(f: h5py.File, expected: str) -> None:
    schema = f.attrs.get("schema")
    version = f.attrs.get("schema_version")
    if schema is None or version is None:
        raise SchemaError(f"{f.filename}: not an fp4drift output (no schema attributes)")
    if schema != expected:
        raise SchemaError(f"{f.filename}: schema {schema!r}, expected {expected!r}")
    if int(version) not in KNOWN_SCHEMAS[expected]:
        raise SchemaError(
            f"{f.filename}: {schema} schema version {int(version)} is not supported "
            f"(this package reads {sorted(KNOWN_SCHEMAS[expected])}); update fp4drift_analysis"
        )
    status = f.attrs.get("status", "complete")
    if status != "complete":
        raise SchemaError(f"{f.filename}: run status is {status!r}, not 'complete'")


@dataclass
class QuantizeRecipe:
    name: str
    attrs: dict
    stats: dict


@dataclass
class QuantizeResult:
    path: str
    attrs: dict
    recipes: list[QuantizeRecipe] = field(default_factory=list)

    def stat(self, key: str) -> np.ndarray:
        return np.array([r.stats[key] for r in self.recipes], dtype=float)

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.recipes]


def load_quantize(path: str) -> QuantizeResult:
    """Load the statistics of an `fp4drift quantize` output (tensors stay in the file)."""
    with h5py.File(path, "r") as f:
        _check_schema(f, "fp4drift.quantize")
        result = QuantizeResult(path=path, attrs=dict(f.attrs))
        order = f["recipes"].attrs.get("order")
        names = order.split(",") if order else sorted(f["recipes"].keys())
        for name in names:
            g = f["recipes"][name]
            result.recipes.append(
                QuantizeRecipe(name=name, attrs=dict(g.attrs), stats=dict(g["stats"].attrs))
            )
    return result


@dataclass
class SumDotRun:
    """An `fp4drift run` trace of the sum or dot workload: arrays over the recorded points
    (n = 1, 2, 4, ... and the last n) and, for `computed`/`error`, over the SR runs."""

    path: str
    attrs: dict          # root: provenance, config text, workload
    options: dict        # /sum_dot attributes: format, rounding, terms, runs, ...
    n: np.ndarray
    exact: np.ndarray
    computed: np.ndarray  # points x runs
    error: np.ndarray     # points x runs
    mean_error: np.ndarray
    rms_error: np.ndarray
    sr_variance: np.ndarray
    sr_half_step_sq: np.ndarray
    first_stagnation: np.ndarray

    @property
    def label(self) -> str:
        o = self.options
        bits = f" ({int(o['sr_bits'])} bits)" if o.get("rounding") == "sr" and int(o.get("sr_bits", 0)) else ""
        return f"{o['operation']} of {o['terms']} in {o['format']}, {o['rounding']}{bits}"


def load_run(path: str) -> SumDotRun:
    """Load an `fp4drift run` trace (sum and dot workloads)."""
    with h5py.File(path, "r") as f:
        _check_schema(f, "fp4drift.run")
        if "sum_dot" not in f:
            raise SchemaError(f"{path}: workload {f.attrs.get('workload')!r} has no loader yet")
        g = f["sum_dot"]
        return SumDotRun(
            path=path,
            attrs=dict(f.attrs),
            options=dict(g.attrs),
            **{k: g[k][()] for k in ("n", "exact", "computed", "error", "mean_error", "rms_error", "sr_variance",
                                     "sr_half_step_sq", "first_stagnation")},
        )
