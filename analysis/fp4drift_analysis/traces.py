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
                   "source", "config_source", "resumed_at_step",
                   # the device a run stepped on (mlp and lm runs; docs/trace-format.md, "Device attributes")
                   "device", "device_uuid", "device_ordinal", "device_pci_bus_id", "cuda_visible_devices",
                   "devices_used")


class SchemaError(ValueError):
    """The file is not an fp4drift output of a schema version this package understands."""


class IncompleteError(SchemaError):
    """A run trace that is not complete - still being written, stopped, failed or killed - read
    without allow_incomplete."""


# What HDF5 says when a plain (non-SWMR) reader meets a file that a writer has open: a run in
# progress, or one killed while it was writing (its superblock keeps the flag).
_WRITER_HAS_IT = ("already open for write", "unable to lock file")
INCOMPLETE_HINT = "pass --allow-incomplete (Python: allow_incomplete=True) to read what it holds so far"


def _open_h5(path: str, allow_incomplete: bool) -> h5py.File:
    """The file read-only; a run trace being written (docs/trace-format.md, "Reading a run while
    it runs") only with allow_incomplete, and then as a SWMR reader."""
    try:
        return h5py.File(path, "r")
    except OSError as e:   # h5py's "file signature not found" does not say which file
        if not any(m in str(e) for m in _WRITER_HAS_IT):
            raise OSError(f"{path}: not readable as an HDF5 file ({e})") from e
    if not allow_incomplete:
        raise IncompleteError(f"{path}: a run still being written (or killed while it was); {INCOMPLETE_HINT}")
    try:
        return h5py.File(path, "r", libver="latest", swmr=True)
    except OSError as e:
        raise OSError(f"{path}: being written and not open to readers at this instant (the run is starting, "
                      f"stopping or finishing: try again) ({e})") from e


@contextmanager
def _open(path: str, allow_incomplete: bool = False):
    """h5py.File(path, "r") for the loaders, with errors that name the file: h5py says "Unable
    to synchronously open file (... errno = 2 ...)" for a missing file, and a KeyError without
    the file ("object 'step' doesn't exist") for a trace that lacks a dataset. A trace still
    being written is read in SWMR mode, with allow_incomplete only."""
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path}: is a directory, not a trace file")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    h = _open_h5(path, allow_incomplete)
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
        raise IncompleteError(f"{f.filename}: run status is {status!r}, not 'complete'; {INCOMPLETE_HINT}")


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
    def status(self) -> str:
        """complete, or (read with allow_incomplete) running, interrupted or failed."""
        return _str(self.attrs.get("status", "complete"))

    @property
    def incomplete(self) -> str:
        """"" for a complete run; otherwise what a figure or table says of it: how far it got."""
        if self.status == "complete":
            return ""
        step = getattr(self, "step", None)
        upto = f", up to step {int(step[-1])}" if step is not None and len(step) else ", no step recorded yet"
        return f"incomplete ({self.status}{upto})"

    @property
    def config(self) -> dict:
        """The run's config file, parsed back from the verbatim text in the trace."""
        return tomllib.loads(_str(self.attrs.get("config", "")))

    @property
    def reference_precision(self) -> str:
        """The reference's scalar (double, binary128 or mp256); double for traces that predate
        the attribute."""
        options = getattr(self, "options", {}) or {}
        return _str(options.get("reference_precision", "double")) or "double"


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


# --- fp4drift.run, workload lm ---------------------------------------------------------------

# Linear kinds of an lm trace in model order (`linear_kinds`); q, k, v appear instead of qkv
# when the model was configured with fused_qkv = false.
LM_KINDS = ("qkv", "q", "k", "v", "o", "gateup", "down", "mamba_in", "mamba_out", "head")
OPERAND_STATS = ("nmse", "clipped_fraction", "underflow_fraction", "zero_scale_fraction")
LM_PROBES = ("grad_cosine", "grad_rel_error", "grad_sr_mean_rel_error")
LM_MODEL_KEYS = ("vocab", "d_model", "heads", "kv_heads", "ffn", "seq_len", "batch", "pattern", "parameters",
                 "mamba_state", "mamba_head_dim", "mamba_expand", "mamba_groups", "mamba_conv_width", "mamba_chunk")


