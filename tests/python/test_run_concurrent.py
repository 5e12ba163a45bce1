"""`fp4drift run --concurrent-runs`: stepping the low-precision runs on one host thread each
does not change the trace (the runs share nothing), and a bad value is refused before any
output exists."""
import os
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

EXE = os.environ.get("FP4DRIFT_EXE", "")
pytestmark = pytest.mark.skipif(not (EXE and os.access(EXE, os.X_OK)), reason="FP4DRIFT_EXE not set to the fp4drift binary")
ROOT = Path(__file__).resolve().parents[2]


def _datasets(path: Path) -> dict:
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, np.asarray(o[()])) if isinstance(o, h5py.Dataset) else None)
    return out


def test_concurrent_runs_write_the_same_trace(tmp_path: Path) -> None:
    traces = {}
    for mode in ("off", "on"):
        out = tmp_path / f"{mode}.h5"
        p = subprocess.run([EXE, "run", str(ROOT / "data/configs/mlp-quick.toml"), "--steps", "60", "--concurrent-runs",
                            mode, "--out", str(out), "--json"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        traces[mode] = _datasets(out)
    assert traces["off"].keys() == traces["on"].keys()
    assert "mlp/runs/nvfp4/loss" in traces["off"]
    for name, a in traces["off"].items():
        assert a.tobytes() == traces["on"][name].tobytes(), name


def test_a_bad_value_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "x.h5"
    p = subprocess.run([EXE, "run", str(ROOT / "data/configs/mlp-quick.toml"), "--concurrent-runs", "sometimes",
                        "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "--concurrent-runs" in p.stderr and "sometimes" in p.stderr
    assert not out.exists()


def test_cuda_graphs_off_is_refused_off_the_gpu(tmp_path: Path) -> None:
    # --cuda-graphs only means something to the resident CUDA step: asking a CPU run for it is
    # a mistake to report, not an option to ignore.
    out = tmp_path / "x.h5"
    p = subprocess.run([EXE, "run", str(ROOT / "data/configs/mlp-quick.toml"), "--cuda-graphs", "off",
                        "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "--cuda-graphs off" in p.stderr and "--backend cpu" in p.stderr
    assert not out.exists()
