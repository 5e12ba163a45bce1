"""Loading fp4drift output files (layout: docs/trace-format.md).

Every loader returns numpy arrays, the file's root attributes (`attrs`: provenance, and for
runs the config text) and, where pandas / xarray are importable, `to_pandas()` /
`to_xarray()` views. `load(path)` picks the loader from the file's `schema` attribute;
`register_loader` lets another module (the sweep index loader) add a schema without touching
this one."""

from __future__ import annotations

import os
import re
import tomllib
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import h5py
import numpy as np

KNOWN_SCHEMAS = {"fp4drift.quantize": {1}, "fp4drift.gemm": {1}, "fp4drift.run": {1}}

# The root attributes that say where a file came from (docs/trace-format.md, common root).
PROVENANCE_KEYS = ("fp4drift_version", "git_commit", "command_line", "host", "backend", "created", "status",
                   "source", "config_source", "resumed_at_step")


class SchemaError(ValueError):
    """The file is not an fp4drift output of a schema version this package understands."""


@contextmanager
def _open(path: str):
    """h5py.File(path, "r") for the loaders, with errors that name the file: h5py says "Unable
    to synchronously open file (... errno = 2 ...)" for a missing file, and a KeyError without
    the file ("object 'step' doesn't exist") for a trace that lacks a dataset."""
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path}: is a directory, not a trace file")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    try:
        h = h5py.File(path, "r")
    except OSError as e:   # h5py's "file signature not found" does not say which file
        raise OSError(f"{path}: not readable as an HDF5 file ({e})") from e
    with h as f:
        try:
            yield f
        except KeyError as e:
            what = str(e.args[0]) if e.args else str(e)
            m = re.search(r"object '([^']+)' doesn't exist", what)
            raise SchemaError(f"{path}: not a complete fp4drift trace "
                              f"({'no ' + repr(m.group(1)) + ' where its schema has one' if m else what})") from e


def _str(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _check_schema(f: h5py.File, expected: str, allow_incomplete: bool = False) -> None:
    schema = f.attrs.get("schema")
    version = f.attrs.get("schema_version")
    if schema is None or version is None:
        raise SchemaError(f"{f.filename}: not an fp4drift output (no schema attributes)")
    if _str(schema) != expected:
        raise SchemaError(f"{f.filename}: schema {_str(schema)!r}, expected {expected!r}")
    if int(version) not in KNOWN_SCHEMAS[expected]:
        raise SchemaError(
            f"{f.filename}: {expected} schema version {int(version)} is not supported "
            f"(this package reads {sorted(KNOWN_SCHEMAS[expected])}); update fp4drift_analysis"
        )
    status = _str(f.attrs.get("status", "complete"))
    if status != "complete" and not allow_incomplete:
        raise SchemaError(f"{f.filename}: run status is {status!r}, not 'complete' "
                          "(pass allow_incomplete=True to look at a partial run)")


def _optional(module: str):
    """pandas / xarray are optional: a clear message instead of a bare ImportError."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{module} is not installed (pip install {module}); the numpy arrays need nothing more") from e


class _Provenance:
    attrs: dict

    @property
    def provenance(self) -> dict:
        """The root attributes that say which build, command, machine and time wrote the file."""
        return {k: self.attrs[k] for k in PROVENANCE_KEYS if k in self.attrs}


class _RunConfig(_Provenance):
    @property
    def config(self) -> dict:
        """The run's config file, parsed back from the verbatim text in the trace."""
        return tomllib.loads(_str(self.attrs.get("config", "")))


# --- fp4drift.quantize -----------------------------------------------------------------------

@dataclass
class QuantizeRecipe:
    name: str
    attrs: dict
    stats: dict


@dataclass
class QuantizeResult(_Provenance):
    path: str
    attrs: dict
    recipes: list[QuantizeRecipe] = field(default_factory=list)

    def stat(self, key: str) -> np.ndarray:
        """One statistic (docs/numerics.md section 7) per recipe, in run order."""
        missing = [r.name for r in self.recipes if key not in r.stats]
        if missing:
            raise KeyError(f"{self.path}: no statistic {key!r} for {', '.join(missing)}")
        return np.array([r.stats[key] for r in self.recipes], dtype=float)

    def recipe(self, name: str) -> QuantizeRecipe:
        for r in self.recipes:
            if r.name == name:
                return r
        raise KeyError(f"{self.path}: no recipe {name!r} (recipes: {', '.join(self.names)})")

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.recipes]

    def to_pandas(self):
        """One row per recipe: its statistics and options."""
        pd = _optional("pandas")
        rows = [{**{k: v for k, v in r.attrs.items()}, **r.stats} for r in self.recipes]
        return pd.DataFrame(rows, index=pd.Index(self.names, name="recipe"))

    def to_xarray(self):
        xr = _optional("xarray")
        keys = sorted(set().union(*(r.stats for r in self.recipes))) if self.recipes else []
        data = {k: ("recipe", np.array([r.stats.get(k, np.nan) for r in self.recipes], dtype=float)) for k in keys}
        return xr.Dataset(data, coords={"recipe": self.names}, attrs=_scalar_attrs(self.attrs))