def _never(v) -> int | None:
    """A step attribute where -1 means "never" (and an absent one: an unfinished run) as None."""
    return None if v is None or int(v) < 0 else int(v)


def _list(v) -> list[str]:
    return [x for x in _str(v).split(",") if x] if v is not None else []


@dataclass
class LmRecipeRun:
    """One low-precision run of an lm trace: arrays over the S recorded steps, the C compares,
    the P parameters (`LmRun.param_names`) and the 6L operand slots (slot = linear * 6 + role * 2
    + operand, linear in `LmRun.linear_names` order)."""

    name: str
    attrs: dict
    loss: np.ndarray                          # [S] nats
    rel_loss_gap: np.ndarray                  # [S] (loss - reference) / reference
    grad_norm: np.ndarray                     # [S] before clipping
    clip_factor: np.ndarray                   # [S] min(1, max_grad_norm / grad_norm)
    lost_update_fraction: np.ndarray          # [S, P]
    operand_nmse: np.ndarray                  # [S, 6L]
    operand_clipped_fraction: np.ndarray      # [S, 6L]
    operand_underflow_fraction: np.ndarray    # [S, 6L]
    operand_zero_scale_fraction: np.ndarray   # [S, 6L]
    weight_rel_error: np.ndarray              # [C, P]
    weight_rel_error_total: np.ndarray        # [C] every parameter as one vector
    grad_cosine: np.ndarray                   # [C, P] the local-error probe
    grad_rel_error: np.ndarray                # [C, P]
    grad_sr_mean_rel_error: np.ndarray        # [C, P]

    # The final attributes are written when the run completes: NaN / None in a partial trace.
    @property
    def tail_loss(self) -> float:
        return float(self.attrs.get("tail_loss", np.nan))

    @property
    def tail_rel_loss_gap(self) -> float:
        return float(self.attrs.get("tail_rel_loss_gap", np.nan))

    @property
    def growth_exponent(self) -> float:
        """`weight_error_growth_exponent`: slope of log weight_rel_error_total against log step."""
        return float(self.attrs.get("weight_error_growth_exponent", np.nan))

    @property
    def first_nonfinite_step(self) -> int | None:
        """The first step whose loss is not finite; None if every loss is (or the run is unfinished)."""
        return _never(self.attrs.get("first_nonfinite_step"))

    @property
    def gemm_path(self) -> str:
        return _str(self.attrs.get("gemm_path", ""))

    @property
    def extra(self) -> dict:
        """The operand statistics and probes by dataset name, as MlpRecipeRun.extra has them, so
        code written for mlp runs reads lm runs too."""
        return {f"operand_{k}": getattr(self, f"operand_{k}") for k in OPERAND_STATS[1:]} | \
            {k: getattr(self, k) for k in LM_PROBES}

    def operand_stat(self, key: str) -> np.ndarray:
        """[S, 6L] array of an operand statistic: nmse, clipped_fraction, underflow_fraction,
        zero_scale_fraction."""
        if key not in OPERAND_STATS:
            raise KeyError(f"run {self.name}: no operand statistic {key!r} (one of {', '.join(OPERAND_STATS)})")
        return getattr(self, f"operand_{key}")


