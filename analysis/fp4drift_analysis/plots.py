"""Plots of fp4drift outputs (PNG or PDF by the file suffix). Every axis says its quantity and
unit; every figure's title names the trace(s) it shows."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402

from .stats import fit_growth  # noqa: E402
from .traces import (OPERAND_ROLES, MlpRun, SchemaError, SumDotRun, load_gemm, load_quantize,  # noqa: E402
                     load_run)

SUFFIXES = (".png", ".pdf")


def _save(fig, out: str) -> None:
    """PNG (130 dpi) or PDF (vector) by the suffix; anything else is refused before drawing."""
    _check_out(out)
    fig.savefig(out, dpi=130)
    plt.close(fig)


def _check_out(out: str) -> None:
    if Path(out).suffix.lower() not in SUFFIXES:
        raise ValueError(f"{out}: output must end in .png or .pdf")


def _mlp(path: str) -> MlpRun:
    r = load_run(path)
    if not isinstance(r, MlpRun):
        raise SchemaError(f"{path}: a {r.options.get('operation', 'sum/dot')} trace, this plot needs an mlp trace")
    return r


def _trace_label(r, many: bool) -> str:
    return Path(str(r.attrs.get("config_source", r.path))).stem if many else ""


def running_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over up to `window` records (the per-step batch loss is noisy)."""
    x = np.asarray(x, dtype=float)
    c = np.cumsum(np.insert(x, 0, 0.0))
    i = np.arange(1, len(x) + 1)
    lo = np.maximum(i - window, 0)
    return (c[i] - c[lo]) / (i - lo)


def _growth_line(ax, steps, err, color, label, method="ols"):
    """err vs step on log-log axes with the fitted power law dashed; the fit in the legend."""
    ok = (err > 0) & (steps > 0) & np.isfinite(err)
    try:
        fit = fit_growth(steps, err, method=method)
        text = f"{label}: {fit.label()}"
    except ValueError:
        fit, text = None, f"{label}: no fit (< 3 positive points)"
    ax.loglog(steps[ok], err[ok], color=color, lw=1, label=text)
    if fit is not None:
        s = steps[ok]
        ax.loglog(s, fit.prefactor * s ** fit.exponent, color=color, ls="--", lw=0.8)
    return fit


def plot_quantize(path: str, out: str) -> None:
    """SNR (= -10 log10 NMSE) per recipe, with the clipped and underflow fractions."""
    _check_out(out)
    r = load_quantize(path)
    nmse = r.stat("nmse")
    snr = np.where(nmse > 0, -10.0 * np.log10(np.where(nmse > 0, nmse, 1.0)), np.nan)
    y = np.arange(len(r.names))
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 0.38 * len(y) + 1.8), sharey=True)
    ax0.barh(y, snr, color="tab:blue")
    ax0.set_yticks(y, r.names)
    ax0.invert_yaxis()
    ax0.set_xlabel("SNR = -10 log10(NMSE)  [dB]")
    ax0.grid(axis="x", alpha=0.3)
    for yi, v in zip(y, snr):
        ax0.text(v, yi, f" {v:.1f}", va="center", fontsize=8)
    h = 0.38
    ax1.barh(y - h / 2, 100 * r.stat("clipped_fraction"), height=h, label="clipped (|x e_b| > max)")
    ax1.barh(y + h / 2, 100 * r.stat("underflow_fraction"), height=h, label="underflow (x != 0 -> 0)")
    ax1.set_xlabel("fraction of elements  [%]")
    ax1.legend(loc="lower right", fontsize=8)
    ax1.grid(axis="x", alpha=0.3)
    source = r.attrs.get("source", "")
    fig.suptitle(f"fp4drift quantize: {source}", fontsize=10)
    fig.tight_layout()
    _save(fig, out)


