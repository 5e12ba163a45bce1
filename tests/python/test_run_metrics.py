"""The run summary's headline metrics: the Python definitions (stats.window_mean_gap,
aggregate_rel_error, local_exponents) against hand-computed cases - the same cases as the C++
ones (tests/unit/test_run_metrics.cpp) - and, with an fp4drift binary, the trace attributes and
the CLI's JSON and table against those definitions applied to the trace's own per-step rows."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

from fp4drift_analysis.stats import (aggregate_rel_error, final_growth_window, fit_growth, local_exponents,
                                     window_mean_gap)

EXE = os.environ.get("FP4DRIFT_EXE", "")
needs_exe = pytest.mark.skipif(not (EXE and os.access(EXE, os.X_OK)), reason="FP4DRIFT_EXE not set to the fp4drift binary")


# --- hand-computed cases ----------------------------------------------------------------------

def test_gap_window_bounds_and_mean() -> None:
    s = np.arange(600)
    g = s / 1000.0
    w = window_mean_gap(s, g)                # the last tenth: steps 540..599
    assert (w.records, w.first_step, w.last_step) == (60, 540, 599)
    assert w.mean == pytest.approx(0.5695, rel=1e-14)
    assert w.label() == "loss gap, mean of steps 540-599"
    w = window_mean_gap(s[:100], g[:100])   # a tenth is 10: the floor of 20 wins
    assert (w.records, w.first_step) == (20, 80) and w.mean == pytest.approx(0.0895, rel=1e-14)
    w = window_mean_gap([0, 2, 4, 6, 8], [1, 2, 3, 4, 5])
    assert (w.records, w.first_step, w.mean) == (5, 0, 3.0)
    assert window_mean_gap(np.arange(201), np.ones(201)).records == 21
    assert math.isnan(window_mean_gap([0, 2, 4, 6, 8], [1, 2, 3, math.nan, 5]).mean)
    w = window_mean_gap([0, 2, 4, 6, 8], [1, 2, 3, 4, 5], fraction=0.25, min_records=1)
    assert (w.records, w.mean) == (2, 4.5)
    with pytest.raises(ValueError):
        window_mean_gap([0, 1], [1.0, 2.0], fraction=0)


def test_aggregate_is_one_frobenius_ratio() -> None:
    assert aggregate_rel_error([0.5, 0.3], [4, 100]) == pytest.approx(math.sqrt(10 / 104), rel=1e-15)
    rows = aggregate_rel_error([[0.5, 0.3], [0.25, 0.25]], [4, 100])
    assert rows[0] == pytest.approx(math.sqrt(10 / 104)) and rows[1] == pytest.approx(0.25)


def test_exact_power_law_gives_its_exponent_in_every_window() -> None:
    s = np.arange(10, 2001, 10)
    e = 3e-4 * s ** 0.5
    ws = local_exponents(s, e)
    assert len(ws) == 6
    assert (ws[-1].first_step, ws[-1].last_step, ws[-1].points) == (1010, 2000, 100)
    assert (ws[0].first_step, ws[0].last_step) == (40, 60)
    for w in ws:
        assert w.exponent == pytest.approx(0.5, abs=1e-12) and w.ci_high - w.ci_low < 1e-9


def test_two_power_laws_give_their_exponents_in_their_windows() -> None:
    s = np.arange(10, 2001, 10).astype(float)
    e = np.where(s <= 500, s ** 0.25, 500 ** 0.25 * (s / 500) ** 0.7)
    ws = local_exponents(s, e)
    assert [round(w.exponent, 12) for w in ws] == [0.25, 0.25, 0.25, 0.25, 0.7, 0.7]
    assert final_growth_window(s, e).exponent == pytest.approx(0.7, abs=1e-12)
    # one power law through the whole bent curve is neither exponent; a stated window is
    whole = fit_growth(s, e)
    assert 0.3 < whole.exponent < 0.65
    early = fit_growth(s, e, window=(0, 500))
    assert early.exponent == pytest.approx(0.25, abs=1e-12) and (early.first_step, early.last_step) == (10, 500)


def test_slope_interval_covers_at_its_confidence() -> None:
    # log e = log 0.01 + 0.6 log s + N(0, 0.05^2), independent residuals (the interval's
    # assumption): 2000 seeded replicates cover 0.6 at 0.95 +- 4 binomial sd (sd 0.0049). Fixed seed.
    rng = np.random.default_rng(20261204)
    s = np.arange(10, 401, 10).astype(float)
    hits = 0
    for _ in range(2000):
        e = 0.01 * s ** 0.6 * np.exp(rng.normal(0, 0.05, s.size))
        w = final_growth_window(s, e)
        assert w.points == 20
        hits += w.ci_low <= 0.6 <= w.ci_high
    assert abs(hits / 2000 - 0.95) < 4 * 0.0049


# --- against fp4drift's summary ----------------------------------------------------------------

MLP = """workload = "mlp"
[mlp]
widths = [32, 64, 64, 8]
batch = 32
steps = 240
lr = 0.05
[recipes]
names = ["nvfp4", "bf16"]
high_precision_layers = [0, 2]
[reference]
compare_every = 5
[trace]
flush_every = 50
"""


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("headline")
    cfg = d / "m.toml"
    cfg.write_text(MLP)
    out = d / "m.h5"
    r = subprocess.run([EXE, "run", str(cfg), "--out", str(out), "--json"], check=True, capture_output=True, text=True)
    table = d / "t.h5"
    t = subprocess.run([EXE, "run", str(cfg), "--out", str(table)], check=True, capture_output=True, text=True)
    return out, json.loads(r.stdout), t.stdout


@needs_exe
def test_mlp_summary_matches_the_definitions(mlp_run) -> None:
    from fp4drift_analysis import load_run
    from fp4drift_analysis.plots import ablation_table, headline_weight_error
    path, js, _ = mlp_run
    r = load_run(str(path))
    with h5py.File(path) as f:
        norms = f["mlp/reference"].attrs["final_weight_sq_norm"]
        # ||W_ref||^2 per layer from the final reference weights in the trace's checkpoint
        assert norms.shape == (3,) and np.all(norms > 0)
    runs = {x["recipe"]: x for x in js["runs"]}
    for run in r.runs:
        a, x = run.attrs, runs[run.name]
        gw = window_mean_gap(r.step, run.rel_loss_gap)
        assert (gw.first_step, gw.last_step, gw.records) == (216, 239, 24)    # ceil(24.0), steps 216..239
        assert a["rel_loss_gap_window_mean"] == pytest.approx(gw.mean, rel=1e-12)
        assert x["rel_loss_gap"] == pytest.approx(gw.mean, rel=1e-12)
        assert x["rel_loss_gap_window"]["first_step"] == 216 and x["rel_loss_gap_window"]["last_step"] == 239
        # nvfp4 quantizes layer 1 only (0 and 2 in bf16); bf16 has no edge layers
        q = [1] if run.name == "nvfp4" else [0, 1, 2]
        assert list(a["quantized_layers"]) == q == x["quantized_layers"]
        assert x["edge_layers"] == ([0, 2] if run.name == "nvfp4" else [])
        e = aggregate_rel_error(run.weight_rel_error[:, q], norms[q])
        assert a["quantized_weight_rel_error"] == pytest.approx(e[-1], rel=1e-12)
        assert x["quantized_weight_rel_error"] == pytest.approx(e[-1], rel=1e-12)
        assert x["quantized_layer_weight_rel_error"] == list(run.weight_rel_error[-1, q])
        h, _ = headline_weight_error(r, run)
        np.testing.assert_allclose(h, e, rtol=1e-12)
        fw = final_growth_window(r.compare_step, e)
        assert (fw.first_step, fw.last_step) == (125, 240)
        assert a["quantized_growth_exponent"] == pytest.approx(fw.exponent, rel=1e-9)
        assert x["quantized_growth"]["exponent"] == pytest.approx(fw.exponent, rel=1e-9)
        assert x["quantized_growth"]["ci_low"] == pytest.approx(fw.ci_low, rel=1e-9)
        ws = local_exponents(r.compare_step, e)
        assert list(a["local_exponent_first_step"]) == [w.first_step for w in ws]
        np.testing.assert_allclose(a["local_exponent"], [w.exponent for w in ws], rtol=1e-9)
        np.testing.assert_allclose(a["local_exponent_ci_high"], [w.ci_high for w in ws], rtol=1e-9)
        # the legacy attribute keeps its meaning: last layer, every compare
        assert a["weight_error_growth_exponent"] == pytest.approx(
            fit_growth(r.compare_step, run.weight_rel_error[:, -1]).exponent, rel=1e-9)
    rows = {row[0]: row for row in ablation_table([str(path)])}
    for run in r.runs:
        assert rows[run.name][1] == pytest.approx(run.attrs["rel_loss_gap_window_mean"], rel=1e-12)
        assert rows[run.name][2] == pytest.approx(run.attrs["quantized_weight_rel_error"], rel=1e-12)


@needs_exe
def test_mlp_table_states_the_windows(mlp_run) -> None:
    _, _, table = mlp_run
    assert "loss gap: mean of (L - L_ref) / L_ref over steps 216-239" in table
    assert "over the compares of steps 125-240, 95% t interval" in table
    assert "loss gap 216-239" in table and "quantized W rel err" in table
    assert "quantized 1 " in table and "edge 0 " in table


@needs_exe
def test_fit_reports_its_window(mlp_run, capsys) -> None:
    from fp4drift_analysis.__main__ import main
    path, _, _ = mlp_run
    assert main(["fit", str(path)]) == 0
    out = capsys.readouterr().out
    assert "125-240" in out and "local exponents" in out and "quantized layers 1" in out
    assert main(["fit", str(path), "--window", "0:60"]) == 0
    assert "5-60" in capsys.readouterr().out
    assert main(["fit", str(path), "--window", "60"]) == 2
    assert "--window must be LO:HI" in capsys.readouterr().err


@needs_exe
def test_plots_draw_the_headline(mlp_run, tmp_path: Path) -> None:
    from fp4drift_analysis.__main__ import main
    path, _, _ = mlp_run
    for cmd in ("plot-growth", "plot-run", "ablation", "compare"):
        out = tmp_path / f"{cmd}.png"
        assert main([cmd, str(path), "--out", str(out)]) == 0 and out.stat().st_size > 0
    with pytest.raises(SystemExit) as e:
        main(["ablation", str(path), "--gap-fraction", "0", "--out", str(tmp_path / "x.png")])
    assert e.value.code == 2


@needs_exe
def test_a_trace_without_the_summary_attributes_falls_back_and_says_so(mlp_run, tmp_path: Path) -> None:
    # a trace written before the headline attributes: the last layer, named as such
    from fp4drift_analysis import load_run
    from fp4drift_analysis.plots import headline_weight_error
    path, _, _ = mlp_run
    old = tmp_path / "old.h5"
    old.write_bytes(Path(path).read_bytes())
    with h5py.File(old, "r+") as f:
        del f["mlp/reference"].attrs["final_weight_sq_norm"]
        for name in f["mlp/runs"]:
            del f["mlp/runs"][name].attrs["quantized_layers"]
    r = load_run(str(old))
    e, what = headline_weight_error(r, r.run("nvfp4"))
    assert what == "last layer (trace without quantized_layers)"
    np.testing.assert_array_equal(e, r.run("nvfp4").weight_rel_error[:, -1])