@dataclass
class LmRun(_RunConfig):
    """An `fp4drift run` trace of the lm workload: the double reference and the recipes' runs on
    the same token batches (docs/trace-format.md, workload lm)."""

    path: str
    attrs: dict
    options: dict                  # the /lm attributes
    step: np.ndarray               # [S]
    lr: np.ndarray                 # [S] the scheduled learning rate of the step
    compare_step: np.ndarray       # [C] steps after which the parameters were compared
    reference_loss: np.ndarray     # [S] nats
    reference_grad_norm: np.ndarray
    reference_attrs: dict          # tail_loss, first_nonfinite_step (complete runs)
    runs: list[LmRecipeRun] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.runs]

    def run(self, name: str) -> LmRecipeRun:
        for r in self.runs:
            if r.name == name:
                return r
        raise KeyError(f"{self.path}: no run {name!r} (runs: {', '.join(self.names)})")

    @property
    def model(self) -> dict:
        """vocab, d_model, heads, kv_heads, ffn, seq_len, batch, pattern, parameters (their count)."""
        o = self.options
        return {k: (_str(o[k]) if k == "pattern" else int(o[k])) for k in LM_MODEL_KEYS if k in o}

    @property
    def param_names(self) -> list[str]:
        return _list(self.options.get("param_names"))

    @property
    def linear_names(self) -> list[str]:
        return _list(self.options.get("linear_names"))

    @property
    def linear_kinds(self) -> list[str]:
        return _list(self.options.get("linear_kinds"))

    @property
    def kinds(self) -> list[str]:
        """The linear kinds this model has, in LM_KINDS order."""
        present = set(self.linear_kinds)
        return [k for k in LM_KINDS if k in present] + sorted(present - set(LM_KINDS))

    @property
    def high_precision_blocks(self) -> list[int]:
        return [int(b) for b in _list(self.options.get("high_precision_blocks"))]

    @property
    def edge_recipe(self) -> str:
        return _str(self.options.get("edge_recipe", ""))

    @property
    def data(self) -> str:
        return _str(self.options.get("data", ""))

    @property
    def loss_floor_nats(self) -> float:
        """The synthetic source's Bayes loss (NaN for a token file)."""
        return float(self.options.get("loss_floor_nats", np.nan))

    @property
    def unigram_loss_nats(self) -> float:
        """The loss of the best context-free model (entropy of the targets' unigram distribution)."""
        return float(self.options.get("unigram_loss_nats", np.nan))

    @property
    def switch_to_bf16_step(self) -> int | None:
        """The first step trained in BF16 (the recipes switch there); None if they never do."""
        return _never(self.options.get("switch_to_bf16_step"))

    @property
    def reference_tail_loss(self) -> float:
        return float(self.reference_attrs.get("tail_loss", np.nan))

    @property
    def reference_first_nonfinite_step(self) -> int | None:
        return _never(self.reference_attrs.get("first_nonfinite_step"))

    def operand_slots(self, kind: str | None = None, role: str | int | None = None,
                      operand: int | None = None) -> np.ndarray:
        """Slot indices (slot = linear * 6 + role * 2 + operand) of the linears of `kind` (all
        if None), GEMM `role` (fprop/dgrad/wgrad or 0..2; all if None) and operand (0: X, dY,
        X^T; 1: W, W^T, dY^T; both if None)."""
        kinds = self.linear_kinds
        if kind is not None and kind not in kinds:
            raise KeyError(f"{self.path}: no linear of kind {kind!r} (kinds: {', '.join(self.kinds)})")
        if isinstance(role, str):
            if role not in OPERAND_ROLES:
                raise KeyError(f"role {role!r}: one of {', '.join(OPERAND_ROLES)}")
            role = OPERAND_ROLES.index(role)
        return np.array([lin * 6 + ro * 2 + op for lin, k in enumerate(kinds) if kind is None or k == kind
                         for ro in range(3) if role is None or ro == role
                         for op in range(2) if operand is None or op == operand], dtype=np.int64)

    def operand_by_kind(self, recipe: str, stat: str = "nmse") -> dict[str, np.ndarray]:
        """Per linear kind, the [S, 3, 2] history of an operand statistic (axis 1: role fprop,
        dgrad, wgrad; axis 2: operand, as in operand_slot_label), the mean over the linears of
        that kind (over the layers)."""
        a = self.run(recipe).operand_stat(stat)
        kinds = np.array(self.linear_kinds)
        by_linear = a.reshape(a.shape[0], len(kinds), 3, 2)
        return {k: by_linear[:, kinds == k].mean(axis=1) for k in self.kinds}

    def operand_slot_label(self, slot: int) -> str:
        """'blocks.1.down wgrad X^T': the linear's name, the GEMM role and the operand."""
        lin, rest = divmod(slot, 6)
        role, operand = divmod(rest, 2)
        return f"{self.linear_names[lin]} {OPERAND_ROLES[role]} {OPERAND_NAMES[role][operand]}"

    def to_pandas(self):
        """Long format, one row per (recipe, step): loss, reference loss, relative loss gap,
        gradient norm and clip factor, learning rate."""
        pd = _optional("pandas")
        frames = [pd.DataFrame({"recipe": r.name, "step": self.step, "lr": self.lr, "loss": r.loss,
                                "reference_loss": self.reference_loss, "rel_loss_gap": r.rel_loss_gap,
                                "grad_norm": r.grad_norm, "clip_factor": r.clip_factor})
                  for r in self.runs]
        return pd.concat(frames, ignore_index=True)

    def to_xarray(self):
        """Every array; the slot dimension carries linear, kind, role and operand coordinates, so
        `ds.operand_nmse.groupby("kind")` groups the operand statistics by linear kind."""
        xr = _optional("xarray")
        rs = self.runs
        stack = lambda key: np.stack([getattr(r, key) for r in rs])  # noqa: E731
        rec, step_param, cmp_param, slot = ("recipe", "step"), ("recipe", "step", "param"), \
            ("recipe", "compare_step", "param"), ("recipe", "step", "slot")
        data = {
            "reference_loss": (("step",), self.reference_loss),
            "reference_grad_norm": (("step",), self.reference_grad_norm),
            "lr": (("step",), self.lr),
            **{k: (rec, stack(k)) for k in ("loss", "rel_loss_gap", "grad_norm", "clip_factor")},
            "lost_update_fraction": (step_param, stack("lost_update_fraction")),
            **{f"operand_{k}": (slot, stack(f"operand_{k}")) for k in OPERAND_STATS},
            **{k: (cmp_param, stack(k)) for k in ("weight_rel_error", *LM_PROBES)},
            "weight_rel_error_total": (("recipe", "compare_step"), stack("weight_rel_error_total")),
            **{k: (("recipe",), np.array([getattr(r, k) for r in rs], dtype=float))
               for k in ("tail_loss", "tail_rel_loss_gap", "growth_exponent")},
        }
        n = 6 * len(self.linear_names)
        slots = np.arange(n)
        lin, role, op = slots // 6, (slots % 6) // 2, slots % 2
        coords = {"recipe": self.names, "step": self.step, "compare_step": self.compare_step,
                  "param": self.param_names, "slot": slots,
                  "linear": ("slot", np.array(self.linear_names)[lin]), "kind": ("slot", np.array(self.linear_kinds)[lin]),
                  "role": ("slot", np.array(OPERAND_ROLES)[role]), "operand": ("slot", op)}
        return xr.Dataset(data, coords=coords, attrs={**_scalar_attrs(self.attrs), **_scalar_attrs(self.options)})


