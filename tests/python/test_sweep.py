"""fp4drift sweep end to end (docs/sweeps.md): every run present exactly once, a killed sweep
resumed without redoing finished work, results bit-identical to the same runs made one by
one with `fp4drift run`, a failed run recorded and counted, and the same sweep under
`mpirun -n 2`. Tiny MLP runs (16-32-16, 20-100 steps) keep the whole file near 20 s on two idle cores."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from fp4drift_analysis.sweep import load_sweep

EXE = os.environ.get("FP4DRIFT_EXE", "")
pytestmark = pytest.mark.skipif(
    not (EXE and os.access(EXE, os.X_OK)), reason="FP4DRIFT_EXE not set to the fp4drift binary"
)

BASE = """workload = "mlp"
[mlp]
widths = [16, 32, 16]
batch = 16
seed = 1
teacher_width = 32
lr = 0.02
steps = {steps}
[recipes]
names = ["nvfp4", "bf16"]
[reference]
compare_every = 10
[trace]
every = 1
flush_every = 10
"""


def make_sweep(d: Path, steps: int, seeds: list[int], lrs=(0.01, 0.02), extra: str = "") -> Path:
    (d / "base.toml").write_text(BASE.format(steps=steps))
    s = d / "sweep.toml"
    s.write_text(f'base = "base.toml"\nworkers = 2\n[grid.mlp]\nlr = [{", ".join(map(str, lrs))}]\n'
                 f'seed = [{", ".join(map(str, seeds))}]\n{extra}')
    return s


def sweep(s: Path, out: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, "sweep", str(s), "--out", str(out), *args], capture_output=True, text=True, **kw)


def datasets(path: Path) -> dict[str, bytes]:
    """Every dataset of a trace as raw bytes (bit-for-bit comparison), and the run-result
    attributes of /mlp/runs/* (growth exponent, first non-finite step)."""
    out: dict[str, bytes] = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[()].tobytes()
        f.visititems(visit)
        for r in f["mlp/runs"]:
            for k, v in f["mlp/runs"][r].attrs.items():
                out[f"mlp/runs/{r}@{k}"] = np.asarray(v).tobytes()
    return out


def one_by_one(out: Path, ids: list[str], dest: Path) -> dict[str, dict[str, bytes]]:
    """The same runs made one at a time with `fp4drift run`, from the sweep's materialised configs
    (one OpenMP thread: on a loaded 2-core CI machine more threads only spin; the sweep's
    children ran with 1 or 2 threads, and the runs' results do not depend on the count)."""
    dest.mkdir(exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    res = {}
    for rid in ids:
        t = dest / f"{rid}.h5"
        subprocess.run([EXE, "run", str(out / "runs" / rid / "config.toml"), "--out", str(t)], check=True,
                       capture_output=True, env=env)
        res[rid] = datasets(t)
    return res


def assert_same(a: dict[str, bytes], b: dict[str, bytes], what: str) -> None:
    assert a.keys() == b.keys(), what
    differ = [k for k in a if a[k] != b[k]]
    assert not differ, f"{what}: datasets differ bit-wise: {[k for k in differ if 'checkpoint' not in k][:8]} and {len(differ)} in all"


HEADLINE = ("rel_loss_gap_window_mean", "quantized_weight_rel_error", "quantized_growth_exponent")


def assert_headline_is_the_runs_summary(out: Path, idx) -> None:
    """Every /summary_recipes row carries its run's summary headline: equal bit for bit to the
    trace's own attributes, and recomputed here from the trace's arrays with stats.py (the
    window mean, the Frobenius aggregate over the quantized layers, the last factor-2 slope) as
    an independent check. The recomputation sums in another order than fp4drift (fsum, numpy),
    so it agrees to rounding: the relative tolerance 1e-12 is ~1000 double ulps, far above the
    error of a sum of <= 400 terms or a 20-point least-squares slope, far below any
    difference between definitions (the last record vs the window mean differ by percent)."""
    from fp4drift_analysis.stats import aggregate_rel_error, final_growth_window, window_mean_gap
    for i, rid in enumerate(idx.ids):
        if idx.summary["status"][i] != "complete":
            continue
        run = idx.run(rid)
        with h5py.File(out / "runs" / rid / "trace.h5", "r") as f:
            norms = np.asarray(f["mlp/reference"].attrs["final_weight_sq_norm"], dtype=float)
            attrs = {r: dict(f["mlp/runs"][r].attrs) for r in f["mlp/runs"]}
        for row in np.flatnonzero(idx.recipes["run"] == i):
            name = str(idx.recipes["recipe"][row])
            a, r = attrs[name], run.run(name)
            col = {k: idx.recipes[k][row] for k in idx.recipes}
            # the trace's attributes, bit for bit
            np.testing.assert_equal(col["rel_loss_gap_window_mean"], a["rel_loss_gap_window_mean"])
            assert (col["gap_window_first_step"], col["gap_window_last_step"]) == \
                (a["gap_window_first_step"], a["gap_window_last_step"])
            np.testing.assert_equal(col["quantized_weight_rel_error"], a["quantized_weight_rel_error"])
            np.testing.assert_equal(col["quantized_growth_exponent"], a["quantized_growth_exponent"])
            np.testing.assert_equal([col["quantized_growth_ci_low"], col["quantized_growth_ci_high"]],
                                    a["quantized_growth_ci"])
            assert [col["quantized_growth_first_step"], col["quantized_growth_last_step"]] == \
                list(a["quantized_growth_window"])
            # recomputed from the arrays
            w = window_mean_gap(run.step, r.rel_loss_gap)
            assert col["rel_loss_gap_window_mean"] == pytest.approx(w.mean, rel=1e-12, abs=0)
            assert (col["gap_window_first_step"], col["gap_window_last_step"]) == (w.first_step, w.last_step)
            q = np.atleast_1d(a["quantized_layers"]).astype(int)
            if q.size == 0:  # a recipe that quantizes nothing has no headline weight error
                assert np.isnan(col["quantized_weight_rel_error"]) and np.isnan(col["quantized_growth_exponent"])
                continue
            agg = aggregate_rel_error(r.weight_rel_error[-1:, q], norms[q])[0]
            assert col["quantized_weight_rel_error"] == pytest.approx(agg, rel=1e-12, abs=0)
            g = final_growth_window(run.compare_step, aggregate_rel_error(r.weight_rel_error[:, q], norms[q]))
            if np.isfinite(g.exponent):
                assert col["quantized_growth_exponent"] == pytest.approx(g.exponent, rel=1e-9, abs=1e-12)
                assert [col["quantized_growth_first_step"], col["quantized_growth_last_step"]] == \
                    [g.first_step, g.last_step]
            else:
                assert np.isnan(col["quantized_growth_exponent"])
            # not the old definitions under new names
            assert col["final_rel_loss_gap"] == r.rel_loss_gap[-1]
            assert col["final_weight_rel_error"] == r.weight_rel_error[-1, -1]
    assert not idx.fallbacks


def test_local_two_workers_every_run_once_and_equal_to_single_runs(tmp_path: Path) -> None:
    s = make_sweep(tmp_path, 20, [1, 2])
    out = tmp_path / "out"
    p = sweep(s, out)
    assert p.returncode == 0, p.stderr
    assert "4 runs: 4 complete, 0 failed" in p.stdout
    idx = load_sweep(str(out / "sweep.h5"))
    import fp4drift_analysis
    assert list(fp4drift_analysis.load(str(out / "sweep.h5")).ids) == list(idx.ids)  # load() knows the index
    ids = idx.ids
    assert len(ids) == 4 and len(set(ids)) == 4
    assert sorted(os.listdir(out / "runs")) == sorted(ids)  # nothing else, nothing twice
    assert list(idx.summary["status"]) == ["complete"] * 4
    assert list(idx.summary["attempts"]) == [1] * 4
    assert list(idx.summary["exit_code"]) == [0] * 4
    assert np.all(idx.summary["wall_s"] > 0)
    # The grid, last axis fastest, and the values reached the runs' configs.
    np.testing.assert_array_equal(idx.params["mlp.lr"], [0.01, 0.01, 0.02, 0.02])
    np.testing.assert_array_equal(idx.params["mlp.seed"], [1, 2, 1, 2])
    for i, rid in enumerate(ids):
        run = idx.run(rid)
        cfg = run.attrs["config"]
        assert f"lr = {idx.params['mlp.lr'][i]}" in cfg and f"seed = {int(idx.params['mlp.seed'][i])}" in cfg
        # The summary's final metrics are the trace's last records.
        rows = np.flatnonzero(idx.recipes["run"] == i)
        assert list(idx.recipes["recipe"][rows]) == ["nvfp4", "bf16"]
        assert idx.recipes["final_loss"][rows[0]] == run.runs[0].loss[-1]
        assert idx.summary["reference_final_loss"][i] == run.reference_loss[-1]
    assert_headline_is_the_runs_summary(out, idx)
    # Different seeds give different trajectories (the overrides are not ignored).
    assert idx.summary["reference_final_loss"][0] != idx.summary["reference_final_loss"][1]
    # The index links every trace.
    with h5py.File(out / "sweep.h5", "r") as f:
        for rid in ids:
            assert f[f"runs/{rid}"].attrs["status"] == "complete"
    # Bit for bit equal to the same runs made one by one.
    single = one_by_one(out, ids, tmp_path / "single")
    for rid in ids:
        assert_same(datasets(out / "runs" / rid / "trace.h5"), single[rid], rid)
    # A rerun does nothing and says so.
    p = sweep(s, out)
    assert p.returncode == 0, p.stderr
    assert "4 complete from before, 0 to run" in p.stderr
    assert list(load_sweep(str(out / "sweep.h5")).summary["attempts"]) == [1] * 4


def _records(out: Path) -> dict[str, str]:
    st: dict[str, str] = {}
    if not (out / "runs").is_dir():
        return st
    for d in (out / "runs").iterdir():
        r = d / "result.toml"
        if r.exists():
            for line in r.read_text().splitlines():
                if line.startswith("status = "):
                    st[d.name] = line.split('"')[1]
    return st


def _trace_status(out: Path, rid: str) -> str:
    """The status attribute of a run's trace ("" when it has none or cannot be read)."""
    try:
        with h5py.File(out / "runs" / rid / "trace.h5", "r") as f:
            return str(f.attrs.get("status", ""))
    except OSError:
        return ""


def _past_checkpoint(out: Path) -> bool:
    """Some run still going has written a checkpoint and is far from its end (its log shows a
    step in [20, 100]: of 200 or 400 steps; flush_every 10)."""
    for rid, st in _records(out).items():
        log = out / "runs" / rid / "log.txt"
        if st == "running" and log.exists():
            steps = [int(w.split("/")[0]) for w in log.read_text().split() if "/" in w and w.split("/")[0].isdigit()]
            if steps and 20 <= max(steps) <= 100:
                return True
    return False


def test_killed_sweep_resumes_without_duplicating_work(tmp_path: Path) -> None:
    # 4 runs of 200 steps, 2 at a time: Ctrl-C (SIGINT; SIGTERM takes the same path) once one
    # run has finished and another is past a checkpoint.
    s = make_sweep(tmp_path, 200, [1, 2])
    out = tmp_path / "out"
    proc = subprocess.Popen([EXE, "sweep", str(s), "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while time.time() < deadline and not ("complete" in _records(out).values() and _past_checkpoint(out)):
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    first = _records(out)
    done = {r for r, st in first.items() if st == "complete"}
    stopped = {r for r, st in first.items() if st == "interrupted"}
    assert done and stopped, first
    idx = load_sweep(str(out / "sweep.h5"), allow_incomplete=True)
    assert idx.attrs["status"] == "interrupted"
    assert int(idx.attrs["runs_complete"]) == len(done)
    checkpoint = {}
    for r in stopped:
        if not (out / "runs" / r / "trace.h5").exists():
            continue  # launched an instant before the stop: stopped before it wrote anything
        with h5py.File(out / "runs" / r / "trace.h5", "r") as f:
            assert f.attrs["status"] == "interrupted"
        with h5py.File(out / "runs" / r / "trace.h5.ckpt", "r") as c:
            checkpoint[r] = int(c.attrs["step"])
    assert max(checkpoint.values()) >= 10, checkpoint  # what the stop waited for
    stamp = {r: (out / "runs" / r / "trace.h5").stat().st_mtime_ns for r in done}

    p = sweep(s, out)
    assert p.returncode == 0, p.stderr
    assert f"{len(done)} complete from before, {4 - len(done)} to run" in p.stderr
    idx = load_sweep(str(out / "sweep.h5"))
    assert list(idx.summary["status"]) == ["complete"] * 4
    att = dict(zip(idx.ids, idx.summary["attempts"]))
    for r in idx.ids:
        # finished runs untouched, stopped ones resumed (second attempt), the rest run once
        assert att[r] == (2 if r in stopped else 1), (r, att[r])
    for r in done:
        assert (out / "runs" / r / "trace.h5").stat().st_mtime_ns == stamp[r]
    assert_headline_is_the_runs_summary(out, idx)  # 200 steps: finite growth exponents too
    assert np.isfinite(idx.recipes["quantized_growth_exponent"]).any()
    for r in checkpoint:
        with h5py.File(out / "runs" / r / "trace.h5", "r") as f:
            # continued from its checkpoint, not restarted (a run stopped before its first
            # checkpoint resumes at 0)
            assert int(f.attrs["resumed_at_step"]) == checkpoint[r]
    # Resumed runs equal uninterrupted ones bit for bit.
    single = one_by_one(out, [max(checkpoint, key=checkpoint.get)], tmp_path / "single")
    for r, data in single.items():
        got = datasets(out / "runs" / r / "trace.h5")
        assert_same(got, data, r)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def test_failed_run_is_recorded_counted_and_rerun(tmp_path: Path) -> None:
    # One run killed by SIGKILL (as the OOM killer would): the others finish, the exit status is
    # 1 and the message counts the failures; the next sweep reruns it.
    s = make_sweep(tmp_path, 60, [1, 2])
    out = tmp_path / "out"
    proc = subprocess.Popen([EXE, "sweep", str(s), "--out", str(out), "--workers", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    deadline = time.time() + 20
    while time.time() < deadline and not _children(proc.pid):
        time.sleep(0.01)
    kids = _children(proc.pid)
    assert kids
    os.kill(kids[0], signal.SIGKILL)
    outp, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "1 of 4 runs failed" in err
    assert "4 runs: 3 complete, 1 failed" in outp
    idx = load_sweep(str(out / "sweep.h5"))  # the sweep itself completed
    failed = np.flatnonzero(idx.summary["status"] == "failed")
    assert list(failed) == [0]
    assert "killed by signal 9" in idx.summary["error"][0]
    assert idx.summary["exit_code"][0] == 128 + 9
    assert np.isnan(idx.summary["reference_final_loss"][0])
    p = sweep(s, out)
    assert p.returncode == 0, p.stderr
    idx = load_sweep(str(out / "sweep.h5"))
    assert list(idx.summary["status"]) == ["complete"] * 4
    assert list(idx.summary["attempts"]) == [2, 1, 1, 1]


def test_bad_sweep_is_refused_before_anything_runs(tmp_path: Path) -> None:
    s = make_sweep(tmp_path, 20, [1, 2], extra="lrr = [0.1]\n")
    out = tmp_path / "out"
    p = sweep(s, out)
    assert p.returncode == 2
    assert "unknown config key 'mlp.lrr'" in p.stderr
    assert not out.exists()
    # A changed base config does not silently mix with runs made from the old one.
    s = make_sweep(tmp_path, 20, [1])
    assert sweep(s, out).returncode == 0
    make_sweep(tmp_path, 30, [1])
    p = sweep(s, out)
    assert p.returncode == 2 and "differs from the config this sweep gives" in p.stderr


def test_mpirun_two_ranks(tmp_path: Path) -> None:
    mpirun = shutil.which("mpirun")
    if not mpirun:
        pytest.skip("mpirun not installed (Debian: openmpi-bin); CI has it")
    s = make_sweep(tmp_path, 20, [1, 2, 3])
    out = tmp_path / "out"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    p = subprocess.run([mpirun, "-n", "2", "--oversubscribe", EXE, "sweep", str(s), "--out", str(out), "--workers", "1"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("6 runs: 6 complete, 0 failed") == 1  # rank 0 reports, once
    idx = load_sweep(str(out / "sweep.h5"))
    assert idx.attrs["mode"] == "mpi" and int(idx.attrs["ranks"]) == 2
    assert sorted(os.listdir(out / "runs")) == sorted(idx.ids) and len(set(idx.ids)) == 6
    assert list(idx.summary["attempts"]) == [1] * 6  # every run exactly once
    assert set(idx.summary["rank"]) == {0, 1}  # both ranks worked
    # The same results as the local sweep (and so as single runs).
    local = tmp_path / "local"
    assert sweep(s, local).returncode == 0
    for rid in idx.ids:
        assert_same(datasets(out / "runs" / rid / "trace.h5"), datasets(local / "runs" / rid / "trace.h5"), rid)


def test_sum_sweep_list_times_grid_and_its_summary(tmp_path: Path) -> None:
    (tmp_path / "base.toml").write_text('workload = "sum"\n[sum]\nterms = "constant"\nc = 1.0\nn = 4096\n'
                                        'format = "fp16"\nrounding = "sr"\nruns = 4\nseed = 1\n')
    s = tmp_path / "sweep.toml"
    s.write_text('base = "base.toml"\nworkers = 2\n[list.rn.sum]\nrounding = "rne"\nruns = 1\n'
                 '[list.sr]\n[grid.sum]\nseed = [3, 4]\n')
    out = tmp_path / "out"
    p = sweep(s, out)
    assert p.returncode == 0, p.stderr
    idx = load_sweep(str(out / "sweep.h5"))
    assert list(idx.summary["label"]) == ['rn: sum.rounding="rne" sum.runs=1 sum.seed=3',
                                          'rn: sum.rounding="rne" sum.runs=1 sum.seed=4',
                                          "sr: sum.seed=3", "sr: sum.seed=4"]
    # An entry that leaves a key at the base value: NaN for numbers, None otherwise.
    np.testing.assert_array_equal(idx.params["sum.runs"], [1, 1, np.nan, np.nan])
    assert list(idx.params["sum.rounding"]) == ["rne", "rne", None, None]
    assert idx.recipes["run"].size == 0  # no mlp runs
    for i in range(4):
        run = idx.run(i)
        assert idx.summary["final_rms_error"][i] == run.rms_error[-1]
        assert idx.summary["final_exact"][i] == run.exact[-1] == 4096
    # Under RNE an FP16 sum of ones stops at 2048 (the error is exactly 2048 at n = 4096) for
    # any seed; SR stays near the exact sum.
    assert list(idx.summary["final_rms_error"][:2]) == [2048, 2048]
    assert np.all(idx.summary["final_rms_error"][2:] < 100)
    assert np.isnan(idx.summary["reference_final_loss"]).all()


def _descendants(pid: int) -> list[int]:
    """pid's child processes, recursively, deepest first."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids = [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
        for k in kids:
            out += _descendants(k) + [k]
    return out


def test_mpirun_killed_sweep_resumes_without_duplicating_work(tmp_path: Path) -> None:
    mpirun = shutil.which("mpirun")
    if not mpirun:
        pytest.skip("mpirun not installed (Debian: openmpi-bin); CI has it")
    s = make_sweep(tmp_path, 200, [1, 2])
    out = tmp_path / "out"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader")
    cmd = [mpirun, "-n", "2", "--oversubscribe", EXE, "sweep", str(s), "--out", str(out), "--workers", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 60
    while time.time() < deadline and not ("complete" in _records(out).values() and _past_checkpoint(out)):
        time.sleep(0.02)
    # The whole job killed at once (a lost allocation): runs, ranks and mpirun, SIGKILL, no
    # chance to flush. (mpirun passes a Ctrl-C on only after about a second, longer than these
    # runs last; the graceful stop is tested in local mode above.)
    for pid in _descendants(proc.pid) + [proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, err = proc.communicate(timeout=60)
    first = _records(out)
    # A run whose trace was finished but whose record was not yet rewritten when the kill came
    # counts as complete too: the restart trusts the trace's own status, not the record.
    done = {r for r, st in first.items() if st == "complete" or _trace_status(out, r) == "complete"}
    assert done and len(done) < 4, (first, err)
    stamp = {r: (out / "runs" / r / "trace.h5").stat().st_mtime_ns for r in done}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"{len(done)} complete from before, {4 - len(done)} to run" in p.stderr
    idx = load_sweep(str(out / "sweep.h5"))
    assert sorted(os.listdir(out / "runs")) == sorted(idx.ids) and len(set(idx.ids)) == 4
    assert list(idx.summary["status"]) == ["complete"] * 4
    for r, n in zip(idx.ids, idx.summary["attempts"]):
        assert n == (1 if r in done or r not in first else 2), (r, n, first)
    for r in done:  # not run again
        assert (out / "runs" / r / "trace.h5").stat().st_mtime_ns == stamp[r]
    # Runs that were going when the job died: resumed from their last checkpoint (or rerun if
    # the kill left the trace unreadable), equal to the same run made alone either way.
    again = [r for r, n in zip(idx.ids, idx.summary["attempts"]) if n == 2]
    assert again
    single = one_by_one(out, again, tmp_path / "single")
    for r, data in single.items():
        assert_same(datasets(out / "runs" / r / "trace.h5"), data, r)


def one_complete_run(tmp_path: Path) -> tuple[Path, Path, str, Path, dict[str, bytes]]:
    """A sweep of one short run, done: the sweep file, its output, the run's id, its trace and the
    trace's datasets."""
    s = make_sweep(tmp_path, 20, [1], lrs=(0.02,))
    out = tmp_path / "out"
    assert sweep(s, out).returncode == 0
    rid = load_sweep(str(out / "sweep.h5")).ids[0]
    trace = out / "runs" / rid / "trace.h5"
    return s, out, rid, trace, datasets(trace)


def test_a_resume_that_fails_starts_the_run_again(tmp_path: Path) -> None:
    # An interrupted trace whose checkpoint is damaged: the resume is refused, and the sweep
    # starts the run from step 0 at once instead of recording a failure that every rerun would
    # repeat.
    s, out, rid, trace, want = one_complete_run(tmp_path)
    with h5py.File(trace, "r+") as f:
        f.attrs["status"] = "interrupted"
    Path(str(trace) + ".ckpt").write_bytes(b"not a checkpoint")
    p = sweep(s, out)
    assert p.returncode == 0, p.stderr
    idx = load_sweep(str(out / "sweep.h5"))
    assert list(idx.summary["status"]) == ["complete"]
    assert list(idx.summary["attempts"]) == [3]  # the first run, the failed resume, the rerun
    log = (out / "runs" / rid / "log.txt").read_text()
    assert "attempt 2 (resume)" in log and "the resume failed" in log and "attempt 3 at" in log
    assert_same(datasets(trace), want, rid)


def test_a_complete_run_left_with_its_checkpoint_is_cleaned_not_rerun(tmp_path: Path) -> None:
    # A child killed after it closed its complete trace and before it removed its checkpoint and
    # journal: the next sweep counts the run complete, removes the two files and leaves the
    # trace as it was.
    s, out, rid, trace, want = one_complete_run(tmp_path)
    left = [Path(str(trace) + ".ckpt"), Path(str(trace) + ".rows")]
    for f in left:
        f.write_bytes(b"left by a kill")
    p = sweep(s, out)
    assert p.returncode == 0, p.stderr
    assert not [f.name for f in left if f.exists()]
    idx = load_sweep(str(out / "sweep.h5"))
    assert list(idx.summary["status"]) == ["complete"]
    assert list(idx.summary["attempts"]) == [1]  # not run again
    assert_same(datasets(trace), want, rid)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"  # not a zombie
    except OSError:
        return False


def test_runs_orphaned_by_a_killed_sweep_keep_the_directory_locked(tmp_path: Path) -> None:
    s = make_sweep(tmp_path, 1000, [1], lrs=(0.02,))
    out = tmp_path / "out"
    proc = subprocess.Popen([EXE, "sweep", str(s), "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 20
    while time.time() < deadline and not _children(proc.pid):
        time.sleep(0.01)
    orphans = _children(proc.pid)
    assert orphans
    proc.kill()  # SIGKILL: the sweep cannot stop its run, which goes on
    proc.communicate()
    p = sweep(s, out)
    assert _alive(orphans[0]), "the run ended before the check: make it longer"
    assert p.returncode == 2 and "the runs of a killed one, is running" in p.stderr
    deadline = time.time() + 60
    while time.time() < deadline and _alive(orphans[0]):
        time.sleep(0.05)
    p = sweep(s, out)
    assert p.returncode == 0, p.stderr
    idx = load_sweep(str(out / "sweep.h5"))
    # The orphan finished the run; the sweep takes its trace as it is.
    assert list(idx.summary["status"]) == ["complete"] and list(idx.summary["attempts"]) == [1]


def test_lm_sweep_rows_carry_the_runs_summary_headline(tmp_path: Path) -> None:
    """lm runs: the headline columns are the traces' attributes bit for bit, the loss gap the
    window mean recomputed with stats.py; the older columns keep the whole model's error."""
    from fp4drift_analysis.stats import window_mean_gap
    from test_lm_analysis import LM_CONFIG, UNFUSED  # the small lm model those tests use

    (tmp_path / "base.toml").write_text(LM_CONFIG.format(**UNFUSED).replace("steps = 20", "steps = 10"))
    (tmp_path / "sweep.toml").write_text('base = "base.toml"\nworkers = 1\n[grid.lm]\nseed = [1, 2]\n')
    out = tmp_path / "out"
    p = sweep(tmp_path / "sweep.toml", out, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr
    idx = load_sweep(str(out / "sweep.h5"))
    assert len(idx.recipes["recipe"]) == 2 and not idx.fallbacks
    for row, run_index in enumerate(idx.recipes["run"]):
        rid, name = idx.ids[int(run_index)], str(idx.recipes["recipe"][row])
        with h5py.File(out / "runs" / rid / "trace.h5", "r") as f:
            a = dict(f["lm/runs"][name].attrs)
        for k in ("rel_loss_gap_window_mean", "quantized_weight_rel_error", "quantized_growth_exponent"):
            np.testing.assert_equal(idx.recipes[k][row], a[k], err_msg=k)
        t = idx.run(rid)
        r = t.run(name)
        w = window_mean_gap(t.step, r.rel_loss_gap)
        assert idx.recipes["rel_loss_gap_window_mean"][row] == pytest.approx(w.mean, rel=1e-12, abs=0)
        assert (idx.recipes["gap_window_first_step"][row], idx.recipes["gap_window_last_step"][row]) == \
            (w.first_step, w.last_step)
        assert np.isfinite(idx.recipes["quantized_weight_rel_error"][row])
        assert idx.recipes["final_weight_rel_error"][row] == r.weight_rel_error_total[-1]
