"""Shared pieces of the fault tests: running fp4drift under the fault-injection library
(tests/support/fault_inject.c) and comparing traces bit for bit."""
from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import h5py
import numpy as np

EXE = os.environ.get("FP4DRIFT_EXE", "fp4drift")
FAULT_LIB = os.environ.get("FP4D_FAULT_LIB", "")

# A small mlp run with three checkpoints (25, 50, 60) and compares every 10 steps: every
# kind of write a long run makes, in about 470 file-system events.
TINY_MLP = """workload = "mlp"

[mlp]
widths = [32, 32, 16]
activation = "relu"
batch = 16
seed = 1
teacher_width = 32
optimizer = "sgd"
lr = 0.02
momentum = 0.9
steps = 60

[recipes]
names = ["nvfp4", "bf16"]

[reference]
compare_every = 10

[trace]
every = 1
flush_every = 25
"""

# Attributes that say when, where and how often a run was made, not what it computed.
VOLATILE_ATTRS = {"created", "rebuilt_at_step", "start_time", "end_time", "host", "command_line", "resumed_at_step", "run_id", "status",
                  "git_commit", "git_dirty", "fp4drift_version", "config_source", "pid", "omp_threads",
                  "omp_wait_policy"}


def run(args: list[str], env: dict[str, str] | None = None, timeout: float = 120,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.setdefault("OMP_NUM_THREADS", "1")
    if env:
        full.update(env)
    exe = str(Path(EXE).resolve()) if cwd is not None and os.sep in EXE else EXE  # a relative EXE names it from here
    return subprocess.run([exe, *args], capture_output=True, text=True, env=full, timeout=timeout, cwd=cwd)


def faulty(env: dict[str, str]) -> dict[str, str]:
    return {"LD_PRELOAD": _preload(FAULT_LIB), **env}


@functools.lru_cache(maxsize=None)
def asan_runtime() -> str:
    """The AddressSanitizer runtime fp4drift is linked with ("" for a build without it)."""
    exe = shutil.which(EXE) or EXE
    try:
        out = subprocess.run(["ldd", exe], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("libasan") and len(parts) >= 3 and parts[1] == "=>":
            return parts[2]
    return ""


def _suppress_hdf5_leaks() -> None:
    """Under ASan's leak checker, leaves out the allocations HDF5 itself loses.

    Opening a trace that a kill left torn makes HDF5 1.10 read object headers it then cannot
    release: their cache entries are lost when the failed open or close gives up (about 200
    bytes, every frame inside libhdf5). fp4drift closes every handle it opens and turns off
    HDF5's at-exit clean-up on purpose (src/trace/h5.cpp), so nothing of ours is behind them;
    a leak of fp4drift's own has its own frames and is still reported."""
    if not asan_runtime():
        return
    d = Path(tempfile.mkdtemp(prefix="fp4d-lsan-"))
    atexit.register(shutil.rmtree, d, True)
    supp = d / "hdf5.supp"
    supp.write_text("leak:libhdf5\n")
    # print_suppressions=0: the list of suppressed leaks would be a second line after a
    # one-line error, which the tests count.
    ours = f"suppressions={supp}:print_suppressions=0"
    prior = os.environ.get("LSAN_OPTIONS", "")
    os.environ["LSAN_OPTIONS"] = f"{prior}:{ours}" if prior else ours


_suppress_hdf5_leaks()


def _preload(lib: str) -> str:
    # ASan must be the first library of the process or it refuses to start ("ASan runtime does
    # not come first in initial library list"); a preloaded library would come before it.
    # Preloaded first, its interceptors still pass the file-system calls on to the fault
    # library's, which passes them on to libc.
    asan = asan_runtime()
    return f"{asan}:{lib}" if asan else lib


def trace_items(path: Path) -> dict[str, object]:
    """Every dataset (bytes, dtype, shape) and every non-volatile attribute of a trace."""
    out: dict[str, object] = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            for k, v in obj.attrs.items():
                if k in VOLATILE_ATTRS:
                    continue
                # Dimension scales' object references: equal traces name the same objects, at
                # whatever addresses the files hold them.
                if k == "DIMENSION_LIST":
                    out[f"{name}@{k}"] = [[f[r].name for r in axis] for axis in v]
                elif k == "REFERENCE_LIST":
                    out[f"{name}@{k}"] = sorted((f[ref].name, int(axis)) for ref, axis in v)
                elif isinstance(v, np.ndarray) and v.dtype == object:  # e.g. DIMENSION_LABELS: by value
                    out[f"{name}@{k}"] = v.tolist()
                else:
                    out[f"{name}@{k}"] = v.tobytes() if isinstance(v, np.ndarray) else v
            if isinstance(obj, h5py.Dataset):
                a = obj[()]
                out[name] = (str(a.dtype), a.shape, np.asarray(a).tobytes())
        for k, v in f.attrs.items():
            if k not in VOLATILE_ATTRS:
                out[f"/@{k}"] = v
        f.visititems(visit)
    return out


def differences(a: Path, b: Path) -> list[str]:
    x, y = trace_items(a), trace_items(b)
    keys = sorted(set(x) | set(y))
    return [k for k in keys if k not in x or k not in y or not _equal(x[k], y[k])]


def _equal(u, v) -> bool:
    if isinstance(u, np.generic) or isinstance(v, np.generic):
        return np.asarray(u).tobytes() == np.asarray(v).tobytes()
    return u == v
