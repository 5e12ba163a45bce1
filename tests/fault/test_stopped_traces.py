"""What a stopped mlp run's trace looks like to readers other than fp4drift (docs/reliability.md).

A SWMR writer's file carries a superblock flag saying it is open for writing; plain readers
(h5py without swmr=True, h5dump, HDFView) refuse the file while it is set. A run stopped by
SIGINT or SIGTERM leaves SWMR mode and closes its trace, which clears the flag, so the trace
opens anywhere. Only a writer that dies without closing (SIGKILL, the OOM killer, a lost node)
leaves the flag; `fp4drift run --resume` or `h5clear -s` clears it."""
from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import h5py
import pytest

import fault_common as fc

STEPS = "1000"  # progress lines every 100 steps; the trace flushes every 25


def _whole(tmp_path: Path) -> tuple[Path, Path]:
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(fc.TINY_MLP)
    whole = tmp_path / "whole.h5"
    r = fc.run(["run", str(cfg), "--steps", STEPS, "--out", str(whole)])
    assert r.returncode == 0, r.stderr
    return cfg, whole


def _stop_after(cfg: Path, out: Path, sig: int, lines: int) -> subprocess.Popen:
    p = subprocess.Popen([fc.EXE, "run", str(cfg), "--steps", STEPS, "--out", str(out)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, env={**fc.os.environ, "OMP_NUM_THREADS": "1"})
    for _ in range(lines):  # past at least `lines` - 1 flushes of 25 steps
        line = p.stderr.readline()
        assert line.startswith("progress:"), line
    p.send_signal(sig)
    p.stderr.read()
    p.wait()
    return p


def _resume_equals(cfg: Path, cut: Path, whole: Path) -> None:
    r = fc.run(["run", str(cfg), "--steps", STEPS, "--out", str(cut), "--resume"])
    assert r.returncode == 0, r.stderr
    with h5py.File(cut, "r") as f:
        assert f.attrs["status"] == "complete"
    assert fc.differences(whole, cut) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_run_leaves_a_trace_plain_readers_open(tmp_path, sig):
    cfg, whole = _whole(tmp_path)
    cut = tmp_path / "cut.h5"
    p = _stop_after(cfg, cut, sig, 1)
    assert p.returncode == 130
    with h5py.File(cut, "r") as f:  # a plain reader: refused if the writer's flag were left
        assert f.attrs["status"] == "interrupted"
        assert f["mlp/step"].shape[0] > 0
    if shutil.which("h5dump"):
        d = subprocess.run(["h5dump", "-A", str(cut)], capture_output=True, text=True)
        assert d.returncode == 0, d.stderr[-400:]
    _resume_equals(cfg, cut, whole)


def test_a_killed_run_is_refused_by_plain_readers_until_its_flag_is_cleared(tmp_path):
    cfg, whole = _whole(tmp_path)
    cut = tmp_path / "cut.h5"
    p = _stop_after(cfg, cut, signal.SIGKILL, 2)
    assert p.returncode == -9
    with pytest.raises(OSError, match="already open for write"):
        h5py.File(cut, "r")
    with h5py.File(cut, "r", libver="latest", swmr=True) as f:  # a SWMR reader reads it as it is
        assert f.attrs["status"] == "running"
        assert f["mlp/step"].shape[0] > 0
    if not shutil.which("h5clear"):
        pytest.skip("h5clear (HDF5's tools) is not installed")
    c = subprocess.run(["h5clear", "-s", str(cut)], capture_output=True, text=True)
    assert c.returncode == 0, c.stderr[-400:]
    with h5py.File(cut, "r") as f:
        assert f.attrs["status"] == "running"  # readable, and still not complete
    # Clearing the flag by hand changes nothing a resume relies on.
    _resume_equals(cfg, cut, whole)
