"""Reading a run while it runs (docs/trace-format.md, "Reading a run while it runs"): a real
`fp4drift run` writes its trace in SWMR mode; h5py opens it as a SWMR reader and sees the rows
grow; the analysis loader refuses it by default and reads it with allow_incomplete; the finished
trace equals, dataset by dataset, that of the same run made with no reader. A run killed in SWMR
mode is read as incomplete, and resumes to the same bits.

No fixed sleeps: the writer is held with SIGSTOP where a check needs it still, and every wait
polls with a deadline that fails saying what did not happen."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from fp4drift_analysis.__main__ import main as analysis_main
from fp4drift_analysis.traces import IncompleteError, MlpRun, load_run

EXE = os.environ.get("FP4DRIFT_EXE", "")
pytestmark = pytest.mark.skipif(
    not (EXE and os.access(EXE, os.X_OK)), reason="FP4DRIFT_EXE not set to the fp4drift binary"
)

# Long enough that the run flushes many times after its first progress line (every 20 steps,
# 100 flushes), short enough for CI (a few seconds on two cores).
CONFIG = """workload = "mlp"
[mlp]
widths = [32, 64, 64, 8]
batch = 32
steps = 2000
lr = 0.05
[recipes]
names = ["nvfp4", "bf16"]
high_precision_layers = [0]
[reference]
compare_every = 10
[trace]
flush_every = 20
"""
DEADLINE_S = 300
# Root attributes that say when, where and how a file was made, not what it holds.
VOLATILE = {"created", "host", "command_line", "run_id", "resumed_at_step", "rebuilt_at_step", "omp_threads",
            "omp_wait_policy"}


def _poll(what: str, probe, proc: subprocess.Popen | None = None, deadline_s: float = DEADLINE_S):
    """probe() until it returns something true; fails naming `what` when the deadline passes or
    the run ends first."""
    end = time.monotonic() + deadline_s
    while True:
        v = probe()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the run ended (exit {proc.returncode}) before {what}")
        if time.monotonic() > end:
            pytest.fail(f"{what}: not within {deadline_s} s")
        time.sleep(0.005)


def _swmr(path: Path) -> h5py.File | None:
    try:
        return h5py.File(path, "r", libver="latest", swmr=True)
    except OSError:   # not in SWMR mode at this instant (created, verified or finished outside it)
        return None


def _start(cfg: Path, out: Path, *extra: str) -> subprocess.Popen:
    """The run, returned once it has printed its first progress line: it is stepping, so its trace
    is in SWMR mode (a reader opening the trace in the instant between its creation and the run
    opening it would hold HDF5's file lock against the run)."""
    p = subprocess.Popen([EXE, "run", str(cfg), "--out", str(out), *extra], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    if not line.startswith("progress:"):
        p.kill()
        pytest.fail(f"fp4drift run printed {line!r} before any progress line: {p.stderr.read()}")
    return p


def _datasets(f: h5py.File) -> dict:
    out = {}
    f.visititems(lambda name, o: out.__setitem__(name, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out


def _attrs(f: h5py.File) -> dict:
    out = {"/": {k: v for k, v in f.attrs.items() if k not in VOLATILE}}
    f.visititems(lambda name, o: out.__setitem__(name, dict(o.attrs)))
    return out


def _same_trace(a: Path, b: Path) -> None:
    """Dataset by dataset bit for bit (NaN where NaN), and every attribute but the volatile ones."""
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        da, db = _datasets(fa), _datasets(fb)
        assert sorted(da) == sorted(db)
        differ = [n for n in da if da[n].dtype.kind in "fiu" and not np.array_equal(da[n], db[n], equal_nan=True)]
        assert differ == [], differ
        aa, ab = _attrs(fa), _attrs(fb)
        assert sorted(aa) == sorted(ab)
        for name in aa:
            assert sorted(aa[name]) == sorted(ab[name]), name
            for k, v in aa[name].items():
                if k in ("DIMENSION_LIST", "REFERENCE_LIST"):   # object references: positions in the file
                    continue
                w = ab[name][k]
                floats = np.asarray(v).dtype.kind == "f"
                assert np.array_equal(v, w, equal_nan=floats), (name, k, v, w)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, Path]:
    """The config and the trace of the run made with no reader."""
    d = tmp_path_factory.mktemp("swmr")
    cfg = d / "m.toml"
    cfg.write_text(CONFIG)
    ref = d / "alone.h5"
    subprocess.run([EXE, "run", str(cfg), "--out", str(ref)], check=True, capture_output=True)
    return cfg, ref


def test_a_reader_follows_a_run_and_the_trace_is_unchanged(reference, tmp_path: Path) -> None:
    cfg, ref = reference
    out = tmp_path / "live.h5"
    p = _start(cfg, out)
    try:
        def opened_with_rows():
            h = _swmr(out)
            if h is not None and h["mlp/step"].shape[0] == 0:
                h.close()
                return None
            return h

        f = _poll("a SWMR reader opening the trace with a recorded step", opened_with_rows, p)
        step = f["mlp/step"]
        assert f.attrs["status"] == "running"
        n1 = step.shape[0]

        def grown():
            step.refresh()
            return step.shape[0] > n1

        _poll(f"mlp/step growing past its {n1} rows on refresh()", grown, p)
        n2 = step.shape[0]
        # What a reader sees is the run's own rows: the prefix of the trace made with no reader.
        with h5py.File(ref, "r") as r:
            assert np.array_equal(step[:n2], r["mlp/step"][:n2])
            loss = f["mlp/runs/nvfp4/loss"]
            loss.refresh()
            k = min(n2, loss.shape[0])
            assert np.array_equal(loss[:k], r["mlp/runs/nvfp4/loss"][:k])

        # The steps every per-step dataset has by now (a flush extends them one after another,
        # so mlp/step alone can be ahead of the others): what the read below must reach at least.
        seen = len(load_run(str(out), allow_incomplete=True).step)

        # Held still, the run's trace is refused by default and read as far as it goes with
        # allow_incomplete, every per-step array cut to the steps all of them have.
        os.kill(p.pid, signal.SIGSTOP)
        try:
            with pytest.raises(IncompleteError, match="--allow-incomplete"):
                load_run(str(out))
            assert analysis_main(["plot-run", str(out), "--out", str(tmp_path / "refused.png")]) == 2
            assert not (tmp_path / "refused.png").exists()
            partial = load_run(str(out), allow_incomplete=True)
            assert isinstance(partial, MlpRun) and partial.status == "running"
            n = len(partial.step)
            assert n >= seen and partial.incomplete == f"incomplete (running, up to step {int(partial.step[-1])})"
            full = load_run(str(ref))
            assert np.array_equal(partial.step, full.step[:n])
            assert np.array_equal(partial.reference_loss, full.reference_loss[:n])
            c = len(partial.compare_step)
            assert c > 0 and np.array_equal(partial.compare_step, full.compare_step[:c])
            for a, b in zip(partial.runs, full.runs):
                assert len(a.loss) == len(a.operand_nmse) == len(a.lost_update_fraction) == n
                assert np.array_equal(a.loss, b.loss[:n]) and np.array_equal(a.operand_nmse, b.operand_nmse[:n])
                assert len(a.weight_rel_error) == c and np.array_equal(a.weight_rel_error, b.weight_rel_error[:c])
            png = tmp_path / "live.png"
            assert analysis_main(["plot-run", str(out), "--allow-incomplete", "--out", str(png)]) == 0
            assert png.stat().st_size > 0
        finally:
            os.kill(p.pid, signal.SIGCONT)
        # The reader stays open to the end: it must not keep the run from finishing.
        err = p.communicate(timeout=DEADLINE_S)[1]
        assert p.returncode == 0, err
        f.close()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    # Complete: a plain reader opens it, and it is the trace of the run made with no reader.
    assert load_run(str(out)).status == "complete"
    assert not list(tmp_path.glob("live.h5.*")), "the checkpoint and journal are removed at the end"
    _same_trace(ref, out)


def test_a_run_killed_in_swmr_mode_resumes_from_its_trace(reference, tmp_path: Path) -> None:
    cfg, ref = reference
    out = tmp_path / "killed.h5"
    p = _start(cfg, out)
    # Killed while stepping (SWMR mode): the file keeps its writer's flag, so a plain reader is
    # told it is incomplete, and a SWMR reader reads it.
    os.kill(p.pid, signal.SIGKILL)
    p.communicate()
    with pytest.raises(IncompleteError, match="--allow-incomplete"):
        load_run(str(out))
    killed = load_run(str(out), allow_incomplete=True)
    assert killed.status == "running"
    # The resume clears the dead writer's flag and verifies the rows against the checkpoint. (A
    # kill inside a flush can leave the file shorter than the space HDF5 had allocated; that trace
    # is rebuilt from the journal instead - either way to the same bits. test_swmr.cpp kills a
    # writer between flushes, where the trace must be continued as it is.)
    r = subprocess.run([EXE, "run", str(cfg), "--out", str(out), "--resume"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with h5py.File(out, "r") as f:
        assert f.attrs["status"] == "complete" and int(f.attrs["resumed_at_step"]) >= 0
        rebuilt = "rebuilt_at_step" in f.attrs
    assert rebuilt == ("rebuilt it from its journal" in r.stderr), r.stderr
    _same_trace(ref, out)


def test_a_trace_another_process_holds_is_not_taken_for_damage(reference, tmp_path: Path) -> None:
    """A resume that finds HDF5's lock held by another process (a reader left open) waits a moment,
    then refuses, saying why and changing nothing; once the lock is let go it continues. Before,
    the failed open read as a torn trace and the resume rebuilt it from the journal under the
    reader's feet."""
    import fcntl
    import hashlib
    import threading

    cfg, ref = reference
    out = tmp_path / "held.h5"
    p = _start(cfg, out)
    os.kill(p.pid, signal.SIGKILL)
    p.communicate()
    before = hashlib.sha256(out.read_bytes()).hexdigest()
    fd = os.open(out, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)  # what an HDF5 reader holds while the file is open
    try:
        r = subprocess.run([EXE, "run", str(cfg), "--out", str(out), "--resume"], capture_output=True, text=True)
        assert r.returncode != 0
        assert "another process has it open" in r.stderr and "nothing was changed" in r.stderr, r.stderr
        assert "rebuilt" not in r.stderr, r.stderr
        assert hashlib.sha256(out.read_bytes()).hexdigest() == before
        assert not list(tmp_path.glob("held.h5.partial"))
        # A lock let go within the wait: the resume goes on and finishes the same run.
        threading.Timer(0.5, os.close, args=(fd,)).start()
        fd = -1
        r = subprocess.run([EXE, "run", str(cfg), "--out", str(out), "--resume"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    finally:
        if fd >= 0:
            os.close(fd)
    with h5py.File(out, "r") as f:
        assert f.attrs["status"] == "complete"
        rebuilt = "rebuilt_at_step" in f.attrs
    assert rebuilt == ("rebuilt it from its journal" in r.stderr), r.stderr
    _same_trace(ref, out)