def plot_mlp(path: str, out: str, smooth: int = 20) -> None:
    """Training trajectories of an mlp trace: losses (reference dashed), relative loss gap, and
    the last layer's weight error against the reference on log-log axes with the fitted growth
    exponent and its 95% CI, and the mean NMSE of the quantized GEMM operands."""
    _check_out(out)
    r = _mlp(path)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    (a0, a1), (a2, a3) = axes
    a0.semilogy(r.step, r.reference_loss, "k--", lw=1, label="reference (double)")
    for i, run in enumerate(r.runs):
        c = f"C{i}"
        a0.semilogy(r.step, run.loss, color=c, lw=0.8, label=run.name)
        a1.plot(r.step, 100 * run.rel_loss_gap, color=c, lw=0.4, alpha=0.4)
        a1.plot(r.step, 100 * running_mean(run.rel_loss_gap, smooth), color=c, lw=1.2,
                label=f"{run.name} (mean of {smooth} steps)")
        _growth_line(a2, r.compare_step.astype(float), run.weight_rel_error[:, -1], c, run.name)
        nmse = np.where(run.operand_nmse > 0, run.operand_nmse, np.nan)
        with np.errstate(all="ignore"):
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)   # all-NaN rows: nothing quantized
                a3.semilogy(r.step, np.nanmean(nmse, axis=1), color=c, lw=0.8, label=run.name)
    a0.set(xlabel="step", ylabel=_loss_label(r), title="loss")
    a1.set(xlabel="step", ylabel="(loss - loss_ref) / loss_ref  [%]", title="relative loss gap")
    a1.axhline(0, color="k", lw=0.5)
    a2.set(xlabel="step", ylabel="||W - W_ref||_F / ||W_ref||_F", title="last-layer weight error vs reference (fit dashed)")
    a3.set(xlabel="step", ylabel="mean NMSE over quantized GEMM operands", title="operand quantization error")
    for a in axes.flat:
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7)
    fig.suptitle(f"fp4drift run (mlp): {r.attrs.get('config_source', path)}", fontsize=10)
    fig.tight_layout()
    _save(fig, out)


def _loss_label(r: MlpRun) -> str:
    task = r.config.get("mlp", {}).get("task", "regression")
    return "loss: cross-entropy [nats]" if task == "classification" else "loss: 0.5 mean squared error"


def plot_runs(paths: list[str], out: str) -> None:
    """Relative error |s_n - exact| / |exact| against n on log-log axes, one line per trace:
    run 0 for RNE/RZ; for SR the RMS over the runs (solid), |mean| (dotted) and the bound
    sqrt(sum step^2 / 4) (dashed), all relative to |exact|."""
    def positive(v: np.ndarray) -> np.ndarray:  # exact points (error 0) have no place on a log axis
        return np.where(v > 0, v, np.nan)

    _check_out(out)
    if len(paths) == 1 and isinstance(load_run(paths[0]), MlpRun):
        plot_mlp(paths[0], out)
        return
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, path in enumerate(paths):
        r = load_run(path)
        if isinstance(r, MlpRun):
            raise SchemaError(f"{path}: an mlp trace; plot one at a time, or overlay mlp traces with `compare`")
        color = f"C{i}"
        scale = np.where(r.exact != 0, np.abs(r.exact), 1.0)
        if r.options.get("rounding") == "sr" and r.error.shape[1] > 1:
            ax.loglog(r.n, positive(r.rms_error / scale), color=color, label=f"{r.label}: RMS over {r.error.shape[1]} runs")
            ax.loglog(r.n, positive(np.abs(r.mean_error) / scale), color=color, ls=":", label="  |mean error|")
            ax.loglog(r.n, positive(np.sqrt(r.sr_half_step_sq) / scale), color=color, ls="--", lw=0.8,
                      label="  sqrt(sum step^2/4)")
        else:
            ax.loglog(r.n, positive(np.abs(r.error[:, 0]) / scale), color=color, label=r.label)
    ax.set_xlabel("n (terms)")
    ax.set_ylabel("relative error |s_n - exact| / |exact|")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle("fp4drift run: recursive sums", fontsize=10)
    fig.tight_layout()
    _save(fig, out)


def _mlp_pairs(paths: list[str], recipes: list[str] | None):
    """(label, trace, run) for every recipe (or the named ones) of every mlp trace."""
    traces = [_mlp(p) for p in paths]
    many = len(traces) > 1
    pairs = []
    for t in traces:
        names = recipes or t.names
        for name in names:
            if recipes and name not in t.names:
                continue
            prefix = _trace_label(t, many)
            pairs.append((f"{prefix}:{name}" if prefix else name, t, t.run(name)))
    if not pairs:
        raise KeyError(f"none of the recipes {', '.join(recipes or [])} is in {', '.join(paths)}")
    return pairs


