"""Shared helpers of the research notebooks: find the fp4drift binary, run it into a cache
directory (skipping runs whose trace is already there and complete), small plotting helpers.

Environment:
  FP4DRIFT_EXE     the fp4drift binary (default: build/apps/fp4drift/fp4drift in this repo)
  FP4DRIFT_NB_OUT  the cache directory of the traces (default: notebooks/out/, git-ignored)

A cached trace is named after its settings (a hash of the command's arguments), so changing a
notebook's settings makes a new trace instead of silently reusing an old one. A trace made by
an older binary is reused; delete the cache directory after rebuilding to regenerate.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np

NOTEBOOKS = Path(__file__).resolve().parent
REPO = NOTEBOOKS.parent

from fp4drift_analysis import load_quantize, load_run  # noqa: F401  (re-exported)


def exe() -> Path:
    """The fp4drift binary: $FP4DRIFT_EXE, else the repo's build; a clear error if neither runs."""
    env = os.environ.get("FP4DRIFT_EXE")
    path = Path(env) if env else REPO / "build" / "apps" / "fp4drift" / "fp4drift"
    if not (path.is_file() and os.access(path, os.X_OK)):
        origin = "FP4DRIFT_EXE" if env else "the default build path"
        raise FileNotFoundError(
            f"fp4drift binary not found at {path} ({origin}); build it with "
            "`cmake --build build --target fp4drift` or set FP4DRIFT_EXE")
    return path


def out_dir() -> Path:
    d = Path(os.environ.get("FP4DRIFT_NB_OUT") or NOTEBOOKS / "out")
    d.mkdir(parents=True, exist_ok=True)
    return d


def config(name: str) -> Path:
    """A shipped config: data/configs/NAME (checked to exist)."""
    p = REPO / "data" / "configs" / name
    if not p.is_file():
        raise FileNotFoundError(f"config {p} does not exist")
    return p


def _complete(path: Path) -> bool:
    try:
        with h5py.File(path, "r") as f:
            return f.attrs.get("status", "complete") == "complete"
    except OSError:
        return False


def fp4drift(name: str, args: list, inputs: tuple = ()) -> Path:
    """Run `fp4drift ARGS --out CACHE/NAME-HASH.h5` unless that trace exists and is complete;
    return its path. HASH covers the arguments and the contents of `inputs` (files the command
    reads, e.g. a config or an HDF5 tensor), so new settings or a changed config re-run."""
    args = [str(a) for a in args]
    h = hashlib.sha256("\0".join(args).encode())
    for p in inputs:
        h.update(Path(p).read_bytes())
    out = out_dir() / f"{name}-{h.hexdigest()[:10]}.h5"
    if out.exists() and _complete(out):
        print(f"cached: {out.name}")
        return out
    cmd = [str(exe()), *args, "--out", str(out)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"fp4drift failed (exit {r.returncode}): {' '.join(cmd)}\n{r.stderr.strip()}")
    print(f"made:   {out.name}  ({time.perf_counter() - t0:.1f} s: fp4drift {' '.join(args)})")
    return out


def write_tensor(name: str, x: np.ndarray, dataset: str = "x") -> str:
    """Write a float32 tensor into CACHE/NAME.h5 and return `FILE:/dataset` for --input."""
    p = out_dir() / f"{name}.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset(dataset, data=np.asarray(x, dtype=np.float32))
    return f"{p}:/{dataset}"


def table(rows: list, header: list, fmt: str = "{:>12}") -> None:
    """Print a plain aligned table (floats in 4 significant digits)."""
    def cell(v):
        if isinstance(v, (float, np.floating)):
            return f"{v:.4g}"
        return str(v)
    widths = [max(len(str(h)), *(len(cell(r[i])) for r in rows)) for i, h in enumerate(header)]
    print("  ".join(str(h).rjust(w) for h, w in zip(header, widths)))
    for r in rows:
        print("  ".join(cell(v).rjust(w) for v, w in zip(r, widths)))


def caption(ax_or_fig, text: str) -> None:
    """A caption under a figure (matplotlib has none of its own)."""
    fig = getattr(ax_or_fig, "figure", ax_or_fig)
    fig.text(0.01, -0.02, text, ha="left", va="top", fontsize=8.5, wrap=True)