def _ordered(g: h5py.Group) -> list[str]:
    order = g.attrs.get("order")
    return _str(order).split(",") if order is not None and _str(order) else sorted(g.keys())


def load_quantize(path: str) -> QuantizeResult:
    """Load the statistics of an `fp4drift quantize` output (tensors stay in the file)."""
    with _open(path) as f:
        _check_schema(f, "fp4drift.quantize")
        result = QuantizeResult(path=path, attrs=dict(f.attrs))
        for name in _ordered(f["recipes"]):
            g = f["recipes"][name]
            result.recipes.append(
                QuantizeRecipe(name=name, attrs=dict(g.attrs), stats=dict(g["stats"].attrs))
            )
    return result


# --- fp4drift.gemm ---------------------------------------------------------------------------

@dataclass
class GemmResult(_Provenance):
    """An `fp4drift gemm` output: per GEMM recipe its error split (attributes; docs/trace-format.md)."""

    path: str
    attrs: dict
    recipes: list[QuantizeRecipe] = field(default_factory=list)   # stats = the recipe's attributes

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.recipes]

    def attr(self, key: str) -> np.ndarray:
        """One attribute (e.g. total_rel_frobenius) per recipe, NaN where a recipe lacks it."""
        if not any(key in r.stats for r in self.recipes):
            raise KeyError(f"{self.path}: no GEMM recipe has attribute {key!r}")
        return np.array([float(r.stats[key]) if key in r.stats else np.nan for r in self.recipes])

    def recipe(self, name: str) -> QuantizeRecipe:
        for r in self.recipes:
            if r.name == name:
                return r
        raise KeyError(f"{self.path}: no GEMM recipe {name!r} (recipes: {', '.join(self.names)})")

    def to_pandas(self):
        pd = _optional("pandas")
        return pd.DataFrame([r.stats for r in self.recipes], index=pd.Index(self.names, name="recipe"))

    def to_xarray(self):
        xr = _optional("xarray")
        keys = sorted({k for r in self.recipes for k, v in r.stats.items() if np.ndim(v) == 0
                       and isinstance(v, (int, float, np.integer, np.floating, np.bool_))})
        return xr.Dataset({k: ("recipe", self.attr(k)) for k in keys}, coords={"recipe": self.names},
                          attrs=_scalar_attrs(self.attrs))


def load_gemm(path: str) -> GemmResult:
    """Load the per-recipe error split of an `fp4drift gemm` output (tensors stay in the file)."""
    with _open(path) as f:
        _check_schema(f, "fp4drift.gemm")
        result = GemmResult(path=path, attrs=dict(f.attrs))
        for name in _ordered(f["recipes"]):
            result.recipes.append(QuantizeRecipe(name=name, attrs={}, stats=dict(f["recipes"][name].attrs)))
    return result