def plot_growth(paths: list[str], out: str, recipes: list[str] | None = None, layer: int = -1,
                method: str = "ols") -> None:
    """Weight error against the reference vs step on log-log axes, one line per (trace, recipe),
    each with its fitted power law (dashed) and exponent with 95% CI in the legend."""
    _check_out(out)
    pairs = _mlp_pairs(paths, recipes)
    for label, t, run in pairs:   # an index past the layers was an IndexError traceback
        if not -t.layers <= layer < t.layers:
            raise ValueError(f"{label}: layer {layer} does not exist ({t.layers} layers: 0..{t.layers - 1}, "
                             "or -1 for the last)")
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (label, t, run) in enumerate(pairs):
        _growth_line(ax, t.compare_step.astype(float), run.weight_rel_error[:, layer], f"C{i % 10}", label, method)
    which = "last layer" if layer == -1 else f"layer {layer}"
    ax.set(xlabel="step", ylabel=f"||W - W_ref||_F / ||W_ref||_F  ({which})",
           title=f"weight error growth, fit error ~ step^b ({'OLS' if method == 'ols' else 'Newey-West HAC'} CI)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, out)


def plot_heatmap(path: str, out: str, quantity: str = "weight_rel_error") -> None:
    """Per-layer heat map (layers x compare steps, log colour scale) of the weight error against
    the reference, or of another per-layer compare quantity (grad_rel_error, ...), one panel
    per recipe on a shared colour scale."""
    _check_out(out)
    r = _mlp(path)
    mats = []
    for run in r.runs:
        m = run.weight_rel_error if quantity == "weight_rel_error" else run.extra.get(quantity)
        if m is None:
            raise KeyError(f"{path}: run {run.name} has no {quantity}")
        mats.append(np.asarray(m, dtype=float))
    pos = np.concatenate([m[(m > 0) & np.isfinite(m)] for m in mats])
    if pos.size == 0:
        raise ValueError(f"{path}: {quantity} has no positive finite value to plot on a log scale")
    norm = LogNorm(vmin=pos.min(), vmax=pos.max())
    fig, axes = plt.subplots(len(mats), 1, figsize=(9, 1.2 + 0.45 * r.layers * len(mats)), squeeze=False,
                             sharex=True)
    cs = r.compare_step
    for ax, run, m in zip(axes[:, 0], r.runs, mats):
        im = ax.imshow(np.where(m > 0, m, np.nan).T, aspect="auto", origin="lower", norm=norm, cmap="viridis",
                       extent=(cs[0] - 0.5, cs[-1] + 0.5, -0.5, r.layers - 0.5), interpolation="nearest")
        ax.set_yticks(range(r.layers))
        ax.set_ylabel(f"{run.name}\nlayer")
    axes[-1, 0].set_xlabel("step")
    unit = "||W - W_ref||_F / ||W_ref||_F" if quantity == "weight_rel_error" else quantity
    fig.colorbar(im, ax=axes[:, 0].tolist(), label=unit)
    fig.suptitle(f"per-layer {quantity}: {r.attrs.get('config_source', path)}", fontsize=10)
    _save(fig, out)


STAT_LABELS = {"nmse": "NMSE = sum (x_hat - x)^2 / sum x^2", "clipped_fraction": "clipped fraction [%]",
               "underflow_fraction": "underflow fraction [%]", "zero_scale_fraction": "zero-scale blocks [%]"}


def plot_stats(path: str, out: str, smooth: int = 1) -> None:
    """Quantization-statistic histories of an mlp trace: per statistic a panel, one line per
    (recipe, GEMM role), the mean over the quantized operands of that role (all layers)."""
    _check_out(out)
    r = _mlp(path)
    keys = ["nmse"] + [k for k in ("clipped_fraction", "underflow_fraction", "zero_scale_fraction")
                       if all(f"operand_{k}" in run.extra for run in r.runs)]
    fig, axes = plt.subplots(len(keys), 1, figsize=(9, 2.6 * len(keys)), sharex=True, squeeze=False)
    slots = np.arange(6 * r.layers)
    role_of = (slots % 6) // 2
    styles = ("-", "--", ":")
    for ax, key in zip(axes[:, 0], keys):
        for i, run in enumerate(r.runs):
            a = run.operand_stat(key)
            quantized = run.operand_nmse.max(axis=0) > 0   # slots the recipe quantizes at all
            for role in range(3):
                cols = quantized & (role_of == role)
                if not cols.any():
                    continue
                y = a[:, cols].mean(axis=1) * (1 if key == "nmse" else 100)
                ax.plot(r.step, running_mean(y, smooth), color=f"C{i}", ls=styles[role], lw=0.9,
                        label=f"{run.name} {OPERAND_ROLES[role]}")
        if key == "nmse":
            ax.set_yscale("log")
        ax.set_ylabel(STAT_LABELS[key])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel("step")
    fig.suptitle(f"quantization statistics of the GEMM operands (mean per role): "
                 f"{r.attrs.get('config_source', path)}", fontsize=10)
    fig.tight_layout()
    _save(fig, out)


def plot_compare(paths: list[str], out: str, recipes: list[str] | None = None, smooth: int = 20) -> None:
    """Overlay several traces: sum/dot traces as in plot_runs; mlp traces (e.g. RN vs SR, RHT on
    and off, or one config against an ablation) by relative loss gap and last-layer weight
    error with fitted exponents, one line per (trace, recipe)."""
    _check_out(out)
    loaded = [load_run(p) for p in paths]
    if all(isinstance(t, SumDotRun) for t in loaded):
        plot_runs(paths, out)
        return
    if not all(isinstance(t, MlpRun) for t in loaded):
        raise SchemaError("compare: mix of mlp and sum/dot traces; compare traces of one kind")
    pairs = _mlp_pairs(paths, recipes)
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(13, 5))
    for i, (label, t, run) in enumerate(pairs):
        c = f"C{i % 10}"
        a0.plot(t.step, 100 * running_mean(run.rel_loss_gap, smooth), color=c, lw=1, label=label)
        _growth_line(a1, t.compare_step.astype(float), run.weight_rel_error[:, -1], c, label)
    a0.axhline(0, color="k", lw=0.5)
    a0.set(xlabel="step", ylabel=f"(loss - loss_ref) / loss_ref  [%], mean of {smooth} steps",
           title="relative loss gap")
    a1.set(xlabel="step", ylabel="||W - W_ref||_F / ||W_ref||_F (last layer)", title="weight error (fit dashed)")
    for a in (a0, a1):
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7)
    fig.suptitle("fp4drift run: " + ", ".join(Path(p).name for p in paths), fontsize=10)
    fig.tight_layout()
    _save(fig, out)


