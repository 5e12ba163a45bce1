"""fp4drift_analysis: loading `fp4drift quantize` outputs, refusing unknown schemas, plotting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from fp4drift_analysis import SchemaError, load_quantize
from fp4drift_analysis.plots import plot_quantize

EXE = os.environ.get("FP4DRIFT_EXE", "")
pytestmark = pytest.mark.skipif(
    not (EXE and os.access(EXE, os.X_OK)), reason="FP4DRIFT_EXE not set to the fp4drift binary"
)


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("analysis") / "q.h5"
    subprocess.run(
        [EXE, "quantize", "--generate", "normal", "--shape", "64x64", "--recipe", "nvfp4,mxfp4,bf16",
         "--out", str(out)],
        check=True, capture_output=True,
    )
    return out


def test_load_keeps_run_order_and_statistics(trace: Path) -> None:
    r = load_quantize(str(trace))
    assert r.names == ["nvfp4", "mxfp4", "bf16"]
    nmse = r.stat("nmse")
    # Ordering implied by the formats on N(0,1) data: BF16 (8 significant bits) is far more
    # accurate than either 4-bit format; NVFP4's E4M3 scales beat MXFP4's power-of-two ones.
    assert nmse[2] < nmse[0] < nmse[1]
    with h5py.File(trace) as f:
        assert np.isclose(nmse[0], f["recipes/nvfp4/stats"].attrs["nmse"], rtol=0, atol=0)


def test_unknown_schema_version_is_refused(trace: Path, tmp_path: Path) -> None:
    bad = tmp_path / "future.h5"
    bad.write_bytes(trace.read_bytes())
    with h5py.File(bad, "r+") as f:
        f.attrs["schema_version"] = 99
    with pytest.raises(SchemaError, match="version 99"):
        load_quantize(str(bad))


def test_incomplete_run_is_refused(trace: Path, tmp_path: Path) -> None:
    bad = tmp_path / "running.h5"
    bad.write_bytes(trace.read_bytes())
    with h5py.File(bad, "r+") as f:
        f.attrs["status"] = "running"
    with pytest.raises(SchemaError, match="running"):
        load_quantize(str(bad))


def test_plot_writes_png_and_pdf(trace: Path, tmp_path: Path) -> None:
    for name in ("q.png", "q.pdf"):
        out = tmp_path / name
        plot_quantize(str(trace), str(out))
        assert out.stat().st_size > 5000


def test_cli_entry_point_reports_errors(tmp_path: Path) -> None:
    # The installed package, from a directory that is not the source tree: by `python -m` and
    # by the environment's `fp4drift-analysis` script.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = Path(sys.executable).parent / "fp4drift-analysis"
    for cmd in ([sys.executable, "-m", "fp4drift_analysis"], [str(script)]):
        r = subprocess.run([*cmd, "plot-quantize", str(tmp_path / "nope.h5"), "--out", str(tmp_path / "x.png")],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
        assert r.returncode == 2, (cmd, r.stderr)
        assert "nope.h5" in r.stderr


@pytest.fixture(scope="module")
def run_traces(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("runs")
    configs = Path(__file__).resolve().parents[2] / "data" / "configs"
    out = []
    for name in ("sum-fp16-rn", "sum-fp16-sr"):
        path = d / f"{name}.h5"
        subprocess.run([EXE, "run", str(configs / f"{name}.toml"), "--steps", "4096", "--out", str(path)],
                       check=True, capture_output=True)
        out.append(path)
    return out[0], out[1]


def test_load_run_gives_the_stagnation_theory_predicts(run_traces) -> None:
    from fp4drift_analysis import load_run

    rn, sr = load_run(str(run_traces[0])), load_run(str(run_traces[1]))
    assert rn.options["format"] == "fp16" and int(rn.options["precision_bits"]) == 11
    # n ones in FP16 under RNE: exact up to 2^11, then stuck at 2048 (2048 + 1 ties to even).
    np.testing.assert_array_equal(rn.computed[:, 0], np.minimum(rn.n, 2048).astype(float))
    assert rn.first_stagnation.tolist() == [2049]
    # SR over 64 runs: the configured run count, and no stagnation-sized error: at n = 4096 the
    # RN error is 2048, while SR's RMS is bounded by sqrt(sum step^2/4) (each step past 2048 is 2).
    assert sr.computed.shape == (len(sr.n), 64)
    last = -1
    # E[error^2] <= E[sum step^2/4]; over 64 runs the sample mean square has a relative spread of
    # about sqrt(2/64) = 0.18 (near-Gaussian errors), so 1.5^2 = 2.25 is a > 6-sigma allowance.
    assert sr.rms_error[last] <= np.sqrt(sr.sr_half_step_sq[last]) * 1.5
    assert np.sqrt(sr.sr_half_step_sq[last]) < 0.1 * abs(rn.error[last, 0])
    assert rn.attrs["config"].startswith("# Recursive sum")


def test_plot_run_compares_traces(run_traces, tmp_path: Path) -> None:
    out = tmp_path / "runs.png"
    r = subprocess.run([sys.executable, "-m", "fp4drift_analysis", "plot-run", str(run_traces[0]), str(run_traces[1]),
                        "--out", str(out)], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 10_000
    bad = subprocess.run([sys.executable, "-m", "fp4drift_analysis", "plot-run", str(tmp_path / "missing.h5"),
                          "--out", str(out)], capture_output=True, text=True,
                         cwd=tmp_path)
    assert bad.returncode == 2 and "error" in bad.stderr


MLP_CONFIG = """workload = "mlp"
[mlp]
widths = [32, 64, 64, 8]
batch = 32
steps = {steps}
lr = 0.05
[recipes]
names = ["nvfp4", "bf16"]
high_precision_layers = [0]
[reference]
compare_every = 10
[trace]
flush_every = 50
"""


def _walk(g, prefix=""):
    for k, v in g.items():
        if isinstance(v, h5py.Group):
            yield from _walk(v, prefix + k + "/")
        else:
            yield prefix + k


def test_mlp_interrupted_by_sigint_resumes_bit_exactly(tmp_path: Path) -> None:
    import signal

    cfg = tmp_path / "m.toml"
    cfg.write_text(MLP_CONFIG.format(steps=3000))
    whole, cut = tmp_path / "whole.h5", tmp_path / "cut.h5"
    subprocess.run([EXE, "run", str(cfg), "--steps", "1200", "--out", str(whole)], check=True, capture_output=True)
    # Interrupt a run at its first progress line (10%), as Ctrl-C would.
    p = subprocess.Popen([EXE, "run", str(cfg), "--steps", "1200", "--out", str(cut)], stderr=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, text=True)
    line = p.stderr.readline()
    assert line.startswith("progress:"), line
    p.send_signal(signal.SIGINT)
    err = p.stderr.read()
    assert p.wait() == 130, err
    assert "continue with --resume" in err
    # A valid file, marked, holding every step up to its checkpoint (kept beside it, OUT.ckpt).
    with h5py.File(cut, "r") as f, h5py.File(str(cut) + ".ckpt", "r") as c:
        assert f.attrs["status"] == "interrupted"
        ck = int(c.attrs["step"])
        assert 0 < ck < 1200 and f["mlp/step"].shape[0] >= ck
    from fp4drift_analysis import SchemaError, load_run

    with pytest.raises(SchemaError, match="interrupted"):
        load_run(str(cut))
    assert load_run(str(cut), allow_incomplete=True).step.shape[0] >= ck
    subprocess.run([EXE, "run", str(cfg), "--steps", "1200", "--out", str(cut), "--resume"], check=True,
                   capture_output=True)
    with h5py.File(whole, "r") as a, h5py.File(cut, "r") as b:
        assert b.attrs["status"] == "complete" and int(b.attrs["resumed_at_step"]) == ck
        names = sorted(_walk(a))
        assert names == sorted(_walk(b))
        differ = [n for n in names if not np.array_equal(a[n][()], b[n][()], equal_nan=True)]
        assert differ == [], differ


def test_mlp_killed_outright_resumes_bit_exactly(tmp_path: Path) -> None:
    """SIGKILL (no handler runs): the file must be as at its last flush - readable by a SWMR
    reader (the killed writer's flag keeps plain readers out until a resume clears it), status
    still 'running', and --resume continues to the same bits as an uninterrupted run."""
    import signal

    cfg = tmp_path / "m.toml"
    cfg.write_text(MLP_CONFIG.format(steps=3000))
    whole, cut = tmp_path / "whole.h5", tmp_path / "cut.h5"
    subprocess.run([EXE, "run", str(cfg), "--steps", "1200", "--out", str(whole)], check=True, capture_output=True)
    p = subprocess.Popen([EXE, "run", str(cfg), "--steps", "1200", "--out", str(cut)], stderr=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, text=True)
    for _ in range(2):  # the second progress line: past at least one checkpoint (every 50 steps)
        line = p.stderr.readline()
        assert line.startswith("progress:"), line
    p.send_signal(signal.SIGKILL)
    p.wait()
    with pytest.raises(OSError, match="already open for write"):
        h5py.File(cut, "r")
    with h5py.File(cut, "r", libver="latest", swmr=True) as f, h5py.File(str(cut) + ".ckpt", "r") as c:
        assert f.attrs["status"] == "running"
        ck = int(c.attrs["step"])
        assert 0 < ck < 1200 and f["mlp/step"].shape[0] == int(c.attrs["records"])
        f["mlp/runs/nvfp4/operand_nmse"][()]  # every chunk inflates and passes its checksum
    subprocess.run([EXE, "run", str(cfg), "--steps", "1200", "--out", str(cut), "--resume"], check=True,
                   capture_output=True)
    with h5py.File(whole, "r") as a, h5py.File(cut, "r") as b:
        assert b.attrs["status"] == "complete" and int(b.attrs["resumed_at_step"]) == ck
        names = sorted(_walk(a))
        assert not Path(str(cut) + ".ckpt").exists() and not Path(str(cut) + ".rows").exists()
        differ = [n for n in names if not np.array_equal(a[n][()], b[n][()], equal_nan=True)]
        assert differ == [], differ


def test_plot_run_of_an_mlp_trace(tmp_path: Path) -> None:
    cfg = tmp_path / "m.toml"
    cfg.write_text(MLP_CONFIG.format(steps=60))
    trace, png = tmp_path / "m.h5", tmp_path / "m.png"
    subprocess.run([EXE, "run", str(cfg), "--out", str(trace)], check=True, capture_output=True)
    from fp4drift_analysis import load_run

    r = load_run(str(trace))
    assert r.names == ["nvfp4", "bf16"]
    assert r.step.tolist() == list(range(60))
    assert r.run("nvfp4").weight_rel_error.shape == (6, 3)
    res = subprocess.run([sys.executable, "-m", "fp4drift_analysis", "plot-run", str(trace), "--out", str(png)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert png.stat().st_size > 20_000


# --- every loader, the dispatch, the optional pandas/xarray views, every plot -----------------

def test_gemm_loader_and_plot(tmp_path: Path) -> None:
    from fp4drift_analysis import load, load_gemm
    from fp4drift_analysis.plots import plot_gemm

    g = tmp_path / "g.h5"
    subprocess.run([EXE, "gemm", "--role", "wgrad", "--m", "32", "--n", "32", "--k", "64", "--recipe", "bf16,nvfp4",
                    "--out", str(g)], check=True, capture_output=True)
    r = load_gemm(str(g))
    assert r.names == ["bf16", "nvfp4"] and int(r.attrs["k"]) == 64
    total, quant, acc = (r.attr(f"{p}_rel_frobenius") for p in ("total", "quantization", "accumulation"))
    # BF16 (8 significant bits) is far more accurate than NVFP4; total = quantization +
    # accumulation holds element-wise, so the Frobenius norms obey the triangle inequality.
    assert total[0] < total[1]
    assert (total <= quant + acc + 1e-12).all()
    assert r.provenance["command_line"].split()[1] == "gemm"
    assert type(load(str(g))).__name__ == "GemmResult"
    plot_gemm(str(g), str(tmp_path / "g.pdf"))
    assert (tmp_path / "g.pdf").stat().st_size > 5000


def test_load_dispatch_refuses_unknown_schemas(trace: Path, tmp_path: Path) -> None:
    from fp4drift_analysis import load
    from fp4drift_analysis.traces import LOADERS, register_loader

    assert load(str(trace)).names == ["nvfp4", "mxfp4", "bf16"]
    bad = tmp_path / "other.h5"
    bad.write_bytes(trace.read_bytes())
    with h5py.File(bad, "r+") as f:
        f.attrs["schema"] = "fp4drift.future"
    with pytest.raises(SchemaError, match="unknown schema 'fp4drift.future'"):
        load(str(bad))
    # a new schema plugs in without editing traces.py (as sweep.py adds its loader)
    assert "fp4drift.sweep" in LOADERS
    register_loader("fp4drift.future", {1}, lambda path, allow_incomplete=False: "future")
    try:
        assert load(str(bad)) == "future"
    finally:
        del LOADERS["fp4drift.future"]


def test_plot_refuses_other_suffixes(trace: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="png or .pdf"):
        plot_quantize(str(trace), str(tmp_path / "q.jpg"))
    assert not (tmp_path / "q.jpg").exists()


@pytest.fixture(scope="module")
def mlp_traces(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("mlp")
    out = []
    for name, layers in (("edge", "[0]"), ("all", "[]")):
        cfg = d / f"{name}.toml"
        cfg.write_text(MLP_CONFIG.format(steps=40).replace('names = ["nvfp4", "bf16"]', 'names = ["nvfp4", "bf16", "fp32"]')
                       .replace("high_precision_layers = [0]", f"high_precision_layers = {layers}"))
        subprocess.run([EXE, "run", str(cfg), "--out", str(d / f"{name}.h5")], check=True, capture_output=True)
        out.append(d / f"{name}.h5")
    return out[0], out[1]


def test_mlp_loader_arrays_config_and_fit(mlp_traces) -> None:
    from fp4drift_analysis import fit_growth, load_run

    r = load_run(str(mlp_traces[0]))
    assert r.config["mlp"]["widths"] == [32, 64, 64, 8] and r.layers == 3
    assert r.provenance["status"] == "complete"
    fp32 = r.run("fp32")
    # the fp32 recipe follows the double reference to float32 rounding (u = 6e-8): the loss gap
    # stays below 1e-5 while NVFP4's is orders of magnitude larger
    assert abs(fp32.rel_loss_gap[:20]).max() < 1e-5 < abs(r.run("nvfp4").rel_loss_gap).max()
    assert r.run("nvfp4").extra["operand_clipped_fraction"].shape == r.run("nvfp4").operand_nmse.shape
    # the package's OLS fit is the same least-squares slope fp4drift stores in the trace
    nv = r.run("nvfp4")
    assert fit_growth(r.compare_step, nv.weight_rel_error[:, -1]).exponent == pytest.approx(nv.growth_exponent, rel=1e-9)


def test_pandas_and_xarray_views(trace: Path, mlp_traces, run_traces) -> None:
    pd = pytest.importorskip("pandas")
    from fp4drift_analysis import load_quantize, load_run

    q = load_quantize(str(trace)).to_pandas()
    assert list(q.index) == ["nvfp4", "mxfp4", "bf16"] and q.loc["nvfp4", "nmse"] == load_quantize(str(trace)).stat("nmse")[0]
    m = load_run(str(mlp_traces[0]))
    df = m.to_pandas()
    assert len(df) == 3 * len(m.step) and set(df.recipe) == {"nvfp4", "bf16", "fp32"}
    assert isinstance(load_run(str(run_traces[0])).to_pandas(), pd.DataFrame)
    pytest.importorskip("xarray")
    ds = m.to_xarray()
    assert ds["weight_rel_error"].dims == ("recipe", "compare_step", "layer")
    assert float(ds["loss"].sel(recipe="bf16").isel(step=5)) == m.run("bf16").loss[5]
    assert load_run(str(run_traces[1])).to_xarray()["error"].shape[1] == 64


@pytest.mark.parametrize("command,extra", [
    ("plot-growth", ["--method", "hac"]), ("plot-heatmap", []), ("plot-stats", ["--smooth", "5"]),
    ("compare", []), ("ablation", ["--gap-min-records", "20"]), ("plot-run", []),
])
@pytest.mark.parametrize("suffix", [".png", ".pdf"])
def test_mlp_plot_commands(mlp_traces, tmp_path: Path, command: str, extra: list, suffix: str) -> None:
    traces = [str(mlp_traces[0])] if command in ("plot-heatmap", "plot-stats", "plot-run") else [str(p) for p in mlp_traces]
    out = tmp_path / f"p{suffix}"
    r = subprocess.run([sys.executable, "-m", "fp4drift_analysis", command, *traces, "--out", str(out), *extra],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 8000
    with open(out, "rb") as f:
        assert f.read(4) == (b"\x89PNG" if suffix == ".png" else b"%PDF")


def test_fit_and_bias_commands(mlp_traces, run_traces) -> None:
    cwd = Path(__file__).resolve().parents[2] / "analysis"
    r = subprocess.run([sys.executable, "-m", "fp4drift_analysis", "fit", str(mlp_traces[0])],
                       capture_output=True, text=True, cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert "edge.h5:nvfp4" in r.stdout and "HAC" in r.stdout
    r = subprocess.run([sys.executable, "-m", "fp4drift_analysis", "bias", str(run_traces[1])],
                       capture_output=True, text=True, cwd=cwd)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "indistinguishable from 0 at 99%" in r.stdout
    # an mlp trace is not a sum: refused with exit 2
    r = subprocess.run([sys.executable, "-m", "fp4drift_analysis", "bias", str(mlp_traces[0])],
                       capture_output=True, text=True, cwd=cwd)
    assert r.returncode == 2 and "sum/dot" in r.stderr


@pytest.mark.parametrize("command,extra,want", [
    ("plot-growth", ["--layer", "3"], "layer 3 does not exist"),
    ("plot-growth", ["--layer", "-4"], "layer -4 does not exist"),
    ("plot-stats", ["--smooth", "0"], "--smooth: must be an integer >= 1, got '0'"),
    ("ablation", ["--gap-min-records", "0"], "--gap-min-records: must be an integer >= 1, got '0'"),
    ("ablation", ["--gap-min-records", "-5"], "--gap-min-records: must be an integer >= 1, got '-5'"),
    ("ablation", ["--gap-fraction", "1.5"], "--gap-fraction: must be a number in (0, 1], got '1.5'"),
])
def test_plot_options_out_of_range_are_bad_input(mlp_traces, tmp_path: Path, command: str, extra: list,
                                                 want: str) -> None:
    # --layer 3 of a 3-layer trace ended in an IndexError traceback (exit 1); --smooth 0 drew NaN
    # curves and a window of 0 (or -5) records averaged the whole run instead of its last steps, with exit 0.
    out = tmp_path / "p.png"
    r = subprocess.run([sys.executable, "-m", "fp4drift_analysis", command, str(mlp_traces[0]), "--out", str(out),
                        *extra], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert want in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def test_cli_names_the_file_that_is_missing_a_directory_or_damaged(mlp_traces, tmp_path: Path) -> None:
    # A missing file or a directory gave h5py's "Unable to synchronously open file (... errno =
    # 2, ... flags = 0, o_flags = 0)"; a trace lacking a dataset gave h5py's KeyError "object
    # 'step' doesn't exist" without the file, which among several traces does not say which.
    damaged = tmp_path / "damaged.h5"
    with h5py.File(mlp_traces[0]) as src, h5py.File(damaged, "w") as f:
        for k, v in src.attrs.items():
            f.attrs[k] = v
        f.create_group("mlp")
    cwd = Path(__file__).resolve().parents[2] / "analysis"
    for path, want in ((tmp_path / "nope.h5", "no such file"), (tmp_path, "is a directory"),
                       (damaged, "not a complete fp4drift trace")):
        r = subprocess.run([sys.executable, "-m", "fp4drift_analysis", "fit", str(mlp_traces[0]), str(path)],
                           capture_output=True, text=True, cwd=cwd)
        assert r.returncode == 2, r.stderr
        assert f"error: {path}: {want}" in r.stderr and "synchronously" not in r.stderr and "Traceback" not in r.stderr
