"""Loading fp4drift output files (layout: docs/trace-format.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

import h5py
import numpy as np

KNOWN_SCHEMAS = {"fp4drift.quantize": {1}, "fp4drift.run": {1}}


class SchemaError(ValueError):
    """The file is not an fp4drift output of a schema version this package understands."""


def _check_schema(f: h5py.File, expected: str, allow_incomplete: bool = False) -> None:
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
    if status != "complete" and not allow_incomplete:
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


@dataclass
class MlpRecipeRun:
    """One low-precision run of an mlp trace (arrays over the recorded steps / compares)."""

    name: str
    attrs: dict
    loss: np.ndarray
    rel_loss_gap: np.ndarray
    lost_update_fraction: np.ndarray   # steps x layers
    operand_nmse: np.ndarray           # steps x (layers * 6), slot = layer * 6 + role * 2 + operand
    weight_rel_error: np.ndarray       # compares x layers


@dataclass
class MlpRun:
    """An `fp4drift run` trace of the mlp workload: the reference and the recipes' runs."""

    path: str
    attrs: dict
    options: dict
    step: np.ndarray
    compare_step: np.ndarray
    reference_loss: np.ndarray
    runs: list[MlpRecipeRun] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.runs]

    def run(self, name: str) -> MlpRecipeRun:
        for r in self.runs:
            if r.name == name:
                return r
        raise KeyError(f"{self.path}: no run {name!r} (runs: {', '.join(self.names)})")


def load_run(path: str, allow_incomplete: bool = False):
    """Load an `fp4drift run` trace: SumDotRun (sum, dot) or MlpRun (mlp). An mlp run that was
    interrupted or failed is refused unless allow_incomplete (its data ends at the last flush)."""
    with h5py.File(path, "r") as f:
        _check_schema(f, "fp4drift.run", allow_incomplete)
        if "mlp" in f:
            g = f["mlp"]
            out = MlpRun(path=path, attrs=dict(f.attrs), options=dict(g.attrs), step=g["step"][()],
                         compare_step=g["compare_step"][()], reference_loss=g["reference/loss"][()])
            for name in str(g.attrs["recipes"]).split(","):
                r = g["runs"][name]
                out.runs.append(MlpRecipeRun(
                    name=name, attrs=dict(r.attrs), loss=r["loss"][()], rel_loss_gap=r["rel_loss_gap"][()],
                    lost_update_fraction=r["lost_update_fraction"][()], operand_nmse=r["operand_nmse"][()],
                    weight_rel_error=r["weight_rel_error"][()]))
            return out
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
