"""The installed `fp4drift-analysis` entry point, run as a researcher would: from a directory
outside the clone, with no PYTHONPATH. Figures land where --out says, or without it in the
current directory; nothing is written into the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXE = os.environ.get("FP4DRIFT_EXE", "")
SCRIPT = Path(sys.executable).parent / "fp4drift-analysis"
pytestmark = pytest.mark.skipif(
    not (EXE and os.access(EXE, os.X_OK)), reason="FP4DRIFT_EXE not set to the fp4drift binary"
)

# Where other writers legitimately put files while this runs (build trees, the environment,
# bytecode caches, pytest's cache, the notebooks' outputs): not what this test is about.
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", "out", ".ipynb_checkpoints"}


def source_tree_files() -> dict[str, int]:
    files = {}
    for d, dirs, names in os.walk(ROOT):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("build")]
        for n in names:
            p = Path(d) / n
            try:
                files[str(p.relative_to(ROOT))] = p.stat().st_mtime_ns
            except FileNotFoundError:  # removed while walking
                pass
    return files


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli-trace") / "q.h5"
    subprocess.run([EXE, "quantize", "--generate", "normal", "--shape", "64x64", "--preset", "nvfp4,bf16",
                    "--out", str(out)], check=True, capture_output=True)
    return out


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_the_script_is_installed_in_the_environment() -> None:
    assert SCRIPT.is_file() and os.access(SCRIPT, os.X_OK), f"{SCRIPT}: run scripts/setup"


def test_figure_goes_where_asked_and_nowhere_else(trace: Path, tmp_path: Path) -> None:
    work, figs = tmp_path / "work", tmp_path / "figs"
    work.mkdir(), figs.mkdir()
    assert not work.resolve().is_relative_to(ROOT)
    before = source_tree_files()
    r = run_cli(["plot-quantize", str(trace), "--out", str(figs / "q.pdf")], work)
    assert r.returncode == 0, r.stderr
    assert (figs / "q.pdf").read_bytes()[:5] == b"%PDF-"
    assert list(figs.iterdir()) == [figs / "q.pdf"]
    assert list(work.iterdir()) == []
    # A relative --out is relative to the working directory, as for any command.
    r = run_cli(["plot-quantize", str(trace), "--out", "rel.png"], work)
    assert r.returncode == 0, r.stderr
    assert (work / "rel.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    after = source_tree_files()
    changed = sorted(k for k in after if before.get(k) != after[k])
    assert changed == [], f"written into the source tree: {changed}"
    assert sorted(p.name for p in trace.parent.iterdir()) == ["q.h5"]


def test_without_out_the_figure_goes_to_the_working_directory(trace: Path, tmp_path: Path) -> None:
    before = source_tree_files()
    r = run_cli(["plot-quantize", str(trace)], tmp_path)
    assert r.returncode == 0, r.stderr
    want = tmp_path / "q-plot-quantize.png"
    assert want.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(want) in r.stdout
    assert sorted(p.name for p in trace.parent.iterdir()) == ["q.h5"]
    after = source_tree_files()
    assert sorted(k for k in after if before.get(k) != after[k]) == []


def test_help_names_the_entry_point(tmp_path: Path) -> None:
    r = run_cli(["--help"], tmp_path)
    assert r.returncode == 0
    assert r.stdout.startswith("usage: fp4drift-analysis")


def test_bad_output_suffix_is_one_line_and_writes_nothing(trace: Path, tmp_path: Path) -> None:
    r = run_cli(["plot-quantize", str(trace), "--out", "q.jpg"], tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "must end in .png or .pdf" in r.stderr
    assert list(tmp_path.iterdir()) == []
