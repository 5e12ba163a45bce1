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


# A bad value, and --cuda-graphs off where nothing launches graphs (it only means something to
# the resident CUDA step: asking a CPU run for it is a mistake to report, not an option to
# ignore). Both refused before any output exists.
@pytest.mark.parametrize("args, expected", [
    (["--concurrent-runs", "sometimes"], ["--concurrent-runs", "sometimes"]),
    (["--cuda-graphs", "off"], ["--cuda-graphs off", "--backend cpu"]),
])
def test_a_bad_option_is_refused(tmp_path: Path, args: list, expected: list) -> None:
    out = tmp_path / "x.h5"
    p = subprocess.run([EXE, "run", str(ROOT / "data/configs/mlp-quick.toml"), *args, "--out", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    for text in expected:
        assert text in p.stderr
    assert not out.exists()
