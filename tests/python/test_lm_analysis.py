"""fp4drift_analysis on lm traces (docs/trace-format.md, workload lm): the loader's arrays and
attributes against what they are defined to be, the grouping of operand statistics by linear
kind against hand-picked slots, the plots, and the refusals. Two tiny models (a few seconds
on two cores, made once for the module)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

EXE = os.environ.get("FP4DRIFT_EXE", "")
pytestmark = pytest.mark.skipif(
    not (EXE and os.access(EXE, os.X_OK)), reason="FP4DRIFT_EXE not set to the fp4drift binary"
)

# Every dimension a multiple of 16 and batch x seq_len = 32, so every recipe tiles. 20 steps:
# the tail (last tenth) is two records, so a tail mean is not just the last value.
LM_CONFIG = """workload = "lm"
[lm]
steps = 20
vocab = 16
d_model = 32
heads = 2
kv_heads = 1
ffn = 32
seq_len = 16
batch = 2
pattern = "{pattern}"
{model_extra}
[lm.optimizer]
lr = 0.01
max_grad_norm = 1.0
schedule = "warmup-cosine"
warmup_steps = 2
[data]
order = 1
zipf_support = 4
copy_prob = 0.1
copy_length = 3
[recipes]
names = {names}
{recipes_extra}
[reference]
compare_every = 5
probe_draws = 1
[trace]
flush_every = 10
"""

FUSED = dict(pattern="AF", model_extra="", names='["nvfp4", "bf16"]', recipes_extra="switch_to_bf16_at = 0.75")
# Two attention blocks with separate q, k, v; block 0 kept in BF16, so the two layers of each
# kind differ and a per-kind mean that took one layer only would show.
UNFUSED = dict(pattern="AA", model_extra="fused_qkv = false", names='["nvfp4"]',
               recipes_extra="high_precision_layers = [0]")


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("lm")
    # One OpenMP thread per run (the results are the same bits): on a shared two-core machine
    # two runs side by side with a thread per core each took ten times longer, spinning.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    jobs = {}
    for name, fmt in (("fused", FUSED), ("unfused", UNFUSED)):
        cfg = d / f"{name}.toml"
        cfg.write_text(LM_CONFIG.format(**fmt))
        jobs[name] = subprocess.Popen([EXE, "run", str(cfg), "--out", str(d / f"{name}.h5")], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    mlp = d / "mlp.toml"
    mlp.write_text('workload = "mlp"\n[mlp]\nwidths = [32, 64, 8]\nbatch = 32\nsteps = 20\nlr = 0.05\n'
                   '[recipes]\nnames = ["nvfp4"]\n[reference]\ncompare_every = 5\n')
    subprocess.run([EXE, "run", str(mlp), "--out", str(d / "mlp.h5")], check=True, capture_output=True, env=env)
    for name, p in jobs.items():
        err = p.stderr.read()
        assert p.wait() == 0, err
    return {name: d / f"{name}.h5" for name in ("fused", "unfused", "mlp")}


def test_load_dispatches_on_the_workload_and_reads_the_attributes(traces) -> None:
    from fp4drift_analysis import load, load_run
    from fp4drift_analysis.traces import LmRun

    r = load_run(str(traces["fused"]))
    assert isinstance(r, LmRun) and isinstance(load(str(traces["fused"])), LmRun)
    assert r.names == ["nvfp4", "bf16"]
    assert r.model == {"vocab": 16, "d_model": 32, "heads": 2, "kv_heads": 1, "ffn": 32, "seq_len": 16, "batch": 2,
                       "pattern": "AF", "parameters": r.model["parameters"]}
    assert r.param_names == ["embedding", "blocks.0.norm", "blocks.0.qkv", "blocks.0.o", "blocks.1.norm",
                             "blocks.1.gateup", "blocks.1.down", "final_norm", "head"]
    assert r.linear_names == ["blocks.0.qkv", "blocks.0.o", "blocks.1.gateup", "blocks.1.down", "head"]
    assert r.linear_kinds == r.kinds == ["qkv", "o", "gateup", "down", "head"]
    # round(0.75 * 20) = 15; the synthetic source: floor < unigram loss < ln(vocab) (uniform guess)
    assert r.switch_to_bf16_step == 15 and r.high_precision_blocks == [] and r.edge_recipe == "bf16"
    assert 0 < r.loss_floor_nats < r.unigram_loss_nats < math.log(16) + 1e-9
    assert r.data == "synthetic" and r.config["lm"]["pattern"] == "AF" and r.provenance["status"] == "complete"
    S, C, P, slots = 20, 4, len(r.param_names), 6 * len(r.linear_names)
    assert r.step.tolist() == list(range(S)) and r.compare_step.tolist() == [5, 10, 15, 20]
    assert r.lr.shape == r.reference_loss.shape == r.reference_grad_norm.shape == (S,)
    nv = r.run("nvfp4")
    for key in ("loss", "rel_loss_gap", "grad_norm", "clip_factor"):
        assert getattr(nv, key).shape == (S,), key
    assert nv.lost_update_fraction.shape == (S, P)
    for key in ("nmse", "clipped_fraction", "underflow_fraction", "zero_scale_fraction"):
        assert nv.operand_stat(key).shape == (S, slots), key
    for key in ("weight_rel_error", "grad_cosine", "grad_rel_error", "grad_sr_mean_rel_error"):
        assert getattr(nv, key).shape == (C, P), key
    assert nv.weight_rel_error_total.shape == (C,)
    assert nv.first_nonfinite_step is None and r.reference_first_nonfinite_step is None
    assert nv.gemm_path
    with pytest.raises(KeyError, match="no run 'fp8'"):
        r.run("fp8")


def test_values_are_what_the_trace_format_defines(traces) -> None:
    from fp4drift_analysis import fit_growth, load_run

    r = load_run(str(traces["fused"]))
    n = len(r.step) // 10   # the last tenth of the records
    ref_tail = r.reference_loss[-n:].mean()
    assert r.reference_tail_loss == pytest.approx(ref_tail, rel=1e-14)
    for run in r.runs:
        np.testing.assert_allclose(run.rel_loss_gap, (run.loss - r.reference_loss) / r.reference_loss, rtol=1e-12)
        assert run.tail_loss == pytest.approx(run.loss[-n:].mean(), rel=1e-14)
        assert run.tail_rel_loss_gap == pytest.approx((run.tail_loss - ref_tail) / ref_tail, rel=1e-9)
        # max_grad_norm = 1 in the config
        np.testing.assert_allclose(run.clip_factor, np.minimum(1.0, 1.0 / run.grad_norm), rtol=1e-12)
        assert fit_growth(r.compare_step, run.weight_rel_error_total).exponent == pytest.approx(run.growth_exponent,
                                                                                                 rel=1e-9)
        # the whole model's error lies between its parameters' smallest and largest
        w = run.weight_rel_error
        assert (w.min(axis=1) <= run.weight_rel_error_total + 1e-15).all()
        assert (run.weight_rel_error_total <= w.max(axis=1) + 1e-15).all()
    # NVFP4 before the switch at step 15 (E2M1: NMSE ~1e-2), BF16 after it (~1e-6); the head is
    # always in the edge recipe (BF16)
    nmse = r.run("nvfp4").operand_nmse
    first = r.operand_slots("qkv", "fprop", 0)
    assert (nmse[:15, first] > 1e-3).all() and (nmse[15:, first] < 1e-4).all()
    assert (nmse[:, r.operand_slots("head")] < 1e-4).all()


def test_operand_statistics_grouped_by_kind(traces) -> None:
    from fp4drift_analysis import load_run

    r = load_run(str(traces["unfused"]))
    assert r.linear_names == ["blocks.0.q", "blocks.0.k", "blocks.0.v", "blocks.0.o",
                              "blocks.1.q", "blocks.1.k", "blocks.1.v", "blocks.1.o", "head"]
    assert r.kinds == ["q", "k", "v", "o", "head"] and r.high_precision_blocks == [0]
    # slot = linear * 6 + role * 2 + operand: wgrad (2) dY^T (1) of linears 0 and 4
    assert r.operand_slots("q", "wgrad", 1).tolist() == [5, 29]
    assert r.operand_slots("head").tolist() == list(range(48, 54))
    assert r.operand_slot_label(29) == "blocks.1.q wgrad dY^T"
    nmse = r.run("nvfp4").operand_nmse
    # block 0 is kept in BF16, block 1 in NVFP4: the kind's mean is the mean of the two layers
    assert (nmse[:, 5] < 1e-4).all() and (nmse[:, 29] > 1e-3).all()
    by_kind = r.operand_by_kind("nvfp4")
    assert list(by_kind) == r.kinds and by_kind["q"].shape == (20, 3, 2)
    np.testing.assert_array_equal(by_kind["q"][:, 2, 1], (nmse[:, 5] + nmse[:, 29]) / 2)
    np.testing.assert_array_equal(by_kind["o"][:, 0, 0], (nmse[:, 18] + nmse[:, 42]) / 2)
    np.testing.assert_array_equal(by_kind["head"][:, 1, 0], nmse[:, 50])
    clipped = r.operand_by_kind("nvfp4", "clipped_fraction")["v"]
    np.testing.assert_array_equal(clipped[:, 0, 1], r.run("nvfp4").operand_clipped_fraction[:, [13, 37]].mean(axis=1))
    with pytest.raises(KeyError, match="no linear of kind 'qkv'"):
        r.operand_slots("qkv")


def test_plot_lm_and_the_cli(traces, tmp_path: Path) -> None:
    out = tmp_path / "lm.png"
    r = subprocess.run([sys.executable, "-m", "fp4drift_analysis", "plot-lm", str(traces["fused"]), "--out", str(out),
                        "--smooth", "4"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    with open(out, "rb") as f:
        assert f.read(4) == b"\x89PNG"
    assert out.stat().st_size > 30_000
    # an lm trace's weight error has parameters, not layers: --layer is bad input, named
    bad = subprocess.run([sys.executable, "-m", "fp4drift_analysis", "plot-growth", str(traces["fused"]), "--layer",
                          "1", "--out", str(tmp_path / "g.png")], capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode == 2 and "--param" in bad.stderr and "Traceback" not in bad.stderr


def test_the_multi_trace_plots_read_lm_traces(traces, tmp_path: Path) -> None:
    from fp4drift_analysis import SchemaError, load_run
    from fp4drift_analysis import plots

    fused, unfused = str(traces["fused"]), str(traces["unfused"])
    plots.plot_runs([unfused], str(tmp_path / "run.png"))           # one lm trace: plot_lm
    plots.plot_compare([fused, unfused], str(tmp_path / "cmp.png"))
    plots.plot_ablation([fused, unfused], str(tmp_path / "abl.png"), min_records=4)
    plots.plot_growth([fused, unfused], str(tmp_path / "gr.pdf"), recipes=["nvfp4"], param="head")
    plots.plot_heatmap(fused, str(tmp_path / "hm.png"), "grad_rel_error")
    plots.plot_stats(unfused, str(tmp_path / "st.png"))
    for name in ("run.png", "cmp.png", "abl.png", "gr.pdf", "hm.png", "st.png"):
        assert (tmp_path / name).stat().st_size > 8000, name
    # the ablation's lm gap is the summary's: the per-step gaps' mean over the trailing window;
    # its weight error the quantized linears' together, its exponent the last window's
    r = load_run(fused)
    rows = plots.ablation_table([fused])
    for (label, gap, err, b, gw), run in zip(rows, r.runs):
        assert label == run.name and gap == pytest.approx(run.attrs["rel_loss_gap_window_mean"], rel=1e-12)
        assert gw.last_step == r.step[-1]
        assert err == pytest.approx(run.attrs["quantized_weight_rel_error"], rel=1e-12)
        assert b == pytest.approx(run.attrs["quantized_growth_exponent"], rel=1e-9, nan_ok=True)
    with pytest.raises(SchemaError, match="mix of mlp and lm"):
        plots.plot_compare([fused, str(traces["mlp"])], str(tmp_path / "mix.png"))
    with pytest.raises(SchemaError, match="an lm trace; plot one at a time"):
        plots.plot_runs([fused, unfused], str(tmp_path / "two.png"))
    with pytest.raises(ValueError, match="no parameter 'nope'"):
        plots.plot_growth([fused], str(tmp_path / "g.png"), param="nope")


def test_wrong_or_incomplete_traces_are_refused(traces, tmp_path: Path) -> None:
    from fp4drift_analysis import SchemaError, load_run
    from fp4drift_analysis.plots import plot_lm

    with pytest.raises(SchemaError, match="mlp trace, this plot needs an lm trace"):
        plot_lm(str(traces["mlp"]), str(tmp_path / "x.png"))
    running = tmp_path / "running.h5"
    running.write_bytes(traces["fused"].read_bytes())
    with h5py.File(running, "r+") as f:
        f.attrs["status"] = "running"
        for k in ("tail_loss", "tail_rel_loss_gap"):   # written only when a run completes
            del f["lm/runs/nvfp4"].attrs[k]
    with pytest.raises(SchemaError, match="'running'"):
        load_run(str(running))
    partial = load_run(str(running), allow_incomplete=True)
    assert math.isnan(partial.run("nvfp4").tail_rel_loss_gap)
    damaged = tmp_path / "damaged.h5"
    damaged.write_bytes(traces["fused"].read_bytes())
    with h5py.File(damaged, "r+") as f:
        del f["lm/runs/bf16/grad_cosine"]
    with pytest.raises(SchemaError, match="damaged.h5: not a complete fp4drift trace .*grad_cosine"):
        load_run(str(damaged))
    relabelled = tmp_path / "relabelled.h5"
    relabelled.write_bytes(traces["fused"].read_bytes())
    with h5py.File(relabelled, "r+") as f:   # a parameter name lost: every column would shift
        f["lm"].attrs["param_names"] = "embedding,head"
    with pytest.raises(SchemaError, match="9 columns, the /lm attributes name 2"):
        load_run(str(relabelled))
    assert not (tmp_path / "x.png").exists()


def test_xarray_view(traces) -> None:
    pytest.importorskip("xarray")
    from fp4drift_analysis import load_run

    r = load_run(str(traces["unfused"]))
    ds = r.to_xarray()
    assert ds["weight_rel_error"].dims == ("recipe", "compare_step", "param")
    assert list(ds["param"].values) == r.param_names
    q = ds["operand_nmse"].sel(recipe="nvfp4").where(ds["kind"] == "q", drop=True)
    np.testing.assert_array_equal(q["slot"].values, r.operand_slots("q"))
    assert float(ds["tail_rel_loss_gap"].sel(recipe="nvfp4")) == r.run("nvfp4").tail_rel_loss_gap
    assert len(r.to_pandas()) == len(r.step)


def test_sweep_of_lm_runs_loads_with_its_metrics(tmp_path: Path) -> None:
    # The sweep index's per-(run, recipe) rows of lm runs are the traces' own final values.
    from fp4drift_analysis import load
    from fp4drift_analysis.traces import LmRun

    (tmp_path / "base.toml").write_text(LM_CONFIG.format(**UNFUSED).replace("steps = 20", "steps = 10"))
    (tmp_path / "sweep.toml").write_text('base = "base.toml"\nworkers = 1\n[grid.lm]\nseed = [1, 2]\n')
    subprocess.run([EXE, "sweep", str(tmp_path / "sweep.toml"), "--out", str(tmp_path / "out")], check=True,
                   capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    s = load(str(tmp_path / "out" / "sweep.h5"))
    assert list(s.summary["workload"]) == ["lm", "lm"] and len(s.recipes["recipe"]) == 2
    for i, run_index in enumerate(s.recipes["run"]):
        t = s.run(int(run_index))
        assert isinstance(t, LmRun)
        r = t.run(str(s.recipes["recipe"][i]))
        assert s.recipes["final_loss"][i] == r.loss[-1]
        assert s.recipes["final_weight_rel_error"][i] == r.weight_rel_error_total[-1]
        assert s.recipes["growth_exponent"][i] == r.growth_exponent
        if "tail_rel_loss_gap" in s.recipes:   # indexes written before lm metrics lack the column
            assert s.recipes["tail_rel_loss_gap"][i] == r.tail_rel_loss_gap