def ablation_table(paths: list[str], window: int = 50) -> list[tuple[str, float, float, float]]:
    """(label, final relative loss gap (mean of the last `window` steps), final last-layer weight
    error, growth exponent) per (trace, recipe)."""
    rows = []
    for label, t, run in _mlp_pairs(paths, None):
        w = min(window, len(run.rel_loss_gap))
        rows.append((label, float(np.mean(run.rel_loss_gap[-w:])), float(run.weight_rel_error[-1, -1]),
                     run.growth_exponent))
    return rows


def plot_ablation(paths: list[str], out: str, window: int = 50) -> None:
    """Ablation bars: per (trace, recipe) the final relative loss gap and the final last-layer
    weight error, sorted by loss gap."""
    _check_out(out)
    rows = sorted(ablation_table(paths, window), key=lambda r: r[1])
    y = np.arange(len(rows))
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(11, 0.4 * len(rows) + 1.8), sharey=True)
    gaps = [100 * r[1] for r in rows]
    a0.barh(y, gaps, color="tab:red")
    a0.set_yticks(y, [r[0] for r in rows])
    a0.invert_yaxis()
    for yi, v in zip(y, gaps):
        a0.text(v, yi, f" {v:.2f}%", va="center", fontsize=8)
    a0.set_xlabel(f"relative loss gap [%], mean of the last {window} steps")
    a1.barh(y, [r[2] for r in rows], color="tab:blue")
    for yi, r in zip(y, rows):
        a1.text(r[2], yi, f" {r[2]:.3g} (b = {r[3]:.2f})", va="center", fontsize=8)
    a1.set_xlabel("final last-layer ||W - W_ref||_F / ||W_ref||_F  (growth exponent b)")
    for a in (a0, a1):
        a.grid(axis="x", alpha=0.3)
    fig.suptitle("ablation: " + ", ".join(Path(p).name for p in paths), fontsize=10)
    fig.tight_layout()
    _save(fig, out)


def plot_gemm(path: str, out: str) -> None:
    """The error split of an `fp4drift gemm` output per recipe: total, quantization and
    accumulation relative Frobenius errors on a log axis."""
    _check_out(out)
    g = load_gemm(path)
    y = np.arange(len(g.names))
    h = 0.27
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(y) + 1.8))
    for j, part in enumerate(("total", "quantization", "accumulation")):
        v = g.attr(f"{part}_rel_frobenius")
        ax.barh(y + (j - 1) * h, np.where(v > 0, v, np.nan), height=h, label=part)
    ax.set_xscale("log")
    ax.set_yticks(y, g.names)
    ax.invert_yaxis()
    ax.set_xlabel("||E||_F / ||C_exact||_F")
    ax.grid(axis="x", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    a = g.attrs
    fig.suptitle(f"fp4drift gemm: {a.get('role', '')} M={a.get('m', '')} N={a.get('n', '')} K={a.get('k', '')}",
                 fontsize=10)
    fig.tight_layout()
    _save(fig, out)
