"""Plots of fp4drift outputs (PNG or PDF by the file suffix)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .traces import SchemaError, load_quantize, load_run  # noqa: E402


def plot_quantize(path: str, out: str) -> None:
    """SNR (= -10 log10 NMSE) per recipe, with the clipped and underflow fractions."""
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
    fig.savefig(out, dpi=130)
    plt.close(fig)


def plot_mlp(path: str, out: str) -> None:
    """Training trajectories of an mlp trace: losses (reference dashed), relative loss gap, and
    the last layer's weight error against the reference on log-log axes with the fitted growth
    exponent, and the mean NMSE of the quantized GEMM operands."""
    r = load_run(path)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    (a0, a1), (a2, a3) = axes
    a0.semilogy(r.step, r.reference_loss, "k--", lw=1, label="reference (double)")
    for i, run in enumerate(r.runs):
        c = f"C{i}"
        a0.semilogy(r.step, run.loss, color=c, lw=0.8, label=run.name)
        a1.plot(r.step, 100 * run.rel_loss_gap, color=c, lw=0.8, label=run.name)
        err = run.weight_rel_error[:, -1]
        ok = (err > 0) & (r.compare_step > 0)
        exp = run.attrs.get("weight_error_growth_exponent", np.nan)
        a2.loglog(r.compare_step[ok], err[ok], color=c, label=f"{run.name} (slope {exp:.2f})")
        nmse = run.operand_nmse
        mean = np.where(nmse > 0, nmse, np.nan)
        with np.errstate(all="ignore"):
            a3.semilogy(r.step, np.nanmean(mean, axis=1), color=c, lw=0.8, label=run.name)
    a0.set(xlabel="step", ylabel="loss (0.5 MSE or cross-entropy)", title="loss")
    a1.set(xlabel="step", ylabel="(loss - loss_ref) / loss_ref  [%]", title="relative loss gap")
    a1.axhline(0, color="k", lw=0.5)
    a2.set(xlabel="step", ylabel="||W - W_ref||_F / ||W_ref||_F", title="last-layer weight error vs reference")
    a3.set(xlabel="step", ylabel="mean NMSE over quantized GEMM operands", title="operand quantization error")
    for a in axes.flat:
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7)
    fig.suptitle(f"fp4drift run (mlp): {r.attrs.get('config_source', path)}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    plt.close(fig)


def plot_runs(paths: list[str], out: str) -> None:
    """Relative error |s_n - exact| / |exact| against n on log-log axes, one line per trace:
    run 0 for RNE/RZ; for SR the RMS over the runs (solid), |mean| (dotted) and the bound
    sqrt(sum step^2 / 4) (dashed), all relative to |exact|."""
    def positive(v: np.ndarray) -> np.ndarray:  # exact points (error 0) have no place on a log axis
        return np.where(v > 0, v, np.nan)

    if len(paths) == 1 and load_run(paths[0]).__class__.__name__ == "MlpRun":
        plot_mlp(paths[0], out)
        return
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, path in enumerate(paths):
        r = load_run(path)
        if r.__class__.__name__ == "MlpRun":
            raise SchemaError(f"{path}: an mlp trace; plot one mlp trace at a time")
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
    fig.savefig(out, dpi=130)
    plt.close(fig)