def _load_lm(f: h5py.File, path: str) -> LmRun:
    g = f["lm"]
    ref = g["reference"]
    out = LmRun(path=path, attrs=dict(f.attrs), options=dict(g.attrs), step=g["step"][()], lr=g["lr"][()],
                compare_step=g["compare_step"][()], reference_loss=ref["loss"][()],
                reference_grad_norm=ref["grad_norm"][()], reference_attrs=dict(ref.attrs))
    P, slots = len(out.param_names), 6 * len(out.linear_names)
    for name in _list(g.attrs["recipes"]):
        r = g["runs"][name]
        arrays = {k: r[k][()] for k in ("loss", "rel_loss_gap", "grad_norm", "clip_factor", "lost_update_fraction",
                                         *(f"operand_{s}" for s in OPERAND_STATS), "weight_rel_error",
                                         "weight_rel_error_total", *LM_PROBES)}
        # The names in the attributes are what every per-parameter and per-slot column is read
        # by: a trace whose columns disagree with them would be mislabelled silently.
        for k, v in arrays.items():
            want = P if v.ndim == 2 and not k.startswith("operand_") else slots
            if v.ndim == 2 and v.shape[1] != want:
                raise SchemaError(f"{path}: lm/runs/{name}/{k} has {v.shape[1]} columns, the /lm attributes "
                                  f"name {want}")
        out.runs.append(LmRecipeRun(name=name, attrs=dict(r.attrs), **arrays))
    return out


