"""Loading fp4drift output files (layout: docs/trace-format.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

import h5py
import numpy as np

KNOWN_SCHEMAS = {"fp4drift.quantize": {1}}


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
