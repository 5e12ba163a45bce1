"""The research notebooks (notebooks/NN-*.ipynb): committed without outputs, in step with their
sources (notebooks/src/), and executable end to end against the current fp4drift binary.

Each notebook runs in a fresh kernel with its traces produced into a temporary cache
(FP4DRIFT_NB_OUT), never reusing notebooks/out/ and never writing outputs back into
notebooks/. A failing cell - including a notebook's closing "what we see" assertions - fails
the test with the notebook, the cell's index and first line, and the error.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))
EXE = os.environ.get("FP4DRIFT_EXE", "")
needs_exe = pytest.mark.skipif(not (EXE and os.access(EXE, os.X_OK)), reason="FP4DRIFT_EXE not set to the fp4drift binary")


def test_the_five_notebooks_exist() -> None:
    assert [p.name[:2] for p in PATHS] == ["01", "02", "03", "04", "05"], [p.name for p in PATHS]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_committed_notebook_has_no_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} have outputs or execution counts (strip them: notebooks/make_notebooks.py)"


def test_notebooks_match_their_sources() -> None:
    r = subprocess.run([sys.executable, str(NOTEBOOKS / "make_notebooks.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _nbsupport():
    sys.path.insert(0, str(NOTEBOOKS))
    try:
        import nbsupport
    finally:
        sys.path.pop(0)
    return nbsupport


def test_missing_binary_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbsupport = _nbsupport()
    monkeypatch.setenv("FP4DRIFT_EXE", str(tmp_path / "no-such-fp4drift"))
    with pytest.raises(FileNotFoundError, match="no-such-fp4drift"):
        nbsupport.exe()


@needs_exe
def test_cache_reuses_a_complete_trace_and_reports_failures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbsupport = _nbsupport()
    monkeypatch.setenv("FP4DRIFT_NB_OUT", str(tmp_path))
    args = ["quantize", "--generate", "normal", "--shape", "32x32", "--recipe", "nvfp4"]
    first = nbsupport.fp4drift("t", args)
    stamp = first.stat().st_mtime_ns
    assert nbsupport.fp4drift("t", args) == first and first.stat().st_mtime_ns == stamp  # reused, not rerun
    assert nbsupport.fp4drift("t", [*args[:-1], "mxfp4"]) != first                      # new settings, new trace
    with pytest.raises(RuntimeError, match="no-such-recipe"):
        nbsupport.fp4drift("bad", [*args[:-1], "no-such-recipe"])
    assert not list(tmp_path.glob("bad-*.h5")), "a failed run must leave no trace under its final name"


@needs_exe
@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_notebook_runs_end_to_end(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("FP4DRIFT_NB_OUT", str(tmp_path / "cache"))  # the kernel inherits the environment
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    try:
        client.execute()
    except CellExecutionError as e:
        failed = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                  and any(o.get("output_type") == "error" for o in c.get("outputs", []))]
        where = failed[0] if failed else "?"
        first = nb.cells[where].source.splitlines()[0] if failed else ""
        pytest.fail(f"{path.name}, cell {where} ({first!r}) failed:\n{e}", pytrace=False)
    # The run happened in memory: the committed file is untouched.
    assert not any(c.get("outputs") for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
