"""A full disk (every write failing with ENOSPC from the N-th on, tests/support/fault_inject.c)
for the one-shot commands and for sweeps: one line and exit 1, nothing left under a final
name, and - for sweeps - a rerun with space again that finishes every run, bit for bit as a
sweep that never met a full disk."""
from __future__ import annotations

from pathlib import Path

import h5py
import pytest

import fault_common as fc

pytestmark = pytest.mark.skipif(not fc.FAULT_LIB, reason="FP4D_FAULT_LIB (the fault-injection library) is not set")

SUM = """workload = "sum"

[sum]
terms = "constant"
c = 1.0
n = 5000
format = "fp16"
rounding = "rne"
"""

ONE_SHOT = {
    "quantize": ["quantize", "--generate", "normal", "--shape", "256x256", "--recipe", "nvfp4,mxfp4", "--out", "{out}"],
    "gemm": ["gemm", "--m", "32", "--n", "32", "--k", "64", "--recipe", "nvfp4", "--out", "{out}"],
    "run-sum": ["run", "{cfg}", "--out", "{out}"],
}


def _events(args: list[str], d: Path) -> int:
    count = d / "count"
    r = fc.run(args, fc.faulty({"FP4D_FAULT_COUNT_FILE": str(count)}))
    assert r.returncode == 0, r.stderr
    return int(count.read_text())


@pytest.mark.parametrize("command", sorted(ONE_SHOT))
def test_one_shot_outputs_on_a_full_disk(command, tmp_path):
    cfg = tmp_path / "sum.toml"
    cfg.write_text(SUM)
    out = tmp_path / "o.h5"
    args = [a.format(out=out, cfg=cfg) for a in ONE_SHOT[command]]
    n = _events(args, tmp_path)
    out.unlink()
    assert n > 3, n
    for k in range(1, n + 1):
        r = fc.run(args, fc.faulty({"FP4D_FAULT_ENOSPC_AT": str(k)}))
        lines = r.stderr.strip().splitlines()
        if r.returncode == 0:  # only the fsyncs and the rename were left, and they cannot fail so
            with h5py.File(out, "r") as f:
                assert f.attrs["status"] == "complete", k
            assert sorted(p.name for p in tmp_path.glob("o.h5*")) == ["o.h5"], k
            out.unlink()
            continue
        assert r.returncode == 1, (k, r.returncode, lines[-3:])
        assert len(lines) == 1 and "no space left on device" in lines[0], (k, lines)
        left = sorted(p.name for p in tmp_path.glob("o.h5*"))
        assert left == [], (k, left)


SWEEP = """base = "base.toml"
workers = 2

[grid.mlp]
seed = [1, 2, 3, 4]
"""


def _sweep(d: Path, env: dict[str, str] | None = None):
    return fc.run(["sweep", str(d / "s.toml"), "--out", str(d / "out")], env)


def test_sweep_on_a_full_disk_finishes_on_the_next_run(tmp_path):
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "base.toml").write_text(fc.TINY_MLP)
    (clean / "s.toml").write_text(SWEEP)
    assert _sweep(clean).returncode == 0
    ids = sorted(p.name for p in (clean / "out" / "runs").iterdir())
    assert len(ids) == 4
    # From the sweep's first writes (its run directories, configs, records, index) to its runs'
    # last ones: each point leaves a sweep that one more command finishes.
    full = 0
    for k in (5, 20, 40, 60, 90, 120, 200, 300, 450):
        d = tmp_path / f"full{k}"
        d.mkdir()
        (d / "base.toml").write_text(fc.TINY_MLP)
        (d / "s.toml").write_text(SWEEP)
        r = _sweep(d, fc.faulty({"FP4D_FAULT_ENOSPC_AT": str(k)}))
        lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith("progress")]
        if r.returncode != 0:
            full += 1
            assert r.returncode == 1, (k, r.returncode, lines[-3:])
            assert "no space left on device" in lines[-1] or "runs failed" in lines[-1], (k, lines[-3:])
        for rec in (d / "out" / "runs").glob("*/result.toml"):
            text = rec.read_text()
            assert "signal" not in text, (k, text)  # a full disk is reported as one, not as a crash
            if 'status = "failed"' in text:
                assert "no space left on device" in text, (k, text)
        again = _sweep(d)
        assert again.returncode == 0, (k, again.stderr[-800:])
        for rid in ids:
            t = d / "out" / "runs" / rid / "trace.h5"
            with h5py.File(t, "r") as f:
                assert f.attrs["status"] == "complete", (k, rid)
            diff = fc.differences(clean / "out" / "runs" / rid / "trace.h5", t)
            assert diff == [], (k, rid, diff[:4])
    assert full >= 7, f"only {full} of the 9 points met a full disk: the injection did not reach the sweep"
