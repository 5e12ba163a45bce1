"""Run traces name their axes and units the netCDF way (docs/trace-format.md, "Dimensions and
units"): read back with h5py's dimension-scale API, which is what xarray's h5netcdf engine reads."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import h5py
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXE = os.environ.get("FP4DRIFT_EXE", "")
pytestmark = pytest.mark.skipif(
    not (EXE and os.access(EXE, os.X_OK)), reason="FP4DRIFT_EXE not set to the fp4drift binary"
)


def axes(ds: h5py.Dataset) -> list[tuple[str, str]]:
    """(label, attached scale's path) per axis."""
    return [(d.label, d[0].name if len(d) else "") for d in ds.dims]


def run(config: str, out: Path, *extra: str) -> Path:
    p = subprocess.run([EXE, "run", str(ROOT / "data/configs" / config), "--out", str(out), *extra],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return out


def test_mlp_trace_dims_and_units(tmp_path: Path) -> None:
    with h5py.File(run("mlp-quick.toml", tmp_path / "m.h5", "--steps", "60", "--threads", "1")) as f:
        widths = f["mlp"].attrs["widths"]
        L = len(widths) - 1
        assert f["mlp/layer"][()].tolist() == list(range(L))
        assert f["mlp/operand_slot"][()].tolist() == list(range(6 * L))
        for name in ("step", "compare_step", "layer", "operand_slot"):
            assert f[f"mlp/{name}"].is_scale, name
            assert f[f"mlp/{name}"].attrs["CLASS"] == b"DIMENSION_SCALE"
        assert axes(f["mlp/reference/loss"]) == [("step", "/mlp/step")]
        recipes = f["mlp"].attrs["recipes"].split(",")
        for r in recipes:
            g = f[f"mlp/runs/{r}"]
            assert axes(g["loss"]) == [("step", "/mlp/step")]
            assert axes(g["operand_nmse"]) == [("step", "/mlp/step"), ("operand_slot", "/mlp/operand_slot")]
            assert axes(g["lost_update_fraction"]) == [("step", "/mlp/step"), ("layer", "/mlp/layer")]
            assert axes(g["weight_rel_error"]) == [("compare_step", "/mlp/compare_step"), ("layer", "/mlp/layer")]
            # every dataset of a run is labelled, and every float one has a unit
            for k, ds in g.items():
                assert all(lbl for lbl, _ in axes(ds)), (r, k)
                assert ds.attrs["units"] in ("1", "nat"), (r, k)
            assert g["loss"].attrs["units"] == "1"  # regression: half a mean square of plain numbers
        assert "units" not in f["mlp/step"].attrs  # an index has no unit
        # the scales' lengths follow the rows they index
        assert f["mlp/step"].shape[0] == f[f"mlp/runs/{recipes[0]}/loss"].shape[0] == 60


def test_sum_trace_dims(tmp_path: Path) -> None:
    with h5py.File(run("sum-fp16-sr.toml", tmp_path / "s.h5")) as f:
        g = f["sum_dot"]
        R = g.attrs["runs"]
        assert g["run"][()].tolist() == list(range(R))
        assert axes(g["computed"]) == [("n", "/sum_dot/n"), ("run", "/sum_dot/run")]
        assert axes(g["rms_error"]) == [("n", "/sum_dot/n")]
        assert axes(g["first_stagnation"]) == [("run", "/sum_dot/run")]
        assert g["error"].attrs["units"] == "1"
        assert "units" not in g["first_stagnation"].attrs