# The datasets indexed by compare step; every other per-row array of an mlp or lm trace is indexed
# by recorded step.
_COMPARE_ARRAYS = {"compare_step", "weight_rel_error", "weight_rel_error_total", *LM_PROBES}


def _cut_to_common_rows(r) -> None:
    """A trace read while it is written: the writer extends its datasets one after another at a
    flush, so a reader can find some a flush ahead of the others. Every per-record (per-compare)
    array is cut to the rows all of them have, so that row i is one step everywhere."""
    found = []   # (holder, key, array, is_dict)
    for o in (r, *r.runs):
        for k, v in vars(o).items():
            if isinstance(v, np.ndarray) and v.ndim >= 1:
                found.append((o, k, v, False))
            elif k == "extra" and isinstance(v, dict):
                found += [(v, kk, vv, True) for kk, vv in v.items() if isinstance(vv, np.ndarray) and vv.ndim >= 1]
    for compare in (False, True):
        group = [x for x in found if (x[1] in _COMPARE_ARRAYS) == compare]
        n = min((len(x[2]) for x in group), default=0)
        for holder, k, v, is_dict in group:
            if is_dict:
                holder[k] = v[:n]
            else:
                setattr(holder, k, v[:n])


def load_run(path: str, allow_incomplete: bool = False):
    """Load an `fp4drift run` trace: SumDotRun (sum, dot), MlpRun (mlp) or LmRun (lm). An mlp or
    lm run that is still running (read in SWMR mode), was interrupted, failed or was killed is
    refused unless allow_incomplete: its data ends at its last flush, every per-step array cut to
    the steps all of them have, and its `incomplete` property says how far it got."""
    r = _load_run(path, allow_incomplete)
    if isinstance(r, (MlpRun, LmRun)) and r.status != "complete":
        _cut_to_common_rows(r)
    return r


def _load_run(path: str, allow_incomplete: bool):
    with _open(path, allow_incomplete) as f:
        _check_schema(f, "fp4drift.run", allow_incomplete)
        workload = _str(f.attrs.get("workload", ""))
        if workload in RUN_WORKLOADS:
            return RUN_WORKLOADS[workload](f, path)
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


# Workloads whose trace is read by the root `workload` attribute: loader(open file, path). The
# older workloads are recognised by their group, which their traces have always had.
RUN_WORKLOADS: dict[str, Callable] = {"lm": _load_lm}


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


def schema_of(path: str, allow_incomplete: bool = False) -> str:
    with _open(path, allow_incomplete) as f:
        schema = f.attrs.get("schema")
    if schema is None:
        raise SchemaError(f"{path}: not an fp4drift output (no schema attribute)")
    return _str(schema)


def load(path: str, allow_incomplete: bool = False):
    """Load any fp4drift output by its `schema` attribute; an unknown schema is refused by name."""
    schema = schema_of(path, allow_incomplete)
    if schema not in LOADERS:
        raise SchemaError(f"{path}: unknown schema {schema!r} (this package reads {', '.join(sorted(LOADERS))})")
    return LOADERS[schema](path, allow_incomplete=allow_incomplete)
