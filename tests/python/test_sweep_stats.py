"""sweep-stats: the t interval and the sign test against textbook and hand values, and grouping,
labelling and pairing over seeds on a small synthetic sweep index written here in the layout of
docs/trace-format.md (no fp4drift binary needed)."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

from fp4drift_analysis.__main__ import main
from fp4drift_analysis.stats import sign_test, t_interval, t_quantile
from fp4drift_analysis.sweep import load_sweep, parse_overrides
from fp4drift_analysis.sweep_stats import group_runs, paired_gaps

# --- the statistics ---------------------------------------------------------------------------


@pytest.mark.parametrize("p,dof,table", [(0.975, 2, 4.303), (0.975, 9, 2.262), (0.95, 4, 2.132),
                                         (0.995, 5, 4.032), (0.975, 30, 2.042)])
def test_t_quantile_textbook(p, dof, table):
    assert t_quantile(p, dof) == pytest.approx(table, abs=5e-4)


def test_t_interval_textbook():
    iv = t_interval([2.0, 2.2, 2.4], 0.95)           # mean 2.2, s = 0.2
    assert (iv.n, iv.mean, iv.sd) == (3, pytest.approx(2.2), pytest.approx(0.2))
    assert iv.half_width == pytest.approx(4.303 * 0.2 / math.sqrt(3), abs=1e-4)
    x = np.arange(10.0)                              # n = 10: s = sqrt(55/6)
    iv = t_interval(x, 0.95)
    assert iv.half_width == pytest.approx(2.262 * math.sqrt(55 / 6) / math.sqrt(10), abs=1e-3)
    one = t_interval([5.0])
    assert one.mean == 5.0 and math.isnan(one.half_width)


def test_sign_test_hand_values():
    assert sign_test([1, 2, 3]).p_value == pytest.approx(0.25)             # 2 / 2^3
    assert sign_test([1] * 8).p_value == pytest.approx(2 / 256)
    assert sign_test([1] * 9 + [-1]).p_value == pytest.approx(2 * 11 / 1024)  # 2 (C(10,0) + C(10,1)) / 2^10
    t = sign_test([1, 0, -1, 2])                                            # the tie is left out
    assert (t.positive, t.negative, t.ties, t.p_value) == (2, 1, 1, 1.0)
    assert sign_test([0, 0]).p_value == 1.0
    assert sign_test([-1, -1, -1, -1, 1, -1]).p_value == pytest.approx(2 * 7 / 64)


# --- a synthetic sweep index ------------------------------------------------------------------

# (lr, seed) -> {recipe: tail_loss}; nvfp4's gaps to bf16 in percent: lr 0.01: +1, +3, +2;
# lr 0.02: -1, +1 and no nvfp4 row for seed 3 (paired over seeds 1, 2 only).
TABLE = {
    (0.01, 1): {"nvfp4": 2.0 * 1.01, "bf16": 2.0},
    (0.01, 2): {"nvfp4": 2.2 * 1.03, "bf16": 2.2},
    (0.01, 3): {"nvfp4": 2.4 * 1.02, "bf16": 2.4},
    (0.02, 1): {"nvfp4": 3.0 * 0.99, "bf16": 3.0},
    (0.02, 2): {"nvfp4": 3.0 * 1.01, "bf16": 3.0},
    (0.02, 3): {"bf16": 3.3},
}


def write_index(path: Path, table=TABLE, seed_key="mlp.seed") -> Path:
    s = h5py.string_dtype()
    runs = list(table)
    with h5py.File(path, "w") as f:
        f.attrs.update(schema="fp4drift.sweep", schema_version=1, status="complete",
                       axes=f"mlp.lr,{seed_key}")
        g = f.create_group("summary")
        g["index"] = np.arange(len(runs))
        g.create_dataset("id", data=[f"{i:04d}-0000abcd" for i in range(len(runs))], dtype=s)
        g.create_dataset("overrides", data=[f"mlp.lr = {lr}\n{seed_key} = {sd}\n" for lr, sd in runs], dtype=s)
        g.create_dataset("label", data=[f"mlp.lr={lr} {seed_key}={sd}" for lr, sd in runs], dtype=s)
        g.create_dataset("status", data=["complete"] * len(runs), dtype=s)
        g["reference_final_loss"] = np.array([1.0 + 0.1 * i for i in range(len(runs))])
        p = g.create_group("param")
        p.create_dataset("mlp.lr", data=[str(lr) for lr, _ in runs], dtype=s)
        p.create_dataset(seed_key, data=[str(sd) for _, sd in runs], dtype=s)
        rows = [(i, r, v) for i, k in enumerate(runs) for r, v in table[k].items()]
        r = f.create_group("summary_recipes")
        r["row"] = np.arange(len(rows))
        r["run"] = np.array([i for i, _, _ in rows])
        r.create_dataset("id", data=[f"{i:04d}-0000abcd" for i, _, _ in rows], dtype=s)
        r.create_dataset("recipe", data=[x for _, x, _ in rows], dtype=s)
        r["tail_loss"] = np.array([v for _, _, v in rows])
        r["growth_exponent"] = np.full(len(rows), np.nan)
    return path


@pytest.fixture()
def index(tmp_path) -> Path:
    return write_index(tmp_path / "sweep.h5")


def test_overrides_and_labels(index):
    assert parse_overrides('a.b = 1\nc = "x"\nd = [0, 7]\ne = true\nf = 0.5\n') == \
        {"a.b": 1, "c": "x", "d": (0, 7), "e": True, "f": 0.5}
    s = load_sweep(str(index))
    assert s.varying_keys() == ["mlp.lr", "mlp.seed"]
    assert s.label(4) == "mlp.lr=0.02 mlp.seed=2"
    assert s.label(4, ["mlp.seed"]) == "mlp.seed=2"


def test_grouping_and_pairing_over_common_seeds(index):
    s = load_sweep(str(index))
    cells = group_runs(s, ["mlp.lr"], "tail_loss")
    got = {(c.key, c.recipe): c for c in cells}
    assert list(got) == [((0.01,), "nvfp4"), ((0.01,), "bf16"), ((0.02,), "nvfp4"), ((0.02,), "bf16")]
    b = got[((0.01,), "bf16")]
    assert b.seeds == [1, 2, 3] and b.interval.mean == pytest.approx(2.2)
    assert b.interval.half_width == pytest.approx(4.303 * 0.2 / math.sqrt(3), abs=1e-4)
    assert got[((0.02,), "nvfp4")].seeds == [1, 2]
    assert got[((0.02,), "bf16")].interval.n == 3
    pairs = {p.key: p for p in paired_gaps(cells, "bf16")}
    p = pairs[(0.01,)]
    assert p.gaps == pytest.approx([1.0, 3.0, 2.0])
    assert p.interval.mean == pytest.approx(2.0)
    assert p.interval.half_width == pytest.approx(4.303 / math.sqrt(3), abs=1e-3)   # s = 1
    assert p.t == pytest.approx(2.0 * math.sqrt(3)) and p.dof == 2
    assert (p.sign.positive, p.sign.negative, p.sign.p_value) == (3, 0, pytest.approx(0.25))
    q = pairs[(0.02,)]
    assert q.seeds == [1, 2] and q.gaps == pytest.approx([-1.0, 1.0])   # seed 3 has no nvfp4: not paired
    assert q.interval.mean == pytest.approx(0.0, abs=1e-12) and q.sign.p_value == 1.0


def test_no_grouping_pools_groups_but_refuses_a_repeated_seed(index):
    s = load_sweep(str(index))
    with pytest.raises(ValueError, match="two runs with mlp.seed=1.*differing in mlp.lr"):
        group_runs(s, [], "tail_loss")


def test_per_run_metric(index):
    cells = group_runs(load_sweep(str(index)), ["mlp.lr"], "reference_final_loss")
    assert [(c.recipe, c.interval.n) for c in cells] == [("-", 3), ("-", 3)]
    assert cells[0].interval.mean == pytest.approx(1.1)


# --- the command ------------------------------------------------------------------------------


def test_cli_text_json_and_plot(index, tmp_path, capsys):
    out = tmp_path / "m.png"
    assert main(["sweep-stats", str(index), "--group-by", "mlp.lr", "--baseline", "bf16", "--plot", str(out)]) == 0
    text = capsys.readouterr().out
    assert "95% t interval, n-1 dof" in text and "sign test" in text
    assert out.stat().st_size > 1000
    assert main(["sweep-stats", str(index), "--group-by", "mlp.lr", "--baseline", "bf16", "--json",
                 "--confidence", "0.9"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["seed_key"] == "mlp.seed" and d["confidence"] == 0.9
    g = d["groups"][0]
    assert g["keys"] == {"mlp.lr": 0.01} and g["recipe"] == "nvfp4" and g["n"] == 3
    assert g["runs"] == ["mlp.lr=0.01 mlp.seed=1", "mlp.lr=0.01 mlp.seed=2", "mlp.lr=0.01 mlp.seed=3"]
    p = [x for x in d["paired"] if x["keys"] == {"mlp.lr": 0.02}][0]
    assert p["n"] == 2 and p["seeds"] == [1, 2] and p["p_sign"] == 1.0


def test_cli_seed_key_named(tmp_path, capsys):
    idx = write_index(tmp_path / "s.h5", seed_key="data.seed")
    assert main(["sweep-stats", str(idx), "--group-by", "mlp.lr"]) == 2
    assert "no seed key" in capsys.readouterr().err
    assert main(["sweep-stats", str(idx), "--group-by", "mlp.lr", "--seed-key", "data.seed"]) == 0


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert err.startswith("fp4drift_analysis: error:") and "\n" not in err, err
    return err


def test_cli_errors(index, tmp_path, capsys):
    assert "unknown key 'mlp.widths'" in _error(capsys, ["sweep-stats", str(index), "--group-by", "mlp.widths"])
    assert "unknown metric 'loss'" in _error(capsys, ["sweep-stats", str(index), "--group-by", "mlp.lr",
                                                      "--metric", "loss"])
    assert "not finite" in _error(capsys, ["sweep-stats", str(index), "--group-by", "mlp.lr",
                                           "--metric", "growth_exponent"])
    assert "unknown --baseline recipe 'fp8'" in _error(capsys, ["sweep-stats", str(index), "--group-by", "mlp.lr",
                                                                "--baseline", "fp8"])
    trace = tmp_path / "trace.h5"
    with h5py.File(trace, "w") as f:
        f.attrs.update(schema="fp4drift.run", schema_version=1)
    assert "expected 'fp4drift.sweep'" in _error(capsys, ["sweep-stats", str(trace), "--group-by", "mlp.lr"])
    text = tmp_path / "notes.txt"
    text.write_text("not hdf5\n")
    _error(capsys, ["sweep-stats", str(text), "--group-by", "mlp.lr"])
    assert "--plot needs a --group-by key" in _error(capsys, ["sweep-stats", str(index), "--group-by", "",
                                                               "--metric", "reference_final_loss",
                                                               "--plot", str(tmp_path / "x.png")])


# --- the trace commands on a sweep index --------------------------------------------------------


def test_expand_traces_selects_and_labels(index):
    from fp4drift_analysis.sweep import expand_traces
    paths, labels = expand_traces([str(index)], ["mlp.lr=0.02"])
    assert [Path(p).parent.name for p in paths] == ["0003-0000abcd", "0004-0000abcd", "0005-0000abcd"]
    assert all(Path(p).name == "trace.h5" for p in paths)
    assert [labels[p] for p in paths] == ["mlp.seed=1", "mlp.seed=2", "mlp.seed=3"]   # only what varies
    paths, labels = expand_traces([str(index)], ["mlp.lr=0.02", "mlp.seed=2"])
    assert [labels[p] for p in paths] == ["mlp.lr=0.02 mlp.seed=2"]
    with pytest.raises(ValueError, match="unknown key 'lr'"):
        expand_traces([str(index)], ["lr=0.02"])
    with pytest.raises(ValueError, match="no complete run matches"):
        expand_traces([str(index)], ["mlp.lr=0.5"])


EXE = os.environ.get("FP4DRIFT_EXE", "")


@pytest.mark.skipif(not (EXE and os.access(EXE, os.X_OK)),
                    reason="FP4DRIFT_EXE not set to the fp4drift binary")
def test_fit_and_compare_on_a_real_sweep(tmp_path, capsys):
    """A tiny mlp sweep made by the binary: fit and compare read its index, runs named by overrides."""
    (tmp_path / "base.toml").write_text('workload = "mlp"\n[mlp]\nwidths = [16, 32, 16]\nbatch = 16\nseed = 1\n'
                                        'teacher_width = 32\nlr = 0.02\nsteps = 40\n[recipes]\nnames = ["nvfp4", "bf16"]\n'
                                        '[reference]\ncompare_every = 5\n[trace]\nevery = 1\nflush_every = 10\n')
    (tmp_path / "sweep.toml").write_text('base = "base.toml"\nworkers = 2\n[grid.mlp]\nlr = [0.01, 0.02]\n'
                                         'seed = [1, 2]\n')
    p = subprocess.run([EXE, "sweep", str(tmp_path / "sweep.toml"), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    idx = str(tmp_path / "out" / "sweep.h5")
    assert main(["fit", idx, "--where", "mlp.lr=0.02"]) == 0
    text = capsys.readouterr().out
    assert "mlp.seed=1:nvfp4" in text and "mlp.seed=2:bf16" in text and "trace.h5" not in text
    out = tmp_path / "c.png"
    assert main(["compare", idx, "--where", "mlp.seed=1", "--recipes", "nvfp4", "--out", str(out)]) == 0
    assert out.stat().st_size > 1000
    assert main(["sweep-stats", idx, "--group-by", "mlp.lr", "--metric", "final_weight_rel_error",
                 "--baseline", "bf16"]) == 0
    assert "t interval" in capsys.readouterr().out


# --- the headline columns and older indices -----------------------------------------------------


def test_older_index_reads_headline_names_from_older_columns_and_says_so(index, capsys):
    """An index written before the headline columns: the headline names stand for the older
    columns (the values are those columns', not recomputed) and the report's label names them."""
    with h5py.File(index, "a") as f:
        r = f["summary_recipes"]
        r["final_rel_loss_gap"] = r["tail_loss"][()] / 10
    s = load_sweep(str(index))
    assert s.fallbacks == {"rel_loss_gap_window_mean": "final_rel_loss_gap", "quantized_growth_exponent": "growth_exponent"}
    np.testing.assert_array_equal(s.recipes["rel_loss_gap_window_mean"], s.recipes["final_rel_loss_gap"])
    assert "quantized_weight_rel_error" not in s.recipes   # no older column to stand in
    assert s.metric_label("rel_loss_gap_window_mean") == \
        "rel_loss_gap_window_mean (older index: final_rel_loss_gap, the last record's gap)"
    assert s.metric_label("tail_loss") == "tail_loss"
    assert main(["sweep-stats", str(index), "--group-by", "mlp.lr", "--metric", "rel_loss_gap_window_mean"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "older index: final_rel_loss_gap, the last record's gap" in head, head
    assert main(["sweep-stats", str(index), "--group-by", "mlp.lr", "--metric", "rel_loss_gap_window_mean",
                 "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["metric"] == "rel_loss_gap_window_mean" and "older index" in j["metric_label"]
    cell = next(g for g in j["groups"] if g["recipe"] == "bf16" and g["keys"]["mlp.lr"] == 0.01)
    assert cell["values"] == pytest.approx([0.2, 0.22, 0.24], rel=1e-15)


def test_headline_columns_are_read_as_written(index, capsys):
    """An index with the headline columns: no fallback, no label, and a headline column that is NaN
    everywhere (traces older than the run summary) is refused with the reason."""
    with h5py.File(index, "a") as f:
        r = f["summary_recipes"]
        r["final_rel_loss_gap"] = np.full(r["tail_loss"].shape, 9.0)          # must not be read
        r["rel_loss_gap_window_mean"] = r["tail_loss"][()] / 100
        r["quantized_growth_exponent"] = np.full(r["tail_loss"].shape, np.nan)
    s = load_sweep(str(index))
    assert not s.fallbacks
    assert main(["sweep-stats", str(index), "--group-by", "mlp.lr", "--metric", "rel_loss_gap_window_mean",
                 "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["metric_label"] == "rel_loss_gap_window_mean"
    cell = next(g for g in j["groups"] if g["recipe"] == "bf16" and g["keys"]["mlp.lr"] == 0.01)
    assert cell["values"] == pytest.approx([0.02, 0.022, 0.024], rel=1e-15)
    err = _error(capsys, ["sweep-stats", str(index), "--group-by", "mlp.lr", "--metric", "quantized_growth_exponent"])
    assert "not finite" in err and "predate the run summary" in err


@pytest.mark.skipif(not (EXE and os.access(EXE, os.X_OK)),
                    reason="FP4DRIFT_EXE not set to the fp4drift binary")
def test_single_run_plots_and_bias_take_a_sweep_index(tmp_path, capsys):
    """plot-run, plot-heatmap and plot-stats draw the one run --where selects from a real mlp
    sweep (several are refused, naming them); bias tests every run of a sum sweep, labelled by
    its overrides."""
    (tmp_path / "base.toml").write_text('workload = "mlp"\n[mlp]\nwidths = [16, 32, 16]\nbatch = 16\nseed = 1\n'
                                        'teacher_width = 32\nlr = 0.02\nsteps = 30\n[recipes]\nnames = ["nvfp4", "bf16"]\n'
                                        '[reference]\ncompare_every = 5\n[trace]\nevery = 1\nflush_every = 10\n')
    (tmp_path / "sweep.toml").write_text('base = "base.toml"\nworkers = 2\n[grid.mlp]\nseed = [1, 2]\n')
    p = subprocess.run([EXE, "sweep", str(tmp_path / "sweep.toml"), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    idx = str(tmp_path / "out" / "sweep.h5")
    for command in ("plot-run", "plot-heatmap", "plot-stats"):
        out = tmp_path / f"{command}.png"
        assert main([command, idx, "--where", "mlp.seed=2", "--out", str(out)]) == 0, command
        assert out.stat().st_size > 1000
    capsys.readouterr()
    assert main(["plot-heatmap", idx, "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "stands for 2" in err and "mlp.seed=1" in err and "select one with --where" in err, err
    assert not (tmp_path / "x.png").exists()

    # Sums of ones in FP16 with exact SR over 16 seeds each: unbiased, so bias exits 0 (a fixed
    # outcome for these seeds; the test's confidence is 99%).
    (tmp_path / "sum.toml").write_text('workload = "sum"\n[sum]\nterms = "constant"\nc = 1.0\nn = 4096\n'
                                       'format = "fp16"\nrounding = "sr"\nsr_bits = 0\nruns = 16\nseed = 1\n')
    (tmp_path / "sums.toml").write_text('base = "sum.toml"\nworkers = 2\n[grid.sum]\nseed = [1, 101]\n')
    p = subprocess.run([EXE, "sweep", str(tmp_path / "sums.toml"), "--out", str(tmp_path / "sums")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert main(["bias", str(tmp_path / "sums" / "sweep.h5")]) == 0
    lines = [l for l in capsys.readouterr().out.splitlines() if "n = 4096" in l]
    assert len(lines) == 2 and lines[0].startswith("sum.seed=1 ") and lines[1].startswith("sum.seed=101 "), lines
