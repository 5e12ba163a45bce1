"""The device attributes of a run trace (docs/trace-format.md, "Device attributes") reach the
analysis package's provenance, and a sweep's index carries the GPU each run was given (empty for
the CPU backend, which pins nothing). The GPU side is tests/gpu/test_gpu_device_identity.cpp and
tests/unit/test_device_assignment.cpp."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fp4drift_analysis.sweep import load_sweep
from fp4drift_analysis.traces import load_run

EXE = os.environ.get("FP4DRIFT_EXE", "")
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    not (EXE and os.access(EXE, os.X_OK)), reason="FP4DRIFT_EXE not set to the fp4drift binary"
)


def test_cpu_run_provenance_names_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "q.h5"
    p = subprocess.run([EXE, "run", str(ROOT / "data/configs/mlp-quick.toml"), "--steps", "60", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    prov = load_run(str(out)).provenance
    assert prov["backend"] == "cpu"
    assert prov["device"] == "cpu"
    assert prov["devices_used"] == "cpu"
    for cuda_only in ("device_uuid", "device_ordinal", "device_pci_bus_id", "cuda_visible_devices"):
        assert cuda_only not in prov


def test_cpu_sweep_index_records_no_gpu(tmp_path: Path) -> None:
    sweep = tmp_path / "s.toml"
    sweep.write_text(f'base = "{ROOT / "data/configs/sum-fp16-sr.toml"}"\n[grid.sum]\nn = [64]\nseed = [1, 2, 3]\n')
    p = subprocess.run([EXE, "sweep", str(sweep), "--out", str(tmp_path / "out"), "--workers", "2"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "warning" not in p.stderr  # the CPU backend shares no GPU
    s = load_sweep(str(tmp_path / "out" / "sweep.h5"))
    assert list(s.summary["cuda_visible_devices"]) == ["", "", ""]
    for rid in s.ids:
        assert 'cuda_visible_devices = ""' in (tmp_path / "out" / "runs" / rid / "result.toml").read_text()


def test_sum_and_dot_traces_name_the_cpu(tmp_path: Path) -> None:
    # sum and dot run on the CPU only; their traces carry the same device attributes as an mlp
    # run on the CPU, so that every run trace names its device.
    import h5py

    for cfg in ("sum-fp16-rn.toml", "dot-e4m3-sr8.toml"):
        out = tmp_path / cfg.replace(".toml", ".h5")
        p = subprocess.run([EXE, "run", str(ROOT / "data/configs" / cfg), "--out", str(out)], capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        with h5py.File(out, "r") as f:
            assert f.attrs["device"] == "cpu", cfg
            assert f.attrs["devices_used"] == "cpu", cfg
            assert "device_uuid" not in f.attrs