# --- fp4drift.run ----------------------------------------------------------------------------

@dataclass
class SumDotRun(_RunConfig):
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

    def to_pandas(self):
        """One row per recorded n: the exact value and the run statistics (per-run arrays: to_xarray)."""
        pd = _optional("pandas")
        return pd.DataFrame({"exact": self.exact, "mean_error": self.mean_error, "rms_error": self.rms_error,
                             "sr_variance": self.sr_variance, "sr_half_step_sq": self.sr_half_step_sq},
                            index=pd.Index(self.n, name="n"))

    def to_xarray(self):
        xr = _optional("xarray")
        point, run = ("n",), ("n", "run")
        return xr.Dataset(
            {"exact": (point, self.exact), "computed": (run, self.computed), "error": (run, self.error),
             "mean_error": (point, self.mean_error), "rms_error": (point, self.rms_error),
             "sr_variance": (point, self.sr_variance), "sr_half_step_sq": (point, self.sr_half_step_sq),
             "first_stagnation": (("run",), self.first_stagnation)},
            coords={"n": self.n, "run": np.arange(self.computed.shape[1])},
            attrs={**_scalar_attrs(self.attrs), **_scalar_attrs(self.options)})


# Per-recipe mlp datasets beyond the core five: read when the file has them (older traces lack
# the probes), shapes in docs/trace-format.md.
MLP_OPTIONAL = ("operand_clipped_fraction", "operand_underflow_fraction", "operand_zero_scale_fraction",
                "grad_cosine", "grad_rel_error", "grad_sr_mean_rel_error")
OPERAND_ROLES = ("fprop", "dgrad", "wgrad")
OPERAND_NAMES = (("X", "W"), ("dY", "W^T"), ("X^T", "dY^T"))


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
    extra: dict = field(default_factory=dict)   # MLP_OPTIONAL arrays present in the file

    @property
    def growth_exponent(self) -> float:
        return float(self.attrs.get("weight_error_growth_exponent", np.nan))

    def operand_stat(self, key: str) -> np.ndarray:
        """steps x (layers * 6) array of an operand statistic: nmse, clipped_fraction, ..."""
        if key == "nmse":
            return self.operand_nmse
        name = f"operand_{key}"
        if name not in self.extra:
            raise KeyError(f"run {self.name}: no {name} in this trace")
        return self.extra[name]


def operand_slot_label(slot: int) -> str:
    """'layer 1 wgrad X^T' for slot = layer * 6 + role * 2 + operand (docs/trace-format.md)."""
    layer, rest = divmod(slot, 6)
    role, operand = divmod(rest, 2)
    return f"layer {layer} {OPERAND_ROLES[role]} {OPERAND_NAMES[role][operand]}"


