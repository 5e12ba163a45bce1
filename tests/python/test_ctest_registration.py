"""The python and bounds CTest tests are registered whether or not the virtual environment
existed at configure time, and fail, saying to run scripts/setup, when its interpreter is
missing: a configure without .venv must not turn `ctest -L bounds` into a run of nothing that
passes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CMAKE, CTEST = shutil.which("cmake"), shutil.which("ctest")
pytestmark = pytest.mark.skipif(not (CMAKE and CTEST), reason="cmake/ctest not installed")


@pytest.fixture(scope="module")
def build_without_venv(tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("build-novenv")
    missing = build / "no-venv" / "bin" / "python"
    r = subprocess.run([CMAKE, "-S", str(ROOT), "-B", str(build), "-DFP4DRIFT_CUDA=OFF", "-DFP4DRIFT_MPI=OFF",
                        f"-DFP4DRIFT_VENV_PYTHON={missing}"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return build


@pytest.mark.parametrize("label,test", [("bounds", "bounds.check"), ("python", "python.pytest")])
def test_registered_without_venv(build_without_venv: Path, label: str, test: str) -> None:
    r = subprocess.run([CTEST, "-N", "-L", label], cwd=build_without_venv, capture_output=True, text=True)
    assert test in r.stdout, r.stdout


def test_missing_venv_fails_loudly(build_without_venv: Path) -> None:
    # Only the bounds label is run: the python label would run this file again.
    r = subprocess.run([CTEST, "-L", "bounds", "--output-on-failure"], cwd=build_without_venv, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode != 0, r.stdout
    assert "scripts/setup" in r.stdout, r.stdout
