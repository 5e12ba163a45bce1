"""`fp4drift run` of a sum/dot config stops on SIGINT or SIGTERM like an mlp run: exit 130, a
one-line message, and - the run being written whole - neither the output nor OUT.partial
left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

EXE = os.environ.get("FP4DRIFT_EXE", "")
pytestmark = pytest.mark.skipif(not (EXE and os.access(EXE, os.X_OK)), reason="FP4DRIFT_EXE not set to the fp4drift binary")
ROOT = Path(__file__).resolve().parents[2]

# 64 SR runs of 2^23 terms: tens of seconds, far longer than the second before the signal.
LONG_SUM = [str(ROOT / "data/configs/sum-fp16-sr.toml"), "--steps", str(1 << 23)]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_sum_run_stops_on_signal_without_output(tmp_path: Path, sig: signal.Signals) -> None:
    out = tmp_path / "x.h5"
    p = subprocess.Popen([EXE, "run", *LONG_SUM, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    time.sleep(1.0)
    assert p.poll() is None, "the run ended before the signal: it no longer tests an interruption"
    assert (tmp_path / "x.h5.partial").exists()   # the output was being written
    started = time.monotonic()
    p.send_signal(sig)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 130, stderr
    assert time.monotonic() - started < 10, "the run did not stop promptly"
    assert stderr.count("\n") == 1 and "interrupted" in stderr, stderr
    assert "wrote" not in stdout
    assert sorted(os.listdir(tmp_path)) == []   # neither x.h5 nor x.h5.partial


def test_dot_run_without_out_stops_on_signal() -> None:
    p = subprocess.Popen([EXE, "run", str(ROOT / "data/configs/dot-e4m3-sr8.toml"), "--steps", str(1 << 24)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    assert p.poll() is None
    p.send_signal(signal.SIGINT)
    _, stderr = p.communicate(timeout=60)
    assert p.returncode == 130, stderr