@dataclass
class MlpRun(_RunConfig):
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

    @property
    def layers(self) -> int:
        return len(np.atleast_1d(self.options["widths"])) - 1

    def run(self, name: str) -> MlpRecipeRun:
        for r in self.runs:
            if r.name == name:
                return r
        raise KeyError(f"{self.path}: no run {name!r} (runs: {', '.join(self.names)})")

    def to_pandas(self):
        """Long format, one row per (recipe, step): loss, reference loss, relative loss gap."""
        pd = _optional("pandas")
        frames = [pd.DataFrame({"recipe": r.name, "step": self.step, "loss": r.loss,
                                "reference_loss": self.reference_loss, "rel_loss_gap": r.rel_loss_gap})
                  for r in self.runs]
        return pd.concat(frames, ignore_index=True)

    def to_xarray(self):
        xr = _optional("xarray")
        rs = self.runs
        stack = lambda key: np.stack([getattr(r, key) for r in rs])  # noqa: E731
        data = {
            "reference_loss": (("step",), self.reference_loss),
            "loss": (("recipe", "step"), stack("loss")),
            "rel_loss_gap": (("recipe", "step"), stack("rel_loss_gap")),
            "lost_update_fraction": (("recipe", "step", "layer"), stack("lost_update_fraction")),
            "operand_nmse": (("recipe", "step", "slot"), stack("operand_nmse")),
            "weight_rel_error": (("recipe", "compare_step", "layer"), stack("weight_rel_error")),
        }
        for key in MLP_OPTIONAL:
            if rs and all(key in r.extra for r in rs):
                dims = ("recipe", "step", "slot") if key.startswith("operand_") else ("recipe", "compare_step", "layer")
                data[key] = (dims, np.stack([r.extra[key] for r in rs]))
        return xr.Dataset(data, coords={"recipe": self.names, "step": self.step, "compare_step": self.compare_step,
                                        "layer": np.arange(self.layers), "slot": np.arange(6 * self.layers)},
                          attrs={**_scalar_attrs(self.attrs), **_scalar_attrs(self.options)})


def load_run(path: str, allow_incomplete: bool = False):
    """Load an `fp4drift run` trace: SumDotRun (sum, dot) or MlpRun (mlp). An mlp run that was
    interrupted or failed is refused unless allow_incomplete (its data ends at the last flush)."""
    with _open(path) as f:
        _check_schema(f, "fp4drift.run", allow_incomplete)
        if "mlp" in f:
            g = f["mlp"]
            out = MlpRun(path=path, attrs=dict(f.attrs), options=dict(g.attrs), step=g["step"][()],
                         compare_step=g["compare_step"][()], reference_loss=g["reference/loss"][()])
            for name in _str(g.attrs["recipes"]).split(","):
                r = g["runs"][name]
                out.runs.append(MlpRecipeRun(
                    name=name, attrs=dict(r.attrs), loss=r["loss"][()], rel_loss_gap=r["rel_loss_gap"][()],
                    lost_update_fraction=r["lost_update_fraction"][()], operand_nmse=r["operand_nmse"][()],
                    weight_rel_error=r["weight_rel_error"][()],
                    extra={k: r[k][()] for k in MLP_OPTIONAL if k in r}))
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


def _scalar_attrs(attrs: dict) -> dict:
    """HDF5 attributes as netCDF-friendly scalars (xarray refuses some numpy types in attrs)."""
    out = {}
    for k, v in attrs.items():
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, np.generic):
            v = v.item()
        elif isinstance(v, np.ndarray):
            v = v.tolist()
        out[k] = v
    return out


# --- dispatch --------------------------------------------------------------------------------

LOADERS: dict[str, Callable] = {
    "fp4drift.quantize": lambda path, allow_incomplete=False: load_quantize(path),
    "fp4drift.gemm": lambda path, allow_incomplete=False: load_gemm(path),
    "fp4drift.run": load_run,
}


def register_loader(schema: str, versions: set[int], loader: Callable) -> None:
    """Add a schema to `load`: loader(path, allow_incomplete=False) must check the version itself
    (with _check_schema, which reads KNOWN_SCHEMAS)."""
    KNOWN_SCHEMAS[schema] = set(versions)
    LOADERS[schema] = loader


def schema_of(path: str) -> str:
    with _open(path) as f:
        schema = f.attrs.get("schema")
    if schema is None:
        raise SchemaError(f"{path}: not an fp4drift output (no schema attribute)")
    return _str(schema)


def load(path: str, allow_incomplete: bool = False):
    """Load any fp4drift output by its `schema` attribute; an unknown schema is refused by name."""
    schema = schema_of(path)
    if schema not in LOADERS:
        raise SchemaError(f"{path}: unknown schema {schema!r} (this package reads {', '.join(sorted(LOADERS))})")
    return LOADERS[schema](path, allow_incomplete=allow_incomplete)
